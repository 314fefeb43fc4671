import { jetstreamManager } from '@nats-io/jetstream';
import type { UsageRecord } from '@weir/core';
import { buildUsageRecord, type PrivateNats, startPrivateNats, uniqueTag, waitUntil } from '@weir/testing';
import { type UsageStreamFixture, usageStreamFixture } from './test-support';

// An outage of a private nats-server (never the shared one): the sink buffers while it is down,
// nothing throws, and after it comes back every record is stored and delivered exactly once.
describe('NATS outage (private nats-server)', () => {
  let server: PrivateNats;
  let fx: UsageStreamFixture;

  beforeAll(async () => {
    server = await startPrivateNats();
    fx = await usageStreamFixture(server.url, 'weir-test-outage');
  });
  afterAll(async () => {
    await fx?.cleanup();
    await server?.dispose();
  });

  it('buffers while NATS is down and delivers every record exactly once after reconnect', async () => {
    const tag = uniqueTag();
    const rec = (i: number) => buildUsageRecord(i, {}, tag);
    const sink = fx.sink({ publishTimeoutMs: 1_000, retryBaseMs: 100, retryMaxMs: 500 });
    const source = fx.source({ pullExpiresMs: 2_000 });
    const got: UsageRecord[] = [];
    await source.start(async (batch) => {
      got.push(...batch);
    });

    for (let i = 0; i < 20; i++) sink.record(rec(i));
    await sink.flush();
    await waitUntil(() => got.length >= 20, 10_000, 'records before the outage');

    const pid = server.pid;
    await server.stop();
    expect(pid).toBeDefined();
    const downAt = Date.now();
    // Record for ~3 s while the server is down.
    for (let i = 20; i < 80; i++) {
      expect(() => sink.record(rec(i))).not.toThrow();
      if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 500));
    }
    let flushed = false;
    const flushing = sink.flush().then(() => (flushed = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(sink.pending()).toBe(60);
    expect(flushed).toBe(false);
    expect(got).toHaveLength(20);
    const downMs = Date.now() - downAt;

    await server.restart();
    const upAt = Date.now();
    await flushing;
    const flushMs = Date.now() - upAt;
    expect(sink.pending()).toBe(0);
    await waitUntil(() => got.length >= 80, 20_000, 'records after the outage');
    const deliveredMs = Date.now() - upAt;
    // Give any duplicate time to show up.
    await new Promise((resolve) => setTimeout(resolve, 500));

    const ids = got.map((r) => r.generationId);
    expect(ids).toHaveLength(80);
    expect(new Set(ids).size).toBe(80);
    expect(new Set(ids)).toEqual(new Set(Array.from({ length: 80 }, (_, i) => rec(i).generationId)));
    const jsm = await jetstreamManager(fx.nc);
    expect((await jsm.streams.info(fx.stream)).state.messages).toBe(80);
    expect(sink.stats().failedPublishes).toBeGreaterThan(0);
    // Timings for the report (not asserted).
    console.log(`outage: down ${downMs} ms; flush ${flushMs} ms and delivery ${deliveredMs} ms after restart; sink ${JSON.stringify(sink.stats())}`);
    await source.stop();
  }, 60_000);
});

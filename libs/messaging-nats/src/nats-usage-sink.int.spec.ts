import { jetstreamManager } from '@nats-io/jetstream';
import { WeirError } from '@weir/core';
import { buildUsageRecord, uniqueTag } from '@weir/testing';
import { connectNats } from './connect';
import { createNatsUsageSink } from './nats-usage-sink';
import { SHARED_NATS_URL, type UsageStreamFixture, usageStreamFixture } from './test-support';
import { usageSubject } from './usage-stream';

describe('createNatsUsageSink', () => {
  let fx: UsageStreamFixture;
  beforeEach(async () => {
    fx = await usageStreamFixture();
  });
  afterEach(async () => {
    await fx.cleanup();
  });

  it('record() returns at once; flush() resolves when every earlier record has a PubAck, in order', async () => {
    const sink = fx.sink({ maxInFlight: 8 });
    const tag = uniqueTag();
    const t0 = performance.now();
    for (let i = 0; i < 200; i++) sink.record(buildUsageRecord(i, {}, tag));
    const recordMs = performance.now() - t0;
    expect(sink.pending()).toBe(200);
    await sink.flush();
    expect(sink.pending()).toBe(0);
    expect(recordMs).toBeLessThan(100);
    const jsm = await jetstreamManager(fx.nc);
    const info = await jsm.streams.info(fx.stream);
    expect(info.state.messages).toBe(200);
    const m = await jsm.streams.getMessage(fx.stream, { seq: 200 });
    expect(m?.subject).toBe(usageSubject(fx.subjectPrefix, buildUsageRecord(199).tenantId));
    expect(m?.json<{ generationId: string }>().generationId).toBe(buildUsageRecord(199, {}, tag).generationId);
  });

  it('keeps records past capacity (saturated), retries until the stream exists, and close() reports what is left', async () => {
    const nc = await connectNats({ servers: SHARED_NATS_URL, name: `weir-test-nostream-${uniqueTag()}` });
    try {
      const warnings: string[] = [];
      const failures: number[] = [];
      const sink = createNatsUsageSink(
        nc,
        {
          subjectPrefix: `weir-test.${uniqueTag()}.nostream`,
          capacity: 3,
          retryBaseMs: 20,
          retryMaxMs: 50,
          publishTimeoutMs: 500,
          logger: { debug: () => undefined, info: () => undefined, warn: (_f, m) => warnings.push(m ?? ''), error: (_f, m) => warnings.push(m ?? '') },
          onError: (_e, f) => failures.push(f.attempt),
        },
      );
      for (let i = 0; i < 5; i++) sink.record(buildUsageRecord(i));
      expect(sink.saturated()).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(sink.pending()).toBe(5);
      expect(failures.length).toBeGreaterThan(1);
      const result = await sink.close({ timeoutMs: 200 });
      expect(result).toEqual({ unwritten: 5 });
      expect(warnings).toContain('usage sink saturated; new requests should be refused');
      expect(warnings).toContain('usage sink closed with records not published');
      expect(() => sink.record(buildUsageRecord(9))).toThrow(WeirError);
    } finally {
      await nc.close();
    }
  });

  it('refuses malformed records synchronously', () => {
    const sink = fx.sink();
    expect(() => sink.record(buildUsageRecord(1, { costNanoUsd: -5 }))).toThrow(/costNanoUsd/);
    expect(sink.pending()).toBe(0);
  });
});

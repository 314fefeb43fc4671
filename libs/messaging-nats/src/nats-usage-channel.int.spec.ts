import { context, propagation, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { UsageRecord } from '@weir/core';
import { buildUsageRecord, describeUsageChannelContract, uniqueTag, waitUntil } from '@weir/testing';
import { connectNats } from './connect';
import { createNatsUsageSource } from './nats-usage-source';
import { SHARED_NATS_URL, usageStreamFixture } from './test-support';
import { usageSubject } from './usage-stream';

describeUsageChannelContract('NATS JetStream (shared server)', async () => {
  const fx = await usageStreamFixture();
  return { sink: fx.sink(), source: fx.source(), cleanup: fx.cleanup };
});

describe('NATS usage channel', () => {
  let fx: Awaited<ReturnType<typeof usageStreamFixture>>;
  let tag: string;
  const rec = (i: number, overrides: Partial<UsageRecord> = {}) => buildUsageRecord(i, overrides, tag);

  beforeEach(async () => {
    tag = uniqueTag();
    fx = await usageStreamFixture();
  });
  afterEach(async () => {
    await fx.cleanup();
  });

  async function streamMessages(): Promise<number> {
    const jsm = await jetstreamManager(fx.nc);
    return (await jsm.streams.info(fx.stream)).state.messages;
  }

  it('stores a republished record (same generationId) once', async () => {
    const sink = fx.sink();
    sink.record(rec(1));
    sink.record(rec(2));
    await sink.flush();
    // A second producer (e.g. a retry after a lost PubAck) sends the same generation again.
    const other = fx.sink();
    other.record(rec(1, { outputTokens: 999 }));
    await other.flush();
    expect(await streamMessages()).toBe(2);
    expect(other.stats()).toMatchObject({ acked: 1, duplicates: 1 });
    const got: UsageRecord[] = [];
    const source = fx.source();
    await source.start(async (batch) => {
      got.push(...batch);
    });
    await waitUntil(() => got.length >= 2);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(got.map((r) => [r.generationId, r.outputTokens])).toEqual([
      [rec(1).generationId, rec(1).outputTokens],
      [rec(2).generationId, rec(2).outputTokens],
    ]);
  });

  it('with a linger, records trickling in a few ms apart are handed over as one batch (without, one by one)', async () => {
    const publishApart = async (from: number) => {
      const sink = fx.sink();
      for (let i = from; i < from + 4; i++) {
        sink.record(rec(i));
        await sink.flush();
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    };
    const batches = async (lingerMs: number, from: number) => {
      const sizes: number[] = [];
      const source = fx.source({ lingerMs, durable: `linger-${lingerMs}-${tag}` });
      await source.start(async (batch) => {
        sizes.push(batch.length);
      });
      await new Promise((resolve) => setTimeout(resolve, 300)); // the consumer is pulling
      await publishApart(from);
      await waitUntil(() => sizes.reduce((a, b) => a + b, 0) >= from + 4);
      await source.stop();
      return sizes;
    };
    const lingering = await batches(500, 0);
    // The first batch holds the 4 new records (plus none before: the stream was empty).
    expect(lingering).toEqual([4]);
    const eager = await batches(0, 4);
    // The stream now holds 8; a fresh durable starts from the first: 4 already stored, then 4 apart.
    expect(eager.length).toBeGreaterThanOrEqual(4);
  });

  it('a consumer restart redelivers unacked messages and skips acked ones', async () => {
    const sink = fx.sink();
    for (let i = 0; i < 6; i++) sink.record(rec(i));
    await sink.flush();

    // Ledger #1 (its own connection) accepts the first batch, then "crashes" holding the next
    // one unacked: its handler never settles and its connection dies.
    const nc1 = await connectNats({ servers: SHARED_NATS_URL, name: `weir-test-ledger1-${tag}` });
    const first = createNatsUsageSource(nc1, { stream: fx.stream, durable: fx.durable, batchSize: 3, ackWaitMs: 1_000 });
    const accepted: string[] = [];
    let calls = 0;
    let crash!: () => void;
    const crashed = new Promise<void>((_, reject) => (crash = () => reject(new Error('crashed'))));
    await first.start(async (batch) => {
      calls++;
      if (calls === 1) {
        accepted.push(...batch.map((r) => r.generationId));
        return;
      }
      await crashed;
    });
    await waitUntil(() => calls >= 2, 5_000, 'second batch in flight');
    expect(accepted).toEqual([0, 1, 2].map((i) => rec(i).generationId));
    await nc1.close();

    // Ledger #2 on the same durable gets exactly the unacked rest.
    const second = fx.source({ ackWaitMs: 1_000, batchSize: 10 });
    const got: string[] = [];
    await second.start(async (batch) => {
      got.push(...batch.map((r) => r.generationId));
    });
    await waitUntil(() => got.length >= 3, 10_000, 'unacked records redelivered');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect([...new Set(got)].sort()).toEqual([3, 4, 5].map((i) => rec(i).generationId).sort());
    // Let the "crashed" instance's handler settle so its timers end with the test.
    crash();
    await first.stop();
  });

  it('a rejecting handler gets the same batch again (redelivered by JetStream)', async () => {
    const sink = fx.sink();
    for (let i = 0; i < 4; i++) sink.record(rec(i));
    await sink.flush();
    const source = fx.source({ retryBaseMs: 100 });
    const calls: string[][] = [];
    await source.start(async (batch) => {
      calls.push(batch.map((r) => r.generationId));
      if (calls.length === 1) throw new Error('store down (expected by the test)');
    });
    await waitUntil(() => calls.length >= 2 && calls.flat().filter((id) => id === rec(3).generationId).length >= 2, 5_000);
    const ids = [0, 1, 2, 3].map((i) => rec(i).generationId);
    expect([...calls[0]].sort()).toEqual(ids.sort());
    expect(new Set(calls.slice(1).flat())).toEqual(new Set(ids));
    expect(source.stats().nakked).toBeGreaterThanOrEqual(4);
  });

  it('logs, acks and counts a malformed message, and goes on', async () => {
    const errors: object[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (f: object) => errors.push(f) };
    const malformed: string[] = [];
    const source = fx.source({ logger, onMalformed: (m) => malformed.push(m.reason) });
    const got: UsageRecord[] = [];
    await source.start(async (batch) => {
      got.push(...batch);
    });
    const js = jetstream(fx.nc);
    await js.publish(usageSubject(fx.subjectPrefix, 't0'), new TextEncoder().encode('{"v":1,"generationId":"x"'));
    await js.publish(usageSubject(fx.subjectPrefix, 't0'), new TextEncoder().encode(JSON.stringify({ v: 1, secret: 'prompt text' })));
    const sink = fx.sink();
    sink.record(rec(1));
    await sink.flush();
    await waitUntil(() => got.length === 1 && malformed.length === 2);
    expect(source.stats().malformed).toBe(2);
    expect(JSON.stringify(errors)).not.toContain('prompt text');
    await source.stop();
    // Acked: a fresh start on the same durable sees nothing more.
    const again: UsageRecord[] = [];
    await source.start(async (batch) => {
      again.push(...batch);
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(again).toEqual([]);
  });

  it('carries traceparent/tracestate of the recording context in the JetStream headers', async () => {
    const contextManager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(contextManager);
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    try {
      const spanContext = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: TraceFlags.SAMPLED };
      const sink = fx.sink();
      context.with(trace.setSpanContext(context.active(), spanContext), () => sink.record(rec(1)));
      await sink.flush();
      const jsm = await jetstreamManager(fx.nc);
      const stored = await jsm.streams.getMessage(fx.stream, { seq: 1 });
      expect(stored?.header.get('traceparent')).toBe('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
      expect(stored?.header.get('Nats-Msg-Id')).toBe(rec(1).generationId);
    } finally {
      propagation.disable();
      context.disable();
    }
  });
});

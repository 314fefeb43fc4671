import pino from 'pino';
import { type UsageRecord, type UsageRepository, WeirError } from '@weir/core';
import { createBatchedUsageSink, type LedgerLogger } from './batched-usage-sink';

/**
 * A hand-written fake repository: stores by generation id (idempotent like the real one),
 * records every call, can fail the next N calls (before or after "committing") and can be
 * held on a gate to simulate a slow database.
 */
function fakeRepository() {
  const stored = new Map<string, UsageRecord>();
  const order: string[] = [];
  const calls: string[][] = [];
  let failures = 0;
  let commitThenFail = false;
  let gate: Promise<void> | undefined;
  let release: (() => void) | undefined;
  const repo: UsageRepository = {
    async insertMany(records) {
      calls.push(records.map((r) => r.generationId));
      if (gate) await gate;
      if (failures > 0 && !commitThenFail) {
        failures--;
        throw new Error('connection refused');
      }
      for (const r of records) {
        if (!stored.has(r.generationId)) order.push(r.generationId);
        if (!stored.has(r.generationId)) stored.set(r.generationId, r);
      }
      if (failures > 0 && commitThenFail) {
        failures--;
        throw new Error('connection lost after commit');
      }
    },
  };
  return {
    repo,
    stored,
    order,
    calls,
    failNext(n: number, afterCommit = false) {
      failures = n;
      commitThenFail = afterCommit;
    },
    hold() {
      gate = new Promise<void>((r) => (release = r));
    },
    release() {
      gate = undefined;
      release?.();
    },
  };
}

let seq = 0;
function rec(overrides: Partial<UsageRecord> = {}): UsageRecord {
  seq++;
  return {
    generationId: `gen_${seq}`,
    requestId: `req_${seq}`,
    tenantId: 'acme',
    appId: 'web',
    apiKeyId: 'key_1',
    route: 'generations',
    modelAlias: 'stories',
    modelRevision: 'stories260k@1',
    inputTokens: 10,
    outputTokens: 5,
    cachedInputTokens: 0,
    costNanoUsd: 100,
    status: 'completed',
    finishReason: 'stop',
    errorCode: null,
    queueMs: 0.4,
    ttftMs: 3.2,
    totalMs: 12.5,
    startedAt: new Date(),
    finishedAt: new Date(),
    ...overrides,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function recordingLogger() {
  const lines: { level: string; fields: object; message: string }[] = [];
  const logger: LedgerLogger = {
    warn: (fields, message) => lines.push({ level: 'warn', fields, message }),
    error: (fields, message) => lines.push({ level: 'error', fields, message }),
  };
  return { logger, lines };
}

describe('createBatchedUsageSink', () => {
  it('accepts a pino logger', () => {
    const logger: LedgerLogger = pino({ enabled: false });
    expect(logger).toBeDefined();
  });

  it('records synchronously and writes later, off the caller’s path', async () => {
    const fake = fakeRepository();
    fake.hold(); // a database that never answers must not delay record()
    const sink = createBatchedUsageSink(fake.repo, { flushIntervalMs: 5 });
    const started = performance.now();
    for (let i = 0; i < 1_000; i++) sink.record(rec());
    expect(performance.now() - started).toBeLessThan(100);
    expect(fake.calls).toHaveLength(0);
    expect(sink.pending()).toBe(1_000);
    fake.release();
    await sink.close();
    expect(fake.stored.size).toBe(1_000);
  });

  it('writes a partial batch after flushIntervalMs, in one call', async () => {
    const fake = fakeRepository();
    const sink = createBatchedUsageSink(fake.repo, { flushIntervalMs: 20 });
    const records = [rec(), rec(), rec()];
    records.forEach((r) => sink.record(r));
    await sleep(5);
    expect(fake.calls).toHaveLength(0);
    await sleep(60);
    expect(fake.calls).toEqual([records.map((r) => r.generationId)]);
    expect(sink.pending()).toBe(0);
    await sink.close();
  });

  it('splits into batches of maxBatch, in record order, without waiting for the interval', async () => {
    const fake = fakeRepository();
    const sink = createBatchedUsageSink(fake.repo, { maxBatch: 256, flushIntervalMs: 60_000 });
    const records = Array.from({ length: 600 }, () => rec());
    records.forEach((r) => sink.record(r));
    await sleep(20);
    // Two full batches went at once; the 88 left wait for the (long) interval or a flush.
    expect(fake.calls.map((c) => c.length)).toEqual([256, 256]);
    await sink.flush();
    expect(fake.calls.map((c) => c.length)).toEqual([256, 256, 88]);
    expect(fake.order).toEqual(records.map((r) => r.generationId));
    await sink.close();
  });

  it('retries failed writes with backoff until they succeed, keeping order and never dropping', async () => {
    const fake = fakeRepository();
    const failures: number[] = [];
    const { logger, lines } = recordingLogger();
    const sink = createBatchedUsageSink(fake.repo, {
      maxBatch: 2,
      flushIntervalMs: 1,
      retryBaseMs: 2,
      logger,
      onError: (_err, f) => failures.push(f.attempt),
    });
    fake.failNext(4);
    const records = Array.from({ length: 5 }, () => rec());
    records.forEach((r) => sink.record(r));
    await sink.flush();
    expect(failures).toEqual([1, 2, 3, 4]);
    expect(lines.filter((l) => l.level === 'warn').map((l) => (l.fields as { attempt: number }).attempt)).toEqual([1, 2, 4]);
    expect(fake.order).toEqual(records.map((r) => r.generationId));
    // The failed batch was retried as the same batch.
    expect(fake.calls.slice(0, 5)).toEqual(Array(5).fill(records.slice(0, 2).map((r) => r.generationId)));
    await sink.close();
  });

  it('does not duplicate when a write committed but reported failure (idempotent retry)', async () => {
    const fake = fakeRepository();
    const sink = createBatchedUsageSink(fake.repo, { flushIntervalMs: 1, retryBaseMs: 1 });
    fake.failNext(2, true);
    const records = [rec(), rec(), rec()];
    records.forEach((r) => sink.record(r));
    await sink.flush();
    expect(fake.calls).toHaveLength(3);
    expect(fake.stored.size).toBe(3);
    expect(fake.order).toEqual(records.map((r) => r.generationId));
    await sink.close();
  });

  it('flush drains everything recorded before it, and resolves at once when idle', async () => {
    const fake = fakeRepository();
    const sink = createBatchedUsageSink(fake.repo, { maxBatch: 100, flushIntervalMs: 60_000 });
    await sink.flush();
    for (let i = 0; i < 1_050; i++) sink.record(rec());
    await sink.flush();
    expect(fake.stored.size).toBe(1_050);
    expect(sink.pending()).toBe(0);
    await sink.close();
  });

  it('reports saturation at capacity and keeps every record beyond it', async () => {
    const fake = fakeRepository();
    const { logger, lines } = recordingLogger();
    const sink = createBatchedUsageSink(fake.repo, { capacity: 5, maxBatch: 2, flushIntervalMs: 1, logger });
    fake.hold();
    for (let i = 0; i < 4; i++) sink.record(rec());
    expect(sink.saturated()).toBe(false);
    for (let i = 0; i < 3; i++) sink.record(rec());
    expect(sink.pending()).toBe(7);
    expect(sink.saturated()).toBe(true);
    expect(lines.filter((l) => l.message.includes('saturated'))).toHaveLength(1);
    fake.release();
    await sink.flush();
    expect(sink.saturated()).toBe(false);
    expect(fake.stored.size).toBe(7);
    await sink.close();
  });

  it('refuses malformed records synchronously so they cannot block the queue', () => {
    const sink = createBatchedUsageSink(fakeRepository().repo);
    for (const bad of [
      rec({ inputTokens: -1 }),
      rec({ outputTokens: 1.5 }),
      rec({ costNanoUsd: Number.NaN }),
      rec({ totalMs: Number.POSITIVE_INFINITY }),
      rec({ finishedAt: new Date('nope') }),
    ]) {
      expect(() => sink.record(bad)).toThrow(WeirError);
    }
    expect(sink.pending()).toBe(0);
    sink.record(rec({ ttftMs: null }));
    expect(sink.pending()).toBe(1);
    return sink.close();
  });

  it('close drains records recorded while closing, then refuses new ones', async () => {
    const fake = fakeRepository();
    const sink = createBatchedUsageSink(fake.repo, { flushIntervalMs: 60_000 });
    sink.record(rec());
    fake.hold();
    const closing = sink.close();
    sink.record(rec());
    fake.release();
    expect(await closing).toEqual({ unwritten: 0 });
    expect(fake.stored.size).toBe(2);
    expect(() => sink.record(rec())).toThrow(expect.objectContaining({ code: 'shutting_down' }));
    expect(await sink.close()).toEqual({ unwritten: 0 });
  });

  it('close with a timeout gives up on a dead database and reports what is left', async () => {
    const fake = fakeRepository();
    const { logger, lines } = recordingLogger();
    const sink = createBatchedUsageSink(fake.repo, { flushIntervalMs: 1, retryBaseMs: 5, logger });
    fake.failNext(Number.POSITIVE_INFINITY);
    sink.record(rec());
    sink.record(rec());
    const started = performance.now();
    expect(await sink.close({ timeoutMs: 50 })).toEqual({ unwritten: 2 });
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(lines.some((l) => l.level === 'error' && (l.fields as { unwritten: number }).unwritten === 2)).toBe(true);
    expect(sink.pending()).toBe(2);
    const callsAtClose = fake.calls.length;
    await sleep(30);
    expect(fake.calls.length).toBe(callsAtClose); // the writer stopped
  });
});

import type { UsageRecord, UsageRecordSource, UsageSink } from '@weir/core';
import { buildUsageRecord, uniqueTag, waitUntil } from './usage-records';

/** What {@link describeUsageChannelContract} needs for one test: a sink wired to a source. */
export interface UsageChannelFixture {
  /** Where records are recorded. */
  sink: UsageSink;
  /**
   * Where they come out. It must accept `start` again after `stop`, continuing where it left
   * off (for a durable consumer: the same durable). Redelivery after a rejection should be
   * fast (≤ 1 s) to keep the suite quick.
   */
  source: UsageRecordSource;
  /** Stops what is still running and deletes what the fixture created (streams, consumers). */
  cleanup: () => Promise<void>;
}

type Batch = readonly UsageRecord[];

/**
 * The contract every usage sink → source channel passes (a jest `describe` block):
 * - `record` is synchronous (returns nothing) and `flush` resolves once a source is started
 *   (the suite never flushes before `start`: in-process, the handler is the only durability);
 * - every record is delivered, in record order, field for field (dates as equal `Date`s; null
 *   `ttftMs` / `errorCode` and `uncertain` preserved), whether recorded before or after `start`;
 * - a batch whose handler rejects is delivered again, and nothing is lost;
 * - `stop` waits for the batch in flight; a later `start` gets exactly the records not yet
 *   accepted (accepted ones are never delivered again);
 * - a malformed record is refused by `record` (throws) and does not block the others.
 * @param make creates a fresh, isolated channel per test.
 */
export function describeUsageChannelContract(name: string, make: () => Promise<UsageChannelFixture>): void {
  describe(`UsageChannel contract: ${name}`, () => {
    let fx: UsageChannelFixture;
    let tag: string;
    const rec = (i: number, overrides: Partial<UsageRecord> = {}) => buildUsageRecord(i, overrides, tag);

    beforeEach(async () => {
      tag = uniqueTag();
      fx = await make();
    });
    afterEach(async () => {
      await fx.cleanup();
    });

    it('delivers every record in order and intact, recorded before or after start', async () => {
      const sent = [
        ...Array.from({ length: 30 }, (_, i) => rec(i)),
        rec(30, { status: 'failed', finishReason: 'error', errorCode: 'upstream_error', uncertain: true, ttftMs: null }),
        rec(31, { tenantId: 'tenant.with dots*', uncertain: false }),
      ];
      for (const r of sent.slice(0, 10)) expect(fx.sink.record(r)).toBeUndefined();
      const got: UsageRecord[] = [];
      await fx.source.start(async (batch) => {
        got.push(...batch);
      });
      for (const r of sent.slice(10)) fx.sink.record(r);
      await fx.sink.flush();
      await waitUntil(() => got.length >= sent.length, 10_000, 'all records delivered');
      expect(got).toEqual(sent);
      expect(got[0].startedAt).toBeInstanceOf(Date);
    });

    it('redelivers a batch whose handler rejected, losing nothing', async () => {
      const sent = Array.from({ length: 12 }, (_, i) => rec(i));
      for (const r of sent) fx.sink.record(r);
      const calls: Batch[] = [];
      const accepted: UsageRecord[] = [];
      let rejections = 0;
      await fx.source.start(async (batch) => {
        calls.push(batch);
        if (rejections < 2) {
          rejections++;
          throw new Error('store unavailable (expected by the test)');
        }
        accepted.push(...batch);
      });
      await fx.sink.flush();
      await waitUntil(() => new Set(accepted.map((r) => r.generationId)).size === sent.length, 10_000, 'every record accepted');
      const firstIds = calls[0].map((r) => r.generationId);
      const acceptedIds = accepted.map((r) => r.generationId);
      for (const id of firstIds) expect(acceptedIds).toContain(id);
      expect(new Set(acceptedIds)).toEqual(new Set(sent.map((r) => r.generationId)));
    });

    it('stop waits for the batch in flight; a later start gets only what was not accepted', async () => {
      const first = Array.from({ length: 5 }, (_, i) => rec(i));
      for (const r of first) fx.sink.record(r);
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const got1: UsageRecord[] = [];
      let inHandler = false;
      let handlerFinished = false;
      await fx.source.start(async (batch) => {
        inHandler = true;
        await gate;
        got1.push(...batch);
        handlerFinished = true;
      });
      await waitUntil(() => inHandler, 10_000, 'first batch in flight');
      let stopped = false;
      const stopping = fx.source.stop().then(() => (stopped = true));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(stopped).toBe(false);
      release();
      await stopping;
      expect(handlerFinished).toBe(true);
      // Everything of `first` must eventually be accepted: the in-flight batch now, the rest later.
      const second = Array.from({ length: 5 }, (_, i) => rec(100 + i));
      for (const r of second) fx.sink.record(r);
      const got2: UsageRecord[] = [];
      await fx.source.start(async (batch) => {
        got2.push(...batch);
      });
      await fx.sink.flush();
      const expectedIds = [...first, ...second].map((r) => r.generationId).filter((id) => !got1.some((g) => g.generationId === id));
      await waitUntil(() => got2.length >= expectedIds.length, 10_000, 'the rest delivered after restart');
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(got2.map((r) => r.generationId).sort()).toEqual([...expectedIds].sort());
      await fx.source.stop();
    });

    it('refuses a malformed record without blocking the others', async () => {
      expect(() => fx.sink.record(rec(0, { inputTokens: -1 }))).toThrow();
      expect(() => fx.sink.record(rec(1, { startedAt: new Date(Number.NaN) }))).toThrow();
      fx.sink.record(rec(2));
      const got: UsageRecord[] = [];
      await fx.source.start(async (batch) => {
        got.push(...batch);
      });
      await fx.sink.flush();
      await waitUntil(() => got.length >= 1, 10_000, 'the valid record delivered');
      expect(got.map((r) => r.generationId)).toEqual([rec(2).generationId]);
    });
  });
}

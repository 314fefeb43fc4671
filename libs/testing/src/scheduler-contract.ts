import type { ScheduleRequest, ScheduleResult, SchedulerService, SchedulingDefaults, SlotLease } from '@weir/core';
import { type ContractSubject, contractCallers } from './port-contract-fixtures';

/** The replicas and queue bound a scheduler under contract must be built with. */
export interface SchedulerContractTopology {
  /** `solo@1`: one replica with one slot; `pair@1`: two replicas with one slot each. */
  replicas: Array<{ id: string; revisionId: string; slots: number }>;
  /** Queue entries per replica of a revision (so `solo@1` queues at most 2). */
  maxQueuePerReplica: number;
  /**
   * Scheduler settings: one tenant may fill the whole queue, and the prior service rate is
   * 1,000,000 tokens/s per sequence, so a request of `tokens` tokens holds a sequence for
   * `tokens` µs in the start-time estimate (a 64-token lease: 0.064 ms).
   */
  settings: Partial<SchedulingDefaults>;
}

const topology: SchedulerContractTopology = {
  replicas: [
    { id: 'solo@1/0', revisionId: 'solo@1', slots: 1 },
    { id: 'pair@1/0', revisionId: 'pair@1', slots: 1 },
    { id: 'pair@1/1', revisionId: 'pair@1', slots: 1 },
  ],
  maxQueuePerReplica: 2,
  settings: { tenantQueueShare: 1, priorPrefillTokensPerS: 1_000_000, priorDecodeTokensPerS: 1_000_000 },
};

/** Deadlines in the contract are on `performance.now()` (the `systemClock` of `@weir/core`). */
function scheduleRequest(revisionId: string, overrides: Partial<ScheduleRequest> = {}): ScheduleRequest {
  return {
    caller: contractCallers.acme,
    revisionId,
    tokens: 64,
    deadlineAt: performance.now() + 10_000,
    signal: new AbortController().signal,
    ...overrides,
  };
}

function leaseOf(result: ScheduleResult): SlotLease {
  if (!result.ok) throw new Error(`expected a lease, got ${result.reason}: ${result.message}`);
  return result.lease;
}

const settled = async <T>(promise: Promise<T>, ms: number): Promise<T | 'pending'> =>
  Promise.race([promise, new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms))]);

/**
 * The contract every `SchedulerService` binding passes (a jest `describe` block), with the
 * semantics of the in-process slot scheduler. `setup` builds the scheduler over
 * {@link SchedulerContractTopology} with deadlines on `performance.now()`, before each test:
 * - a free slot is granted at once on a replica of the revision, spread across replicas;
 *   an unknown revision, or one whose every replica is to be avoided, answers `no_replica`;
 *   `avoidReplicas` is honoured; an already-aborted signal answers `cancelled`;
 * - a full revision queues the request FIFO until a lease is released, reporting the
 *   queue time; a bounded queue answers `queue_full`;
 * - a queued request leaves with `deadline` when its deadline passes and `cancelled` when
 *   its signal fires, and leaving frees its queue entry;
 * - `release()` is idempotent: releasing twice frees one slot; it accepts the generation's
 *   measurements (a usage report);
 * - a request whose estimated start is past its deadline answers `deadline_unmeetable` at
 *   once, with a retry hint;
 * - batch-class work waits behind interactive work queued after it.
 */
export function describeSchedulerContract(name: string, setup: (topology: SchedulerContractTopology) => Promise<ContractSubject<SchedulerService>>): void {
  describe(`scheduler contract: ${name}`, () => {
    let subject: ContractSubject<SchedulerService>;
    const scheduler = () => subject.service;
    const acquire = (revisionId: string, overrides: Partial<ScheduleRequest> = {}) => scheduler().acquire(scheduleRequest(revisionId, overrides));

    beforeEach(async () => {
      subject = await setup(structuredClone(topology));
    });
    afterEach(async () => {
      await subject?.close?.();
    });

    it('grants a free slot at once, spread across the revision replicas', async () => {
      const a = leaseOf(await acquire('pair@1'));
      const b = leaseOf(await acquire('pair@1'));
      expect([a.replicaId, b.replicaId].sort()).toEqual(['pair@1/0', 'pair@1/1']);
      expect(a.queueMs).toBeLessThan(50);
      a.release();
      b.release();
    });

    it('answers no_replica for a revision nobody serves', async () => {
      const result = await acquire('ghost@1');
      expect(result).toMatchObject({ ok: false, reason: 'no_replica' });
    });

    it('honours avoidReplicas, and answers no_replica when every replica is avoided', async () => {
      const lease = leaseOf(await acquire('pair@1', { avoidReplicas: ['pair@1/0'] }));
      expect(lease.replicaId).toBe('pair@1/1');
      lease.release();
      expect(await acquire('solo@1', { avoidReplicas: ['solo@1/0'] })).toMatchObject({ ok: false, reason: 'no_replica' });
    });

    it('answers cancelled for an already-aborted signal', async () => {
      const controller = new AbortController();
      controller.abort();
      expect(await acquire('solo@1', { signal: controller.signal })).toMatchObject({ ok: false, reason: 'cancelled' });
    });

    it('queues FIFO until a lease is released and reports the queue time', async () => {
      const held = leaseOf(await acquire('solo@1'));
      const first = acquire('solo@1');
      await new Promise((r) => setTimeout(r, 20));
      const second = acquire('solo@1');
      expect(await settled(first, 30)).toBe('pending');
      held.release();
      const firstLease = leaseOf(await first);
      expect(firstLease.replicaId).toBe('solo@1/0');
      expect(firstLease.queueMs).toBeGreaterThanOrEqual(30);
      expect(await settled(second, 30)).toBe('pending');
      firstLease.release();
      leaseOf(await second).release();
    });

    it('answers queue_full beyond the queue bound', async () => {
      const held = leaseOf(await acquire('solo@1'));
      const waiting = [acquire('solo@1'), acquire('solo@1')];
      await new Promise((r) => setTimeout(r, 20));
      expect(await acquire('solo@1')).toMatchObject({ ok: false, reason: 'queue_full' });
      held.release();
      for (const w of waiting) leaseOf(await w).release();
    });

    it('answers deadline when the deadline passes while queued', async () => {
      const held = leaseOf(await acquire('solo@1'));
      const started = performance.now();
      const result = await acquire('solo@1', { deadlineAt: performance.now() + 80 });
      expect(result).toMatchObject({ ok: false, reason: 'deadline' });
      expect(performance.now() - started).toBeGreaterThanOrEqual(70);
      expect(result.ok || result.queueMs).toBeGreaterThanOrEqual(60);
      held.release();
    });

    it('answers cancelled when the signal fires while queued, freeing the queue entry', async () => {
      const held = leaseOf(await acquire('solo@1'));
      const controller = new AbortController();
      const leaving = acquire('solo@1', { signal: controller.signal });
      const staying = acquire('solo@1');
      await new Promise((r) => setTimeout(r, 20));
      controller.abort();
      expect(await leaving).toMatchObject({ ok: false, reason: 'cancelled' });
      // The bound is 2: with the leaver gone there is room for one more.
      const third = acquire('solo@1');
      await new Promise((r) => setTimeout(r, 20));
      held.release();
      const next = leaseOf(await staying);
      next.release();
      leaseOf(await third).release();
    });

    it('answers deadline_unmeetable at once, with a retry hint, when the estimated start is past the deadline', async () => {
      // 20,000,000 tokens at the prior 1,000,000 tokens/s: the only slot is busy for ~20 s.
      const held = leaseOf(await acquire('solo@1', { tokens: 20_000_000 }));
      const started = performance.now();
      const result = await acquire('solo@1', { deadlineAt: performance.now() + 2_000 });
      expect(result).toMatchObject({ ok: false, reason: 'deadline_unmeetable', queueMs: 0 });
      expect(result.ok || result.retryAfterMs).toBeGreaterThanOrEqual(1_000);
      expect(performance.now() - started).toBeLessThan(1_000);
      held.release();
    });

    it('serves interactive work before batch work queued earlier', async () => {
      const held = leaseOf(await acquire('solo@1'));
      const order: string[] = [];
      const batch = acquire('solo@1', { priority: 'batch', caller: contractCallers.globex }).then((r) => (order.push('batch'), r));
      await new Promise((r) => setTimeout(r, 20));
      const interactive = acquire('solo@1').then((r) => (order.push('interactive'), r));
      await new Promise((r) => setTimeout(r, 20));
      held.release();
      leaseOf(await interactive).release();
      leaseOf(await batch).release();
      expect(order).toEqual(['interactive', 'batch']);
    });

    it('takes the generation’s measurements with release and frees the slot', async () => {
      const held = leaseOf(await acquire('solo@1', { inputTokens: 10 }));
      held.release({ inputTokens: 10, outputTokens: 54, ttftMs: 5, durationMs: 120 });
      leaseOf(await acquire('solo@1')).release();
    });

    it('frees one slot for a double release', async () => {
      const held = leaseOf(await acquire('solo@1'));
      held.release();
      held.release();
      const again = leaseOf(await acquire('solo@1'));
      expect(await acquire('solo@1', { deadlineAt: performance.now() + 60 })).toMatchObject({ ok: false, reason: 'deadline' });
      again.release();
    });
  });
}

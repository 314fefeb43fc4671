import type { Caller, ScheduleRequest, ScheduleResult, SlotLease } from '@weir/core';
import { createPoolScheduler, type PoolSchedulerOptions, type SchedulerObserver } from './pool-scheduler';

const callers: Record<string, Caller> = {
  acme: { tenantId: 'acme', appId: 'acme-app', apiKeyId: 'k1' },
  globex: { tenantId: 'globex', appId: 'globex-app', apiKeyId: 'k2' },
  initech: { tenantId: 'initech', appId: 'initech-app', apiKeyId: 'k3' },
};
// The fake clock: jest's modern fake timers drive Date.now and every setTimeout.
const clock = { now: () => Date.now() };

beforeEach(() => jest.useFakeTimers());
afterEach(() => jest.useRealTimers());

const req = (tenant: keyof typeof callers, over: Partial<ScheduleRequest> = {}): ScheduleRequest => ({
  caller: callers[tenant],
  revisionId: 'm@1',
  tokens: 100,
  inputTokens: 50,
  deadlineAt: Date.now() + 600_000,
  signal: new AbortController().signal,
  ...over,
});

function leaseOf(result: ScheduleResult): SlotLease {
  if (!result.ok) throw new Error(`expected a lease, got ${result.reason}: ${result.message}`);
  return result.lease;
}

/** Lets resolved promises run (no timers advance). */
const flush = () => jest.advanceTimersByTimeAsync(0);

const base = (over: Partial<PoolSchedulerOptions> = {}): PoolSchedulerOptions => ({
  replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1, kvTokens: 10_000 }],
  clock,
  ...over,
});

describe('createPoolScheduler: capacity', () => {
  it('never oversubscribes a replica in sequences or KV tokens, whatever the order of work', async () => {
    const s = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 4, kvTokens: 1_000 }, { id: 'r1', revisionId: 'm@1', slots: 2, kvTokens: 2_000 }], settings: { tenantQueueShare: 1 }, rejectUnmeetable: false }));
    const held: SlotLease[] = [];
    const pending: Array<Promise<void>> = [];
    let seed = 7;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    const check = () => {
      for (const r of s.stats().replicas) {
        expect(r.inFlight).toBeLessThanOrEqual(r.slots);
        expect(r.kvTokensInUse).toBeLessThanOrEqual(r.kvTokens);
      }
    };
    for (let step = 0; step < 400; step++) {
      if (random() < 0.55) {
        const tenant = (['acme', 'globex', 'initech'] as const)[Math.floor(random() * 3)];
        pending.push(s.acquire(req(tenant, { tokens: 100 + Math.floor(random() * 900) })).then((r) => void (r.ok && held.push(r.lease))));
      } else if (held.length > 0) {
        held.splice(Math.floor(random() * held.length), 1)[0].release();
      }
      await flush();
      check();
    }
    while (held.length > 0 || s.stats().lanes[0].requests > 0) {
      held.shift()?.release();
      await flush();
      check();
    }
    await Promise.all(pending);
    expect(s.stats().replicas.every((r) => r.inFlight === 0 && r.kvTokensInUse === 0)).toBe(true);
  });

  it('queues a request that fits no replica’s free KV tokens, and starts it when enough is released', async () => {
    const s = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 4, kvTokens: 1_000 }] }));
    const a = leaseOf(await s.acquire(req('acme', { tokens: 600 })));
    const b = s.acquire(req('acme', { tokens: 600 }));
    await flush();
    expect(s.stats().replicas[0]).toMatchObject({ inFlight: 1, kvTokensInUse: 600 });
    a.release();
    expect(leaseOf(await b).replicaId).toBe('r0');
  });

  it('answers no_replica for a request larger than every replica’s KV tokens', async () => {
    const s = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 4, kvTokens: 1_000 }] }));
    expect(await s.acquire(req('acme', { tokens: 1_001 }))).toMatchObject({ ok: false, reason: 'no_replica', message: expect.stringContaining('1001 KV tokens') });
  });
});

describe('createPoolScheduler: pools', () => {
  const pools = (): PoolSchedulerOptions =>
    base({
      replicas: [
        { id: 'shared', revisionId: 'm@1', slots: 1, pool: 'interactive' },
        { id: 'acme-0', revisionId: 'm@1', slots: 1, pool: 'acme-pool' },
        { id: 'batch-0', revisionId: 'm@1', slots: 1, pool: 'batch' },
        { id: 'other', revisionId: 'n@1', slots: 1 },
      ],
      tenants: [{ id: 'acme', dedicatedPool: 'acme-pool' }],
    });

  it('keeps a dedicated pool to its tenants, and its tenants to it', async () => {
    const s = createPoolScheduler(pools());
    // Other tenants never reach the dedicated replica, even when it is idle and theirs is busy.
    const g1 = leaseOf(await s.acquire(req('globex')));
    expect(g1.replicaId).toBe('shared');
    const g2 = s.acquire(req('globex'));
    await flush();
    expect(s.stats().inFlight['acme-0']).toBe(0);
    // The dedicated tenant runs on its pool only, and not on a revision its pool does not serve.
    const a1 = leaseOf(await s.acquire(req('acme')));
    expect(a1.replicaId).toBe('acme-0');
    expect(await s.acquire(req('acme', { revisionId: 'n@1' }))).toMatchObject({ ok: false, reason: 'no_replica' });
    g1.release();
    expect(leaseOf(await g2).replicaId).toBe('shared');
  });

  it('puts batch-class work on the batch pool when it serves the revision, interactive work never', async () => {
    const s = createPoolScheduler(pools());
    const b = leaseOf(await s.acquire(req('globex', { priority: 'batch' })));
    expect(b.replicaId).toBe('batch-0');
    const i = leaseOf(await s.acquire(req('globex')));
    expect(i.replicaId).toBe('shared');
    const waiting = s.acquire(req('globex'));
    await flush();
    expect(s.stats().inFlight['batch-0']).toBe(1);
    i.release();
    expect(leaseOf(await waiting).replicaId).toBe('shared');
  });

  it('serves queued interactive work before batch work that arrived earlier, on a shared pool', async () => {
    const s = createPoolScheduler(base({ settings: { tenantQueueShare: 1 } }));
    const held = leaseOf(await s.acquire(req('acme')));
    const order: string[] = [];
    const batch = s.acquire(req('acme', { priority: 'batch' })).then((r) => (order.push('batch'), r));
    const interactive = s.acquire(req('globex')).then((r) => (order.push('interactive'), r));
    await flush();
    held.release();
    leaseOf(await interactive).release();
    leaseOf(await batch).release();
    expect(order).toEqual(['interactive', 'batch']);
  });
});

describe('createPoolScheduler: fairness', () => {
  it('shares a busy replica between tenants by weight, in tokens, not by arrival', async () => {
    const s = createPoolScheduler(
      base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1 }], tenants: [{ id: 'acme', schedulingWeight: 3 }], settings: { quantumTokens: 100, tenantQueueShare: 1 }, maxQueuePerReplica: 1_000, rejectUnmeetable: false }),
    );
    const held = leaseOf(await s.acquire(req('acme')));
    const granted: Array<{ tenant: 'acme' | 'globex'; tokens: number; lease: SlotLease }> = [];
    const queue = (tenant: 'acme' | 'globex', tokens: number) => void s.acquire(req(tenant, { tokens })).then((r) => granted.push({ tenant, tokens, lease: leaseOf(r) }));
    // The noisy tenant (weight 1) queues first and sends 4× larger requests.
    for (let i = 0; i < 200; i++) queue('globex', 400);
    for (let i = 0; i < 400; i++) queue('acme', 100);
    await flush();
    held.release();
    const tokens = { acme: 0, globex: 0 };
    // One lease at a time: each release grants the next entry in the fair order.
    for (let i = 0; i < 240; i++) {
      await flush();
      const last = granted[granted.length - 1];
      tokens[last.tenant] += last.tokens;
      last.lease.release();
    }
    // Weight 3 : 1 in tokens (acme 75 %), within a few percent.
    const share = tokens.acme / (tokens.acme + tokens.globex);
    expect(share).toBeGreaterThan(0.72);
    expect(share).toBeLessThan(0.78);
  });

  it('serves the earliest deadline first inside a tenant', async () => {
    const s = createPoolScheduler(base({ settings: { tenantQueueShare: 1 } }));
    const held = leaseOf(await s.acquire(req('acme')));
    const order: string[] = [];
    const late = s.acquire(req('acme', { deadlineAt: Date.now() + 90_000 })).then((r) => (order.push('late'), leaseOf(r)));
    const soon = s.acquire(req('acme', { deadlineAt: Date.now() + 30_000 })).then((r) => (order.push('soon'), leaseOf(r)));
    await flush();
    held.release();
    (await soon).release();
    (await late).release();
    expect(order).toEqual(['soon', 'late']);
  });
});

describe('createPoolScheduler: bounds', () => {
  it('answers queue_full at the pool bound and at a tenant’s share of it, at once', async () => {
    const s = createPoolScheduler(base({ maxQueuePerReplica: 4, settings: { tenantQueueShare: 0.5 }, rejectUnmeetable: false }));
    leaseOf(await s.acquire(req('acme')));
    void s.acquire(req('acme'));
    void s.acquire(req('acme'));
    expect(await s.acquire(req('acme'))).toMatchObject({ ok: false, reason: 'queue_full', message: expect.stringContaining("tenant's share"), retryAfterMs: 1_000 });
    void s.acquire(req('globex'));
    void s.acquire(req('globex'));
    expect(await s.acquire(req('initech'))).toMatchObject({ ok: false, reason: 'queue_full', message: expect.stringContaining('queue of pool interactive') });
  });

  it('bounds queued bytes per pool and per tenant', async () => {
    const s = createPoolScheduler(base({ maxQueuePerReplica: 100, settings: { maxQueueBytesPerReplica: 1_000, tenantQueueShare: 0.6 }, rejectUnmeetable: false }));
    leaseOf(await s.acquire(req('acme')));
    void s.acquire(req('acme', { bytes: 500 }));
    expect(await s.acquire(req('acme', { bytes: 200 }))).toMatchObject({ ok: false, reason: 'queue_full', message: expect.stringContaining("tenant's share") });
    void s.acquire(req('globex', { bytes: 450 }));
    expect(await s.acquire(req('initech', { bytes: 100 }))).toMatchObject({ ok: false, reason: 'queue_full', message: expect.stringContaining('bytes') });
    expect(s.stats().lanes[0]).toMatchObject({ requests: 2, bytes: 950 });
  });

  it('lets interactive work displace queued batch work in a full queue (batch is shed first)', async () => {
    const events: string[] = [];
    const observer: SchedulerObserver = { onRejected: (e) => events.push(`${e.priority}:${e.reason}`) };
    const s = createPoolScheduler(base({ maxQueuePerReplica: 1, settings: { tenantQueueShare: 1 }, rejectUnmeetable: false, observer }));
    leaseOf(await s.acquire(req('acme')));
    const batch = s.acquire(req('acme', { priority: 'batch' }));
    const interactive = s.acquire(req('globex'));
    expect(await batch).toMatchObject({ ok: false, reason: 'shed', message: expect.stringContaining('displaced by interactive work') });
    await flush();
    expect(s.stats().lanes[0].byTenant).toEqual([{ tenant: 'globex', priority: 'interactive', requests: 1, tokens: 100 }]);
    expect(events).toEqual(['batch:shed']);
    void interactive;
  });
});

describe('createPoolScheduler: leaving the queue', () => {
  it('drops a waiter whose client leaves and one whose deadline passes, holding nothing', async () => {
    const dequeued: string[] = [];
    const s = createPoolScheduler(base({ settings: { tenantQueueShare: 1 }, rejectUnmeetable: false, observer: { onDequeued: (e) => dequeued.push(`${e.outcome}@${e.queueMs}`) } }));
    const held = leaseOf(await s.acquire(req('acme')));
    const ac = new AbortController();
    const cancelled = s.acquire(req('acme', { signal: ac.signal }));
    const late = s.acquire(req('globex', { deadlineAt: Date.now() + 2_000 }));
    await jest.advanceTimersByTimeAsync(500);
    ac.abort();
    expect(await cancelled).toMatchObject({ ok: false, reason: 'cancelled', queueMs: 500 });
    await jest.advanceTimersByTimeAsync(1_500);
    expect(await late).toMatchObject({ ok: false, reason: 'deadline', queueMs: 2_000 });
    expect(s.stats().lanes[0]).toMatchObject({ requests: 0, tokens: 0, bytes: 0 });
    held.release();
    expect(s.stats().replicas[0]).toMatchObject({ inFlight: 0, kvTokensInUse: 0 });
    expect(dequeued).toEqual(['granted@0', 'cancelled@500', 'deadline@2000']);
  });

  it('expires a lease its holder never released, after the deadline plus the grace', async () => {
    const expired: string[] = [];
    const s = createPoolScheduler(base({ leaseGraceMs: 1_000, observer: { onLeaseExpired: (id) => expired.push(id) } }));
    leaseOf(await s.acquire(req('acme', { deadlineAt: Date.now() + 5_000 })));
    await jest.advanceTimersByTimeAsync(5_999);
    expect(s.stats().inFlight.r0).toBe(1);
    await jest.advanceTimersByTimeAsync(2);
    expect(s.stats().inFlight.r0).toBe(0);
    expect(expired).toEqual(['r0']);
  });
});

describe('createPoolScheduler: deadlines', () => {
  // One sequence; prior decode 20 tokens/s, prefill 1,000 tokens/s (the defaults).
  it('rejects at once with deadline_unmeetable when the estimated start is past the deadline', async () => {
    const s = createPoolScheduler(base());
    // In flight: 50 input + 100 output tokens → 0.05 s + 5 s of work on the only sequence.
    leaseOf(await s.acquire(req('acme', { tokens: 150, inputTokens: 50 })));
    const tooSoon = await s.acquire(req('globex', { tokens: 20, inputTokens: 10, deadlineAt: Date.now() + 4_000 }));
    expect(tooSoon).toMatchObject({ ok: false, reason: 'deadline_unmeetable', queueMs: 0 });
    expect(tooSoon.ok || tooSoon.retryAfterMs).toBeGreaterThanOrEqual(1_000);
    // Enough time: it queues.
    const fine = s.acquire(req('globex', { tokens: 20, inputTokens: 10, deadlineAt: Date.now() + 10_000 }));
    await flush();
    expect(s.stats().lanes[0].requests).toBe(1);
    void fine;
  });

  it('counts the work queued ahead by the fair order, not by arrival', async () => {
    const s = createPoolScheduler(base({ settings: { tenantQueueShare: 1, quantumTokens: 100 }, maxQueuePerReplica: 100 }));
    const held = leaseOf(await s.acquire(req('acme', { tokens: 1, inputTokens: 1 })));
    // acme queues 10 requests of 5 s of decode each. With equal weights globex's first request
    // goes after about one of them (5 s), not after all ten (50 s), then runs 5 s itself.
    const order: string[] = [];
    for (let i = 0; i < 10; i++) void s.acquire(req('acme', { tokens: 100, inputTokens: 0 })).then((r) => (order.push('acme'), leaseOf(r).release()));
    await flush();
    expect(await s.acquire(req('globex', { tokens: 100, inputTokens: 0, deadlineAt: Date.now() + 9_000 }))).toMatchObject({ ok: false, reason: 'deadline_unmeetable' });
    const queued = s.acquire(req('globex', { tokens: 100, inputTokens: 0, deadlineAt: Date.now() + 11_000 })).then((r) => (order.push('globex'), leaseOf(r).release()));
    await flush();
    expect(s.stats().lanes[0].byTenant).toContainEqual({ tenant: 'globex', priority: 'interactive', requests: 1, tokens: 100 });
    held.release();
    await queued;
    await flush();
    expect(order.indexOf('globex')).toBeLessThanOrEqual(1);
  });

  it('counts the request’s own run: a start in time is not enough when the answer would end past the deadline', async () => {
    const s = createPoolScheduler(base());
    // In flight: 5.05 s of work on the only sequence.
    leaseOf(await s.acquire(req('acme', { tokens: 150, inputTokens: 50 })));
    // Starts in ≈ 5 s (before the 7 s deadline) but 100 output tokens take 5 s more.
    const cut = await s.acquire(req('globex', { tokens: 100, inputTokens: 0, deadlineAt: Date.now() + 7_000 }));
    expect(cut).toMatchObject({ ok: false, reason: 'deadline_unmeetable', message: expect.stringContaining('estimated run (5000 ms') });
    // 10 output tokens (0.5 s) fit.
    void s.acquire(req('globex', { tokens: 10, inputTokens: 0, deadlineAt: Date.now() + 7_000 }));
    await flush();
    expect(s.stats().lanes[0].requests).toBe(1);
  });

  it('drops queued work that can no longer finish by its deadline before it starts, holding nothing', async () => {
    const s = createPoolScheduler(base());
    const held = leaseOf(await s.acquire(req('acme', { tokens: 150, inputTokens: 50 })));
    // Estimated start ≈ 5 s, run 5 s: meets an 11 s deadline when it arrives.
    const queued = s.acquire(req('globex', { tokens: 100, inputTokens: 0, deadlineAt: Date.now() + 11_000 }));
    await flush();
    expect(s.stats().lanes[0].requests).toBe(1);
    // The lease ahead runs long: at 7 s only 4 s are left for 5 s of work.
    await jest.advanceTimersByTimeAsync(7_000);
    held.release();
    expect(await queued).toMatchObject({ ok: false, reason: 'deadline', message: expect.stringContaining('could no longer finish') });
    expect(s.stats()).toMatchObject({ inFlight: { r0: 0 }, lanes: [{ requests: 0 }] });
    // Work that still fits starts as usual.
    expect((await s.acquire(req('globex', { tokens: 100, inputTokens: 0, deadlineAt: Date.now() + 6_000 }))).ok).toBe(true);
  });

  it('learns the replica’s rates from lease reports (EWMA) and estimates with them', async () => {
    const s = createPoolScheduler(base({ settings: { ewmaAlpha: 0.5 } }));
    expect(s.stats().replicas[0]).toMatchObject({ prefillTokensPerS: 1_000, decodeTokensPerS: 20 });
    const a = leaseOf(await s.acquire(req('acme')));
    a.release({ inputTokens: 1_000, outputTokens: 201, ttftMs: 100, durationMs: 1_100 });
    expect(s.stats().replicas[0]).toMatchObject({ prefillTokensPerS: 10_000, decodeTokensPerS: 200 });
    const b = leaseOf(await s.acquire(req('acme')));
    b.release({ inputTokens: 1_000, outputTokens: 101, ttftMs: 100, durationMs: 1_100 });
    expect(s.stats().replicas[0]).toMatchObject({ prefillTokensPerS: 10_000, decodeTokensPerS: 150 });
    // At 150 tokens/s, 100 output tokens in flight take ~0.7 s: a 2 s deadline is now meetable.
    leaseOf(await s.acquire(req('acme', { tokens: 100, inputTokens: 0 })));
    const queued = s.acquire(req('globex', { tokens: 20, inputTokens: 0, deadlineAt: Date.now() + 2_000 }));
    await flush();
    expect(s.stats().lanes[0].requests).toBe(1);
    void queued;
  });

  it('does not read short prompts as a slow prefill: a long prompt with a long deadline still queues', async () => {
    const s = createPoolScheduler(base({ settings: { ewmaAlpha: 0.5 } }));
    // Short prompts: 10 tokens, 200 ms to the first token (the overhead), 50 tokens/s decode.
    for (let i = 0; i < 5; i++) leaseOf(await s.acquire(req('acme'))).release({ inputTokens: 10, outputTokens: 51, ttftMs: 200, durationMs: 1_200 });
    expect(s.stats().replicas[0].prefillTokensPerS).toBe(1_000); // still the prior, not 50 tokens/s
    // The slot is busy for ~1 s; a 2,700-token prompt with 10 output tokens and a 60 s deadline queues.
    leaseOf(await s.acquire(req('acme', { tokens: 60, inputTokens: 10 })));
    const long = s.acquire(req('globex', { tokens: 2_710, inputTokens: 2_700, deadlineAt: Date.now() + 60_000 }));
    await flush();
    expect(s.stats().lanes[0].requests).toBe(1);
    void long;
  });

  it('grants at once when capacity is free, whatever the estimate says', async () => {
    const s = createPoolScheduler(base());
    expect((await s.acquire(req('acme', { tokens: 5_000, inputTokens: 0, deadlineAt: Date.now() + 10 }))).ok).toBe(true);
  });
});

describe('createPoolScheduler: brownout', () => {
  const two = (observer?: SchedulerObserver) =>
    createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1 }, { id: 'r1', revisionId: 'm@1', slots: 1 }], maxQueuePerReplica: 4, settings: { tenantQueueShare: 1 }, rejectUnmeetable: false, ...(observer ? { observer } : {}) }));

  it('halves the queue bound when one of two replicas dies, sheds batch with a reason, and keeps serving interactive', async () => {
    const brownouts: string[] = [];
    const s = two({ onBrownout: (e) => brownouts.push(`${e.active}@${e.capacityRatio}`) });
    expect(s.stats().lanes[0].bounds.length).toBe(8);
    const a = leaseOf(await s.acquire(req('acme')));
    const b = leaseOf(await s.acquire(req('acme')));
    const batch = [s.acquire(req('globex', { priority: 'batch' })), s.acquire(req('globex', { priority: 'batch' }))];
    const interactive = s.acquire(req('acme'));
    await flush();
    expect(s.stats().lanes[0].requests).toBe(3);

    s.setReplicaHealth(a.replicaId, false);
    expect(s.stats().lanes[0]).toMatchObject({ brownout: true, capacityRatio: 0.5, bounds: { length: 4 } });
    expect(brownouts).toEqual(['true@0.5']);
    for (const r of await Promise.all(batch)) expect(r).toMatchObject({ ok: false, reason: 'shed', message: expect.stringContaining('lost capacity') });
    // New batch work is refused at once; interactive work still queues and is served.
    expect(await s.acquire(req('globex', { priority: 'batch' }))).toMatchObject({ ok: false, reason: 'shed', retryAfterMs: 5_000 });
    b.release();
    const survivor = leaseOf(await interactive);
    expect(survivor.replicaId).toBe(b.replicaId);
    // The survivors' queue holds 4, not 8.
    for (let i = 0; i < 4; i++) void s.acquire(req('acme'));
    expect(await s.acquire(req('acme'))).toMatchObject({ ok: false, reason: 'queue_full' });

    s.setReplicaHealth(a.replicaId, true);
    expect(s.stats().lanes[0]).toMatchObject({ brownout: false, capacityRatio: 1, bounds: { length: 8 } });
    expect(brownouts).toEqual(['true@0.5', 'false@1']);
  });

  it('treats a replica whose decode rate collapsed against its peers as lost capacity, not a pool that slows together', async () => {
    const s = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1 }, { id: 'r1', revisionId: 'm@1', slots: 1 }], settings: { ewmaAlpha: 0.5 } }));
    const report = (decodeMsPerToken: number) => ({ inputTokens: 10, outputTokens: 101, ttftMs: 10, durationMs: 10 + 100 * decodeMsPerToken });
    /** One generation on each replica, at the given ms per output token. */
    const run = async (r0MsPerToken: number, r1MsPerToken: number) => {
      const a = leaseOf(await s.acquire(req('acme')));
      const b = leaseOf(await s.acquire(req('acme')));
      expect([a.replicaId, b.replicaId]).toEqual(['r0', 'r1']);
      a.release(report(r0MsPerToken));
      b.release(report(r1MsPerToken));
    };
    for (let i = 0; i < 5; i++) await run(10, 10); // 100 tokens/s each
    expect(s.stats().lanes[0]).toMatchObject({ brownout: false, capacityRatio: 1 });
    // Both slow down together (fuller batches, a busy host): the same capacity, no brownout.
    for (let i = 0; i < 5; i++) await run(40, 40);
    expect(s.stats().lanes[0]).toMatchObject({ brownout: false, capacityRatio: 1 });
    // r0 alone falls to a fifth of r1's rate.
    for (let i = 0; i < 5; i++) await run(200, 40);
    const lane = s.stats().lanes[0];
    expect(lane.brownout).toBe(true);
    expect(lane.capacityRatio).toBeLessThan(0.8);
    expect(s.stats().replicas.find((r) => r.id === 'r0')?.capacity).toBeLessThan(0.5);
  });

  it('does not judge a replica slow on its first few generations (batch sizes differ by design)', async () => {
    const s = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1 }, { id: 'r1', revisionId: 'm@1', slots: 1 }], settings: { ewmaAlpha: 0.5 } }));
    for (let i = 0; i < 7; i++) {
      const a = leaseOf(await s.acquire(req('acme')));
      const b = leaseOf(await s.acquire(req('acme')));
      a.release({ inputTokens: 10, outputTokens: 101, ttftMs: 10, durationMs: 10 + 100 * 200 });
      b.release({ inputTokens: 10, outputTokens: 101, ttftMs: 10, durationMs: 10 + 100 * 40 });
    }
    expect(s.stats().lanes[0]).toMatchObject({ brownout: false, capacityRatio: 1 });
  });
});

describe('createPoolScheduler: fair share of sequences', () => {
  // One replica of 10 sequences; headroom 0.2 keeps 2 for tenants below their share.
  const ten = () => createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 10, kvTokens: 100_000 }], maxQueuePerReplica: 100, settings: { tenantQueueShare: 1, fairShareHeadroom: 0.2 } }));

  it('lets a flooding tenant fill every sequence while nobody else is active', async () => {
    const s = ten();
    const leases = await Promise.all(Array.from({ length: 10 }, () => s.acquire(req('acme'))));
    expect(leases.every((l) => l.ok)).toBe(true);
    expect(s.stats().inFlight.r0).toBe(10);
  });

  it('keeps the last free sequences for an active tenant below its share, who then starts at once', async () => {
    const s = ten();
    // globex is active (one generation in flight), far below its share of 5.
    const globexFirst = leaseOf(await s.acquire(req('globex')));
    // acme floods: it gets 7 (10 − 1 − the headroom of 2), the rest queue.
    const acme = Array.from({ length: 12 }, () => s.acquire(req('acme')));
    await flush();
    expect(s.stats()).toMatchObject({ inFlight: { r0: 8 }, lanes: [{ requests: 5 }] });
    // globex's next request starts at once, though acme was queued first.
    const globexNext = leaseOf(await s.acquire(req('globex')));
    expect(globexNext.queueMs).toBe(0);
    expect(s.stats().inFlight.r0).toBe(9);
    // When globex has nothing more in flight, acme may use everything again.
    globexFirst.release();
    globexNext.release();
    await flush();
    expect(s.stats()).toMatchObject({ inFlight: { r0: 10 }, lanes: [{ requests: 2 }] });
    void acme;
  });

  it('keeps none in a pool too small for the fraction, and none when set to 0', async () => {
    const small = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 4 }], settings: { fairShareHeadroom: 0.2 } }));
    leaseOf(await small.acquire(req('globex')));
    for (let i = 0; i < 3; i++) leaseOf(await small.acquire(req('acme')));
    const off = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 10 }], settings: { fairShareHeadroom: 0 } }));
    leaseOf(await off.acquire(req('globex')));
    for (let i = 0; i < 9; i++) leaseOf(await off.acquire(req('acme')));
    expect(off.stats().inFlight.r0).toBe(10);
  });
});

describe('createPoolScheduler: prefix affinity', () => {
  const four = () =>
    createPoolScheduler(base({ replicas: [0, 1, 2, 3].map((i) => ({ id: `r${i}`, revisionId: 'm@1', slots: 8, kvTokens: 100_000 })), maxQueuePerReplica: 100, settings: { fairShareHeadroom: 0 } }));

  it('sends the same key to the same replica while its load allows, and spreads different keys', async () => {
    const s = four();
    const homes = new Map<string, Set<string>>();
    for (let k = 0; k < 40; k++) {
      for (let i = 0; i < 3; i++) {
        const lease = leaseOf(await s.acquire(req('acme', { affinityKey: `acme:prefix-${k}` })));
        homes.set(`prefix-${k}`, (homes.get(`prefix-${k}`) ?? new Set()).add(lease.replicaId));
        lease.release();
      }
    }
    for (const replicas of homes.values()) expect(replicas.size).toBe(1);
    expect(new Set([...homes.values()].map((h) => [...h][0])).size).toBe(4);
  });

  it('leaves the affinity replica for the least loaded one when it is a quarter fuller or more', async () => {
    const s = four();
    const key = 'acme:shared-system-prompt';
    const home = leaseOf(await s.acquire(req('acme', { affinityKey: key }))).replicaId;
    // Its home holds 1 of 8 and the rest hold none: within the slack, it stays home.
    expect(leaseOf(await s.acquire(req('acme', { affinityKey: key }))).replicaId).toBe(home);
    // Two more on the home replica: 3 of 8 against 0 is over a quarter: elsewhere.
    leaseOf(await s.acquire(req('acme', { affinityKey: key })));
    const next = leaseOf(await s.acquire(req('acme', { affinityKey: key })));
    expect(next.replicaId).not.toBe(home);
    expect(s.stats().inFlight[home]).toBe(3);
  });

  it('never places a key on a replica it must avoid (a retry after a failure there)', async () => {
    const s = four();
    const key = 'acme:k';
    const home = leaseOf(await s.acquire(req('acme', { affinityKey: key })));
    home.release();
    const retry = leaseOf(await s.acquire(req('acme', { affinityKey: key, avoidReplicas: [home.replicaId] })));
    expect(retry.replicaId).not.toBe(home.replicaId);
  });
});

describe('createPoolScheduler: TPOT target', () => {
  it('holds a replica’s batch below its slots while its p95 TPOT is over the target, and raises it back', async () => {
    const changes: string[] = [];
    const s = createPoolScheduler(
      base({
        replicas: [{ id: 'r0', revisionId: 'm@1', slots: 10 }],
        settings: { tpotTargetMs: 50 },
        maxQueuePerReplica: 100,
        observer: { onSlotLimit: (e) => changes.push(`${e.change}:${e.limit}/${e.slots}`) },
      }),
    );
    const report = (tpotMs: number) => ({ inputTokens: 10, outputTokens: 101, ttftMs: 10, durationMs: 10 + 100 * tpotMs });
    /** Fills the replica to its limit and releases every lease with the given TPOT. */
    const wave = async (tpotMs: number) => {
      const limit = s.stats().replicas[0].slotLimit;
      const leases = await Promise.all(Array.from({ length: limit }, () => s.acquire(req('acme'))));
      await jest.advanceTimersByTimeAsync(1);
      for (const l of leases) leaseOf(l).release(report(tpotMs));
      return limit;
    };
    expect(await wave(80)).toBe(10);
    // p95 80 ms over a 50 ms target: 10 × 50/80 → 6.
    expect(s.stats().replicas[0]).toMatchObject({ slots: 10, slotLimit: 6 });
    expect(changes).toEqual(['decreased:6/10']);
    // The scheduler never gives it more than its limit: the 7th waits.
    const six = await Promise.all(Array.from({ length: 6 }, () => s.acquire(req('acme'))));
    const seventh = s.acquire(req('acme'));
    await flush();
    expect(s.stats()).toMatchObject({ inFlight: { r0: 6 }, lanes: [{ requests: 1 }] });
    await jest.advanceTimersByTimeAsync(1);
    for (const l of six) leaseOf(l).release(report(30));
    leaseOf(await seventh).release(report(30));
    // Fast again and full: one more at a time.
    await wave(30);
    expect(s.stats().replicas[0].slotLimit).toBeGreaterThan(6);
    expect(changes[changes.length - 1]).toMatch(/^increased:/);
  });

  it('keeps the declared slots when no target is set', async () => {
    const s = createPoolScheduler(base({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 4 }] }));
    const leases = await Promise.all(Array.from({ length: 4 }, () => s.acquire(req('acme'))));
    for (const l of leases) leaseOf(l).release({ inputTokens: 10, outputTokens: 101, ttftMs: 10, durationMs: 10_010 });
    expect(s.stats().replicas[0]).toMatchObject({ slots: 4, slotLimit: 4 });
  });
});

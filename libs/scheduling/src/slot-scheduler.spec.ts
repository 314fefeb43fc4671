import type { ScheduleRequest } from '@weir/core';
import { createSlotScheduler } from './slot-scheduler';

const caller = { tenantId: 't', appId: 'a', apiKeyId: 'k' };
const clock = { now: () => performance.now() };
const req = (over: Partial<ScheduleRequest> = {}): ScheduleRequest => ({
  caller,
  revisionId: 'r@1',
  tokens: 100,
  deadlineAt: clock.now() + 60_000,
  signal: new AbortController().signal,
  ...over,
});

describe('createSlotScheduler', () => {
  it('grants up to the slot count at once, then queues FIFO and hands slots on release', async () => {
    const s = createSlotScheduler({ replicas: [{ id: 'x', revisionId: 'r@1', slots: 2 }], clock });
    const a = await s.acquire(req());
    const b = await s.acquire(req());
    expect(a.ok && b.ok).toBe(true);
    const order: string[] = [];
    const c = s.acquire(req()).then((r) => (order.push('c'), r));
    const d = s.acquire(req()).then((r) => (order.push('d'), r));
    expect(s.stats()).toMatchObject({ queued: { 'r@1': 2 }, inFlight: { x: 2 }, unhealthy: [] });
    if (a.ok) a.lease.release();
    const cr = await c;
    expect(cr.ok).toBe(true);
    if (b.ok) b.lease.release();
    await d;
    expect(order).toEqual(['c', 'd']);
    expect(s.stats().inFlight.x).toBe(2);
  });

  it('spreads work over the least-loaded replica', async () => {
    const s = createSlotScheduler({
      replicas: [
        { id: 'x', revisionId: 'r@1', slots: 2 },
        { id: 'y', revisionId: 'r@1', slots: 2 },
      ],
      clock,
    });
    const ids = [];
    for (let i = 0; i < 4; i++) {
      const r = await s.acquire(req());
      if (r.ok) ids.push(r.lease.replicaId);
    }
    expect(ids.sort()).toEqual(['x', 'x', 'y', 'y']);
  });

  it('rejects with queue_full at the bound, at once', async () => {
    const s = createSlotScheduler({ replicas: [{ id: 'x', revisionId: 'r@1', slots: 1 }], maxQueuePerReplica: 1, clock });
    await s.acquire(req());
    void s.acquire(req());
    await expect(s.acquire(req())).resolves.toMatchObject({ ok: false, reason: 'queue_full' });
  });

  it('drops a queued waiter whose client goes away, and one whose deadline passes', async () => {
    const s = createSlotScheduler({ replicas: [{ id: 'x', revisionId: 'r@1', slots: 1 }], clock });
    const held = await s.acquire(req());
    const ac = new AbortController();
    const cancelled = s.acquire(req({ signal: ac.signal }));
    const late = s.acquire(req({ deadlineAt: clock.now() + 20 }));
    ac.abort();
    await expect(cancelled).resolves.toMatchObject({ ok: false, reason: 'cancelled' });
    await expect(late).resolves.toMatchObject({ ok: false, reason: 'deadline' });
    expect(s.stats().queued['r@1']).toBe(0);
    if (held.ok) held.lease.release();
    expect(s.stats().inFlight.x).toBe(0);
  });

  it('release is idempotent and unknown revisions get no_replica', async () => {
    const s = createSlotScheduler({ replicas: [{ id: 'x', revisionId: 'r@1', slots: 1 }], clock });
    const r = await s.acquire(req());
    if (r.ok) {
      r.lease.release();
      r.lease.release();
    }
    expect(s.stats().inFlight.x).toBe(0);
    await expect(s.acquire(req({ revisionId: 'nope' }))).resolves.toMatchObject({ ok: false, reason: 'no_replica' });
  });

  it('takes an unhealthy replica out of rotation and dispatches queued work when it returns', async () => {
    const s = createSlotScheduler({
      replicas: [
        { id: 'x', revisionId: 'r@1', slots: 1 },
        { id: 'y', revisionId: 'r@1', slots: 1 },
      ],
      clock,
    });
    s.setReplicaHealth('x', false);
    expect(s.stats().unhealthy).toEqual(['x']);
    const a = await s.acquire(req());
    expect(a.ok && a.lease.replicaId).toBe('y');
    const waiting = s.acquire(req());
    expect(s.stats().queued['r@1']).toBe(1);
    s.setReplicaHealth('x', true);
    const b = await waiting;
    expect(b.ok && b.lease.replicaId).toBe('x');
    if (b.ok) b.lease.release();
    if (a.ok) a.lease.release();
    // Panic routing: with every replica marked unhealthy, health is ignored rather than
    // answering no_replica for a fleet that may be fine.
    s.setReplicaHealth('x', false);
    s.setReplicaHealth('y', false);
    const c = await s.acquire(req());
    expect(c.ok).toBe(true);
  });

  it('avoids the replicas a retry names', async () => {
    const s = createSlotScheduler({
      replicas: [
        { id: 'x', revisionId: 'r@1', slots: 4 },
        { id: 'y', revisionId: 'r@1', slots: 4 },
      ],
      clock,
    });
    for (let i = 0; i < 4; i++) {
      const r = await s.acquire(req({ avoidReplicas: ['x'] }));
      expect(r.ok && r.lease.replicaId).toBe('y');
    }
    await expect(s.acquire(req({ avoidReplicas: ['x', 'y'] }))).resolves.toMatchObject({ ok: false, reason: 'no_replica' });
  });

  it('expires a lease its holder never released, after the deadline plus the grace', async () => {
    jest.useFakeTimers();
    try {
      const expired: string[] = [];
      const s = createSlotScheduler({ replicas: [{ id: 'x', revisionId: 'r@1', slots: 1 }], clock: { now: () => Date.now() }, leaseGraceMs: 1_000, onLeaseExpired: (id) => expired.push(id) });
      const r = await s.acquire(req({ deadlineAt: Date.now() + 5_000 }));
      expect(r.ok).toBe(true);
      jest.advanceTimersByTime(5_999);
      expect(s.stats().inFlight.x).toBe(1);
      jest.advanceTimersByTime(2);
      expect(s.stats().inFlight.x).toBe(0);
      expect(expired).toEqual(['x']);
    } finally {
      jest.useRealTimers();
    }
  });

  it('answers deadline at once, holding nothing, when the deadline has already passed', async () => {
    const s = createSlotScheduler({ replicas: [{ id: 'x', revisionId: 'r@1', slots: 1 }], clock });
    await expect(s.acquire(req({ deadlineAt: clock.now() - 1 }))).resolves.toMatchObject({ ok: false, reason: 'deadline' });
    expect(s.stats().inFlight.x).toBe(0);
  });
});

import type { Caller, ScheduleRequest, ScheduleResult, SlotLease } from '@weir/core';
import { createCapacityController } from '@weir/capacity';
import { createCapacityTelemetry } from './capacity-telemetry';
import { createPoolScheduler } from './pool-scheduler';

const acme: Caller = { tenantId: 'acme', appId: 'acme-app', apiKeyId: 'k1' };
// Jest's modern fake timers drive Date.now and every setTimeout.
const clock = { now: () => Date.now() };

beforeEach(() => {
  jest.useFakeTimers();
  jest.setSystemTime(Date.UTC(2025, 0, 1));
});
afterEach(() => jest.useRealTimers());

/** 100 context tokens: 40 prompt, an output limit of 60. */
const req = (over: Partial<ScheduleRequest> = {}): ScheduleRequest => ({
  caller: acme,
  revisionId: 'm@1',
  tokens: 100,
  inputTokens: 40,
  deadlineAt: Date.now() + 600_000,
  signal: new AbortController().signal,
  ...over,
});

function leaseOf(result: ScheduleResult): SlotLease {
  if (!result.ok) throw new Error(`expected a lease, got ${result.reason}`);
  return result.lease;
}

const flush = () => jest.advanceTimersByTimeAsync(0);

/** Two interactive replicas of one sequence each and a batch replica. */
function platform() {
  const inner = createPoolScheduler({
    replicas: [
      { id: 'a', revisionId: 'm@1', slots: 1 },
      { id: 'b', revisionId: 'm@1', slots: 1 },
      { id: 'z', revisionId: 'm@1', slots: 1, pool: 'batch' },
    ],
    rejectUnmeetable: false,
    clock,
  });
  return createCapacityTelemetry(inner, { source: 'scheduler-test', clock });
}

describe('createCapacityTelemetry', () => {
  it('samples queue, running work, replicas, tokens and busy time per pool from a real scheduler', async () => {
    const t = platform();
    const s = t.scheduler;
    const first = leaseOf(await s.acquire(req()));
    const second = leaseOf(await s.acquire(req()));
    const third = s.acquire(req()); // both interactive replicas are full: queued
    await flush();

    let [batch, interactive] = t.sample();
    expect(batch).toMatchObject({ pool: 'batch', replicas: 1, healthyReplicas: 1, runningRequests: 0, queuedRequests: 0, busyReplicaSecondsTotal: 0 });
    expect(interactive).toMatchObject({
      pool: 'interactive',
      source: 'scheduler-test',
      at: Date.UTC(2025, 0, 1),
      queuedRequests: 1,
      queuedOutputTokens: 60, // its output limit × the prior fill of 1
      runningRequests: 2,
      replicas: 2,
      healthyReplicas: 2,
      admittedRequestsTotal: 2,
      completedRequestsTotal: 0,
      outputTokensTotal: 0,
    });

    // 2 s later the first finishes with 30 of its 60 output tokens; the queued one takes its replica.
    await jest.advanceTimersByTimeAsync(2_000);
    first.release({ inputTokens: 40, outputTokens: 30, ttftMs: 100, durationMs: 2_000 });
    const thirdLease = leaseOf(await third);
    await jest.advanceTimersByTimeAsync(1_000);
    [batch, interactive] = t.sample();
    expect(interactive).toMatchObject({
      queuedRequests: 0,
      queuedOutputTokens: 0,
      runningRequests: 2,
      admittedRequestsTotal: 3,
      completedRequestsTotal: 1,
      outputTokensTotal: 30,
      inputTokensTotal: 40,
      // Both replicas busy all 3 s (the freed one was taken again at once).
      busyReplicaSecondsTotal: 6,
    });

    // Everything ends at 4 s; the idle second after it adds no busy time.
    await jest.advanceTimersByTimeAsync(1_000);
    second.release({ inputTokens: 40, outputTokens: 60, ttftMs: 100, durationMs: 4_000 });
    thirdLease.release({ inputTokens: 40, outputTokens: 45, ttftMs: 100, durationMs: 2_000 });
    thirdLease.release({ inputTokens: 40, outputTokens: 45, ttftMs: 100, durationMs: 2_000 }); // idempotent
    await jest.advanceTimersByTimeAsync(1_000);
    [, interactive] = t.sample();
    expect(interactive).toMatchObject({ runningRequests: 0, completedRequestsTotal: 3, outputTokensTotal: 135, busyReplicaSecondsTotal: 8 });
    expect(t.scheduler.stats().replicas.every((r) => r.inFlight === 0)).toBe(true);
  });

  it('estimates queued output with the measured fill of the pool', async () => {
    const t = platform();
    const s = t.scheduler;
    // Fill 0.5 (30 of 60), then 0.5 → EWMA stays 0.5.
    for (let i = 0; i < 2; i++) leaseOf(await s.acquire(req())).release({ inputTokens: 40, outputTokens: 30, ttftMs: 10, durationMs: 100 });
    const held = [leaseOf(await s.acquire(req())), leaseOf(await s.acquire(req()))];
    void s.acquire(req());
    void s.acquire(req({ tokens: 240, inputTokens: 40 })); // output limit 200
    await flush();
    const [, interactive] = t.sample();
    expect(interactive).toMatchObject({ queuedRequests: 2, queuedOutputTokens: Math.round((60 + 200) * 0.5) });
    for (const l of held) l.release();
  });

  it('corrects its count from the scheduler when a lease expires unseen', async () => {
    const inner = createPoolScheduler({ replicas: [{ id: 'a', revisionId: 'm@1', slots: 1 }], leaseGraceMs: 1_000, rejectUnmeetable: false, clock });
    const t = createCapacityTelemetry(inner, { source: 's', clock });
    leaseOf(await t.scheduler.acquire(req({ deadlineAt: Date.now() + 1_000 })));
    await jest.advanceTimersByTimeAsync(3_000); // expired at 2 s inside the scheduler
    expect(t.sample()[0]).toMatchObject({ runningRequests: 0, busyReplicaSecondsTotal: 3 });
    await jest.advanceTimersByTimeAsync(5_000);
    // No longer counted as busy: the holder vanished.
    expect(t.sample()[0].busyReplicaSecondsTotal).toBe(3);
  });

  it('feeds the capacity controller: samples of a loaded pool become a measured decision', async () => {
    const t = platform();
    const controller = createCapacityController({ clock, replicaTokensPerSecondHint: 1_000, minBusyReplicaSeconds: 4, pools: { batch: { minReplicas: 0, nPlus: 0 } } });
    controller.ingest(t.sample()[1]);
    // 12 s of work: each interactive replica runs one 60-token request per 2 s (30 tokens/s each).
    for (let step = 0; step < 6; step++) {
      const leases = [leaseOf(await t.scheduler.acquire(req())), leaseOf(await t.scheduler.acquire(req()))];
      await jest.advanceTimersByTimeAsync(2_000);
      for (const l of leases) l.release({ inputTokens: 40, outputTokens: 60, ttftMs: 50, durationMs: 2_000 });
    }
    const [batch, interactive] = t.sample();
    const d = controller.ingest(interactive);
    expect(d).toMatchObject({ basis: 'measured', replicaTokensPerSecond: 30, observedTokensPerSecond: 60, admittedRequestsPerSecond: 1 });
    // 60 tokens/s at 30 × 0.7 = 21 per replica → 3, + 1.
    expect(d?.recommendedReplicas).toBe(4);
    expect(controller.ingest(batch)).toMatchObject({ pool: 'batch', demandTokensPerSecond: 0, recommendedReplicas: 0, basis: 'hint' });
  });
});

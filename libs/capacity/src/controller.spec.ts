import { type CapacityDecision, createCapacityController, type CapacityControllerOptions, type PoolTelemetrySample } from './controller';
import { CapacityInputError } from './errors';
import { planCapacity } from './plan';

const T0 = Date.UTC(2025, 0, 1);

/** A controller clock the test moves, plus a pool whose cumulative counters the test drives. */
function setup(overrides: Partial<CapacityControllerOptions> = {}) {
  let now = T0;
  const gauge: Array<[string, number]> = [];
  const published: CapacityDecision[] = [];
  const controller = createCapacityController({
    clock: { now: () => now },
    replicaTokensPerSecondHint: 800,
    gauge: { set: (pool, n) => gauge.push([pool, n]) },
    onDecision: (d) => published.push(d),
    ...overrides,
  });
  const counters = { admittedRequestsTotal: 0, completedRequestsTotal: 0, outputTokensTotal: 0, inputTokensTotal: 0, busyReplicaSecondsTotal: 0 };
  let state = { replicas: 2, healthyReplicas: 2, queuedRequests: 0, queuedOutputTokens: 0, runningRequests: 0 };
  const sample = (): PoolTelemetrySample => ({ pool: 'interactive', source: 'scheduler-a', at: now, ...state, ...counters });
  return {
    controller,
    gauge,
    published,
    set(s: Partial<typeof state>) {
      state = { ...state, ...s };
    },
    /**
     * Advances both clocks by `seconds` in 5 s steps, each step adding `perSecond` of load to
     * the counters, and ingests a sample after each step. Returns the decisions.
     */
    run(seconds: number, perSecond: { requests: number; outputTokens: number; inputTokens?: number; busyReplicas: number }): CapacityDecision[] {
      const out: CapacityDecision[] = [];
      for (let t = 0; t < seconds; t += 5) {
        now += 5_000;
        counters.admittedRequestsTotal += perSecond.requests * 5;
        counters.completedRequestsTotal += perSecond.requests * 5;
        counters.outputTokensTotal += perSecond.outputTokens * 5;
        counters.inputTokensTotal += (perSecond.inputTokens ?? 0) * 5;
        counters.busyReplicaSecondsTotal += perSecond.busyReplicas * 5;
        const d = controller.ingest(sample());
        if (!d) throw new Error('sample ignored');
        out.push(d);
      }
      return out;
    },
    ingest: () => controller.ingest(sample()),
  };
}

// 10 requests/s of 100 output tokens on 2 replicas that are always busy: 1,000 tokens/s, 500 per busy replica.
const STEADY = { requests: 10, outputTokens: 1000, inputTokens: 2000, busyReplicas: 2 };

describe('createCapacityController', () => {
  it('sizes a steady load with the planner, on the measured per-replica throughput', () => {
    const p = setup();
    p.ingest();
    const d = p.run(60, STEADY).at(-1) as CapacityDecision;
    const plan = planCapacity({ rps: 10, inputTokens: 200, outputTokens: 100, replicaTokensPerSecond: 500, utilization: 0.7, nPlus: 1 });
    // 1,000 / (500 × 0.7) = 2.86 → 3, + 1 for N+1.
    expect(plan.replicasWithFailures).toBe(4);
    expect(d).toMatchObject({
      pool: 'interactive',
      desiredReplicas: 4,
      recommendedReplicas: 4,
      currentReplicas: 2,
      demandTokensPerSecond: 1000,
      observedTokensPerSecond: 1000,
      backlogTokensPerSecond: 0,
      admittedRequestsPerSecond: 10,
      replicaTokensPerSecond: 500,
      basis: 'measured',
    });
    expect(d.lines).toEqual(expect.arrayContaining(plan.lines));
    expect(d.lines.join('\n')).toContain('60,000 tokens / 120 busy replica-s = 500 tokens/s');
    expect(p.gauge.at(-1)).toEqual(['interactive', 4]);
    expect(p.published.at(-1)).toBe(d);
    expect(p.controller.decision('interactive')).toBe(d);
    expect(p.controller.decisions()).toEqual([d]);
  });

  it('scales up at once when a backlog builds', () => {
    const p = setup();
    p.ingest();
    p.run(60, STEADY);
    // 90 queued requests, 30,000 output tokens: 1,000 tokens/s more to drain them in 30 s.
    p.set({ queuedRequests: 90, queuedOutputTokens: 30_000 });
    const [d] = p.run(5, STEADY);
    expect(d.backlogTokensPerSecond).toBe(1000);
    expect(d.demandTokensPerSecond).toBe(2000);
    // ceil(2,000 / 350) = 6, + 1.
    expect(d.recommendedReplicas).toBe(7);
    expect(d.desiredReplicas).toBe(7);
    expect(p.gauge.at(-1)).toEqual(['interactive', 7]);
  });

  it('scales down only after the stabilisation window, keeping the measured throughput while idle', () => {
    const p = setup();
    p.ingest();
    p.run(400, STEADY); // past the first 300 s, so the running count no longer holds it up
    p.set({ replicas: 4, healthyReplicas: 4 });
    const idle = { requests: 0, outputTokens: 0, busyReplicas: 0 };
    // The 60 s window still holds load for a minute, then every recommendation is the floor.
    const during = p.run(300, idle);
    expect(during.every((d) => d.desiredReplicas === 4)).toBe(true);
    expect(during.at(-1)?.recommendedReplicas).toBe(1);
    const after = p.run(65, idle);
    // The last recommendation of 4 came at 415 s (its window still held 45 s of load); 300 s
    // later, at 720 s, the highest left is 3; by 765 s every one in the window is 1.
    expect(after.slice(0, 3).map((d) => d.desiredReplicas)).toEqual([4, 4, 4]);
    expect(after[3].desiredReplicas).toBe(3);
    expect(after[2].lines.at(-1)).toContain('the highest recommendation of the last 300 s');
    expect(after.at(-1)?.desiredReplicas).toBe(1);
    expect(after.at(-1)).toMatchObject({ basis: 'measured', replicaTokensPerSecond: 500, demandTokensPerSecond: 0 });
  });

  it('never goes below the running replicas before it has watched a pool for the stabilisation window', () => {
    const p = setup();
    p.set({ replicas: 5, healthyReplicas: 5 });
    p.ingest();
    const early = p.run(295, { requests: 1, outputTokens: 100, busyReplicas: 1 });
    // 100 tokens/s at 100 measured × 0.7 → 2, + 1.
    expect(early.every((d) => d.desiredReplicas === 5 && d.recommendedReplicas <= 3)).toBe(true);
    expect(early.at(-1)?.recommendedReplicas).toBe(3);
    expect(early.at(-1)?.lines.at(-1)).toContain('never below the 5 running');
    const [later] = p.run(10, { requests: 1, outputTokens: 100, busyReplicas: 1 });
    expect(later.desiredReplicas).toBe(3);
  });

  it('plans on the configured hint until the window holds enough busy time, and says so', () => {
    const p = setup({ minBusyReplicaSeconds: 30 });
    p.ingest();
    // 1 busy replica: 5 replica-s per sample; 30 are needed.
    const [first] = p.run(5, { requests: 2, outputTokens: 300, busyReplicas: 1 });
    expect(first).toMatchObject({ basis: 'hint', replicaTokensPerSecond: 800 });
    expect(first.lines.join('\n')).toContain('configured hint');
    expect(first.lines).toEqual(expect.arrayContaining(planCapacity({ rps: 2, inputTokens: 0, outputTokens: 150, replicaTokensPerSecond: 800, utilization: 0.7, nPlus: 1 }).lines));
    const later = p.run(30, { requests: 2, outputTokens: 300, busyReplicas: 1 });
    expect(later.at(-1)).toMatchObject({ basis: 'measured', replicaTokensPerSecond: 300 });
  });

  it('takes a per-pool hint, bounds and N+k', () => {
    const p = setup({ pools: { interactive: { replicaTokensPerSecondHint: 100, minReplicas: 3, maxReplicas: 5, nPlus: 0, utilization: 0.5 } } });
    p.ingest();
    // 1,000 tokens/s at 100 × 0.5 → 20 replicas, clamped to 5.
    const [d] = p.run(5, { requests: 10, outputTokens: 1000, busyReplicas: 1 });
    expect(d).toMatchObject({ basis: 'hint', recommendedReplicas: 5, desiredReplicas: 5 });
    expect(d.lines).toContain('clamp:    20 within [3, 5] = 5 replicas');
  });

  it('smooths the measured throughput with an EWMA', () => {
    const p = setup({ throughputEwmaAlpha: 0.5, windowSeconds: 5 });
    p.ingest();
    p.run(5, { requests: 1, outputTokens: 1000, busyReplicas: 2 }); // 500
    const [d] = p.run(5, { requests: 1, outputTokens: 2000, busyReplicas: 2 }); // 1,000 → 750
    expect(d.replicaTokensPerSecond).toBe(750);
  });

  it('starts the window afresh when the scheduler restarts, and ignores a sample that is not newer', () => {
    const p = setup();
    p.ingest();
    p.run(30, STEADY);
    const stale = { ...(p.controller.decision('interactive') as CapacityDecision) };
    // Same time again: ignored.
    expect(p.ingest()).toBeUndefined();
    expect(p.controller.decision('interactive')).toEqual(stale);
    // A new source with counters from zero: one sample, no rates, no negative demand.
    const restarted = p.controller.ingest({
      pool: 'interactive',
      source: 'scheduler-b',
      at: T0 + 60_000,
      queuedRequests: 0,
      queuedOutputTokens: 0,
      runningRequests: 0,
      replicas: 2,
      healthyReplicas: 2,
      admittedRequestsTotal: 0,
      completedRequestsTotal: 0,
      outputTokensTotal: 0,
      inputTokensTotal: 0,
      busyReplicaSecondsTotal: 0,
    });
    expect(restarted).toMatchObject({ observedTokensPerSecond: 0, basis: 'measured', replicaTokensPerSecond: 500 });
    expect(restarted?.lines[0]).toContain('1 sample from scheduler-b');
  });

  it('refuses bad options and samples with the field named', () => {
    const clock = { now: () => T0 };
    const bad: Array<[Partial<CapacityControllerOptions>, string]> = [
      [{ replicaTokensPerSecondHint: 0 }, 'replicaTokensPerSecondHint'],
      [{ utilization: 1.5 }, 'utilization'],
      [{ windowSeconds: -1 }, 'windowSeconds'],
      [{ throughputEwmaAlpha: 0 }, 'throughputEwmaAlpha'],
      [{ pools: { gpu: { minReplicas: 4, maxReplicas: 2 } } }, 'pools.gpu.maxReplicas'],
      [{ nPlus: 0.5 }, 'nPlus'],
    ];
    for (const [options, field] of bad) {
      expect(() => createCapacityController({ clock, replicaTokensPerSecondHint: 100, ...options })).toThrow(expect.objectContaining({ name: 'CapacityInputError', field }));
    }
    const c = createCapacityController({ clock, replicaTokensPerSecondHint: 100 });
    const sample: PoolTelemetrySample = {
      pool: 'p',
      source: 's',
      at: T0,
      queuedRequests: 0,
      queuedOutputTokens: 0,
      runningRequests: 0,
      replicas: 1,
      healthyReplicas: 1,
      admittedRequestsTotal: 0,
      completedRequestsTotal: 0,
      outputTokensTotal: -1,
      inputTokensTotal: 0,
      busyReplicaSecondsTotal: 0,
    };
    expect(() => c.ingest(sample)).toThrow(CapacityInputError);
    expect(() => c.ingest({ ...sample, outputTokensTotal: 0, replicas: 1.5 })).toThrow(expect.objectContaining({ field: 'sample.replicas' }));
    expect(c.decisions()).toEqual([]);
  });
});

import { CapacityInputError } from './errors';
import { type CapacityPlanInput, planBySimulation, planCapacity } from './plan';
import type { ReplicaProfile } from './profile';

const seed: CapacityPlanInput = { rps: 100, inputTokens: 2000, outputTokens: 300, replicaTokensPerSecond: 2500, utilization: 0.7, nPlus: 1 };

describe('planCapacity reproduces the seed’s sizing', () => {
  it('100 rps × 300 tokens at 2,500 tokens/s and 70%: 18 replicas, 19 with N+1', () => {
    const plan = planCapacity(seed);
    expect(plan).toMatchObject({
      demandTokensPerSecond: 30_000,
      prefillDemandTokensPerSecond: 200_000,
      usableTokensPerReplica: 1750,
      floorReplicas: 12,
      replicas: 18,
      replicasWithFailures: 19,
      failureChecks: [
        { replicas: 18, survivors: 17, capacityTokensPerSecond: 29_750, meetsDemand: false },
        { replicas: 19, survivors: 18, capacityTokensPerSecond: 31_500, meetsDemand: true },
      ],
    });
    const text = plan.lines.join('\n');
    expect(text).toContain('100 requests/s × 300 output tokens = 30,000 tokens/s');
    expect(text).toContain('ceil(30,000 / 1,750) = 18 replicas');
    expect(text).toContain('17 × 2,500 × 0.7 = 29,750 tokens/s < 30,000: short');
    expect(text).toContain('answer:   19 replicas');
  });

  it('does not round an exact fit up (1,750 tokens/s needs exactly one replica at 70%)', () => {
    expect(planCapacity({ ...seed, rps: 10, outputTokens: 175, nPlus: 0 })).toMatchObject({ replicas: 1, replicasWithFailures: 1, failureChecks: [] });
  });

  it('adds one replica per failure to survive', () => {
    const plan = planCapacity({ ...seed, nPlus: 2 });
    expect(plan.replicasWithFailures).toBe(20);
    expect(plan.failureChecks.map((c) => [c.survivors, c.meetsDemand])).toEqual([
      [16, false],
      [18, true],
    ]);
  });

  it('defaults nPlus to 0 and says there is no failure reserve', () => {
    const { nPlus: _n, ...noReserve } = seed;
    const plan = planCapacity(noReserve);
    expect(plan.replicasWithFailures).toBe(18);
    expect(plan.lines.join('\n')).toContain('no failure reserve');
  });

  it.each([
    ['rps', { rps: 0 }],
    ['outputTokens', { outputTokens: Number.NaN }],
    ['inputTokens', { inputTokens: -1 }],
    ['replicaTokensPerSecond', { replicaTokensPerSecond: -2500 }],
    ['utilization', { utilization: 0 }],
    ['utilization', { utilization: 70 }],
    ['nPlus', { nPlus: 0.5 }],
    ['nPlus', { nPlus: -1 }],
  ])('names %s when it is out of range', (field, patch) => {
    let error: unknown;
    try {
      planCapacity({ ...seed, ...patch });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(CapacityInputError);
    expect((error as CapacityInputError).field).toBe(field);
  });
});

describe('planBySimulation', () => {
  const profile: ReplicaProfile = { prefillTokensPerSecond: 10_000, decodeStepMs: [[1, 20], [32, 40]], kvTokens: 65_536, maxSequences: 32 };
  const load = { rps: 20, inputTokens: { kind: 'fixed', value: 500 }, outputTokens: { kind: 'fixed', value: 100 }, profile, durationSeconds: 20, nPlus: 1 } as const;

  it('finds the smallest fleet meeting the seed’s targets; one fewer misses', () => {
    const plan = planBySimulation(load);
    expect(plan.targets).toEqual({ ttftP95Ms: 1000, tpotP95Ms: 50 });
    expect(plan.replicas).not.toBeNull();
    const n = plan.replicas as number;
    expect(plan.replicasWithFailures).toBe(n + 1);
    expect(plan.report.replicas).toBe(n);
    expect(plan.report.ttftMs.p95).toBeLessThanOrEqual(1000);
    expect(plan.report.tpotMs.p95).toBeLessThanOrEqual(50);
    expect(n).toBeGreaterThanOrEqual(plan.lowerBound);
    if (n > 1) {
      const below = plan.trials.find((t) => t.replicas === n - 1);
      expect(below?.meets).toBe(false);
    }
  });

  it('tighter targets need at least as many replicas', () => {
    const loose = planBySimulation(load).replicas as number;
    const tight = planBySimulation({ ...load, targets: { tpotP95Ms: 30 } }).replicas as number;
    expect(tight).toBeGreaterThanOrEqual(loose);
  });

  it('reports no answer when a request can never fit a replica', () => {
    const plan = planBySimulation({ ...load, inputTokens: { kind: 'fixed', value: 70_000 }, maxReplicas: 4 });
    expect(plan.replicas).toBeNull();
    expect(plan.report.rejected).toBeGreaterThan(0);
  });

  it('names a bad target', () => {
    expect(() => planBySimulation({ ...load, targets: { ttftP95Ms: 0 } })).toThrow(expect.objectContaining({ field: 'targets.ttftP95Ms' }) as CapacityInputError);
  });
});

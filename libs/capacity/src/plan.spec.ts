import { CapacityInputError } from './errors';
import { type CapacityPlanInput, minDecodeStepMs, planBySimulation, planCapacity, plannedMeanTokens, simulationLowerBound } from './plan';
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

  it('never reports a negative survivor count: N+k above the throughput count loses all of them', () => {
    // Was "18 replicas losing 20 leave -2 × 2,500 × 0.7 = -3,500 tokens/s".
    const plan = planCapacity({ ...seed, nPlus: 20 });
    expect(plan.replicasWithFailures).toBe(38);
    expect(plan.failureChecks.map((c) => [c.replicas, c.survivors, c.capacityTokensPerSecond, c.meetsDemand])).toEqual([
      [18, 0, 0, false],
      [38, 18, 31_500, true],
    ]);
    const text = plan.lines.join('\n');
    expect(text).toContain('18 replicas losing 20 leave none: 0 tokens/s < 30,000: short');
    expect(text).not.toMatch(/-\d/);
  });

  it.each([
    // Was "Infinity replicas … NaN tokens/s": 1e-300 × 0.7 rounds to 0 usable tokens/s.
    ['replicaTokensPerSecond', { replicaTokensPerSecond: 1e-300 }],
    // Was "Infinity replicas": rps × output tokens overflows.
    ['rps', { rps: 1e300, outputTokens: 1e10 }],
    // Was 1.43e300 replicas: finite, but not a count (beyond 2^53).
    ['rps', { rps: 1e300 }],
    ['nPlus', { nPlus: 1e300 }],
  ])('refuses a plan whose answer would not be a finite, countable number (%s)', (field, patch) => {
    expect(() => planCapacity({ ...seed, ...patch })).toThrow(expect.objectContaining({ field }) as CapacityInputError);
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

  it('exports its lower bound, so a caller can compare it with a limit before simulating', () => {
    expect(simulationLowerBound(load)).toBe(planBySimulation(load).lowerBound);
    // 5,000 rps × (2,000 / 10,000 + 300 / 800) s = 2,875 replicas.
    expect(simulationLowerBound({ ...load, rps: 5000, inputTokens: { kind: 'fixed', value: 2000 }, outputTokens: { kind: 'fixed', value: 300 } })).toBe(2875);
    expect(() => simulationLowerBound({ ...load, rps: 0 })).toThrow(expect.objectContaining({ field: 'rps' }) as CapacityInputError);
  });

  it('plans on a lognormal mean no larger than its largest draw', () => {
    expect(plannedMeanTokens({ kind: 'lognormal', p50: 300, p95: 900 })).toBeCloseTo(375, 0);
    // σ = ln(10^6) / 1.645 ≈ 8.4: the untruncated mean is ~10^15, the draws stop at 4 × p95.
    expect(plannedMeanTokens({ kind: 'lognormal', p50: 1, p95: 1e6 })).toBe(4e6);
  });

  it('the fastest decode step is the minimum over batches 1…maxSequences', () => {
    expect(minDecodeStepMs(profile)).toBe(20);
    expect(minDecodeStepMs({ ...profile, decodeStepMs: [[1, 30], [8, 12], [64, 40]], maxSequences: 16 })).toBe(12);
    expect(minDecodeStepMs({ ...profile, decodeStepMs: [[1, 30], [64, 10]], maxSequences: 16 })).toBeCloseTo(30 - (20 * 15) / 63, 9);
  });

  describe('stops after the first run when no fleet size can meet the targets', () => {
    it.each([
      ['tpot', { targets: { tpotP95Ms: 5 } }, { reason: 'tpot', minTpotMs: 20 }],
      ['ttft', { inputTokens: { kind: 'fixed', value: 5000 }, targets: { ttftP95Ms: 100 } }, { reason: 'ttft', minTtftP95Ms: 520 }],
      ['kv_memory', { inputTokens: { kind: 'fixed', value: 70_000 } }, { reason: 'kv_memory' }],
      ['no_arrivals', { rps: 0.001, durationSeconds: 1 }, { reason: 'no_arrivals' }],
    ] as const)('%s', (_reason, patch, unreachable) => {
      // Before, each doubled up to maxReplicas (1,000): 11 runs, one of them 1,000 replicas.
      const plan = planBySimulation({ ...load, ...patch });
      expect(plan.replicas).toBeNull();
      expect(plan.trials).toHaveLength(1);
      expect(plan.unreachable).toMatchObject(unreachable);
    });

    it('but keeps searching when a larger fleet can meet them', () => {
      const plan = planBySimulation({ ...load, targets: { tpotP95Ms: 25 } });
      expect(plan.unreachable).toBeUndefined();
      expect(plan.replicas).not.toBeNull();
    });
  });

  it('names a bad target', () => {
    expect(() => planBySimulation({ ...load, targets: { ttftP95Ms: 0 } })).toThrow(expect.objectContaining({ field: 'targets.ttftP95Ms' }) as CapacityInputError);
  });
});

import { CapacityInputError } from './errors';
import { drawTokens, meanTokens, validateDistribution } from './distribution';
import { createRandom } from './prng';
import type { ReplicaProfile } from './profile';
import { simulateCluster, type SimulationInput } from './simulate';
import { nearestRank, summarize } from './stats';

const profile: ReplicaProfile = { prefillTokensPerSecond: 10_000, decodeStepMs: [[1, 20], [32, 40]], kvTokens: 65_536, maxSequences: 32 };
const base: SimulationInput = {
  profile,
  replicas: 1,
  rps: 0.2,
  durationSeconds: 100,
  inputTokens: { kind: 'fixed', value: 1000 },
  outputTokens: { kind: 'fixed', value: 5 },
  seed: 7,
};

describe('simulateCluster', () => {
  it('requests that never overlap each see TTFT = prefill + one step and TPOT = one step at batch 1', () => {
    const report = simulateCluster(base);
    expect(report.arrived).toBeGreaterThan(5);
    // Precondition (fixed by the seed): arrivals are more than one service time (200 ms) apart.
    report.requests.slice(1).forEach((r, i) => expect(r.arrivalMs - report.requests[i].arrivalMs).toBeGreaterThan(200));
    for (const r of report.requests) {
      expect(r.queueMs).toBe(0);
      expect(r.ttftMs).toBeCloseTo(120, 9);
      expect(r.tpotMs).toBeCloseTo(20, 9);
      expect(r.e2eMs).toBeCloseTo(200, 9);
    }
    expect(report.ttftMs.p95).toBeCloseTo(120, 9);
    expect(report.maxBatch).toBe(1);
    expect(report.maxKvUtilization).toBeCloseTo(1005 / 65_536, 12);
    expect(report.rejected).toBe(0);
  });

  it('is deterministic for a seed and differs across seeds', () => {
    const load = { ...base, replicas: 2, rps: 20, durationSeconds: 10, outputTokens: { kind: 'lognormal', p50: 50, p95: 200 } } as const;
    expect(simulateCluster(load)).toEqual(simulateCluster(load));
    expect(simulateCluster({ ...load, seed: 8 }).requests).not.toEqual(simulateCluster(load).requests);
  });

  it('dispatches to the replica with the fewest outstanding tokens', () => {
    const report = simulateCluster({ ...base, replicas: 3, rps: 50, durationSeconds: 2, outputTokens: { kind: 'fixed', value: 100 } });
    expect(report.requests[0].replica).toBe(0);
    const used = new Set(report.requests.map((r) => r.replica));
    expect(used).toEqual(new Set([0, 1, 2]));
    // Equal request sizes: shares within one request of each other (roughly even).
    const counts = [0, 1, 2].map((i) => report.requests.filter((r) => r.replica === i).length);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(Math.ceil(report.arrived / 10));
  });

  it('orders simultaneous events and breaks dispatch ties as the replica scan did (values pinned from it)', () => {
    // Equal lengths: many step ends coincide and many replicas tie on outstanding tokens. The
    // next step end now comes from a heap and the least loaded replica from a tree (O(log n)
    // rather than a scan of every replica per event); ties still go to the lowest index.
    const report = simulateCluster({ ...base, replicas: 16, rps: 100, durationSeconds: 5, inputTokens: { kind: 'fixed', value: 1000 }, outputTokens: { kind: 'fixed', value: 50 }, seed: 3 });
    expect(report.requests.slice(0, 24).map((r) => r.replica)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7]);
    expect(report.arrived).toBe(515);
    expect(report.ttftMs.p95).toBe(258.1424544776155);
    expect(report.tpotMs.p95).toBe(81.44832126398947);
    expect(report.makespanMs).toBe(6720.193257579731);
    expect(report.maxBatch).toBe(28);
  });

  it('names KV memory as binding when contexts fill the cache before the batch fills', () => {
    const report = simulateCluster({ ...base, rps: 20, durationSeconds: 10, inputTokens: { kind: 'fixed', value: 4000 }, outputTokens: { kind: 'fixed', value: 400 } });
    expect(report.bindingConstraint).toBe('kv_memory');
    expect(report.kvBlockedMs).toBeGreaterThan(0);
    // 65,536 / 4,400 = 14 sequences at most.
    expect(report.maxBatch).toBeLessThanOrEqual(14);
    expect(report.maxKvReservedUtilization).toBeLessThanOrEqual(1);
  });

  it('names prefill as binding for long prompts and short answers, decode for the reverse', () => {
    const prefill = simulateCluster({ ...base, rps: 2, durationSeconds: 20, inputTokens: { kind: 'fixed', value: 3000 }, outputTokens: { kind: 'fixed', value: 2 } });
    expect(prefill.bindingConstraint).toBe('prefill');
    const decode = simulateCluster({ ...base, rps: 2, durationSeconds: 20, inputTokens: { kind: 'fixed', value: 10 }, outputTokens: { kind: 'fixed', value: 500 } });
    expect(decode.bindingConstraint).toBe('decode');
  });

  it('counts requests that can never fit as rejected', () => {
    const report = simulateCluster({ ...base, inputTokens: { kind: 'fixed', value: 70_000 } });
    expect(report.rejected).toBe(report.arrived);
    expect(report.requests).toEqual([]);
    expect(Number.isNaN(report.ttftMs.p95)).toBe(true);
  });

  it.each([
    ['replicas', { replicas: 0 }],
    ['rps', { rps: -1 }],
    ['durationSeconds', { durationSeconds: 0 }],
    ['outputTokens.p95', { outputTokens: { kind: 'lognormal', p50: 100, p95: 50 } }],
    ['inputTokens', { inputTokens: { kind: 'samples', values: [] } }],
    ['profile.kvTokens', { profile: { ...profile, kvTokens: 0 } }],
    ['seed', { seed: 1.5 }],
  ])('rejects a bad %s', (field, patch) => {
    expect(() => simulateCluster({ ...base, ...patch } as SimulationInput)).toThrow(expect.objectContaining({ field }) as CapacityInputError);
  });
});

describe('token distributions', () => {
  it('fixed and samples draw exactly what is given', () => {
    const random = createRandom(1);
    expect(drawTokens({ kind: 'fixed', value: 300 }, random)).toBe(300);
    const draws = Array.from({ length: 200 }, () => drawTokens({ kind: 'samples', values: [10, 20, 30] }, random));
    expect(new Set(draws)).toEqual(new Set([10, 20, 30]));
  });

  it('lognormal has the given median and 95th percentile (20,000 seeded draws, within 3%)', () => {
    const random = createRandom(42);
    const d = { kind: 'lognormal', p50: 300, p95: 1200 } as const;
    const draws = Array.from({ length: 20_000 }, () => drawTokens(d, random)).sort((a, b) => a - b);
    expect(nearestRank(draws, 50) / 300).toBeCloseTo(1, 1);
    expect(Math.abs(nearestRank(draws, 50) / 300 - 1)).toBeLessThan(0.03);
    expect(Math.abs(nearestRank(draws, 95) / 1200 - 1)).toBeLessThan(0.03);
    expect(meanTokens(d)).toBeGreaterThan(300);
  });

  it('rejects a lognormal with p95 < p50, naming the field', () => {
    expect(() => validateDistribution('outputTokens', { kind: 'lognormal', p50: 10, p95: 5 })).toThrow('outputTokens.p95');
  });
});

describe('percentiles', () => {
  it('uses nearest rank', () => {
    const values = Array.from({ length: 20 }, (_, i) => i + 1);
    expect(nearestRank(values, 50)).toBe(10);
    expect(nearestRank(values, 95)).toBe(19);
    expect(nearestRank(values, 99)).toBe(20);
    expect(summarize([3, 1, 2])).toEqual({ count: 3, mean: 2, p50: 2, p95: 3, p99: 3, max: 3 });
  });
});

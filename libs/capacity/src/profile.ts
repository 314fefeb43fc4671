import { CapacityInputError, requirePositive } from './errors';

/**
 * What one simulated GPU replica can do. All four numbers are inputs: measure them on the real
 * model, accelerator, runtime and precision before trusting a plan (the seed's warning).
 */
export interface ReplicaProfile {
  /** Prompt tokens processed per second during prefill (tokens/s, > 0). */
  prefillTokensPerSecond: number;
  /**
   * Decode step time as a function of batch size: points `[batch, ms]` with strictly
   * increasing integer batches ≥ 1 and times > 0. Between two points the time is linear in the
   * batch; below the first point it is the first point's time, above the last the last's
   * (so give a point at `maxSequences`). See {@link decodeStepMs}.
   */
  decodeStepMs: ReadonlyArray<readonly [batch: number, ms: number]>;
  /** KV-cache capacity in tokens: context tokens (input + generated) across active sequences (> 0). */
  kvTokens: number;
  /** Largest running batch (concurrent sequences, integer ≥ 1). */
  maxSequences: number;
}

/**
 * The example profile of issue 5 (the benchmark's, fixed in `tools/bench`): 10,000 prefill
 * tokens/s, a 20 ms decode step at batch 1 rising linearly to 40 ms at batch 32, 64k KV tokens,
 * 32 sequences. An illustration, not a measurement of any real accelerator.
 */
export const EXAMPLE_REPLICA_PROFILE: Readonly<ReplicaProfile> = Object.freeze({
  prefillTokensPerSecond: 10_000,
  decodeStepMs: Object.freeze([Object.freeze([1, 20] as const), Object.freeze([32, 40] as const)]),
  kvTokens: 65_536,
  maxSequences: 32,
});

/**
 * Checks a profile.
 * @throws CapacityInputError naming the field (`profile.kvTokens`, `profile.decodeStepMs[1]`, …).
 */
export function validateProfile(profile: ReplicaProfile, field = 'profile'): void {
  requirePositive(`${field}.prefillTokensPerSecond`, profile.prefillTokensPerSecond);
  requirePositive(`${field}.kvTokens`, profile.kvTokens, { integer: true });
  requirePositive(`${field}.maxSequences`, profile.maxSequences, { integer: true });
  const points = profile.decodeStepMs;
  if (!Array.isArray(points) || points.length === 0) {
    throw new CapacityInputError(`${field}.decodeStepMs`, 'needs at least one [batch, ms] point, e.g. [[1, 20], [32, 40]]');
  }
  points.forEach((p, i) => {
    if (!Array.isArray(p) || p.length !== 2) throw new CapacityInputError(`${field}.decodeStepMs[${i}]`, 'must be a [batch, ms] pair');
    requirePositive(`${field}.decodeStepMs[${i}].batch`, p[0], { integer: true });
    requirePositive(`${field}.decodeStepMs[${i}].ms`, p[1]);
    if (i > 0 && p[0] <= points[i - 1][0]) {
      throw new CapacityInputError(`${field}.decodeStepMs[${i}].batch`, `batches must increase (${p[0]} after ${points[i - 1][0]})`);
    }
  });
}

/**
 * Decode step time (ms) for a batch of `batch` sequences, piecewise linear between the
 * profile's points: for b₀ ≤ batch ≤ b₁ with times t₀, t₁,
 * `t = t₀ + (t₁ − t₀) · (batch − b₀) / (b₁ − b₀)`; clamped to the first point's time below b₀
 * of the first point and to the last point's time above the last. With the example profile:
 * batch 1 → 20 ms, 16 → 29.68 ms, 32 → 40 ms. A step produces one token for every sequence
 * in the batch. `batch` ≤ 0 gives the first point's time.
 */
export function decodeStepMs(profile: Pick<ReplicaProfile, 'decodeStepMs'>, batch: number): number {
  const points = profile.decodeStepMs;
  if (batch <= points[0][0]) return points[0][1];
  for (let i = 1; i < points.length; i += 1) {
    const [b1, t1] = points[i];
    if (batch <= b1) {
      const [b0, t0] = points[i - 1];
      return t0 + ((t1 - t0) * (batch - b0)) / (b1 - b0);
    }
  }
  return points[points.length - 1][1];
}

/** Prefill time (ms) of `tokens` prompt tokens: `tokens / prefillTokensPerSecond × 1000`. */
export function prefillMs(profile: Pick<ReplicaProfile, 'prefillTokensPerSecond'>, tokens: number): number {
  return (tokens / profile.prefillTokensPerSecond) * 1000;
}

/**
 * Peak decode throughput of one replica (output tokens/s): the best of `b / decodeStepMs(b) × 1000`
 * over batches 1…maxSequences, ignoring prefill and KV memory. An upper bound for planning.
 */
export function peakDecodeTokensPerSecond(profile: ReplicaProfile): number {
  let best = 0;
  for (let b = 1; b <= profile.maxSequences; b += 1) best = Math.max(best, (b / decodeStepMs(profile, b)) * 1000);
  return best;
}

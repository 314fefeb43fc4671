/**
 * The canary guard's decision, as a pure function: does a canary arm regress against the
 * stable arm badly enough, on enough traffic, to be rolled back?
 */

/** One arm's live statistics over the guard's window. */
export interface ArmStats {
  /** Ledger rows (finished generations) in the window. */
  n: number;
  /** Of `n`, rows with status `failed`. */
  errors: number;
  /** `errors / n`; 0 when `n` is 0. */
  error_rate: number;
  /** Rows with a time to first token. */
  ttft_n: number;
  /** 95th percentile of `ttft_ms` (ms, linear interpolation, Postgres `percentile_cont`); null when `ttft_n` is 0. */
  p95_ttft_ms: number | null;
}

/** The guard's thresholds. */
export interface CanaryThresholds {
  /** Least rows each arm needs in the window before the guard judges anything. Default 50. */
  minRequests: number;
  /** Roll back when canary error rate − stable error rate exceeds this (absolute, 0–1). Default 0.05. */
  errorRateDelta: number;
  /** Roll back when canary p95 TTFT exceeds stable p95 TTFT × this. Default 1.5. */
  p95TtftRatio: number;
}

/** Defaults of {@link CanaryThresholds}. */
export const DEFAULT_CANARY_THRESHOLDS: Readonly<CanaryThresholds> = Object.freeze({ minRequests: 50, errorRateDelta: 0.05, p95TtftRatio: 1.5 });

/** The verdict on one canary arm. */
export type CanaryVerdict =
  | { action: 'keep'; why: 'healthy' | 'not_enough_traffic' }
  | { action: 'roll_back'; trigger: 'error_rate' | 'p95_ttft'; reason: string };

/**
 * Judges a canary against the stable arm:
 * - either arm with fewer than `minRequests` rows → keep (`not_enough_traffic`);
 * - `canary.error_rate − stable.error_rate > errorRateDelta` → roll back (`error_rate`);
 * - both arms with at least `minRequests` TTFT samples and `canary.p95 > stable.p95 ×
 *   p95TtftRatio` → roll back (`p95_ttft`). The TTFT rule needs its own volume because failed
 *   requests have no first token; a stable p95 of 0 ms is compared as 1 ms so a ratio exists.
 * - otherwise keep (`healthy`).
 * The error rule is checked first, so a failing canary is named for its errors.
 */
export function judgeCanary(canary: ArmStats, stable: ArmStats, thresholds: CanaryThresholds = DEFAULT_CANARY_THRESHOLDS): CanaryVerdict {
  if (canary.n < thresholds.minRequests || stable.n < thresholds.minRequests) return { action: 'keep', why: 'not_enough_traffic' };
  const delta = canary.error_rate - stable.error_rate;
  // The epsilon keeps a delta equal to the threshold (0.06 − 0.01 in binary floating point) tolerated.
  if (delta > thresholds.errorRateDelta + 1e-12) {
    return {
      action: 'roll_back',
      trigger: 'error_rate',
      reason: `error rate ${pct(canary.error_rate)} vs stable ${pct(stable.error_rate)} (+${pct(delta)} > +${pct(thresholds.errorRateDelta)} allowed) over ${canary.n} / ${stable.n} requests`,
    };
  }
  if (canary.ttft_n >= thresholds.minRequests && stable.ttft_n >= thresholds.minRequests && canary.p95_ttft_ms !== null && stable.p95_ttft_ms !== null) {
    const limit = Math.max(stable.p95_ttft_ms, 1) * thresholds.p95TtftRatio;
    if (canary.p95_ttft_ms > limit) {
      return {
        action: 'roll_back',
        trigger: 'p95_ttft',
        reason: `p95 TTFT ${Math.round(canary.p95_ttft_ms)} ms vs stable ${Math.round(stable.p95_ttft_ms)} ms (more than ×${thresholds.p95TtftRatio}) over ${canary.ttft_n} / ${stable.ttft_n} first tokens`,
      };
    }
  }
  return { action: 'keep', why: 'healthy' };
}

function pct(rate: number): string {
  return `${(rate * 100).toFixed(1)}%`;
}

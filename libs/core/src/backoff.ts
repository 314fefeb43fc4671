/** Retry delay settings for {@link retryDelayMs}. */
export interface BackoffOptions {
  /** Delay after the first failure (ms). */
  baseMs: number;
  /** Longest delay (ms). */
  maxMs: number;
}

/**
 * Exponential backoff with jitter: `min(maxMs, baseMs × 2^(attempt−1))` scaled by 50–100 %
 * ("equal jitter", so concurrent retriers spread out but never retry at once). `attempt`
 * counts failures so far (1, 2, …); values below 1 are treated as 1. Returns whole ms.
 * @param random uniform [0, 1) source (injectable for tests). Default `Math.random`.
 */
export function retryDelayMs(attempt: number, options: BackoffOptions, random: () => number = Math.random): number {
  const n = Math.max(1, Math.floor(attempt));
  // 2^30 already exceeds any sane maxMs; capping the exponent keeps the product finite.
  const raw = Math.min(options.maxMs, options.baseMs * 2 ** Math.min(n - 1, 30));
  return Math.round(raw * (0.5 + random() / 2));
}

/** True for attempts 1, 2, 4, 8, …: log those only, so a long outage cannot flood the log. */
export function isLogWorthyAttempt(attempt: number): boolean {
  return attempt > 0 && (attempt & (attempt - 1)) === 0;
}

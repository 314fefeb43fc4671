/** Summary statistics of a sample (same unit as the sample). All NaN when `count` is 0. */
export interface Percentiles {
  count: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

/**
 * Nearest-rank percentile of an ascending sorted sample: the value at rank ⌈p/100 · n⌉
 * (1-based), so p95 of 20 values is the 19th. NaN for an empty sample.
 */
export function nearestRank(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1];
}

/** Count, mean, nearest-rank p50/p95/p99 and max of `values` (not modified). */
export function summarize(values: readonly number[]): Percentiles {
  const sorted = [...values].sort((a, b) => a - b);
  const sum = sorted.reduce((a, b) => a + b, 0);
  return {
    count: sorted.length,
    mean: sorted.length === 0 ? Number.NaN : sum / sorted.length,
    p50: nearestRank(sorted, 50),
    p95: nearestRank(sorted, 95),
    p99: nearestRank(sorted, 99),
    max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1],
  };
}

import { CapacityInputError, requirePositive } from './errors';
import { type Random, standardNormal } from './prng';

/**
 * A distribution of token lengths (input or output tokens per request):
 * - `fixed`: every request has `value` tokens;
 * - `samples`: each request draws uniformly from `values` (e.g. lengths measured in production);
 * - `lognormal`: given its median `p50` and 95th percentile `p95` (tokens, `p95 ≥ p50`):
 *   μ = ln p50, σ = (ln p95 − ln p50) / 1.6449 (z of the 95th percentile), draw e^(μ + σ·z);
 *   `max` caps a draw (default 4 × p95), so a long tail cannot produce an absurd request.
 * Every draw is rounded to an integer ≥ 1.
 */
export type TokenDistribution =
  | { kind: 'fixed'; value: number }
  | { kind: 'samples'; values: readonly number[] }
  | { kind: 'lognormal'; p50: number; p95: number; max?: number };

/** z-score of the 95th percentile of the standard normal distribution. */
export const Z_95 = 1.6448536269514722;

/**
 * Checks a distribution; `field` names it in the error (e.g. `outputTokens`).
 * @throws CapacityInputError naming `field` (or `field.p95`, …) when a value is not a positive number.
 */
export function validateDistribution(field: string, d: TokenDistribution): void {
  switch (d.kind) {
    case 'fixed':
      requirePositive(field, d.value, { integer: true });
      return;
    case 'samples':
      if (!Array.isArray(d.values) || d.values.length === 0) throw new CapacityInputError(field, 'needs at least one sample');
      d.values.forEach((v, i) => requirePositive(`${field}[${i}]`, v, { integer: true }));
      return;
    case 'lognormal':
      requirePositive(`${field}.p50`, d.p50);
      requirePositive(`${field}.p95`, d.p95);
      if (d.p95 < d.p50) throw new CapacityInputError(`${field}.p95`, `must be ≥ p50 (${d.p95} < ${d.p50})`);
      if (d.max !== undefined) requirePositive(`${field}.max`, d.max, { integer: true });
      return;
    default: {
      const unreachable: never = d;
      throw new CapacityInputError(field, `unknown distribution ${JSON.stringify(unreachable)}`);
    }
  }
}

/** One draw (tokens, integer ≥ 1). Consumes `random` only for `samples` and `lognormal`. */
export function drawTokens(d: TokenDistribution, random: Random): number {
  switch (d.kind) {
    case 'fixed':
      return Math.max(1, Math.round(d.value));
    case 'samples':
      return Math.max(1, Math.round(d.values[Math.floor(random() * d.values.length)]));
    case 'lognormal': {
      const sigma = (Math.log(d.p95) - Math.log(d.p50)) / Z_95;
      const value = Math.exp(Math.log(d.p50) + sigma * standardNormal(random));
      return Math.max(1, Math.min(d.max ?? 4 * Math.ceil(d.p95), Math.round(value)));
    }
  }
}

/** The expected value of a draw (tokens), for planning arithmetic; lognormal: e^(μ + σ²/2), ignoring the cap. */
export function meanTokens(d: TokenDistribution): number {
  switch (d.kind) {
    case 'fixed':
      return d.value;
    case 'samples':
      return d.values.reduce((a, b) => a + b, 0) / d.values.length;
    case 'lognormal': {
      const sigma = (Math.log(d.p95) - Math.log(d.p50)) / Z_95;
      return Math.exp(Math.log(d.p50) + (sigma * sigma) / 2);
    }
  }
}

import { stickyUnit } from './sticky-hash';

/** An arm with a relative weight ≥ 0. */
export interface WeightedArm<T> {
  value: T;
  weight: number;
}

/** True for a weight that can carry traffic: a finite number > 0 (NaN, ±Infinity and ≤ 0 cannot). */
function usable(weight: number): boolean {
  return Number.isFinite(weight) && weight > 0;
}

/**
 * Picks an arm by a hash of `stickyKey`: the same key always lands on the same arm while the
 * weights are unchanged, and over many keys each arm's share approaches weight ÷ total.
 *
 * Only arms with a finite weight > 0 are ever picked: an arm of weight 0 (or a NaN or infinite
 * weight, which configuration validation refuses but this does not trust) gets no traffic, even
 * when float rounding leaves the hash point past the last boundary. Weights are divided by the
 * largest one before summing, so huge finite weights (e.g. two of 1e308, whose plain sum is
 * Infinity) still split by their ratio instead of sending everything to one arm.
 *
 * @returns the picked arm's value; undefined when no arm has a finite weight > 0.
 */
export function pickWeighted<T>(arms: readonly WeightedArm<T>[], stickyKey: string): T | undefined {
  let max = 0;
  for (const arm of arms) if (usable(arm.weight) && arm.weight > max) max = arm.weight;
  if (max <= 0) return undefined;
  // Each scaled weight is in (0, 1], so the total is at most arms.length: always finite.
  let total = 0;
  for (const arm of arms) if (usable(arm.weight)) total += arm.weight / max;
  let point = stickyUnit(stickyKey) * total;
  let last: T | undefined;
  for (const arm of arms) {
    if (!usable(arm.weight)) continue;
    const scaled = arm.weight / max;
    last = arm.value;
    if (point < scaled) return arm.value;
    point -= scaled;
  }
  // Float rounding only: the point ran past the last positive boundary; `last` has a positive weight.
  return last;
}

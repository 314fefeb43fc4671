import { stickyUnit } from './sticky-hash';

/** An arm with a relative weight ≥ 0. */
export interface WeightedArm<T> {
  value: T;
  weight: number;
}

/**
 * Picks an arm by a hash of `stickyKey`: the same key always lands on the same arm while the
 * weights are unchanged, and over many keys each arm's share approaches weight ÷ total.
 * Returns undefined when no arm has positive weight.
 */
export function pickWeighted<T>(arms: readonly WeightedArm<T>[], stickyKey: string): T | undefined {
  let total = 0;
  for (const arm of arms) if (arm.weight > 0) total += arm.weight;
  if (total <= 0) return undefined;
  let point = stickyUnit(stickyKey) * total;
  let last: T | undefined;
  for (const arm of arms) {
    if (arm.weight <= 0) continue;
    last = arm.value;
    if (point < arm.weight) return arm.value;
    point -= arm.weight;
  }
  return last;
}

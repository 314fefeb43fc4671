/**
 * Seeded pseudo-random numbers for the simulator: mulberry32 (Tommy Ettinger's 32-bit generator,
 * public domain), small, fast and plenty for arrival processes. Not cryptographic.
 */

/** A source of uniform numbers in [0, 1); each call advances its state. */
export type Random = () => number;

/**
 * Creates a mulberry32 generator from a 32-bit integer seed (other numbers are truncated with
 * `>>> 0`). The same seed always yields the same sequence.
 */
export function createRandom(seed: number): Random {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An exponentially distributed draw with the given rate (events per unit): the gap of a Poisson process. */
export function exponential(random: Random, rate: number): number {
  // 1 − u is in (0, 1], so the log is finite.
  return -Math.log(1 - random()) / rate;
}

/** A standard normal draw (Box–Muller; one of the pair is discarded to keep the state simple). */
export function standardNormal(random: Random): number {
  const u = 1 - random();
  const v = random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

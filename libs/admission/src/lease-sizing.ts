/**
 * How big a holder's leases should be (ADR 0002 §1, "Sizing"), as pure functions of what the
 * holder measured recently. The engine (`leased-admission.ts`) asks the store for what these
 * say; the store grants at most a fraction of what is unleased ({@link leaseGrant}).
 *
 * - A **budget lease** aims to hold about `windowMs` (10 s) of the holder's recent spend on the
 *   row — Σ worst cases it admitted there — and at least `minLeaseRequests` (8) of the largest
 *   recent worst case, so a quiet holder still decides a burst in memory. It is refilled in the
 *   background once what is left falls below `refillBelow` (30 %) of that, trimmed back to the
 *   target when it holds more than twice it, and returned when idle. Near the cap the store's
 *   ½-of-unleased bound shrinks grants down to one request's worst case.
 * - A **rate share** aims at 1.5 × the holder's recent use per minute (at least twice the
 *   largest recent need; slots: 1.5 × the peak in flight, at least 1), capped at the limit; idle
 *   share above 1.5 × the target is given back (only the part of the bucket that is full).
 */
import { MINUTE_MS } from './decide';

/** A quantity summed (and its largest item) over a sliding window of two adjacent halves. */
export interface RecentStat {
  /** Start of the current window (epoch ms). */
  startMs: number;
  current: number;
  previous: number;
  currentMax: number;
  previousMax: number;
}

/** A {@link RecentStat} with nothing in it. */
export function emptyRecent(): RecentStat {
  return { startMs: 0, current: 0, previous: 0, currentMax: 0, previousMax: 0 };
}

/** Moves `r` to the window containing `nowMs` (windows of `windowMs`). */
function roll(r: RecentStat, nowMs: number, windowMs: number): void {
  if (nowMs < r.startMs + windowMs) return;
  if (nowMs < r.startMs + 2 * windowMs) {
    r.previous = r.current;
    r.previousMax = r.currentMax;
    r.startMs += windowMs;
  } else {
    r.previous = 0;
    r.previousMax = 0;
    r.startMs = nowMs - (nowMs % windowMs);
  }
  r.current = 0;
  r.currentMax = 0;
}

/** Adds `amount` at `nowMs`. */
export function addRecent(r: RecentStat, nowMs: number, amount: number, windowMs: number): void {
  roll(r, nowMs, windowMs);
  r.current += amount;
  if (amount > r.currentMax) r.currentMax = amount;
}

/** Records a level (e.g. requests in flight): only its maximum matters. */
export function observeRecent(r: RecentStat, nowMs: number, level: number, windowMs: number): void {
  roll(r, nowMs, windowMs);
  if (level > r.currentMax) r.currentMax = level;
}

/**
 * The sum over the last `windowMs` before `nowMs`, estimated as the current window plus the
 * part of the previous one that still overlaps (linear), the usual sliding-window estimate.
 */
export function recentSum(r: RecentStat, nowMs: number, windowMs: number): number {
  roll(r, nowMs, windowMs);
  const overlap = 1 - (nowMs - r.startMs) / windowMs;
  return r.current + r.previous * Math.max(0, overlap);
}

/** The largest item seen in the current or previous window. */
export function recentMax(r: RecentStat, nowMs: number, windowMs: number): number {
  roll(r, nowMs, windowMs);
  return Math.max(r.currentMax, r.previousMax);
}

/** Tuning of lease sizes (defaults in {@link DEFAULT_SIZING}). */
export interface LeaseSizing {
  /** Window of recent spend and use a lease is sized from (ms). */
  windowMs: number;
  /** A budget lease holds at least this many of the largest recent worst case. */
  minLeaseRequests: number;
  /** Refill a budget lease in the background below this fraction of its target (0–1). */
  refillBelow: number;
  /** Most of what is unleased one draw of a shared holder takes (0–1); an exclusive holder takes all. */
  sharedMaxFraction: number;
}

/** 10 s of spend, ≥ 8 worst cases, refill below 30 %, at most ½ of what is unleased (ADR 0002 §1). */
export const DEFAULT_SIZING: LeaseSizing = { windowMs: 10_000, minLeaseRequests: 8, refillBelow: 0.3, sharedMaxFraction: 0.5 };

/**
 * The money (nano-USD) a budget lease aims to have available: the worst cases admitted on the
 * row in the last window, at least `minLeaseRequests` × the largest recent (or current) worst
 * case, at least 1 nano-USD.
 */
export function budgetTarget(recentWorstNano: number, largestWorstNano: number, sizing: LeaseSizing): number {
  return Math.max(1, Math.ceil(recentWorstNano), Math.ceil(sizing.minLeaseRequests * largestWorstNano));
}

/** What a shared holder's maintenance does with a budget lease. */
export type BudgetPlan = { kind: 'none' } | { kind: 'draw'; wantNano: number } | { kind: 'return'; nano: number };

/**
 * A shared holder's background plan for one budget lease with `availableNano` left (grant −
 * settled − in flight) and a target of `targetNano`: refill up to the target below
 * `refillBelow` of it, give back what exceeds the target when it holds more than twice it,
 * else nothing.
 */
export function planBudget(availableNano: number, targetNano: number, sizing: LeaseSizing): BudgetPlan {
  if (availableNano < sizing.refillBelow * targetNano) return { kind: 'draw', wantNano: Math.ceil(targetNano - availableNano) };
  if (availableNano > 2 * targetNano) return { kind: 'return', nano: Math.floor(availableNano - targetNano) };
  return { kind: 'none' };
}

/**
 * A per-minute share's target (requests or tokens per minute): 1.5 × the recent use extrapolated
 * to a minute, at least twice the largest recent need (so a request fits after a refill), at
 * most the limit. Integer.
 */
export function rateTarget(recentUse: number, largestNeed: number, limit: number, sizing: LeaseSizing): number {
  const perMinute = (recentUse * MINUTE_MS) / sizing.windowMs;
  return Math.min(limit, Math.max(1, Math.ceil(1.5 * perMinute), Math.ceil(2 * largestNeed)));
}

/** A slot share's target: 1.5 × the recent peak in flight, at least 1, at most the limit. Integer. */
export function slotTarget(peakInFlight: number, limit: number): number {
  return Math.min(limit, Math.max(1, Math.ceil(1.5 * peakInFlight)));
}

/**
 * A shared holder's background change of one rate field: draw up to the target when the share
 * is below it; give back what exceeds the target when the share is above 1.5 × the target (at
 * most `free`: the part of the bucket that is full, or the slots not in use); else 0. Positive:
 * draw; negative: give back.
 */
export function planShare(share: number, target: number, free: number): number {
  if (share < target) return target - share;
  if (share > 1.5 * target) {
    const give = Math.min(share - target, Math.floor(free));
    if (give > 0) return -give;
  }
  return 0;
}

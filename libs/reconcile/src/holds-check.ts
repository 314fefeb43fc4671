/**
 * Money held for requests that can no longer finish: budget leases past their `hold_until_ms` +
 * grace (ADR 0002 §1: by then every reservation made under them has expired), per-request
 * reservations past their expiry (ADR 0001's `reservations`), and — when the all-in-one that
 * held them is provably stopped (reconciliation holds its data directory's lock) — everything
 * it still held. Pure: the caller reads the rows.
 */
import { formatUsd } from '@weir/ledger';
import type { HeldReservations, LeaseRow } from '@weir/store-pg';

/** What {@link checkHolds} looks at. */
export interface HoldsCheckInput {
  /** Epoch ms; after a fix, the instant the fix reclaimed at (what lapsed by then was reclaimed). */
  nowMs: number;
  /**
   * Every holder is provably stopped (the data directory's lock is ours: the all-in-one on its
   * embedded database): whatever it still holds, whatever its expiry, is orphaned.
   */
  ownerStopped: boolean;
  /** True after this run's fixes: what remains is a difference. */
  fixed: boolean;
  /** A lease may be reclaimed once `hold_until_ms` + this has passed (ms; ADR 0002: 5,000). */
  graceMs: number;
  /**
   * Added to the grace before a lapsed lease counts (ms): live holders reclaim lapsed leases
   * every 10 s, so on a running deployment a lease lapsed for less is not yet a fault. Pass 0
   * after a fix (which reclaimed them).
   */
  slackMs: number;
  leases: readonly LeaseRow[];
  /** Held reservations, `pastExpiry` counted at the cut-off now − `slackMs`. */
  reservations: HeldReservations;
  /** `running` idempotency keys (only judged when `ownerStopped`). */
  runningKeys?: number;
}

/** The outcome of {@link checkHolds}. */
export interface HoldsCheck {
  leases: {
    /** Leases in the store. */
    outstanding: number;
    /** Σ granted − consumed of the budget leases (nano-USD). */
    heldNano: number;
    /** Leases past `hold_until_ms` + grace (+ slack). */
    lapsed: number;
    /** Leases that are a fault: lapsed (or any, when the owner is stopped) and, unless after a fix, holding money where the owner is stopped. */
    stuck: { leaseId: string; holder: string; kind: 'budget' | 'rate'; heldNano: number; holdUntilMs: number }[];
  };
  differences: string[];
  notes: string[];
}

const usd = (nano: number): string => `$${formatUsd(nano).toFixed(9)}`;
const sum = (xs: readonly { heldNano: number }[]) => xs.reduce((n, x) => n + x.heldNano, 0);
const listed = (xs: readonly { leaseId: string }[]) => `${xs.slice(0, 5).map((x) => x.leaseId).join(', ')}${xs.length > 5 ? ', …' : ''}`;

/**
 * Judges the holds:
 * - a lease past `hold_until_ms` + grace + slack is a difference (live holders reclaim such
 *   leases every 10 s; `--fix` reclaims them now); when the owner is stopped, a budget lease
 *   still holding money is a difference whatever its expiry (the next start, or `--fix`,
 *   reclaims it) and the rest are notes — after a fix, any lease left is a difference;
 * - a reservation held past its expiry (+ slack) is a difference (the admission service, or
 *   `--fix`, settles it from its ledger row or releases it); when the owner is stopped, every
 *   reservation still held is;
 * - when the owner is stopped, `running` idempotency keys are a difference (a retry waits for
 *   their claim; the next start, or `--fix`, frees them).
 */
export function checkHolds(input: HoldsCheckInput): HoldsCheck {
  const differences: string[] = [];
  const notes: string[] = [];
  const cutoff = input.nowMs - input.graceMs - input.slackMs;
  const lapsed = input.leases.filter((l) => l.holdUntilMs <= cutoff);
  let stuck: LeaseRow[];
  const after = input.fixed ? ' after the fix' : '';
  if (input.ownerStopped) {
    const holding = input.leases.filter((l) => l.heldNano > 0);
    stuck = input.fixed ? [...input.leases] : holding;
    if (stuck.length > 0) {
      differences.push(
        input.fixed
          ? `${stuck.length} lease(s) of the stopped all-in-one remain after the fix, holding ${usd(sum(stuck))}: ${listed(stuck)}`
          : `${stuck.length} budget lease(s) of the stopped all-in-one hold ${usd(sum(stuck))} its budgets cannot use until they are reclaimed: --fix reclaims them, as its next start would (${listed(stuck)})`,
      );
    }
    const rest = input.leases.filter((l) => !stuck.includes(l));
    if (rest.length > 0) notes.push(`${rest.length} lease(s) of the stopped all-in-one hold no money (rate shares, slots, or fully consumed): its next start, or --fix, reclaims them`);
  } else {
    stuck = lapsed;
    if (stuck.length > 0) {
      const holders = [...new Set(stuck.map((l) => l.holder))];
      differences.push(
        `${stuck.length} lease(s) past hold_until + ${input.graceMs} ms grace${after} still outstanding, holding ${usd(sum(stuck))} (holders ${holders.slice(0, 5).join(', ')}${holders.length > 5 ? ', …' : ''})${input.fixed ? '' : ': --fix reclaims them'} (${listed(stuck)})`,
      );
    }
  }

  const r = input.reservations;
  if (input.ownerStopped ? r.held > 0 : r.pastExpiry > 0) {
    const n = input.ownerStopped ? r.held : r.pastExpiry;
    const nano = input.ownerStopped ? r.heldNano : r.pastExpiryNano;
    differences.push(
      input.ownerStopped
        ? `${n} reservation(s) of the stopped all-in-one still held${after}, holding ${usd(nano)}${input.fixed ? '' : ': --fix settles them from their ledger rows or releases them, as its next start would'}`
        : `${n} reservation(s) held past their expiry${after}, holding ${usd(nano)}${input.fixed ? '' : ': --fix settles them from their ledger rows or releases them'}`,
    );
  } else if (!input.ownerStopped && r.held > 0) notes.push(`${r.held} reservation(s) held within their expiry (${usd(r.heldNano)}): requests in flight`);

  if (input.ownerStopped && (input.runningKeys ?? 0) > 0) {
    differences.push(`${input.runningKeys} idempotency key(s) still running from the stopped all-in-one${after}${input.fixed ? '' : ' (a retry of them waits for their claim): --fix frees them, as its next start would'}`);
  }

  return {
    leases: {
      outstanding: input.leases.length,
      heldNano: sum(input.leases.filter((l) => l.kind === 'budget')),
      lapsed: lapsed.length,
      stuck: stuck.map((l) => ({ leaseId: l.leaseId, holder: l.holder, kind: l.kind, heldNano: l.heldNano, holdUntilMs: l.holdUntilMs })),
    },
    differences,
    notes,
  };
}

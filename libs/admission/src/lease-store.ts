/**
 * The port between the leased admission engine (ADR 0002 §1) and where leases live: a holder
 * (a process that admits) draws **budget leases** (a slice of one budget row's money) and
 * **rate leases** (a share of a scope's per-minute limits and of its concurrency slots), one
 * transaction each, and decides every request in memory on them. Implementations:
 * {@link createInMemoryLeaseStore} (this library: unit tests, one process) and
 * `createPgLeaseStore` in `@weir/store-pg` (Postgres or PGlite, any number of holders).
 *
 * Every implementation keeps these invariants at every commit (the cap across holders):
 * - for every budget row: settled + reserved + leased ≤ the budget passed by the draw that grew
 *   a lease (a draw never takes more than is unleased; the ledger's settlement moves money from
 *   `leased` to `settled` without changing the sum);
 * - leased = Σ (granted − consumed) of the row's live budget leases;
 * - for every scope and rate field: Σ shares of its live rate leases ≤ the limit passed by the
 *   draw that grew one (a smaller limit later is enforced by the holders shrinking their own).
 *
 * What to grant is the domain's decision, reaching the store as data: {@link LeaseAsk} and the
 * pure {@link leaseGrant}. Faults (the database away) are thrown; a failed call changed nothing.
 */
import type { ReservationRef } from '@weir/core';
import type { BudgetKey } from './admission-state';
import type { LimitField } from './decide';

/**
 * `exclusive`: the one process that owns the database (the all-in-one on its own PGlite) leases
 * everything; `shared`: one of several holders on a shared Postgres, leasing by demand.
 */
export type HolderMode = 'exclusive' | 'shared';

/** A field of a rate lease: a per-minute limit (tokens or requests per minute), or concurrency slots. */
export type RateField = LimitField | 'maxConcurrent';

/** Every rate field, in a fixed order. */
export const RATE_FIELDS: readonly RateField[] = ['requestsPerMinute', 'tokensPerMinute', 'inputTokensPerMinute', 'outputTokensPerMinute', 'maxConcurrent'];

/** Shares of a scope's limits held by one rate lease: per minute (requests or tokens), and slots. */
export type RateShares = Record<RateField, number>;

/** All-zero shares. */
export function noShares(): RateShares {
  return { requestsPerMinute: 0, tokensPerMinute: 0, inputTokensPerMinute: 0, outputTokensPerMinute: 0, maxConcurrent: 0 };
}

/**
 * What a holder asks of one lease field (nano-USD for budgets; requests, tokens per minute or
 * slots for rates). Integers are granted.
 */
export interface LeaseAsk {
  /** How much the holder would like added (its sizing target minus what it holds; `Infinity`: all there is). */
  want: number;
  /**
   * The least addition that is of use (a waiting request's shortfall); when less than that is
   * unleased, nothing is granted. 0: any amount.
   */
  min: number;
  /** Most of what is unleased one draw may take, 0 < f ≤ 1 (½ for shared holders, 1 for an exclusive one). */
  maxFraction: number;
}

/**
 * The most one budget lease holds at once (nano-USD): 2^50 ≈ $1.1 million, so grants, their sums
 * over holders and a row's settled spend stay safe integers.
 */
export const MAX_LEASE_NANO = 2 ** 50;

/**
 * How much of `unleased` a draw grants (pure; integer): min(want, ⌊unleased × maxFraction⌋),
 * raised to `min` when that is less and `min` is unleased (so near the cap a lease shrinks to
 * one request's worst case and the last of a budget is still handed out exactly), 0 when not
 * even `min` is unleased. Never negative, never more than ⌊unleased⌋ or {@link MAX_LEASE_NANO}.
 */
export function leaseGrant(unleased: number, ask: LeaseAsk): number {
  // Never more than MAX_LEASE_NANO at once: rows and sums stay exact integers (a budget of
  // $1,000,000,000 is 1e18 nano-USD, beyond 2^53); a holder that spends it draws again.
  const free = Math.min(MAX_LEASE_NANO, Math.max(0, Math.floor(unleased)));
  const min = Math.max(0, Math.ceil(ask.min));
  let grant = Math.min(Math.max(0, ask.want), Math.floor(free * Math.min(1, Math.max(0, ask.maxFraction))));
  if (grant < min) grant = free >= min ? min : 0;
  return Math.min(free, Math.floor(grant));
}

/** A budget lease as stored. Money in nano-USD, times epoch ms. */
export interface BudgetLeaseRow {
  leaseId: string;
  holder: string;
  key: BudgetKey;
  /** What the holder was given, net of what it returned. */
  grantedNano: number;
  /** What the ledger's settlements moved from this lease to the row's settled spend. */
  consumedNano: number;
  /** The latest reservation expiry the holder may use the lease for; it is not reclaimed before. */
  holdUntilMs: number;
}

/** A rate lease as stored. */
export interface RateLeaseRow {
  leaseId: string;
  holder: string;
  scope: string;
  shares: RateShares;
  holdUntilMs: number;
}

/** A budget row's money (nano-USD). */
export interface BudgetRowMoney {
  settledNano: number;
  /** Held by ADR 0001's per-request reservations (0 once admission runs on leases). */
  reservedNano: number;
  leasedNano: number;
}

/** Input of {@link LeaseStore.drawBudget}. */
export interface BudgetDraw {
  holder: string;
  leaseId: string;
  /**
   * true: create the lease when it does not exist (a holder's new lease). false: only grow it;
   * a lease that no longer exists (reclaimed) grants nothing and is reported missing.
   */
  create: boolean;
  key: BudgetKey;
  /** The row's budget as configured now (nano-USD). */
  budgetNano: number;
  ask: LeaseAsk;
  /** `hold_until_ms` of a new lease; an existing one keeps the later of its own and this. */
  holdUntilMs: number;
  nowMs: number;
  /**
   * Demand (shared holders): when set and the draw grants less than `ask.min` — a request is
   * refused for want of money other holders may be sitting on — the row records that this holder
   * wants money until this time (epoch ms); the other holders of the row learn it from their next
   * {@link LeaseStore.heartbeat} and give back what they do not need. A draw by the same holder
   * that grants at least `ask.min` (or any draw after the time) clears it. Absent: no signal.
   */
  demandUntilMs?: number;
}

/** What {@link LeaseStore.drawBudget} did. */
export interface BudgetDrawResult {
  /** The lease after the draw; undefined when it does not exist (and `create` was false). */
  lease?: BudgetLeaseRow;
  /** Added to the lease by this draw (nano-USD, ≥ 0). */
  addedNano: number;
  /** budget − settled − reserved − leased after the draw (nano-USD; may be negative after a budget was lowered). */
  unleasedNano: number;
  /**
   * When the draw granted less than `ask.min`: what live holders other than this one (their
   * `admission_holders` row not expired at `nowMs`) hold on the row (Σ granted − consumed of
   * their leases; nano-USD, ≥ 0) — money that may come back, where a dead holder's does not
   * before its reclaim. 0 when the draw was granted what it needed (not computed).
   */
  othersLeasedNano: number;
}

/** Input of {@link LeaseStore.drawRate}. */
export interface RateDraw {
  holder: string;
  leaseId: string;
  /** As in {@link BudgetDraw.create}. */
  create: boolean;
  scope: string;
  /** The scope's configured limits, for the fields asked (a field without a limit cannot be drawn). */
  limits: Partial<RateShares>;
  ask: Partial<Record<RateField, LeaseAsk>>;
  holdUntilMs: number;
  nowMs: number;
}

/** What {@link LeaseStore.drawRate} did. */
export interface RateDrawResult {
  lease?: RateLeaseRow;
  /** Added per field asked. */
  added: Partial<RateShares>;
  /** limit − Σ shares after the draw, per field asked. */
  unleased: Partial<RateShares>;
}

/** What {@link LeaseStore.heartbeat} found. */
export interface HeartbeatResult {
  /** The ids asked about that exist (a lease missing was reclaimed: the holder must stop using it). */
  live: Set<string>;
  /**
   * Ids of the holder's live budget leases whose row another holder wants money from now (its
   * `demandUntilMs` not passed; see {@link BudgetDraw.demandUntilMs}).
   */
  wanted: Set<string>;
}

/** What a reclaim did. */
export interface ReclaimReport {
  /** Leases deleted. */
  leases: number;
  /** Money given back to budget rows (Σ granted − consumed of the budget leases deleted, nano-USD). */
  returnedNano: number;
  /** Holder rows deleted. */
  holders: number;
}

/**
 * The database side of one settlement (ADR 0002 §2), as the ledger's applier performs it in
 * the transaction that inserts the usage row: `costNano` added to the settled spend of the four
 * budget rows of the tenant and app for the reservation's periods (created on demand), and moved
 * from each lease of `reservation.leaseIds` that still exists: consumed += m and its row's
 * leased −= m, where m = min(cost, granted − consumed) (a cost above what the lease still holds
 * — an overspend, or a lease already reclaimed — is settled but moves nothing).
 */
export interface LeaseSettlement {
  /** The tenant's internal id (`tenantKeyOf`): its budget rows are filed under it. */
  tenantId: string;
  /** The app's internal id (`appKeyOf`). */
  appId: string;
  costNano: number;
  reservation: ReservationRef;
}

/** Durable leases (see the module comment). Times are epoch ms from the holder's clock. */
export interface LeaseStore {
  /**
   * One transaction: the holder's row (created on first call) gets `heartbeat = nowMs` and
   * `expires = nowMs + ttlMs`; each of its leases among `leaseIds` gets
   * hold_until = max(hold_until, `holdUntilMs`). Resolves with the ids of `leaseIds` that exist
   * and those of them whose budget row another holder wants money from ({@link HeartbeatResult}).
   */
  heartbeat(input: { holder: string; mode: HolderMode; nowMs: number; ttlMs: number; leaseIds: readonly string[]; holdUntilMs: number }): Promise<HeartbeatResult>;
  /**
   * One transaction: locks the budget row (created on demand), grants
   * {@link leaseGrant}(budget − settled − reserved − leased, ask) to the lease and adds it to the
   * row's leased money, and records or clears the row's demand ({@link BudgetDraw.demandUntilMs}).
   */
  drawBudget(input: BudgetDraw): Promise<BudgetDrawResult>;
  /**
   * One transaction: gives back min(`returnNano`, granted − consumed) of a holder's lease to its
   * row (granted −= it, the row's leased −= it). Resolves with what was returned and the lease
   * after (undefined when it does not exist).
   */
  returnBudget(input: { holder: string; leaseId: string; returnNano: number; nowMs: number }): Promise<{ returnedNano: number; lease?: BudgetLeaseRow }>;
  /**
   * One transaction: locks the scope, grants each field asked
   * {@link leaseGrant}(limit − Σ shares of the scope's rate leases, ask) and adds it to the lease.
   */
  drawRate(input: RateDraw): Promise<RateDrawResult>;
  /**
   * One transaction: lowers a holder's rate lease to `shares` (each field becomes
   * min(current, given); fields not given are unchanged). Resolves with the lease after.
   */
  shrinkRate(input: { holder: string; leaseId: string; shares: Partial<RateShares>; nowMs: number }): Promise<RateLeaseRow | undefined>;
  /**
   * One transaction (a graceful stop): the holder's row expires now, and each lease given gets
   * hold_until = min(hold_until, the one given) — never below what a reservation made under it
   * needs (the caller's duty).
   */
  retire(input: { holder: string; nowMs: number; leases: readonly { leaseId: string; holdUntilMs: number }[] }): Promise<void>;
  /**
   * One transaction: deletes every lease with hold_until + `graceMs` ≤ `nowMs` (whoever holds
   * it): budget leases give granted − consumed back to their rows; then deletes holders expired
   * for `graceMs` that hold no lease. Safe at any time and on any number of holders at once.
   */
  reclaimExpired(input: { nowMs: number; graceMs: number }): Promise<ReclaimReport>;
  /**
   * One transaction (a start that can prove holders dead — an exclusive holder by the data
   * directory's lock, every other holder; an all-in-one on a shared Postgres, by the same lock,
   * its own predecessor): deletes every lease and row of the holders named in `holders` (when
   * given), else of every holder but `exceptHolder` (of every holder when absent), budget leases
   * giving granted − consumed back to their rows.
   */
  reclaimHolders(input: { exceptHolder?: string; holders?: readonly string[]; nowMs: number }): Promise<ReclaimReport>;
  /** A budget row's money, or undefined when the row does not exist. */
  readBudget(key: BudgetKey): Promise<BudgetRowMoney | undefined>;
  /** Leases (every holder's, or one holder's), budget and rate, by lease id. */
  listLeases(holder?: string): Promise<{ budget: BudgetLeaseRow[]; rate: RateLeaseRow[] }>;
}

/**
 * Admission's decisions as pure functions of the locked state, the limits, the request and the
 * time: no I/O, no clock, no randomness. Stores call them inside the transaction that holds the
 * row locks, so whatever runs them (one process or many against one Postgres) decides on a
 * consistent snapshot.
 *
 * Rate limits are token buckets (capacity = the per-minute limit, refilled evenly: limit ÷
 * 60,000 per ms), the shape OpenAI and Anthropic document for their own limits. A request is
 * charged its worst case up front (1 request; input tokens + output limit) and refunded to its
 * measured tokens at settlement.
 */
import type { AdmissionLimits, RateLimitStatus, RateLimitWindow, RejectReason, ReservationRequest } from '@weir/core';
import { type BudgetPeriod, type BudgetState, type LedgerFacts, NANO_PER_USD, type ReservationRecord, type ScopeState, budgetKeyString } from './admission-state';

/** One minute (ms): the window of every per-minute limit. */
export const MINUTE_MS = 60_000;

/**
 * Slack when comparing fractional bucket levels with their capacity (tokens), so float drain
 * arithmetic (e.g. 59.99999999 after a full refill) never refuses a request that fits.
 */
const LEVEL_EPSILON = 1e-6;

/** A bucket level of {@link ScopeState}. */
export type LevelField = 'requestsUsed' | 'tokensUsed' | 'inputTokensUsed' | 'outputTokensUsed';
/** A per-minute limit of {@link AdmissionLimits}. */
export type LimitField = 'requestsPerMinute' | 'tokensPerMinute' | 'inputTokensPerMinute' | 'outputTokensPerMinute';

/** One per-minute token bucket of a scope. */
export interface Bucket {
  level: LevelField;
  limit: LimitField;
  window: 'requests' | 'tokens';
  /** How the limit is called in messages. */
  noun: string;
  need(r: Pick<ReservationRequest, 'inputTokens' | 'maxOutputTokens'>): number;
}

/** The per-minute buckets, each with its level, limit and what one request needs of it. */
export const BUCKETS: readonly Bucket[] = [
  { level: 'requestsUsed', limit: 'requestsPerMinute', window: 'requests', noun: 'requests per minute', need: () => 1 },
  { level: 'tokensUsed', limit: 'tokensPerMinute', window: 'tokens', noun: 'tokens per minute', need: (r) => r.inputTokens + r.maxOutputTokens },
  { level: 'inputTokensUsed', limit: 'inputTokensPerMinute', window: 'tokens', noun: 'input tokens per minute', need: (r) => r.inputTokens },
  { level: 'outputTokensUsed', limit: 'outputTokensPerMinute', window: 'tokens', noun: 'output tokens per minute', need: (r) => r.maxOutputTokens },
];

const PERIODS: readonly { period: BudgetPeriod; limit: 'monthlyBudgetUsd' | 'dailyBudgetUsd'; noun: string }[] = [
  { period: 'month', limit: 'monthlyBudgetUsd', noun: 'monthly' },
  { period: 'day', limit: 'dailyBudgetUsd', noun: 'daily' },
];

/** One scope a request is checked against: its kind (for messages), limits and locked state. */
export interface ScopeCheck {
  kind: 'tenant' | 'app' | 'use_case';
  /** The use case's name (kind `use_case`), quoted in messages so a 429 says which use case is spent. */
  name?: string;
  limits: AdmissionLimits;
  state: ScopeState;
  /** This scope's locked budget rows for the request's month and day. */
  budgets: { month: BudgetState; day: BudgetState };
  /**
   * Set when one holder among several decides on its leases of the scope (ADR 0002) rather
   * than on the whole scope; absent, the decision is on the whole limits (ADR 0001).
   */
  lease?: ScopeLeaseView;
}

/**
 * What one holder's leases of a scope let it decide on (ADR 0002 §1). Every figure replaces the
 * whole limit in the check; messages still name the configured limits, so a rejection reads as
 * it does without leases.
 */
export interface ScopeLeaseView {
  /**
   * nano-USD this holder may commit in each configured budget period: the grant of its budget
   * lease on that row (absent: 0, no lease yet). The row's `settledNano` is then the cost
   * settled locally under that lease and `reservedNano` the worst cases in flight under it, so
   * a request is admitted while settled + reserved + worst case ≤ grant.
   */
  budgetNano?: { month?: number; day?: number };
  /**
   * This holder's share of each configured per-minute limit (absent: 0): its bucket's capacity,
   * refilled at share ÷ 60,000 per ms. Levels in `state` are in the same local bucket.
   */
  shares?: Partial<Record<LimitField, number>>;
  /** Concurrency slots held (absent: 0); `state.inFlight` counts this holder's reservations. */
  slots?: number;
}

/** Input of {@link decideReservation}. */
export interface ReserveDecisionInput {
  request: Pick<ReservationRequest, 'inputTokens' | 'maxOutputTokens' | 'worstCaseCostNanoUsd'>;
  /** The tenant scope, then the app scope, then (when the request names a use case its tenant defines) the use-case scope. */
  scopes: readonly ScopeCheck[];
  /** The decision time (epoch ms). */
  nowMs: number;
  /** Retry hint for a concurrency rejection (ms): nothing predicts when a slot frees. */
  concurrencyRetryAfterMs: number;
}

/** The outcome of {@link decideReservation}. */
export type ReserveDecision =
  | { ok: true; scopes: ScopeState[]; budgets: BudgetState[]; rateLimits: RateLimitStatus }
  | { ok: false; reason: RejectReason; message: string; retryAfterMs?: number; rateLimits: RateLimitStatus };

/** A bucket level drained from `state.usedAtMs` to `nowMs` at `limit` per minute (never below 0; a clock behind `usedAtMs` drains nothing). */
export function drainedLevel(level: number, limit: number, fromMs: number, nowMs: number): number {
  const elapsed = Math.max(0, nowMs - fromMs);
  return Math.max(0, level - (limit * elapsed) / MINUTE_MS);
}

/** Time (ms, ceil) until a bucket of capacity `limit` at `level` can take `need` more; 0 when it already can. */
export function retryAfterMsFor(level: number, need: number, limit: number): number {
  const excess = level + need - limit;
  return excess <= LEVEL_EPSILON ? 0 : Math.ceil((excess * MINUTE_MS) / limit);
}

/**
 * Decides one reservation on the locked state (the heart of admission; pure).
 *
 * Checked in this order, first failure wins:
 * 1. budgets (`budget_exhausted`, no retry hint): for each configured monthly or daily budget of
 *    the tenant and of the app, settled + reserved + worst case ≤ budget (nano-USD);
 * 2. a request larger than a bucket's capacity (`rate_limited`, no retry hint: it can never
 *    pass; the message says to lower the output limit);
 * 3. per-minute buckets (`rate_limited`, `retryAfterMs` = the longest wait until every failing
 *    bucket has drained enough, ms, ceil);
 * 4. concurrency (`concurrency_limited`, `retryAfterMs` = `concurrencyRetryAfterMs`).
 *
 * With a scope's {@link ScopeLeaseView} (ADR 0002) each check runs on what this holder leases
 * instead: its budget lease's grant, its share of each per-minute limit (capacity and refill;
 * a share smaller than the request is waited for as long as the whole limit takes to produce
 * the request's tokens) and its slots. "Can never pass" is still judged on the whole limit,
 * and messages name the configured limits (slots leased elsewhere count as in flight).
 *
 * Accepting drains every configured bucket to `nowMs`, charges the worst case (1 request;
 * input tokens to the input bucket, the output limit to the output bucket, both to the total
 * bucket), adds 1 in flight and the worst-case cost to each budget row's `reservedNano`.
 * Buckets without a limit stay at 0. `rateLimits` reports the tightest request and token
 * windows (after this request when accepted, before it when rejected).
 */
export function decideReservation(input: ReserveDecisionInput): ReserveDecision {
  const { request, nowMs } = input;
  const worst = request.worstCaseCostNanoUsd;
  const drained = input.scopes.map((s) => drainScope(s, nowMs));
  const before = rateLimitStatus(input.scopes, drained);

  for (const s of input.scopes) {
    for (const p of PERIODS) {
      const budgetUsd = s.limits[p.limit];
      if (budgetUsd === undefined) continue;
      const budgetNano = Math.round(budgetUsd * NANO_PER_USD);
      const cap = s.lease ? (s.lease.budgetNano?.[p.period] ?? 0) : budgetNano;
      const row = s.budgets[p.period];
      const committed = row.settledNano + row.reservedNano;
      if (committed + worst > cap) {
        const left = Math.max(0, cap - committed);
        return {
          ok: false,
          reason: 'budget_exhausted',
          message:
            `The ${whose(s)} ${p.noun} budget of ${formatUsd(budgetNano)} is exhausted: ` +
            `${formatUsd(left)} remains and this request may cost up to ${formatUsd(worst)}. ` +
            `Lower max_tokens or the input, or ask for a higher budget.`,
          rateLimits: before,
        };
      }
    }
  }

  let waitMs = 0;
  let waitMessage = '';
  for (const [i, s] of input.scopes.entries()) {
    for (const b of BUCKETS) {
      const limit = s.limits[b.limit];
      if (limit === undefined) continue;
      const need = b.need(request);
      if (need > limit) {
        return {
          ok: false,
          reason: 'rate_limited',
          message: `This request needs ${need} ${b.window === 'requests' ? 'requests' : 'tokens'} but the ${whose(s)} limit is ${limit} ${b.noun}, so it can never pass; lower max_tokens or shorten the input.`,
          rateLimits: before,
        };
      }
      const capacity = capacityOf(s, b, limit);
      // A local share smaller than the request (leases): it fits only once the share grows;
      // the hint is the time the whole limit takes to produce what it needs.
      const wait = need > capacity ? Math.max(1, Math.ceil((need * MINUTE_MS) / limit)) : retryAfterMsFor(drained[i][b.level], need, capacity);
      if (wait > waitMs) {
        waitMs = wait;
        waitMessage = `Rate limit reached: the ${whose(s)} limit of ${limit} ${b.noun}; retry in ${Math.ceil(wait / 1000)} s.`;
      }
    }
  }
  if (waitMs > 0) return { ok: false, reason: 'rate_limited', message: waitMessage, retryAfterMs: waitMs, rateLimits: before };

  for (const s of input.scopes) {
    const max = s.limits.maxConcurrent;
    if (max === undefined) continue;
    const slots = s.lease ? Math.min(max, s.lease.slots ?? 0) : max;
    if (s.state.inFlight + 1 > slots) {
      // Slots other holders lease count as in flight: the message reads as without leases.
      const inFlight = s.state.inFlight + (max - slots);
      return {
        ok: false,
        reason: 'concurrency_limited',
        message: `The ${s.kind === 'use_case' ? `'${s.name ?? ''}' use case` : s.kind} already has ${inFlight} requests in flight, its limit of ${max}; retry when one finishes.`,
        retryAfterMs: input.concurrencyRetryAfterMs,
        rateLimits: before,
      };
    }
  }

  const scopes = input.scopes.map((s, i): ScopeState => {
    const next: ScopeState = { ...drained[i], inFlight: s.state.inFlight + 1, usedAtMs: nowMs };
    for (const b of BUCKETS) if (s.limits[b.limit] !== undefined) next[b.level] += b.need(request);
    return next;
  });
  const budgets = input.scopes.flatMap((s) => [s.budgets.month, s.budgets.day].map((row) => ({ ...row, reservedNano: row.reservedNano + worst })));
  return { ok: true, scopes, budgets, rateLimits: rateLimitStatus(input.scopes, scopes) };
}

/** How a scope is named in messages: `tenant's`, `app's`, `'support' use case's`. */
function whose(s: Pick<ScopeCheck, 'kind' | 'name'>): string {
  return s.kind === 'use_case' ? `'${s.name ?? ''}' use case's` : `${s.kind}'s`;
}

/** A bucket's capacity and refill per minute: the limit, or this holder's share of it (leases). */
function capacityOf(s: ScopeCheck, b: Bucket, limit: number): number {
  return s.lease ? Math.min(limit, s.lease.shares?.[b.limit] ?? 0) : limit;
}

/** The scope with every configured bucket drained to `nowMs` and unconfigured ones at 0. */
function drainScope(s: ScopeCheck, nowMs: number): ScopeState {
  const out: ScopeState = { ...s.state, usedAtMs: nowMs };
  for (const b of BUCKETS) {
    const limit = s.limits[b.limit];
    out[b.level] = limit === undefined ? 0 : drainedLevel(s.state[b.level], capacityOf(s, b, limit), s.state.usedAtMs, nowMs);
  }
  return out;
}

/** The tightest (least remaining, then latest reset) request and token windows over the scopes' configured buckets. */
function rateLimitStatus(scopes: readonly ScopeCheck[], levels: readonly ScopeState[]): RateLimitStatus {
  const status: RateLimitStatus = {};
  for (const [i, s] of scopes.entries()) {
    for (const b of BUCKETS) {
      const limit = s.limits[b.limit];
      if (limit === undefined) continue;
      const level = levels[i][b.level];
      const capacity = capacityOf(s, b, limit);
      const window: RateLimitWindow = {
        limit,
        remaining: Math.max(0, Math.floor(capacity - level + LEVEL_EPSILON)),
        resetMs: level <= LEVEL_EPSILON || capacity <= 0 ? 0 : Math.ceil((level * MINUTE_MS) / capacity),
      };
      const current = status[b.window];
      if (!current || window.remaining < current.remaining || (window.remaining === current.remaining && window.resetMs > current.resetMs)) {
        status[b.window] = window;
      }
    }
  }
  return status;
}

/** How a held reservation ends: settled to measured actuals, or released (no work, or expired without a ledger row). */
export type FinishOutcome = { kind: 'settle'; costNano: number; inputTokens: number; outputTokens: number } | { kind: 'release' };

/** The new state after a reservation ends, and how far its actual cost exceeded the worst case (nano-USD, ≥ 0). */
export interface FinishEffect {
  scopes: ScopeState[];
  budgets: BudgetState[];
  overspendNano: number;
}

/**
 * Ends a held reservation on the locked rows of its scopes and budget periods (pure).
 *
 * - in flight −1 in both scopes (never below 0);
 * - each budget row: reserved −= worst case, and for a settlement settled += actual cost (even
 *   above the worst case: the charge is real; `overspendNano` reports the excess);
 * - token buckets are refunded the unused part of the worst case: input = max(0, reserved input
 *   − measured input), output = max(0, output limit − measured output), total = the sum of both
 *   refunds; a release refunds every reserved token. The request itself stays counted. A refund
 *   never takes a level below 0, and refunding before or after draining gives the same level
 *   (max(0, max(0, L − d) − r) = max(0, L − r − d)), so no limits or clock are needed.
 */
export function finishReservation(reservation: Pick<ReservationRecord, 'inputTokens' | 'maxOutputTokens' | 'worstCaseNano'>, outcome: FinishOutcome, scopes: readonly ScopeState[], budgets: readonly BudgetState[]): FinishEffect {
  const refund = refundOf(reservation, outcome);
  const nextScopes = scopes.map(
    (s): ScopeState => ({
      ...s,
      inFlight: Math.max(0, s.inFlight - 1),
      tokensUsed: Math.max(0, s.tokensUsed - refund.input - refund.output),
      inputTokensUsed: Math.max(0, s.inputTokensUsed - refund.input),
      outputTokensUsed: Math.max(0, s.outputTokensUsed - refund.output),
    }),
  );
  const cost = outcome.kind === 'settle' ? outcome.costNano : 0;
  const nextBudgets = budgets.map((b) => ({ ...b, reservedNano: Math.max(0, b.reservedNano - reservation.worstCaseNano), settledNano: b.settledNano + cost }));
  return { scopes: nextScopes, budgets: nextBudgets, overspendNano: Math.max(0, cost - reservation.worstCaseNano) };
}

/** Tokens given back at the end of a reservation (see {@link finishReservation}). */
export function refundOf(reservation: Pick<ReservationRecord, 'inputTokens' | 'maxOutputTokens'>, outcome: FinishOutcome): { input: number; output: number } {
  if (outcome.kind === 'release') return { input: reservation.inputTokens, output: reservation.maxOutputTokens };
  return { input: Math.max(0, reservation.inputTokens - outcome.inputTokens), output: Math.max(0, reservation.maxOutputTokens - outcome.outputTokens) };
}

/**
 * Corrects the budget rows of a finished reservation to the ledger's cost (the ledger is the
 * truth): settled += ledger cost − what the reservation charged. Rate limits are not corrected
 * (their window has passed by the time reconciliation runs).
 */
export function correctBudgets(charged: number, ledger: LedgerFacts, budgets: readonly BudgetState[]): BudgetState[] {
  const diff = ledger.costNano - charged;
  return budgets.map((b) => ({ ...b, settledNano: Math.max(0, b.settledNano + diff) }));
}

/** Budget rows of a locked state in the order of `keys`. */
export function budgetsOf(state: ReadonlyMap<string, BudgetState>, keys: readonly { scope: string; period: BudgetPeriod; startsOn: string }[]): BudgetState[] {
  return keys.map((k) => {
    const row = state.get(budgetKeyString(k));
    if (!row) throw new Error(`budget row ${budgetKeyString(k)} was not locked`);
    return row;
  });
}

/** nano-USD → `$1.25`, `$0.000012` (at least 2 decimals, at most 9, trailing zeros trimmed). */
export function formatUsd(nano: number): string {
  const sign = nano < 0 ? '-' : '';
  const digits = Math.abs(Math.round(nano)).toString().padStart(10, '0');
  const whole = digits.slice(0, -9);
  const frac = digits.slice(-9).replace(/0+$/, '').padEnd(2, '0');
  return `${sign}$${whole}.${frac}`;
}

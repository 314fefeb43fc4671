/**
 * The durable state admission decides on (ADR 0001: Postgres is the atomic arbiter), as plain
 * values: one {@link ScopeState} per tenant and per app, one {@link BudgetState} per scope and
 * UTC calendar period, one {@link ReservationRecord} per admitted request. Stores persist
 * these; the pure functions in `decide.ts` compute the next state from the locked one.
 */
import { type AdmissionLimits, type Caller, type TenantSpec, appKeyOf, slugOfInternalId, tenantKeyOf, useCasePolicyOf } from '@weir/core';

/** 1 USD in nano-USD: money is integer nano-USD everywhere in admission. */
export const NANO_PER_USD = 1_000_000_000;

/** A calendar budget period (UTC): the month starting on the 1st, or the day. */
export type BudgetPeriod = 'month' | 'day';

/**
 * The scope key of a tenant: `tenant:<key>`, where the key is the tenant's internal id
 * (`tenantKeyOf(caller)`, issue 14 §4; a legacy tenant's is its slug), so a tenant created
 * again with a deleted one's slug starts with fresh budget rows, leases and buckets.
 */
export function tenantScope(tenantKey: string): string {
  return `tenant:${tenantKey}`;
}

/** The scope key of an app of a tenant: `app:<tenant key>/<app key>` (internal ids, as {@link tenantScope}). */
export function appScope(tenantKey: string, appKey: string): string {
  return `app:${tenantKey}/${appKey}`;
}

/**
 * The scope key of a use case of a tenant: `usecase:<tenant key>/<name>` (the tenant's internal
 * id, as {@link tenantScope}; a use-case name never contains `/`). Only use cases the tenant's
 * policy defines have a scope.
 */
export function useCaseScope(tenantKey: string, name: string): string {
  return `usecase:${tenantKey}/${name}`;
}

/**
 * Whether `key` (an internal id, or a bare slug) names the configured incarnation `spec` of its
 * slug: its own internal id, or the slug itself (state of callers that carry no internal id:
 * tenants older than migration 0012, processes of an earlier version during an upgrade), or any
 * id made for the slug when the configuration names none (a configuration file).
 */
function isLiveKey(spec: { id: string; uid?: string }, key: string): boolean {
  return spec.uid === undefined || key === spec.uid || key === spec.id;
}

/**
 * The configured limits of a scope key (see {@link tenantScope}, {@link appScope},
 * {@link useCaseScope}) in `tenants` (by tenant id): the tenant's, its app's (`{}` when the app
 * has none), or its use case's. Undefined
 * when the tenant or app is not configured, or when the configuration gives it another internal
 * id than the scope's: the scope belongs to a deleted tenant or app, and its state is dropped
 * (leases given back, nothing admitted on it).
 */
export function scopeLimits(tenants: ReadonlyMap<string, TenantSpec>, scope: string): AdmissionLimits | undefined {
  if (scope.startsWith('tenant:')) {
    const key = scope.slice('tenant:'.length);
    const tenant = tenants.get(slugOfInternalId(key));
    return tenant && isLiveKey(tenant, key) ? tenant.limits : undefined;
  }
  if (scope.startsWith('usecase:')) {
    const rest = scope.slice('usecase:'.length);
    const slash = rest.indexOf('/');
    if (slash < 0) return undefined;
    const tenantKey = rest.slice(0, slash);
    const tenant = tenants.get(slugOfInternalId(tenantKey));
    if (!tenant || !isLiveKey(tenant, tenantKey)) return undefined;
    return useCasePolicyOf(tenant, rest.slice(slash + 1))?.limits;
  }
  const rest = scope.slice('app:'.length);
  const slash = rest.indexOf('/');
  if (!scope.startsWith('app:') || slash < 0) return undefined;
  const tenantKey = rest.slice(0, slash);
  const appKey = rest.slice(slash + 1);
  const tenant = tenants.get(slugOfInternalId(tenantKey));
  if (!tenant || !isLiveKey(tenant, tenantKey)) return undefined;
  const app = tenant.apps.find((a) => a.id === slugOfInternalId(appKey));
  if (!app || !isLiveKey(app, appKey)) return undefined;
  return app.limits;
}

/**
 * Whether `spec` (the configured tenant of the caller's slug) is the caller's tenant and app
 * by internal id: false when the caller carries internal ids and the configuration names
 * others — the caller's key is of a deleted tenant or app, or the configuration has not caught
 * up with a new one yet. A caller without internal ids (see `tenantKeyOf`) is its slug's.
 */
export function isSameIncarnation(spec: TenantSpec, caller: Caller): boolean {
  // Strict: a legacy internal id (the slug itself) of a deleted tenant is not the new one's.
  if (caller.tenantUid !== undefined && spec.uid !== undefined && spec.uid !== tenantKeyOf(caller)) return false;
  if (caller.appUid === undefined) return true;
  // A loop, not `find`: this runs on every reservation (no closure per call).
  for (const app of spec.apps) if (app.id === caller.appId) return app.uid === undefined || app.uid === appKeyOf(caller);
  return true;
}

/**
 * One scope's concurrency and rate-limit state (`admission_scopes`). Each per-minute limit is a
 * token bucket stored as the consumed level at `usedAtMs`; the level drains at limit ÷ 60,000
 * per ms, so a fresh scope (all levels 0) starts full. Levels are fractional (double).
 */
export interface ScopeState {
  scope: string;
  /** Reservations held now (≥ 0). */
  inFlight: number;
  /** Requests bucket level (requests). */
  requestsUsed: number;
  /** Input + output tokens bucket level (tokens). */
  tokensUsed: number;
  /** Input tokens bucket level (tokens). */
  inputTokensUsed: number;
  /** Output tokens bucket level (tokens). */
  outputTokensUsed: number;
  /** When the levels were last computed (epoch ms). */
  usedAtMs: number;
}

/** A scope with nothing in flight and full buckets. */
export function emptyScope(scope: string): ScopeState {
  return { scope, inFlight: 0, requestsUsed: 0, tokensUsed: 0, inputTokensUsed: 0, outputTokensUsed: 0, usedAtMs: 0 };
}

/** Identifies a budget row: scope, period and its first day (`YYYY-MM-DD`, UTC). */
export interface BudgetKey {
  scope: string;
  period: BudgetPeriod;
  startsOn: string;
}

/**
 * Money of one scope in one calendar period (`budget_periods`), nano-USD. The admission
 * invariant: settledNano + reservedNano ≤ the period's budget, for every configured budget.
 */
export interface BudgetState extends BudgetKey {
  settledNano: number;
  reservedNano: number;
}

/** A budget row with nothing spent or reserved. */
export function emptyBudget(key: BudgetKey): BudgetState {
  return { ...key, settledNano: 0, reservedNano: 0 };
}

/** A stable string for a {@link BudgetKey}; sorting these sorts rows the way stores lock them. */
export function budgetKeyString(key: BudgetKey): string {
  return `${key.scope}|${key.period}|${key.startsOn}`;
}

/** The first day (`YYYY-MM-DD`, UTC) of the month and of the day that contain `epochMs`. */
export function periodStarts(epochMs: number): { month: string; day: string } {
  const day = new Date(epochMs).toISOString().slice(0, 10);
  return { month: `${day.slice(0, 8)}01`, day };
}

/** What one reservation (or a reserve attempt) locks: its scopes (tenant, app, and its use case's when it has one) and their budget rows, sorted. */
export interface LockKeys {
  /** Scope keys, sorted. */
  scopes: string[];
  /** Budget rows, sorted by {@link budgetKeyString}. */
  budgets: BudgetKey[];
}

/**
 * The rows of a tenant/app pair (and of the tenant's use case `useCase`, when given: a use case
 * the tenant defines) for the month and day starting on the given dates, sorted for locking.
 */
export function lockKeys(tenantId: string, appId: string, monthStartsOn: string, dayStartsOn: string, useCase?: string): LockKeys {
  const scopes = [tenantScope(tenantId), appScope(tenantId, appId), ...(useCase !== undefined ? [useCaseScope(tenantId, useCase)] : [])].sort();
  const budgets = scopes
    .flatMap((scope) => [
      { scope, period: 'month' as const, startsOn: monthStartsOn },
      { scope, period: 'day' as const, startsOn: dayStartsOn },
    ])
    .sort((a, b) => compare(budgetKeyString(a), budgetKeyString(b)));
  return { scopes, budgets };
}

/** The rows a reservation touches (the periods recorded on it, so a reservation made on the 31st settles in that month). */
export function reservationLockKeys(r: ReservationRecord): LockKeys {
  return lockKeys(r.tenantId, r.appId, r.monthStartsOn, r.dayStartsOn, r.useCase);
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Where a reservation is in its life. `held` until exactly one of the others. */
export type ReservationState = 'held' | 'settled' | 'released' | 'expired';

/** Who finished a reservation: the request itself (`gateway`) or reconciliation (`reconciler`). */
export type FinishedBy = 'gateway' | 'reconciler';

/** One admitted request (`reservations`). Token counts are tokens, money nano-USD, times epoch ms. */
export interface ReservationRecord {
  id: string;
  tenantId: string;
  appId: string;
  /** The use case whose scope it holds too (one its tenant defined when it was reserved); absent: none. */
  useCase?: string;
  requestId: string;
  generationId: string;
  state: ReservationState;
  inputTokens: number;
  maxOutputTokens: number;
  worstCaseNano: number;
  /** The budget periods it was reserved in (`YYYY-MM-DD`). */
  monthStartsOn: string;
  dayStartsOn: string;
  createdAtMs: number;
  expiresAtMs: number;
  /** Set once settled (also by reconciliation): the cost charged. */
  settledNano?: number;
  settledInputTokens?: number;
  settledOutputTokens?: number;
  finishedAtMs?: number;
  finishedBy?: FinishedBy;
}

/** The state rows a transaction locked, by key. */
export interface LockedState {
  scopes: ReadonlyMap<string, ScopeState>;
  /** By {@link budgetKeyString}. */
  budgets: ReadonlyMap<string, BudgetState>;
}

/** Rows to write back at the end of a transaction (only those given are written). */
export interface StateWrites {
  scopes: ScopeState[];
  budgets: BudgetState[];
}

/** What the usage ledger says a generation measured and cost (the ledger is the truth). */
export interface LedgerFacts {
  costNano: number;
  inputTokens: number;
  outputTokens: number;
  /** The row holds the gateway's best knowledge after a lost relay, not yet settled from the engine's count. Default false. */
  uncertain?: boolean;
}

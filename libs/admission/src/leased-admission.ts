/**
 * Admission decided in memory on leases (ADR 0002 §1, issue 13 item 1). The holder keeps every
 * scope's state in this process — each tenant's and app's budget leases, its token buckets on
 * its shares of the per-minute limits, its concurrency slots — and decides `reserve`, `settle`
 * and `release` with the pure functions of `decide.ts` (`decideReservation`,
 * `finishReservation`), without I/O. Leases come from a {@link LeaseStore}, one transaction
 * per lease change, in the background: refilled before they run dry, trimmed and returned when
 * idle, their `hold_until` moved forward by a heartbeat.
 *
 * A request meets the database on its path in exactly two cases: a lease it needs is dry (the
 * edge of a budget, a share smaller than the demand, or the first request of a scope or period)
 * — it then draws synchronously (one transaction, shared by every request waiting on the same
 * lease) and decides again — and a reservation expiring after a lease's `hold_until` (deadlines
 * beyond ~2.5 min) first extends it.
 *
 * **Why the cap holds.** The holder admits on a budget lease only while settled locally + worst
 * cases in flight + this worst case ≤ granted; the store never grants more than budget −
 * settled − leased. The database side of a settlement (the ledger's applier, in the
 * transaction that inserts the usage row) moves the cost from the lease to the row's settled
 * spend, so settled + leased does not change. The local figure never relies on the applier:
 * it counts a cost when `settle` is called, and a reservation that expires unsettled at its
 * whole worst case (the applier moves at most that), so what the ledger can consume under a
 * lease never exceeds its grant. Rate shares: Σ shares ≤ limit in the store; each holder runs
 * a bucket of capacity = its share refilled at share ÷ 60,000 per ms, and gives back only the
 * full part of its bucket, so the holders together never exceed one bucket of the limit.
 */
import {
  type AdmissionLimits,
  type AdmissionService,
  type Caller,
  type ReservationRef,
  type ReserveResult,
  type ReservationRequest,
  type Settlement,
  type TenantSpec,
  WeirError,
  appKeyOf,
  newId,
  tenantKeyOf,
  useCasePolicyOf,
} from '@weir/core';
import {
  type BudgetKey,
  type BudgetPeriod,
  type BudgetState,
  NANO_PER_USD,
  type ScopeState,
  appScope,
  budgetKeyString,
  emptyBudget,
  emptyScope,
  isSameIncarnation,
  periodStarts,
  scopeLimits,
  tenantScope,
  useCaseScope,
} from './admission-state';
import { BUCKETS, type FinishOutcome, MINUTE_MS, type ReserveDecision, type ScopeCheck, decideReservation, drainedLevel, finishReservation, formatUsd } from './decide';
import {
  type BudgetLeaseRow,
  type HolderMode,
  type LeaseAsk,
  type LeaseStore,
  RATE_FIELDS,
  type RateField,
  type RateLeaseRow,
  type RateShares,
  type ReclaimReport,
  noShares,
} from './lease-store';
import {
  DEFAULT_SIZING,
  type LeaseSizing,
  type RecentStat,
  addRecent,
  budgetTarget,
  emptyRecent,
  observeRecent,
  planBudget,
  planShare,
  rateTarget,
  recentMax,
  recentSum,
  slotTarget,
} from './lease-sizing';

/** Options of {@link createLeasedAdmission}. Durations in ms. */
export interface LeasedAdmissionOptions {
  /** The configured tenants with their and their apps' limits (see {@link LeasedAdmission.updateTenants}). */
  tenants: readonly TenantSpec[];
  /**
   * `exclusive`: this process owns the database (the all-in-one on its own PGlite): it leases
   * everything, and at `start` reclaims every lease in the store (call it only after the
   * settlement journal was replayed). `shared`: one of several holders; leases by demand.
   */
  mode: HolderMode;
  /** This holder's id (`admission_holders.holder`). Default a fresh `hld_…` id per process. */
  holderId?: string;
  /**
   * Holders this one can prove dead — its own earlier runs, e.g. an all-in-one on a shared
   * Postgres whose data directory's lock it now holds (and whose journal it has replayed), giving
   * the same `holderId` each run: their leases and rows are reclaimed at `start` instead of
   * waiting out their `hold_until` (up to `holdMs`), so a restart after a kill -9 does not find
   * its own budget and concurrency slots held. Shared mode only (exclusive reclaims everyone).
   * Default none.
   */
  predecessors?: readonly string[];
  /** Retry hint for `concurrency_limited`. Default 1,000. */
  concurrencyRetryAfterMs?: number;
  /** Heartbeat and background maintenance interval. Default 2,000. */
  heartbeatMs?: number;
  /** The holder's row expires this long after its last heartbeat. Default 10,000. */
  holderTtlMs?: number;
  /**
   * Heartbeats move each lease's `hold_until` to now + this. Default 240,000 (4 min): above the
   * default reservation lifetime (a 120 s deadline + 60 s grace) plus a heartbeat, so ordinary
   * requests never wait for an extension.
   */
  holdMs?: number;
  /** A lease is reclaimed only this long after its `hold_until` (clock skew between holders). Default 5,000. */
  reclaimGraceMs?: number;
  /** How often maintenance reclaims expired leases (any holder's). Default 10,000. */
  reclaimEveryMs?: number;
  /**
   * After a graceful `stop`, leases are kept this long past the last in-flight expiry before
   * they may be reclaimed: time for the ledger's applier to settle what this holder settled.
   * Default 30,000.
   */
  stopGraceMs?: number;
  /** A shared holder returns a lease unused for this long (nothing in flight). Default 60,000. */
  idleReturnMs?: number;
  /** After a draw found too little to lease, requests needing more are refused without asking again for this long (shared). Default 1,000. */
  drawRetryMs?: number;
  /**
   * A shared holder whose waiting request found too little unleased on a budget row asks the
   * row's other holders for money this long (`BudgetDraw.demandUntilMs`): each gives back what it
   * does not need at its next heartbeat. Default 5,000.
   */
  demandMs?: number;
  /** Most synchronous draws one request may wait for before it is refused. Default 16. */
  maxDrawRounds?: number;
  /** Lease sizing (see `lease-sizing.ts`). Default {@link DEFAULT_SIZING}. */
  sizing?: Partial<LeaseSizing>;
}

/** What the engine reports (all optional, synchronous, must not throw). */
export interface LeasedAdmissionObserver {
  onDecision?(decision: { tenantId: string; outcome: 'admitted' | 'rejected'; reason?: Extract<ReserveResult, { ok: false }>['reason'] }): void;
  /** A settlement above its reservation's worst case. */
  onOverspend?(event: { tenantId: string; appId: string; reservationId: string; overspendNano: number }): void;
  /** A background lease operation (heartbeat, refill, return, reclaim) failed; it is retried at the next pass. */
  onError?(err: unknown, operation: string): void;
  /** A reclaim pass found something. */
  onReclaimed?(report: ReclaimReport): void;
}

/** A periodic timer (injectable for tests). */
export interface MaintenanceTimer {
  /** Calls `fn` every `ms` until the returned cancel is called; must not keep the process alive. */
  every(ms: number, fn: () => void): () => void;
}

/** Dependencies of {@link createLeasedAdmission}. */
export interface LeasedAdmissionDeps {
  store: LeaseStore;
  /** Wall clock, epoch ms. Default `Date.now`. */
  clock?: { now(): number };
  observer?: LeasedAdmissionObserver;
  /** Default: `setInterval`, unref'd. */
  timer?: MaintenanceTimer;
}

/** One budget lease as this holder sees it (money in nano-USD). */
export interface BudgetLeaseView {
  leaseId: string;
  key: BudgetKey;
  status: LeaseStatus;
  grantedNano: number;
  /** Costs settled here under the lease (and worst cases of reservations that expired unsettled). */
  settledNano: number;
  /** Worst cases in flight under the lease. */
  inFlightNano: number;
  /** granted − settled − in flight. */
  availableNano: number;
  holdUntilMs: number;
}

/** One rate lease as this holder sees it. */
export interface RateLeaseView {
  leaseId: string;
  scope: string;
  status: LeaseStatus;
  shares: RateShares;
  holdUntilMs: number;
}

/** `active`: used for new reservations; `retired`: returned, kept until it lapses; `lost`: reclaimed by the store. */
export type LeaseStatus = 'pending' | 'active' | 'retired' | 'lost';

/** Counters since creation. */
export interface LeasedAdmissionCounters {
  admitted: number;
  rejected: number;
  /** Draws a request waited for (each one transaction). */
  syncDraws: number;
  /** Draws made in the background (refills, top-ups). */
  backgroundDraws: number;
  /** Budget returns and share reductions. */
  returns: number;
  /** Budget leases given back because another holder wanted the row's money (a subset of `returns`). */
  rebalances: number;
  heartbeats: number;
  /** `hold_until` extensions a request waited for. */
  extensions: number;
  /** Every store call (one transaction each). */
  transactions: number;
  /** Store calls that failed. */
  failures: number;
  /** Reservations that expired here without a settlement (counted at their worst case). */
  expired: number;
}

/** A view of the engine's state (metrics, tests). */
export interface LeasedAdmissionSnapshot {
  holderId: string;
  mode: HolderMode;
  running: boolean;
  /** Reservations held now. */
  held: number;
  budgetLeases: BudgetLeaseView[];
  rateLeases: RateLeaseView[];
  /** In flight per scope key (`tenant:…`, `app:…/…`). */
  inFlight: Record<string, number>;
  counters: LeasedAdmissionCounters;
}

/** What one maintenance pass did. */
export interface MaintenanceReport {
  /** Local reservations expired unsettled. */
  expired: number;
  /** Leases found reclaimed by the store (no longer usable here). */
  lost: number;
  /** Lease changes made (draws, returns, shrinks). */
  changes: number;
  reclaimed?: ReclaimReport;
}

/** Admission on leases: the {@link AdmissionService} port plus the holder's life cycle. */
export interface LeasedAdmission extends AdmissionService {
  readonly holderId: string;
  readonly mode: HolderMode;
  /**
   * Replaces the tenants' limits (a new configuration snapshot): the next `reserve` decides by
   * them (a lowered budget freezes the row's lease until maintenance has resized it, which
   * starts at once); held reservations settle as they were made. A tenant no longer listed is
   * refused from then on.
   */
  updateTenants(tenants: readonly TenantSpec[]): void;
  /**
   * Registers the holder (an exclusive holder first reclaims every lease in the store), then
   * runs maintenance every `heartbeatMs`. Throws store faults (nothing started). `reserve`
   * works before `start` too (leases are drawn on demand and extended when a reservation needs
   * it), but nothing is refilled, trimmed, returned or reclaimed in the background.
   */
  start(): Promise<void>;
  /**
   * Stops maintenance and refuses new reservations (`shutting_down`). With `returnLeases`
   * (default true): gives back what its leases hold unused, and lets them lapse
   * `stopGraceMs` after the last reservation in flight expires; `settle`/`release` keep
   * working in memory. `returnLeases: false` leaves everything as a crash would (tests).
   */
  stop(options?: { returnLeases?: boolean }): Promise<void>;
  /** One maintenance pass now (heartbeat, local expiries, refills, returns, rebalancing, and a reclaim when due). Passes never overlap. */
  runMaintenance(): Promise<MaintenanceReport>;
  /** Reclaims every lease (any holder's) past its `hold_until` + grace: what a dead holder held goes back. */
  reclaimExpired(): Promise<ReclaimReport>;
  snapshot(): LeasedAdmissionSnapshot;
}

// ---- Local state ------------------------------------------------------------------------

interface BudgetLease extends BudgetState {
  // BudgetState: settledNano = settled locally under this lease; reservedNano = worst cases in flight.
  leaseId: string;
  keyString: string;
  status: LeaseStatus;
  grantedNano: number;
  holdUntilMs: number;
  /** Set by a lowered budget: admits nothing more until resized. */
  frozen: boolean;
  /** Exclusive: take everything there is at the next pass (config changed). */
  topUp: boolean;
  spend: RecentStat;
  lastUsedMs: number;
  /** The lease's one store operation in flight (draws and returns never overlap). */
  busy?: Promise<void>;
  /** Shortfalls of requests that waited on `busy` (nano-USD), for the next draw. */
  pendingNano: number;
  /** A draw found less than needed: requests needing more than `knownUnleasedNano` are refused until then. */
  exhaustedUntilMs: number;
  knownUnleasedNano: number;
  /** What live other holders held on the row at the last draw that fell short (nano-USD): money a refusal must not call spent. */
  othersLeasedNano: number;
  /** Given back as unusable while a co-row was dry (see releaseBlocked) until then. */
  blockedReturnUntilMs: number;
}

interface RateLease {
  leaseId: string;
  scope: string;
  status: LeaseStatus;
  shares: RateShares;
  holdUntilMs: number;
  topUp: boolean;
  /** The limits its shares were last sized under (a lowered limit shrinks them in proportion). */
  limits: Partial<RateShares>;
  busy?: Promise<void>;
  pending: RateShares;
  exhaustedUntilMs: RateShares;
  knownUnleased: RateShares;
}

interface LocalScope {
  scope: string;
  kind: 'tenant' | 'app' | 'use_case';
  /** The use case's name (kind `use_case`), for messages. */
  name?: string;
  /** Levels in this holder's buckets (capacity = its shares), in flight here. */
  state: ScopeState;
  rate?: RateLease;
  use: Record<RateField, RecentStat>;
  lastUsedMs: number;
}

interface Held {
  id: string;
  tenantId: string;
  appId: string;
  /** Tenant, app, and the use case's scope when the request named one its tenant defines. */
  scopes: LocalScope[];
  leases: BudgetLease[];
  inputTokens: number;
  maxOutputTokens: number;
  worstCaseNano: number;
  expiresAtMs: number;
}

const DAY_MS = 86_400_000;

const EMPTY_ROW: BudgetState = emptyBudget({ scope: '', period: 'month', startsOn: '1970-01-01' });

const PERIODS: readonly { period: BudgetPeriod; limit: 'monthlyBudgetUsd' | 'dailyBudgetUsd' }[] = [
  { period: 'month', limit: 'monthlyBudgetUsd' },
  { period: 'day', limit: 'dailyBudgetUsd' },
];

const realTimer: MaintenanceTimer = {
  every(ms, fn) {
    const t = setInterval(fn, ms);
    t.unref();
    return () => clearInterval(t);
  },
};

/**
 * Creates admission on leases over `deps.store` (see the module comment and ADR 0002 §1).
 *
 * `reserve` rejects (a value), exactly as `createAdmission` does: an unknown tenant
 * (`concurrency_limited`, no hint), a budget (`budget_exhausted`), a rate (`rate_limited` with
 * the wait), concurrency (`concurrency_limited`) — once what this holder leases cannot take the
 * request and the store has nothing more to lease. When ok it also returns the
 * {@link ReservationRef} the usage record must carry. It throws WeirError `invalid_request` for
 * malformed requests, `shutting_down` after `stop`, and store faults of a synchronous draw or
 * extension (map them with `withStoreFaultsAsUnavailable`). `settle` and `release` are in
 * memory only and idempotent; `settle` throws `invalid_request` for negative or fractional
 * actuals.
 */
export function createLeasedAdmission(options: LeasedAdmissionOptions, deps: LeasedAdmissionDeps): LeasedAdmission {
  const { store, observer } = deps;
  const clock = deps.clock ?? { now: () => Date.now() };
  const timer = deps.timer ?? realTimer;
  const mode = options.mode;
  const exclusive = mode === 'exclusive';
  const holderId = options.holderId ?? newId('hld');
  const concurrencyRetryAfterMs = options.concurrencyRetryAfterMs ?? 1_000;
  const heartbeatMs = options.heartbeatMs ?? 2_000;
  const holderTtlMs = options.holderTtlMs ?? 10_000;
  const holdMs = options.holdMs ?? 240_000;
  const reclaimGraceMs = options.reclaimGraceMs ?? 5_000;
  const reclaimEveryMs = options.reclaimEveryMs ?? 10_000;
  const stopGraceMs = options.stopGraceMs ?? 30_000;
  const idleReturnMs = options.idleReturnMs ?? 60_000;
  const drawRetryMs = options.drawRetryMs ?? 1_000;
  const demandMs = options.demandMs ?? 5_000;
  const maxDrawRounds = options.maxDrawRounds ?? 16;
  const sizing: LeaseSizing = { ...DEFAULT_SIZING, ...options.sizing };
  const maxFraction = exclusive ? 1 : sizing.sharedMaxFraction;
  const windowMs = sizing.windowMs;

  let tenants = new Map(options.tenants.map((t) => [t.id, t]));
  const scopes = new Map<string, LocalScope>();
  /** The active (or pending) budget lease of each row, by {@link budgetKeyString}. */
  const activeBudget = new Map<string, BudgetLease>();
  /** Every budget lease this holder still knows (active, retired until it lapses). */
  const budgetLeases = new Map<string, BudgetLease>();
  const held = new Map<string, Held>();
  const counters: LeasedAdmissionCounters = {
    admitted: 0,
    rejected: 0,
    syncDraws: 0,
    backgroundDraws: 0,
    returns: 0,
    rebalances: 0,
    heartbeats: 0,
    extensions: 0,
    transactions: 0,
    failures: 0,
    expired: 0,
  };
  // Reservation ids: one random prefix per holder and a counter (unique across holders, and no
  // 16 random bytes from the kernel per request: that was 15 % of a decision's CPU).
  const idPrefix = `${newId('rsv')}_`;
  let idCounter = 0;
  // The UTC month and day of the last decision, recomputed only when a day boundary passes.
  let periods = { fromMs: 0, untilMs: -1, starts: { month: '', day: '' } };
  const startsAt = (nowMs: number) => {
    if (nowMs < periods.fromMs || nowMs >= periods.untilMs) {
      const fromMs = nowMs - (((nowMs % DAY_MS) + DAY_MS) % DAY_MS);
      periods = { fromMs, untilMs: fromMs + DAY_MS, starts: periodStarts(nowMs) };
    }
    return periods.starts;
  };
  let running = false;
  let stopped = false;
  let cancelTimer: (() => void) | undefined;
  let maintaining: Promise<MaintenanceReport> | undefined;
  let lastReclaimMs = -Infinity;

  /** Every store call goes through here: counted, failures counted. */
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    counters.transactions++;
    try {
      return await fn();
    } catch (err) {
      counters.failures++;
      throw err;
    }
  };
  const report = (what: string) => (err: unknown) => {
    try {
      observer?.onError?.(err, what);
    } catch {
      // an observer must not break admission
    }
  };

  // ---- Local objects ----

  const scopeOf = (scope: string, kind: LocalScope['kind'], name?: string): LocalScope => {
    let s = scopes.get(scope);
    if (!s) {
      s = {
        scope,
        kind,
        ...(name !== undefined ? { name } : {}),
        state: emptyScope(scope),
        use: { requestsPerMinute: emptyRecent(), tokensPerMinute: emptyRecent(), inputTokensPerMinute: emptyRecent(), outputTokensPerMinute: emptyRecent(), maxConcurrent: emptyRecent() },
        lastUsedMs: 0,
      };
      scopes.set(scope, s);
    }
    return s;
  };

  const newBudgetLease = (key: BudgetKey, nowMs: number): BudgetLease => {
    const lease: BudgetLease = {
      ...key,
      settledNano: 0,
      reservedNano: 0,
      leaseId: newId('lse'),
      keyString: budgetKeyString(key),
      status: 'pending',
      grantedNano: 0,
      holdUntilMs: 0,
      frozen: false,
      topUp: false,
      spend: emptyRecent(),
      lastUsedMs: nowMs,
      pendingNano: 0,
      exhaustedUntilMs: 0,
      knownUnleasedNano: 0,
      othersLeasedNano: 0,
      blockedReturnUntilMs: 0,
    };
    activeBudget.set(lease.keyString, lease);
    budgetLeases.set(lease.leaseId, lease);
    return lease;
  };

  const budgetLeaseFor = (key: BudgetKey, nowMs: number): BudgetLease => {
    const lease = activeBudget.get(budgetKeyString(key));
    return lease && (lease.status === 'active' || lease.status === 'pending') ? lease : newBudgetLease(key, nowMs);
  };

  const rateLeaseFor = (s: LocalScope): RateLease => {
    if (s.rate && (s.rate.status === 'active' || s.rate.status === 'pending')) return s.rate;
    s.rate = {
      leaseId: newId('lse'),
      scope: s.scope,
      status: 'pending',
      shares: noShares(),
      holdUntilMs: 0,
      topUp: false,
      limits: {},
      pending: noShares(),
      exhaustedUntilMs: noShares(),
      knownUnleased: noShares(),
    };
    return s.rate;
  };

  const configuredBudgetNano = (limits: AppLimits | undefined, period: BudgetPeriod): number | undefined => {
    const usd = limits?.[period === 'month' ? 'monthlyBudgetUsd' : 'dailyBudgetUsd'];
    return usd === undefined ? undefined : Math.round(usd * NANO_PER_USD);
  };

  /** The limits of a scope key under the current configuration (undefined: not configured). */
  const limitsOfScope = (scope: string): AppLimits | undefined => limitsFrom(tenants, scope);

  const rateLimitsOf = (limits: AppLimits | undefined): Partial<RateShares> => {
    const out: Partial<RateShares> = {};
    if (!limits) return out;
    for (const f of RATE_FIELDS) if (limits[f] !== undefined) out[f] = limits[f];
    return out;
  };
  const hasRateLimits = (limits: AppLimits): boolean => RATE_FIELDS.some((f) => limits[f] !== undefined);

  const available = (l: BudgetLease): number => l.grantedNano - l.settledNano - l.reservedNano;

  // ---- Reserve ----

  interface Plan {
    tenantId: string;
    appId: string;
    /** Tenant, app, then the use case (when the request names one its tenant defines). */
    scopes: LocalScope[];
    limits: AppLimits[];
    /** Budget leases of configured budgets, with their period and scope index. */
    leases: { lease: BudgetLease; scopeIndex: number; period: BudgetPeriod; budgetNano: number }[];
    starts: { month: string; day: string };
  }

  const plan = (tenant: TenantSpec, caller: Caller, useCase: string | undefined, nowMs: number): Plan => {
    const starts = startsAt(nowMs);
    const appId = caller.appId;
    const appLimits = tenant.apps.find((a) => a.id === appId)?.limits ?? {};
    // Scopes by internal id (issue 14 §4): a deleted same-slug tenant's buckets, slots and
    // budget rows are not this one's.
    const tenantKey = tenantKeyOf(caller);
    const tScope = scopeOf(tenantScope(tenantKey), 'tenant');
    const aScope = scopeOf(appScope(tenantKey, appKeyOf(caller)), 'app');
    const planned: LocalScope[] = [tScope, aScope];
    const limits: AppLimits[] = [tenant.limits, appLimits];
    // The use case's scope, as the app's: only for a use case the tenant's policy defines.
    const uc = useCasePolicyOf(tenant, useCase);
    if (uc) {
      planned.push(scopeOf(useCaseScope(tenantKey, uc.name), 'use_case', uc.name));
      limits.push(uc.limits);
    }
    const leases: Plan['leases'] = [];
    planned.forEach((s, i) => {
      for (const p of PERIODS) {
        const budgetNano = configuredBudgetNano(limits[i], p.period);
        if (budgetNano === undefined) continue;
        leases.push({ lease: budgetLeaseFor({ scope: s.scope, period: p.period, startsOn: starts[p.period] }, nowMs), scopeIndex: i, period: p.period, budgetNano });
      }
    });
    return { tenantId: tenant.id, appId, scopes: planned, limits, leases, starts };
  };

  const checks = (p: Plan): ScopeCheck[] =>
    p.scopes.map((s, i): ScopeCheck => {
      const budgetNano: { month?: number; day?: number } = {};
      const budgets = { month: EMPTY_ROW, day: EMPTY_ROW };
      for (const l of p.leases) {
        if (l.scopeIndex !== i) continue;
        budgets[l.period] = l.lease;
        budgetNano[l.period] = l.lease.frozen ? Math.min(l.lease.grantedNano, l.lease.settledNano + l.lease.reservedNano) : l.lease.grantedNano;
      }
      const rate = s.rate && s.rate.status === 'active' ? s.rate.shares : undefined;
      return {
        kind: s.kind,
        ...(s.name !== undefined ? { name: s.name } : {}),
        limits: p.limits[i],
        state: s.state,
        budgets,
        lease: { budgetNano, shares: rate ?? {}, slots: rate?.maxConcurrent ?? 0 },
      };
    });

  /** Leases a reservation expiring at `expiresAtMs` would use that do not cover it yet. */
  const uncovered = (p: Plan, expiresAtMs: number): string[] => {
    const ids: string[] = [];
    // A pending lease holds nothing (a request costing nothing passed without it): nothing to cover.
    for (const l of p.leases) if (l.lease.status === 'active' && l.lease.holdUntilMs < expiresAtMs) ids.push(l.lease.leaseId);
    p.scopes.forEach((s, i) => {
      if (s.rate && s.rate.status === 'active' && hasRateLimits(p.limits[i]) && s.rate.holdUntilMs < expiresAtMs) ids.push(s.rate.leaseId);
    });
    return ids;
  };

  const extend = async (ids: string[], untilMs: number): Promise<void> => {
    counters.extensions++;
    const nowMs = clock.now();
    const { live } = await call(() => store.heartbeat({ holder: holderId, mode, nowMs, ttlMs: holderTtlMs, leaseIds: ids, holdUntilMs: untilMs }));
    for (const id of ids) {
      const lease = budgetLeases.get(id) ?? rateLeaseById(id);
      if (!lease) continue;
      if (live.has(id)) lease.holdUntilMs = Math.max(lease.holdUntilMs, untilMs);
      else markLost(lease);
    }
  };

  const rateLeaseById = (id: string): RateLease | undefined => {
    for (const s of scopes.values()) if (s.rate?.leaseId === id) return s.rate;
    return undefined;
  };

  const markLost = (lease: BudgetLease | RateLease) => {
    lease.status = 'lost';
    if ('keyString' in lease) {
      if (activeBudget.get(lease.keyString) === lease) activeBudget.delete(lease.keyString);
    }
  };

  /**
   * What could let a rejected request pass: the store operations to start (or join) — and
   * nothing when some limit cannot be helped (`dry`: the budget leases whose row has too little
   * left to lease). Nothing is started unless every shortage can be fixed, so a request refused
   * on one row does not draw on the others.
   */
  const drawsFor = (p: Plan, request: ReservationRequest, nowMs: number): { waits: Promise<void>[]; dry: BudgetLease[] } => {
    const worst = request.worstCaseCostNanoUsd;
    const starts: (() => Promise<void>)[] = [];
    const dry: BudgetLease[] = [];
    let fixable = true;
    for (const { lease, budgetNano } of p.leases) {
      const short = lease.settledNano + lease.reservedNano + worst - lease.grantedNano;
      if (lease.busy) {
        if (short > 0 || lease.frozen) {
          starts.push(() => {
            lease.pendingNano += worst;
            return lease.busy ?? Promise.resolve();
          });
        }
        continue;
      }
      if (lease.frozen) {
        // A lowered budget: give back what is unused first, then lease again under the new one.
        starts.push(() => unfreeze(lease));
        continue;
      }
      if (short <= 0) continue;
      if (nowMs < lease.exhaustedUntilMs && short > lease.knownUnleasedNano) {
        dry.push(lease);
        fixable = false;
        continue;
      }
      starts.push(() => {
        const target = budgetTarget(recentSum(lease.spend, nowMs, windowMs), Math.max(worst, recentMax(lease.spend, nowMs, windowMs)), sizing);
        const want = exclusive ? Infinity : Math.max(short, target - available(lease), lease.pendingNano + short);
        lease.pendingNano = 0;
        counters.syncDraws++;
        return drawBudget(lease, budgetNano, { want, min: short, maxFraction }, exclusive ? undefined : nowMs + demandMs);
      });
    }
    for (const [i, s] of p.scopes.entries()) {
      const limits = p.limits[i];
      if (!hasRateLimits(limits)) continue;
      const rate = rateLeaseFor(s);
      const ask: Partial<Record<RateField, LeaseAsk>> = {};
      const pending: Partial<RateShares> = {};
      let short = false;
      for (const b of BUCKETS) {
        const limit = limits[b.limit];
        if (limit === undefined) continue;
        const need = b.need(request);
        if (need > limit) return { waits: [], dry }; // can never pass
        const share = Math.min(limit, rate.shares[b.limit]);
        const level = drainedLevel(s.state[b.level], share, s.state.usedAtMs, nowMs);
        const missing = Math.ceil(level + need - share - 1e-6);
        if (missing <= 0) continue;
        short = true;
        if (rate.busy) {
          pending[b.limit] = need;
          continue;
        }
        if ((nowMs < rate.exhaustedUntilMs[b.limit] && missing > rate.knownUnleased[b.limit]) || share >= limit) {
          fixable = false;
          continue;
        }
        const target = rateTarget(recentSum(s.use[b.limit], nowMs, windowMs), Math.max(need, recentMax(s.use[b.limit], nowMs, windowMs)), limit, sizing);
        ask[b.limit] = { want: exclusive ? Infinity : Math.max(missing, target - share, rate.pending[b.limit] + missing), min: missing, maxFraction };
      }
      const max = limits.maxConcurrent;
      if (max !== undefined) {
        const slots = Math.min(max, rate.shares.maxConcurrent);
        if (s.state.inFlight + 1 > slots) {
          short = true;
          if (rate.busy) pending.maxConcurrent = 1;
          else if ((nowMs < rate.exhaustedUntilMs.maxConcurrent && rate.knownUnleased.maxConcurrent < 1) || slots >= max) fixable = false;
          else {
            const target = slotTarget(recentMax(s.use.maxConcurrent, nowMs, windowMs) + 1, max);
            ask.maxConcurrent = { want: exclusive ? Infinity : Math.max(1, target - slots, rate.pending.maxConcurrent + 1), min: 1, maxFraction };
          }
        }
      }
      if (!short) continue;
      starts.push(() => {
        if (rate.busy) {
          for (const f of RATE_FIELDS) rate.pending[f] += pending[f] ?? 0;
          return rate.busy;
        }
        for (const f of RATE_FIELDS) if (ask[f]) rate.pending[f] = 0;
        if (Object.keys(ask).length === 0) return Promise.resolve();
        counters.syncDraws++;
        return drawRate(s, rate, limits, ask);
      });
    }
    if (!fixable) return { waits: [], dry };
    return { waits: starts.map((start) => start()), dry };
  };

  /**
   * A shared holder refused on budget rows with nothing left to lease (`dry`) gives back what it
   * holds on the request's other rows that no request can use while those stay dry: every other
   * row of the tenant when a tenant row is dry (all its requests use it), the app's other rows
   * when an app row is. Else two holders could each hold what the other needs (one a tenant
   * row's money, the other an app row's) until their idle trims (in the background; at most
   * once per `drawRetryMs` per lease).
   */
  const releaseBlocked = (p: Plan, dry: readonly BudgetLease[], nowMs: number) => {
    if (exclusive || dry.length === 0) return;
    const tenantDry = dry.some((d) => d.scope.startsWith('tenant:'));
    const dryScopes = new Set(dry.map((d) => d.scope));
    for (const { lease } of p.leases) {
      if (dry.includes(lease) || lease.busy || lease.status !== 'active' || available(lease) <= 0 || nowMs < lease.blockedReturnUntilMs) continue;
      if (!tenantDry && !dryScopes.has(lease.scope)) continue;
      lease.blockedReturnUntilMs = nowMs + drawRetryMs;
      returnBudget(lease, available(lease)).catch(report('return'));
    }
  };

  /**
   * The refusal message when what live other holders (other admission instances) hold on each
   * dry row, plus what is unleased, would cover this request: part of it may be their requests
   * in flight, the rest they give back at their next heartbeat once this holder's demand reaches
   * them, so a retry may pass. Undefined when some dry row really has too little left.
   */
  const heldElsewhere = (dry: readonly BudgetLease[], worstNano: number): string | undefined => {
    if (exclusive || dry.length === 0) return undefined;
    for (const l of dry) {
      const short = l.settledNano + l.reservedNano + worstNano - l.grantedNano;
      if (l.othersLeasedNano + l.knownUnleasedNano < short) return undefined;
    }
    const l = dry[0];
    return (
      `The ${whose(l)} ${l.period === 'month' ? 'monthly' : 'daily'} budget is nearly spent: ${formatUsd(l.othersLeasedNano)} of what is left is held by ` +
      `other admission instances, for their requests in flight or unused. They give back what they do not use within a few seconds, so a retry after ` +
      `the Retry-After delay may pass; it is refused as exhausted once the rest is spent.`
    );
  };

  /**
   * A shared holder's `budget_exhausted` message from what the store told its last draw (the
   * decision's own figure is this holder's lease, not the budget): the configured budget, and
   * what is left unreserved for this holder (unleased + what its lease still has free).
   * Undefined for an exclusive holder (its lease is the budget) or without a dry row.
   */
  const exhaustedHere = (dry: readonly BudgetLease[], worstNano: number): string | undefined => {
    if (exclusive || dry.length === 0) return undefined;
    const l = dry[0];
    const budgetNano = configuredBudgetNano(limitsOfScope(l.scope), l.period);
    if (budgetNano === undefined) return undefined;
    const left = Math.max(0, l.knownUnleasedNano + Math.max(0, available(l)));
    return (
      `The ${whose(l)} ${l.period === 'month' ? 'monthly' : 'daily'} budget of ${formatUsd(budgetNano)} is exhausted: ${formatUsd(left)} remains unreserved ` +
      `and this request may cost up to ${formatUsd(worstNano)}. Lower max_tokens or the input, or ask for a higher budget.`
    );
  };

  const whose = (l: BudgetLease) => {
    if (l.scope.startsWith('tenant:')) return "tenant's";
    if (l.scope.startsWith('usecase:')) return `'${l.scope.slice(l.scope.indexOf('/') + 1)}' use case's`;
    return "app's";
  };

  const commit = (p: Plan, decision: Extract<ReserveDecision, { ok: true }>, request: ReservationRequest, nowMs: number): ReserveResult => {
    const id = idPrefix + (idCounter++).toString(36);
    p.scopes.forEach((s, i) => {
      s.state = decision.scopes[i];
      s.lastUsedMs = nowMs;
      for (const b of BUCKETS) if (p.limits[i][b.limit] !== undefined) addRecent(s.use[b.limit], nowMs, b.need(request), windowMs);
      observeRecent(s.use.maxConcurrent, nowMs, s.state.inFlight, windowMs);
    });
    const worst = request.worstCaseCostNanoUsd;
    const leases: BudgetLease[] = [];
    const leaseIds: string[] = [];
    for (const { lease, budgetNano } of p.leases) {
      lease.reservedNano += worst;
      lease.lastUsedMs = nowMs;
      addRecent(lease.spend, nowMs, worst, windowMs);
      leases.push(lease);
      if (lease.status === 'active') leaseIds.push(lease.leaseId);
      maybeRefill(lease, budgetNano, nowMs);
    }
    held.set(id, {
      id,
      tenantId: p.tenantId,
      appId: p.appId,
      scopes: p.scopes,
      leases,
      inputTokens: request.inputTokens,
      maxOutputTokens: request.maxOutputTokens,
      worstCaseNano: worst,
      expiresAtMs: request.expiresAtMs,
    });
    const useCase = p.scopes[2]?.name;
    const reservation: ReservationRef = { reservationId: id, worstCaseNano: worst, monthStartsOn: p.starts.month, dayStartsOn: p.starts.day, leaseIds, ...(useCase !== undefined ? { useCase } : {}) };
    return { ok: true, reservationId: id, rateLimits: decision.rateLimits, reservation };
  };

  /** Background refill of a shared lease running low (never on the request's time). */
  const maybeRefill = (lease: BudgetLease, budgetNano: number, nowMs: number) => {
    if (exclusive || lease.busy || lease.frozen || lease.status !== 'active' || nowMs < lease.exhaustedUntilMs) return;
    const target = budgetTarget(recentSum(lease.spend, nowMs, windowMs), recentMax(lease.spend, nowMs, windowMs), sizing);
    const plan = planBudget(available(lease), target, sizing);
    if (plan.kind !== 'draw') return;
    counters.backgroundDraws++;
    drawBudget(lease, budgetNano, { want: plan.wantNano, min: 0, maxFraction }).catch(report('refill'));
  };

  // ---- Lease operations (one store transaction each; one at a time per lease) ----

  /** `demandUntilMs`: a waiting request's draw of a shared holder (see {@link LeasedAdmissionOptions.demandMs}). */
  const drawBudget = (lease: BudgetLease, budgetNano: number, ask: LeaseAsk, demandUntilMs?: number): Promise<void> => {
    const op = (async () => {
      const nowMs = clock.now();
      const res = await call(() =>
        store.drawBudget({
          holder: holderId,
          leaseId: lease.leaseId,
          create: lease.status === 'pending',
          key: { scope: lease.scope, period: lease.period, startsOn: lease.startsOn },
          budgetNano,
          ask,
          holdUntilMs: nowMs + holdMs,
          nowMs,
          ...(demandUntilMs === undefined ? {} : { demandUntilMs }),
        }),
      );
      if (!res.lease) {
        markLost(lease);
        return;
      }
      syncBudget(lease, res.lease);
      if (lease.status === 'pending') lease.status = 'active';
      lease.knownUnleasedNano = Math.max(0, res.unleasedNano);
      lease.othersLeasedNano = Math.max(0, res.othersLeasedNano);
      lease.exhaustedUntilMs = res.addedNano < Math.max(1, ask.min) ? nowMs + drawRetryMs : 0;
    })();
    return own(lease, op);
  };

  /** Gives back `nano` of a lease: taken off the local grant before the transaction, so nothing is admitted on it meanwhile. */
  const returnBudget = (lease: BudgetLease, nano: number): Promise<void> => {
    const back = Math.min(Math.floor(nano), available(lease));
    if (back <= 0 || lease.status === 'pending' || lease.status === 'lost') return Promise.resolve();
    lease.grantedNano -= back;
    counters.returns++;
    const op = (async () => {
      const res = await call(() => store.returnBudget({ holder: holderId, leaseId: lease.leaseId, returnNano: back, nowMs: clock.now() }));
      if (!res.lease) markLost(lease);
      else syncBudget(lease, res.lease);
    })();
    return own(lease, op);
  };

  /** The store's grant is what this holder holds (a failed return that did commit, or a draw that did, are caught up here). */
  const syncBudget = (lease: BudgetLease, row: BudgetLeaseRow) => {
    lease.grantedNano = row.grantedNano;
    lease.holdUntilMs = Math.max(lease.holdUntilMs, row.holdUntilMs);
  };

  const drawRate = (s: LocalScope, rate: RateLease, limits: AppLimits, ask: Partial<Record<RateField, LeaseAsk>>): Promise<void> => {
    const op = (async () => {
      const nowMs = clock.now();
      const res = await call(() =>
        store.drawRate({ holder: holderId, leaseId: rate.leaseId, create: rate.status === 'pending', scope: s.scope, limits: rateLimitsOf(limits), ask, holdUntilMs: nowMs + holdMs, nowMs }),
      );
      if (!res.lease) {
        markLost(rate);
        return;
      }
      syncRate(rate, res.lease);
      rate.limits = { ...rate.limits, ...rateLimitsOf(limits) };
      if (rate.status === 'pending') rate.status = 'active';
      for (const f of RATE_FIELDS) {
        const a = ask[f];
        if (!a) continue;
        rate.knownUnleased[f] = Math.max(0, res.unleased[f] ?? 0);
        rate.exhaustedUntilMs[f] = (res.added[f] ?? 0) < Math.max(1, a.min) ? nowMs + drawRetryMs : 0;
      }
    })();
    return own(rate, op);
  };

  /** Lowers a rate lease's shares to `shares` (locally first, then in the store). */
  const shrinkRate = (rate: RateLease, shares: Partial<RateShares>): Promise<void> => {
    if (rate.status !== 'active') return Promise.resolve();
    let changed = false;
    for (const f of RATE_FIELDS) {
      const v = shares[f];
      if (v !== undefined && v < rate.shares[f]) {
        rate.shares[f] = Math.max(0, v);
        changed = true;
      }
    }
    if (!changed) return Promise.resolve();
    counters.returns++;
    const op = (async () => {
      const row = await call(() => store.shrinkRate({ holder: holderId, leaseId: rate.leaseId, shares: { ...rate.shares }, nowMs: clock.now() }));
      if (!row) markLost(rate);
      else syncRate(rate, row);
    })();
    return own(rate, op);
  };

  const syncRate = (rate: RateLease, row: RateLeaseRow) => {
    rate.shares = { ...row.shares };
    rate.holdUntilMs = Math.max(rate.holdUntilMs, row.holdUntilMs);
  };

  /** Makes `op` the lease's one operation in flight (callers that find it busy wait for it). */
  const own = (lease: { busy?: Promise<void> }, op: Promise<void>): Promise<void> => {
    const p = op.finally(() => {
      if (lease.busy === p) lease.busy = undefined;
    });
    lease.busy = p;
    return p;
  };

  // ---- Settle / release / expiry ----

  const finish = (h: Held, outcome: FinishOutcome) => {
    const effect = finishReservation(
      h,
      outcome,
      h.scopes.map((s) => s.state),
      h.leases,
    );
    h.scopes.forEach((s, i) => (s.state = effect.scopes[i]));
    h.leases.forEach((l, i) => {
      l.reservedNano = effect.budgets[i].reservedNano;
      l.settledNano = effect.budgets[i].settledNano;
    });
    if (effect.overspendNano > 0) observer?.onOverspend?.({ tenantId: h.tenantId, appId: h.appId, reservationId: h.id, overspendNano: effect.overspendNano });
  };

  /** Reservations past their expiry without a settlement: counted at their worst case (the applier may still move up to that). */
  const expireLocal = (nowMs: number): number => {
    let n = 0;
    for (const h of held.values()) {
      if (h.expiresAtMs > nowMs) continue;
      held.delete(h.id);
      h.scopes.forEach((s) => (s.state = { ...s.state, inFlight: Math.max(0, s.state.inFlight - 1) }));
      for (const l of h.leases) {
        l.reservedNano = Math.max(0, l.reservedNano - h.worstCaseNano);
        l.settledNano += h.worstCaseNano;
      }
      n++;
    }
    counters.expired += n;
    return n;
  };

  // ---- Maintenance ----

  const activeRateLeases = (): RateLease[] => [...scopes.values()].flatMap((s) => (s.rate && s.rate.status === 'active' ? [s.rate] : []));

  const maintain = async (): Promise<MaintenanceReport> => {
    const out: MaintenanceReport = { expired: 0, lost: 0, changes: 0 };
    let nowMs = clock.now();
    out.expired = expireLocal(nowMs);

    // Heartbeat: liveness, and hold_until of every lease in use moves to now + holdMs.
    const active = [...budgetLeases.values()].filter((l) => l.status === 'active');
    const rates = activeRateLeases();
    const ids = [...active.map((l) => l.leaseId), ...rates.map((r) => r.leaseId)];
    let wanted: ReadonlySet<string> = new Set();
    try {
      counters.heartbeats++;
      const holdUntilMs = nowMs + holdMs;
      const beat = await call(() => store.heartbeat({ holder: holderId, mode, nowMs, ttlMs: holderTtlMs, leaseIds: ids, holdUntilMs }));
      const live = beat.live;
      wanted = beat.wanted;
      for (const l of [...active, ...rates]) {
        if (live.has(l.leaseId)) l.holdUntilMs = Math.max(l.holdUntilMs, holdUntilMs);
        else {
          markLost(l);
          out.lost++;
        }
      }
    } catch (err) {
      report('heartbeat')(err);
    }

    nowMs = clock.now();
    const starts = periodStarts(nowMs);
    const ops: Promise<void>[] = [];
    const run = (what: string, p: Promise<void>) => {
      out.changes++;
      ops.push(p.catch(report(what)));
    };

    for (const lease of [...budgetLeases.values()]) {
      if (lease.busy) continue;
      const limits = limitsOfScope(lease.scope);
      const budgetNano = configuredBudgetNano(limits, lease.period);
      const current = lease.startsOn === starts[lease.period];
      if (lease.status === 'active') {
        const idle = lease.reservedNano === 0 && nowMs - lease.lastUsedMs >= idleReturnMs;
        if (budgetNano === undefined || !current || (!exclusive && idle)) {
          // Not needed any more: give back what is unused and let it lapse at hold_until.
          retireBudget(lease);
          if (available(lease) > 0) run('return', returnBudget(lease, available(lease)));
          continue;
        }
        if (lease.frozen) {
          // A lowered budget: give everything unused back, then lease again under the new budget.
          run('return', unfreeze(lease));
          continue;
        }
        if (!exclusive && wanted.has(lease.leaseId)) {
          // Another holder was refused for want of this row's money: give back all this one does
          // not need for what it has in flight. Its own next request draws again (½ of what is
          // unleased at most), so two busy holders share the rest instead of one sitting on it.
          if (available(lease) > 0) {
            counters.rebalances++;
            run('rebalance', returnBudget(lease, available(lease)));
          }
          continue;
        }
        if (exclusive) {
          if (lease.topUp) {
            lease.topUp = false;
            counters.backgroundDraws++;
            run('top-up', drawBudget(lease, budgetNano, { want: Infinity, min: 0, maxFraction: 1 }));
          }
          continue;
        }
        const target = budgetTarget(recentSum(lease.spend, nowMs, windowMs), recentMax(lease.spend, nowMs, windowMs), sizing);
        const plan = planBudget(available(lease), target, sizing);
        if (plan.kind === 'draw' && nowMs >= lease.exhaustedUntilMs) {
          counters.backgroundDraws++;
          run('refill', drawBudget(lease, budgetNano, { want: plan.wantNano, min: 0, maxFraction }));
        } else if (plan.kind === 'return') run('return', returnBudget(lease, plan.nano));
      } else if (lease.status !== 'pending' && lease.reservedNano === 0 && lease.holdUntilMs + reclaimGraceMs <= nowMs) {
        // Retired or lost and lapsed: the store reclaims (or reclaimed) it; forget it here.
        budgetLeases.delete(lease.leaseId);
      } else if (lease.status === 'pending' && (!current || nowMs - lease.lastUsedMs >= idleReturnMs)) {
        // Never drawn (its requests were refused for other reasons) and no longer needed.
        budgetLeases.delete(lease.leaseId);
        if (activeBudget.get(lease.keyString) === lease) activeBudget.delete(lease.keyString);
      } else if (lease.status === 'retired' && available(lease) > 0) {
        // Settlements under a retired lease free the rest of their worst cases: give it back.
        run('return', returnBudget(lease, available(lease)));
      }
    }

    for (const s of scopes.values()) {
      const rate = s.rate;
      if (!rate || rate.status !== 'active' || rate.busy) continue;
      const limits = limitsOfScope(s.scope);
      const configured = limits ? rateLimitsOf(limits) : {};
      if (!limits || !hasRateLimits(limits) || (!exclusive && s.state.inFlight === 0 && nowMs - s.lastUsedMs >= Math.max(idleReturnMs, MINUTE_MS))) {
        // Idle for a minute or more: its buckets are full again, so the whole share can go back.
        run('return', shrinkRate(rate, noShares()));
        rate.status = 'retired';
        continue;
      }
      const shrink: Partial<RateShares> = {};
      const ask: Partial<Record<RateField, LeaseAsk>> = {};
      for (const f of RATE_FIELDS) {
        const limit = configured[f];
        const share = rate.shares[f];
        if (limit === undefined) {
          if (share > 0) shrink[f] = 0;
          continue;
        }
        const free = f === 'maxConcurrent' ? share - s.state.inFlight : share - bucketLevel(s, f, share, nowMs);
        if (exclusive) {
          if (share > limit) shrink[f] = limit;
          else if (share < limit && (rate.topUp || nowMs >= rate.exhaustedUntilMs[f])) ask[f] = { want: Infinity, min: 0, maxFraction: 1 };
          continue;
        }
        const sizedFor = rate.limits[f] ?? limit;
        if (limit < sizedFor || share > limit) {
          // A lowered limit: every holder shrinks its own share in proportion, so Σ shares fits.
          shrink[f] = Math.min(limit, Math.floor((share * limit) / Math.max(limit, sizedFor)));
          continue;
        }
        const target =
          f === 'maxConcurrent'
            ? slotTarget(recentMax(s.use.maxConcurrent, nowMs, windowMs), limit)
            : rateTarget(recentSum(s.use[f], nowMs, windowMs), recentMax(s.use[f], nowMs, windowMs), limit, sizing);
        const change = planShare(share, target, free);
        if (change < 0) shrink[f] = share + change;
        else if (change > 0 && nowMs >= rate.exhaustedUntilMs[f]) ask[f] = { want: change, min: 0, maxFraction };
      }
      rate.topUp = false;
      rate.limits = configured;
      if (Object.keys(shrink).length > 0) run('shrink', shrinkRate(rate, shrink));
      else if (Object.keys(ask).length > 0) {
        counters.backgroundDraws++;
        run('rebalance', drawRate(s, rate, limits, ask));
      }
    }
    await Promise.all(ops);

    if (nowMs - lastReclaimMs >= reclaimEveryMs) {
      lastReclaimMs = nowMs;
      try {
        out.reclaimed = await reclaim();
      } catch (err) {
        report('reclaim')(err);
      }
    }
    return out;
  };

  const unfreeze = (lease: BudgetLease): Promise<void> => {
    lease.frozen = false;
    lease.topUp = exclusive;
    lease.exhaustedUntilMs = 0;
    return returnBudget(lease, available(lease));
  };

  const retireBudget = (lease: BudgetLease) => {
    lease.status = 'retired';
    if (activeBudget.get(lease.keyString) === lease) activeBudget.delete(lease.keyString);
  };

  /** A bucket's level drained to `nowMs` at the share's rate. */
  const bucketLevel = (s: LocalScope, f: RateField, share: number, nowMs: number): number => {
    const b = BUCKETS.find((x) => x.limit === f);
    return b ? drainedLevel(s.state[b.level], share, s.state.usedAtMs, nowMs) : 0;
  };

  const reclaim = async (): Promise<ReclaimReport> => {
    const r = await call(() => store.reclaimExpired({ nowMs: clock.now(), graceMs: reclaimGraceMs }));
    if (r.leases > 0 || r.holders > 0) observer?.onReclaimed?.(r);
    return r;
  };

  const runMaintenance = (): Promise<MaintenanceReport> => {
    if (maintaining) return maintaining;
    const p = maintain().finally(() => {
      maintaining = undefined;
    });
    maintaining = p;
    return p;
  };

  return {
    holderId,
    mode,

    updateTenants(next) {
      const before = tenants;
      tenants = new Map(next.map((t) => [t.id, t]));
      for (const lease of activeBudget.values()) {
        const old = configuredBudgetNano(limitsFrom(before, lease.scope), lease.period);
        const now = configuredBudgetNano(limitsOfScope(lease.scope), lease.period);
        if (now === old) continue;
        lease.exhaustedUntilMs = 0;
        if (now !== undefined && old !== undefined && now < old) lease.frozen = true;
        else lease.topUp = exclusive;
      }
      for (const s of scopes.values()) {
        if (!s.rate) continue;
        s.rate.exhaustedUntilMs = noShares();
        s.rate.topUp = exclusive;
      }
      if (running) void runMaintenance().catch(report('maintenance'));
    },

    async reserve(request: ReservationRequest): Promise<ReserveResult> {
      checkRequest(request);
      if (stopped) throw new WeirError('shutting_down', 'admission is stopping; retry on another instance', { retryable: true, retryAfterMs: 1_000 });
      const { tenantId } = request.caller;
      for (let round = 0; ; round++) {
        const spec = tenants.get(tenantId);
        // A key of a deleted tenant (or app), or a new one the snapshot has not reached yet: not admitted here.
        const tenant = spec && isSameIncarnation(spec, request.caller) ? spec : undefined;
        if (!tenant) {
          counters.rejected++;
          observer?.onDecision?.({ tenantId, outcome: 'rejected', reason: 'concurrency_limited' });
          if (spec) {
            return {
              ok: false,
              reason: 'concurrency_limited',
              message: `Tenant ${tenantId} (or its app) was deleted and created again, and this instance's configuration does not have the new one yet; retry in a second.`,
              retryAfterMs: 1_000,
            };
          }
          return { ok: false, reason: 'concurrency_limited', message: `Tenant ${tenantId} has no admission policy; ask the platform team to configure it.` };
        }
        const nowMs = clock.now();
        const p = plan(tenant, request.caller, request.useCase, nowMs);
        const decision = decideReservation({ request, scopes: checks(p), nowMs, concurrencyRetryAfterMs });
        if (decision.ok) {
          const ids = uncovered(p, request.expiresAtMs);
          if (ids.length > 0) {
            // The one other round trip: a deadline beyond what the leases are held for.
            // With a minute of headroom, so the next requests of like deadlines need no round trip.
            await extend(ids, Math.max(nowMs + holdMs, request.expiresAtMs + 60_000));
            continue;
          }
          counters.admitted++;
          observer?.onDecision?.({ tenantId, outcome: 'admitted' });
          return commit(p, decision, request, nowMs);
        }
        const { waits, dry } = round < maxDrawRounds ? drawsFor(p, request, nowMs) : { waits: [], dry: [] };
        if (waits.length === 0) {
          if (decision.reason === 'budget_exhausted') releaseBlocked(p, dry, nowMs);
          counters.rejected++;
          observer?.onDecision?.({ tenantId, outcome: 'rejected', reason: decision.reason });
          const held = decision.reason === 'budget_exhausted' ? heldElsewhere(dry, request.worstCaseCostNanoUsd) : undefined;
          if (held) {
            // Not spent: other live holders hold it, and give back what they do not use at their
            // next heartbeat (demand); this holder may draw again after drawRetryMs.
            return { ok: false, reason: decision.reason, message: held, retryAfterMs: heartbeatMs + drawRetryMs + 1_000, rateLimits: decision.rateLimits };
          }
          return {
            ok: false,
            reason: decision.reason,
            message: decision.reason === 'budget_exhausted' ? (exhaustedHere(dry, request.worstCaseCostNanoUsd) ?? decision.message) : decision.message,
            ...(decision.retryAfterMs === undefined ? {} : { retryAfterMs: decision.retryAfterMs }),
            rateLimits: decision.rateLimits,
          };
        }
        await Promise.all(waits);
      }
    },

    async settle(reservationId: string, settlement: Settlement): Promise<void> {
      checkSettlement(settlement);
      const h = held.get(reservationId);
      if (!h) return;
      held.delete(reservationId);
      finish(h, { kind: 'settle', costNano: settlement.costNanoUsd, inputTokens: settlement.usage.inputTokens, outputTokens: settlement.usage.outputTokens });
    },

    async release(reservationId: string): Promise<void> {
      const h = held.get(reservationId);
      if (!h) return;
      held.delete(reservationId);
      finish(h, { kind: 'release' });
    },

    async start() {
      if (running) return;
      const nowMs = clock.now();
      if (exclusive) {
        // This process owns the database (the data directory's lock): every lease in it is a
        // dead predecessor's, whatever its hold_until. Its journal was replayed before start.
        const r = await call(() => store.reclaimHolders({ nowMs }));
        if (r.leases > 0 || r.holders > 0) observer?.onReclaimed?.(r);
      } else if (options.predecessors && options.predecessors.length > 0) {
        const r = await call(() => store.reclaimHolders({ holders: options.predecessors, nowMs }));
        if (r.leases > 0 || r.holders > 0) observer?.onReclaimed?.(r);
      }
      await call(() => store.heartbeat({ holder: holderId, mode, nowMs, ttlMs: holderTtlMs, leaseIds: [], holdUntilMs: nowMs + holdMs }));
      running = true;
      stopped = false;
      cancelTimer = timer.every(heartbeatMs, () => {
        void runMaintenance().catch(report('maintenance'));
      });
    },

    async stop(opts = {}) {
      stopped = true;
      running = false;
      cancelTimer?.();
      cancelTimer = undefined;
      await maintaining?.catch(() => undefined);
      if (opts.returnLeases === false) return;
      const nowMs = clock.now();
      // Wait for lease operations in flight, then give back what is unused.
      const all = [...budgetLeases.values()];
      const rates = [...scopes.values()].flatMap((s) => (s.rate ? [{ s, rate: s.rate }] : []));
      await Promise.all([...all.map((l) => l.busy), ...rates.map((r) => r.rate.busy)].map((p) => p?.catch(() => undefined)));
      const ops: Promise<void>[] = [];
      for (const l of all) if (l.status === 'active' || l.status === 'retired') ops.push(returnBudget(l, available(l)).catch(report('return')));
      for (const { s, rate } of rates) {
        if (rate.status !== 'active') continue;
        // Keep what the buckets used (until they drain) and the slots in use.
        const keep: Partial<RateShares> = { maxConcurrent: s.state.inFlight };
        for (const b of BUCKETS) keep[b.limit] = Math.ceil(bucketLevel(s, b.limit, rate.shares[b.limit], nowMs));
        ops.push(shrinkRate(rate, keep).catch(report('return')));
      }
      await Promise.all(ops);
      // Leases lapse once every reservation made under them has expired and the applier had time to settle it.
      const lastExpiry = new Map<string, number>();
      for (const h of held.values()) {
        for (const l of h.leases) lastExpiry.set(l.leaseId, Math.max(lastExpiry.get(l.leaseId) ?? 0, h.expiresAtMs));
        for (const s of h.scopes) if (s.rate) lastExpiry.set(s.rate.leaseId, Math.max(lastExpiry.get(s.rate.leaseId) ?? 0, h.expiresAtMs));
      }
      const leases = [
        ...all.filter((l) => l.status === 'active' || l.status === 'retired').map((l) => ({ leaseId: l.leaseId, holdUntilMs: Math.max(nowMs, lastExpiry.get(l.leaseId) ?? 0) + stopGraceMs })),
        ...rates
          .filter(({ rate }) => rate.status === 'active' || rate.status === 'retired')
          .map(({ rate }) => ({ leaseId: rate.leaseId, holdUntilMs: Math.max(nowMs + MINUTE_MS, (lastExpiry.get(rate.leaseId) ?? 0) + stopGraceMs) })),
      ];
      for (const l of all) if (l.status === 'active') l.status = 'retired';
      for (const { rate } of rates) if (rate.status === 'active') rate.status = 'retired';
      await call(() => store.retire({ holder: holderId, nowMs, leases })).catch(report('retire'));
    },

    runMaintenance,
    reclaimExpired: reclaim,

    snapshot(): LeasedAdmissionSnapshot {
      const inFlight: Record<string, number> = {};
      for (const s of scopes.values()) inFlight[s.scope] = s.state.inFlight;
      return {
        holderId,
        mode,
        running,
        held: held.size,
        budgetLeases: [...budgetLeases.values()].map((l) => ({
          leaseId: l.leaseId,
          key: { scope: l.scope, period: l.period, startsOn: l.startsOn },
          status: l.status,
          grantedNano: l.grantedNano,
          settledNano: l.settledNano,
          inFlightNano: l.reservedNano,
          availableNano: available(l),
          holdUntilMs: l.holdUntilMs,
        })),
        rateLeases: [...scopes.values()].flatMap((s) =>
          s.rate ? [{ leaseId: s.rate.leaseId, scope: s.scope, status: s.rate.status, shares: { ...s.rate.shares }, holdUntilMs: s.rate.holdUntilMs }] : [],
        ),
        inFlight,
        counters: { ...counters },
      };
    },
  };
}

type AppLimits = AdmissionLimits;

function limitsFrom(tenants: ReadonlyMap<string, TenantSpec>, scope: string): AppLimits | undefined {
  return scopeLimits(tenants, scope);
}

function checkRequest(r: ReservationRequest): void {
  const bad = (what: string) => new WeirError('invalid_request', `admission: ${what}`);
  if (!isCount(r.inputTokens)) throw bad(`inputTokens must be a non-negative integer, got ${r.inputTokens}`);
  if (!isCount(r.maxOutputTokens)) throw bad(`maxOutputTokens must be a non-negative integer, got ${r.maxOutputTokens}`);
  if (!isCount(r.worstCaseCostNanoUsd)) throw bad(`worstCaseCostNanoUsd must be a non-negative safe integer of nano-USD, got ${r.worstCaseCostNanoUsd}`);
  if (!Number.isFinite(r.expiresAtMs)) throw bad(`expiresAtMs must be an epoch time in ms, got ${r.expiresAtMs}`);
  if (!r.generationId) throw bad('generationId is required');
}

function checkSettlement(s: Settlement): void {
  const bad = (what: string) => new WeirError('invalid_request', `admission: ${what}`);
  if (!isCount(s.costNanoUsd)) throw bad(`costNanoUsd must be a non-negative safe integer of nano-USD, got ${s.costNanoUsd}`);
  if (!isCount(s.usage.inputTokens) || !isCount(s.usage.outputTokens)) throw bad('usage token counts must be non-negative integers');
}

function isCount(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}

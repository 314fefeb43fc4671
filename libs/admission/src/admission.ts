/**
 * Admission: reserve before work, settle after (ARCHITECTURE.md §2, issue 4), over any
 * {@link AdmissionStore}. Each reserve is one store transaction that locks the tenant's and the
 * app's rows and decides with {@link decideReservation}; settle and release are one
 * state-guarded transaction each. With the Postgres store, any number of admission instances
 * share one truth: a budget is a hard cap and rate limits do not multiply with replicas
 * (ADR 0001).
 */
import { type AdmissionService, type ReserveResult, type ReservationRequest, type Settlement, type TenantSpec, WeirError, newId, useCasePolicyOf } from '@weir/core';
import {
  type BudgetKey,
  type LockKeys,
  type LockedState,
  type ReservationRecord,
  type ScopeState,
  appScope,
  budgetKeyString,
  lockKeys,
  periodStarts,
  tenantScope,
  useCaseScope,
} from './admission-state';
import type { AdmissionStore, FinishTransition } from './admission-store';
import { type FinishOutcome, type ReserveDecision, type ScopeCheck, budgetsOf, correctBudgets, decideReservation, finishReservation } from './decide';

/** What admission reports to metrics and logs (all optional, synchronous, must not throw). */
export interface AdmissionObserver {
  /** Every reserve: admitted, or rejected with its reason. */
  onDecision?(decision: { tenantId: string; outcome: 'admitted' | 'rejected'; reason?: ReserveResultReason }): void;
  /** A settlement above the reservation's worst case (should not happen: reserve takes the worst case). */
  onOverspend?(event: { tenantId: string; appId: string; reservationId: string; overspendNano: number }): void;
  /** A reconciliation pass finished. */
  onReconciled?(report: ReconcileReport): void;
}

type ReserveResultReason = Extract<ReserveResult, { ok: false }>['reason'];

/** Options of {@link createAdmission}. */
export interface AdmissionOptions {
  /** The configured tenants with their limits and apps' limits (an app not listed has no limits of its own). */
  tenants: readonly TenantSpec[];
  /** Retry hint for `concurrency_limited` (ms). Default 1,000. */
  concurrencyRetryAfterMs?: number;
  /** Reservations handled per reconciliation step. Default 500. */
  reconcileBatchSize?: number;
  /** How far back reconciliation compares settled reservations with the ledger (ms). Default 7 days. */
  correctionWindowMs?: number;
  /**
   * An expired reservation whose ledger row is still `uncertain` (its relay was lost, and the
   * engine's own count has not been read yet) stays held, worst case and all, this much
   * longer (ms) before it is settled from the uncertain row — so the budget is never handed
   * out again on a count that may rise. Default 600,000 (10 min).
   */
  uncertainHoldMs?: number;
  /**
   * Most reserves of one tenant decided in one store transaction (group commit). Reserves that
   * arrive while a tenant's transaction runs wait for it and then go together. Default 128.
   */
  maxReserveBatch?: number;
}

/** Dependencies of {@link createAdmission}. */
export interface AdmissionDeps {
  store: AdmissionStore;
  /** Wall clock, epoch ms (budget periods are UTC calendar dates). Default `Date.now`. */
  clock?: { now(): number };
  observer?: AdmissionObserver;
}

/** What one reconciliation pass did (counts of reservations; money in nano-USD). */
export interface ReconcileReport {
  /** Expired held reservations settled from their ledger row. */
  expiredSettled: number;
  /** Expired held reservations without a ledger row: marked `expired`, hold released. */
  expiredReleased: number;
  /** Finished reservations whose charge was corrected to their ledger row. */
  corrected: number;
  /** Σ (ledger cost − previous charge) over the corrected reservations (nano-USD; may be negative). */
  correctedNano: number;
  /** Reservations another reconciler or the request itself finished first (nothing done). */
  skipped: number;
}

/** Admission over a store, plus reconciliation. */
export interface Admission extends AdmissionService {
  /**
   * Reconciles reservations with the usage ledger (idempotent; safe on several instances at
   * once: every change is a state-guarded update under row locks):
   * 1. every held reservation past its expiry is settled from its ledger row when the ledger
   *    has one (finished by `reconciler`), else marked `expired` and its hold released — but
   *    one whose ledger row is still `uncertain` stays held until `uncertainHoldMs` after its
   *    expiry, waiting for the row to be settled from the engine's count;
   * 2. every reservation finished within `correctionWindowMs` whose charge differs from its
   *    ledger row's cost is corrected to it (an uncertain ledger row may be corrected later).
   * Repeats each step until a batch comes back short.
   */
  reconcileReservations(): Promise<ReconcileReport>;
  /** Reservations held now (every tenant), for the held-reservations gauge. */
  countHeld(): Promise<number>;
  /**
   * Replaces the tenants' limits and budgets (a new configuration snapshot) atomically: the next
   * `reserve` decides by them; reservations already held settle as they were made. A tenant no
   * longer listed is refused from then on.
   */
  updateTenants(tenants: readonly TenantSpec[]): void;
}

const DAY_MS = 86_400_000;

/**
 * Creates admission over `deps.store`.
 *
 * `reserve` rejects (a value): an unknown tenant (`concurrency_limited`, no retry hint), or any
 * limit of the tenant or the app (see {@link decideReservation}). It throws WeirError
 * `invalid_request` when token counts are not non-negative integers, the worst-case cost is
 * not a non-negative safe integer of nano-USD, or `expiresAtMs` is not finite; store faults
 * propagate. `settle` throws `invalid_request` for negative or fractional actuals.
 */
export function createAdmission(options: AdmissionOptions, deps: AdmissionDeps): Admission {
  const { store, observer } = deps;
  const clock = deps.clock ?? { now: () => Date.now() };
  let tenants = new Map(options.tenants.map((t) => [t.id, t]));
  const concurrencyRetryAfterMs = options.concurrencyRetryAfterMs ?? 1_000;
  const batch = options.reconcileBatchSize ?? 500;
  const correctionWindowMs = options.correctionWindowMs ?? 7 * DAY_MS;
  const uncertainHoldMs = options.uncertainHoldMs ?? 600_000;

  const finish = async (reservationId: string, outcome: FinishOutcome, by: 'gateway' | 'reconciler', state: 'settled' | 'released' | 'expired') => {
    const nowMs = clock.now();
    const transition: FinishTransition =
      outcome.kind === 'settle'
        ? { state: 'settled', settledNano: outcome.costNano, inputTokens: outcome.inputTokens, outputTokens: outcome.outputTokens, finishedBy: by, finishedAtMs: nowMs }
        : { state: state === 'settled' ? 'released' : state, finishedBy: by, finishedAtMs: nowMs };
    let overspend = 0;
    const done = await store.finish(reservationId, transition, (r, locked) => {
      const keys = lockKeysOf(r);
      const effect = finishReservation(r, outcome, keys.scopes.map((s) => scopeOf(locked, s)), budgetsOf(locked.budgets, keys.budgets));
      overspend = effect.overspendNano;
      return { scopes: effect.scopes, budgets: effect.budgets };
    });
    if (done && overspend > 0) observer?.onOverspend?.({ tenantId: done.tenantId, appId: done.appId, reservationId, overspendNano: overspend });
    return done;
  };

  // Group commit: a tenant's reserves are decided one transaction at a time (they would wait
  // on its row locks anyway); those that arrive meanwhile go together in the next one, so a
  // burst costs a few transactions instead of one each (ADR 0001, Consequences).
  interface Waiting {
    request: ReservationRequest;
    resolve(decision: ReserveDecision & { id: string }): void;
    reject(err: unknown): void;
  }
  const waiting = new Map<string, Waiting[]>();
  const draining = new Set<string>();
  const maxBatch = Math.max(1, options.maxReserveBatch ?? 128);

  const drain = async (tenantId: string) => {
    draining.add(tenantId);
    try {
      for (;;) {
        const queue = waiting.get(tenantId) ?? [];
        if (queue.length === 0) break;
        const batch = queue.splice(0, maxBatch);
        try {
          const decisions = await reserveBatch(tenantId, batch.map((w) => w.request));
          batch.forEach((w, i) => w.resolve(decisions[i]));
        } catch (err) {
          for (const w of batch) w.reject(err);
        }
      }
    } finally {
      draining.delete(tenantId);
      if ((waiting.get(tenantId) ?? []).length === 0) waiting.delete(tenantId);
      else void drain(tenantId);
    }
  };

  /**
   * Decides `requests` of one tenant in one store transaction, in order, each against the
   * state the previous ones left (exactly as if they had been reserved one after another at
   * the same instant), and inserts the admitted ones' reservations.
   */
  const reserveBatch = async (tenantId: string, requests: readonly ReservationRequest[]): Promise<(ReserveDecision & { id: string })[]> => {
    const tenant = tenants.get(tenantId) as TenantSpec;
    const nowMs = clock.now();
    const starts = periodStarts(nowMs);
    // A use case has a scope only when the tenant's policy defines it.
    const useCaseOf = (r: ReservationRequest) => useCasePolicyOf(tenant, r.useCase);
    const keys = mergeLockKeys(requests.map((r) => lockKeys(tenantId, r.caller.appId, starts.month, starts.day, useCaseOf(r)?.name)));
    return store.reserve(keys, (lockedRows) => {
      // A working copy: each decision sees the holds of the ones before it.
      const locked = { scopes: new Map(lockedRows.scopes), budgets: new Map(lockedRows.budgets) };
      const decisions: (ReserveDecision & { id: string })[] = [];
      const inserts: ReservationRecord[] = [];
      for (const request of requests) {
        const { appId } = request.caller;
        const check = (kind: ScopeCheck['kind'], scope: string, limits: ScopeCheck['limits'], name?: string): ScopeCheck => ({
          kind,
          ...(name !== undefined ? { name } : {}),
          limits,
          state: scopeOf(locked, scope),
          budgets: {
            month: budgetsOf(locked.budgets, [{ scope, period: 'month', startsOn: starts.month }])[0],
            day: budgetsOf(locked.budgets, [{ scope, period: 'day', startsOn: starts.day }])[0],
          },
        });
        const appLimits = tenant.apps.find((a) => a.id === appId)?.limits ?? {};
        const uc = useCaseOf(request);
        const decision = decideReservation({
          request,
          scopes: [
            check('tenant', tenantScope(tenantId), tenant.limits),
            check('app', appScope(tenantId, appId), appLimits),
            ...(uc ? [check('use_case', useCaseScope(tenantId, uc.name), uc.limits, uc.name)] : []),
          ],
          nowMs,
          concurrencyRetryAfterMs,
        });
        const id = newId('rsv');
        decisions.push({ ...decision, id });
        if (!decision.ok) continue;
        // The next request of the batch sees this one's holds.
        for (const sc of decision.scopes) locked.scopes.set(sc.scope, sc);
        for (const b of decision.budgets) locked.budgets.set(budgetKeyString(b), b);
        inserts.push({
          id,
          tenantId,
          appId,
          ...(uc ? { useCase: uc.name } : {}),
          requestId: request.requestId,
          generationId: request.generationId,
          state: 'held',
          inputTokens: request.inputTokens,
          maxOutputTokens: request.maxOutputTokens,
          worstCaseNano: request.worstCaseCostNanoUsd,
          monthStartsOn: starts.month,
          dayStartsOn: starts.day,
          createdAtMs: nowMs,
          expiresAtMs: request.expiresAtMs,
        });
      }
      // A batch that admits nothing holds nothing and writes nothing.
      if (inserts.length === 0) return { result: decisions };
      return { result: decisions, writes: { scopes: [...locked.scopes.values()], budgets: [...locked.budgets.values()] }, inserts };
    });
  };

  // Group commit of settlements and releases too: one transaction at a time, and those that
  // arrive meanwhile are finished together in the next (each against the state the previous
  // ones left), so a busy instance does not pay a transaction per request twice.
  interface Finishing {
    id: string;
    outcome: FinishOutcome;
    resolve(): void;
    reject(err: unknown): void;
  }
  const finishing: Finishing[] = [];
  let finishDraining = false;
  const enqueueFinish = (id: string, outcome: FinishOutcome) =>
    new Promise<void>((resolve, reject) => {
      finishing.push({ id, outcome, resolve, reject });
      if (!finishDraining) void drainFinishes();
    });
  const drainFinishes = async () => {
    finishDraining = true;
    try {
      while (finishing.length > 0) {
        const batch = finishing.splice(0, maxBatch);
        try {
          await finishBatch(batch);
          for (const w of batch) w.resolve();
        } catch (err) {
          for (const w of batch) w.reject(err);
        }
      }
    } finally {
      finishDraining = false;
      if (finishing.length > 0) void drainFinishes();
    }
  };
  /** Settles or releases a batch in one store transaction (the first outcome of an id wins; a repeat is a no-op, as one call after another would be). */
  const finishBatch = async (batch: readonly Finishing[]) => {
    const nowMs = clock.now();
    const outcomes = new Map<string, FinishOutcome>();
    for (const w of batch) if (!outcomes.has(w.id)) outcomes.set(w.id, w.outcome);
    const items = [...outcomes].map(([id, outcome]) => ({
      id,
      transition:
        outcome.kind === 'settle'
          ? ({ state: 'settled', settledNano: outcome.costNano, inputTokens: outcome.inputTokens, outputTokens: outcome.outputTokens, finishedBy: 'gateway', finishedAtMs: nowMs } as const)
          : ({ state: 'released', finishedBy: 'gateway', finishedAtMs: nowMs } as const),
    }));
    const overspends: { r: ReservationRecord; nano: number }[] = [];
    await store.finishMany(items, (held, lockedRows) => {
      const work = { scopes: new Map(lockedRows.scopes), budgets: new Map(lockedRows.budgets) };
      for (const r of held) {
        const keys = lockKeysOf(r);
        const effect = finishReservation(r, outcomes.get(r.id) as FinishOutcome, keys.scopes.map((sc) => scopeOf(work, sc)), budgetsOf(work.budgets, keys.budgets));
        for (const sc of effect.scopes) work.scopes.set(sc.scope, sc);
        for (const b of effect.budgets) work.budgets.set(budgetKeyString(b), b);
        if (effect.overspendNano > 0) overspends.push({ r, nano: effect.overspendNano });
      }
      return { scopes: [...work.scopes.values()], budgets: [...work.budgets.values()] };
    });
    for (const o of overspends) observer?.onOverspend?.({ tenantId: o.r.tenantId, appId: o.r.appId, reservationId: o.r.id, overspendNano: o.nano });
  };

  return {
    updateTenants(next) {
      tenants = new Map(next.map((t) => [t.id, t]));
    },
    async reserve(request: ReservationRequest): Promise<ReserveResult> {
      checkRequest(request);
      const { tenantId } = request.caller;
      if (!tenants.has(tenantId)) {
        observer?.onDecision?.({ tenantId, outcome: 'rejected', reason: 'concurrency_limited' });
        return { ok: false, reason: 'concurrency_limited', message: `Tenant ${tenantId} has no admission policy; ask the platform team to configure it.` };
      }
      const result = await new Promise<ReserveDecision & { id: string }>((resolve, reject) => {
        const queue = waiting.get(tenantId) ?? [];
        queue.push({ request, resolve, reject });
        waiting.set(tenantId, queue);
        if (!draining.has(tenantId)) void drain(tenantId);
      });
      observer?.onDecision?.(result.ok ? { tenantId, outcome: 'admitted' } : { tenantId, outcome: 'rejected', reason: result.reason });
      if (result.ok) return { ok: true, reservationId: result.id, rateLimits: result.rateLimits };
      return {
        ok: false,
        reason: result.reason,
        message: result.message,
        ...(result.retryAfterMs === undefined ? {} : { retryAfterMs: result.retryAfterMs }),
        rateLimits: result.rateLimits,
      };
    },

    async settle(reservationId: string, settlement: Settlement): Promise<void> {
      checkSettlement(settlement);
      await enqueueFinish(reservationId, {
        kind: 'settle',
        costNano: settlement.costNanoUsd,
        inputTokens: settlement.usage.inputTokens,
        outputTokens: settlement.usage.outputTokens,
      });
    },

    async release(reservationId: string): Promise<void> {
      await enqueueFinish(reservationId, { kind: 'release' });
    },

    async reconcileReservations(): Promise<ReconcileReport> {
      const report: ReconcileReport = { expiredSettled: 0, expiredReleased: 0, corrected: 0, correctedNano: 0, skipped: 0 };
      for (;;) {
        const expired = await store.listExpired(clock.now(), batch);
        const facts = await store.ledgerFacts(expired.map((r) => r.generationId));
        let waiting = 0;
        for (const r of expired) {
          const f = facts.get(r.generationId);
          if (f?.uncertain && clock.now() < r.expiresAtMs + uncertainHoldMs) {
            waiting++;
            continue;
          }
          const done = f
            ? await finish(r.id, { kind: 'settle', costNano: f.costNano, inputTokens: f.inputTokens, outputTokens: f.outputTokens }, 'reconciler', 'settled')
            : await finish(r.id, { kind: 'release' }, 'reconciler', 'expired');
          if (!done) report.skipped++;
          else if (f) report.expiredSettled++;
          else report.expiredReleased++;
        }
        // A full batch of which something finished may have more behind it; one of only
        // waiting rows would be listed again unchanged.
        if (expired.length < batch || waiting === expired.length) break;
      }
      const seen = new Set<string>();
      for (;;) {
        const mismatches = (await store.listLedgerMismatches(clock.now() - correctionWindowMs, batch)).filter((m) => !seen.has(m.reservation.id));
        for (const { reservation, ledger } of mismatches) {
          seen.add(reservation.id);
          const charged = reservation.settledNano ?? 0;
          const done = await store.correct(reservation.id, charged, ledger, clock.now(), (r, locked) => ({
            scopes: [],
            budgets: correctBudgets(charged, ledger, budgetsOf(locked.budgets, lockKeysOf(r).budgets)),
          }));
          if (!done) {
            report.skipped++;
            continue;
          }
          report.corrected++;
          report.correctedNano += ledger.costNano - charged;
        }
        if (mismatches.length < batch) break;
      }
      observer?.onReconciled?.(report);
      return report;
    },

    countHeld: () => store.countHeld(),
  };
}

/** The union of several reserves' lock keys, sorted as stores lock them. */
function mergeLockKeys(all: readonly LockKeys[]): LockKeys {
  const scopes = [...new Set(all.flatMap((k) => k.scopes))].sort();
  const budgets = new Map<string, BudgetKey>();
  for (const k of all) for (const b of k.budgets) budgets.set(budgetKeyString(b), b);
  return { scopes, budgets: [...budgets.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, b]) => b) };
}

function lockKeysOf(r: ReservationRecord) {
  return lockKeys(r.tenantId, r.appId, r.monthStartsOn, r.dayStartsOn, r.useCase);
}

function scopeOf(locked: LockedState, scope: string): ScopeState {
  const s = locked.scopes.get(scope);
  if (!s) throw new Error(`scope row ${scope} was not locked`);
  return s;
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

/**
 * Admission whose store faults (a database connection cut or refused: any error that is not
 * a `WeirError`) reach callers as `upstream_unavailable` (retryable, `Retry-After` 1 s, a 503
 * at the edge) instead of `internal` — a failed store transaction changed nothing, so the
 * caller may retry, here or on another admission instance. `onFault` sees the original error
 * (for a log line). Rejections and `WeirError`s pass through unchanged.
 */
export function withStoreFaultsAsUnavailable<T extends AdmissionService>(admission: T, onFault: (err: unknown, call: string) => void = () => undefined): T {
  const guard =
    (call: string) =>
    (err: unknown): never => {
      if (err instanceof WeirError) throw err;
      onFault(err, call);
      throw new WeirError('upstream_unavailable', 'admission could not reach its database; retry shortly', { retryable: true, retryAfterMs: 1_000, cause: err });
    };
  return {
    ...admission,
    reserve: (request) => admission.reserve(request).catch(guard('reserve')),
    settle: (id, settlement) => admission.settle(id, settlement).catch(guard('settle')),
    release: (id) => admission.release(id).catch(guard('release')),
  };
}

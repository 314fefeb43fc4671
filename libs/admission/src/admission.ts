/**
 * Admission: reserve before work, settle after (ARCHITECTURE.md §2, issue 4), over any
 * {@link AdmissionStore}. Each reserve is one store transaction that locks the tenant's and the
 * app's rows and decides with {@link decideReservation}; settle and release are one
 * state-guarded transaction each. With the Postgres store, any number of admission instances
 * share one truth: a budget is a hard cap and rate limits do not multiply with replicas
 * (ADR 0001).
 */
import { type AdmissionService, type ReserveResult, type ReservationRequest, type Settlement, type TenantSpec, WeirError, newId } from '@weir/core';
import { type LockedState, type ReservationRecord, type ScopeState, appScope, lockKeys, periodStarts, tenantScope } from './admission-state';
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
   *    has one (finished by `reconciler`), else marked `expired` and its hold released;
   * 2. every reservation finished within `correctionWindowMs` whose charge differs from its
   *    ledger row's cost is corrected to it (an uncertain ledger row may be corrected later).
   * Repeats each step until a batch comes back short.
   */
  reconcileReservations(): Promise<ReconcileReport>;
  /** Reservations held now (every tenant), for the held-reservations gauge. */
  countHeld(): Promise<number>;
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
  const tenants = new Map(options.tenants.map((t) => [t.id, t]));
  const concurrencyRetryAfterMs = options.concurrencyRetryAfterMs ?? 1_000;
  const batch = options.reconcileBatchSize ?? 500;
  const correctionWindowMs = options.correctionWindowMs ?? 7 * DAY_MS;

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

  return {
    async reserve(request: ReservationRequest): Promise<ReserveResult> {
      checkRequest(request);
      const { tenantId, appId } = request.caller;
      const tenant = tenants.get(tenantId);
      if (!tenant) {
        observer?.onDecision?.({ tenantId, outcome: 'rejected', reason: 'concurrency_limited' });
        return { ok: false, reason: 'concurrency_limited', message: `Tenant ${tenantId} has no admission policy; ask the platform team to configure it.` };
      }
      const appLimits = tenant.apps.find((a) => a.id === appId)?.limits ?? {};
      const nowMs = clock.now();
      const starts = periodStarts(nowMs);
      const keys = lockKeys(tenantId, appId, starts.month, starts.day);
      const id = newId('rsv');
      const result = await store.reserve<ReserveDecision>(keys, (locked) => {
        const check = (kind: 'tenant' | 'app', scope: string, limits: ScopeCheck['limits']): ScopeCheck => ({
          kind,
          limits,
          state: scopeOf(locked, scope),
          budgets: {
            month: budgetsOf(locked.budgets, [{ scope, period: 'month', startsOn: starts.month }])[0],
            day: budgetsOf(locked.budgets, [{ scope, period: 'day', startsOn: starts.day }])[0],
          },
        });
        const decision = decideReservation({
          request,
          scopes: [check('tenant', tenantScope(tenantId), tenant.limits), check('app', appScope(tenantId, appId), appLimits)],
          nowMs,
          concurrencyRetryAfterMs,
        });
        if (!decision.ok) return { result: decision };
        const record: ReservationRecord = {
          id,
          tenantId,
          appId,
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
        };
        return { result: decision, writes: { scopes: decision.scopes, budgets: decision.budgets }, insert: record };
      });
      observer?.onDecision?.(result.ok ? { tenantId, outcome: 'admitted' } : { tenantId, outcome: 'rejected', reason: result.reason });
      if (result.ok) return { ok: true, reservationId: id, rateLimits: result.rateLimits };
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
      await finish(
        reservationId,
        { kind: 'settle', costNano: settlement.costNanoUsd, inputTokens: settlement.usage.inputTokens, outputTokens: settlement.usage.outputTokens },
        'gateway',
        'settled',
      );
    },

    async release(reservationId: string): Promise<void> {
      await finish(reservationId, { kind: 'release' }, 'gateway', 'released');
    },

    async reconcileReservations(): Promise<ReconcileReport> {
      const report: ReconcileReport = { expiredSettled: 0, expiredReleased: 0, corrected: 0, correctedNano: 0, skipped: 0 };
      for (;;) {
        const expired = await store.listExpired(clock.now(), batch);
        const facts = await store.ledgerFacts(expired.map((r) => r.generationId));
        for (const r of expired) {
          const f = facts.get(r.generationId);
          const done = f
            ? await finish(r.id, { kind: 'settle', costNano: f.costNano, inputTokens: f.inputTokens, outputTokens: f.outputTokens }, 'reconciler', 'settled')
            : await finish(r.id, { kind: 'release' }, 'reconciler', 'expired');
          if (!done) report.skipped++;
          else if (f) report.expiredSettled++;
          else report.expiredReleased++;
        }
        if (expired.length < batch) break;
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

function lockKeysOf(r: ReservationRecord) {
  return lockKeys(r.tenantId, r.appId, r.monthStartsOn, r.dayStartsOn);
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

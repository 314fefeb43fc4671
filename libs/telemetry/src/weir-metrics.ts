import type { Attributes, Meter } from '@opentelemetry/api';
import type { UsageStatus, WeirErrorCode } from '@weir/core';
import type { LocalMetrics } from './local-metrics';
import {
  ATTRIBUTE_NAMES as A,
  CIRCUIT_BREAKER_STATE_VALUES,
  DURATION_BUCKETS_S,
  METRIC_NAMES as M,
  QUEUE_BUCKETS_S,
  TOKEN_BUCKETS,
  TPOT_BUCKETS_S,
  TTFT_BUCKETS_S,
} from './metric-names';

/** `gen_ai.operation.name`: `chat` (/v1/chat/completions), `text_completion` (/v1/completions), `generation` (/v1/generations), `embeddings` (/v1/embeddings). */
export type GenAiOperation = 'chat' | 'text_completion' | 'generation' | 'embeddings';

/** How a request ended: the ledger's `UsageStatus`, or `rejected` before it reached an engine. */
export type RequestStatus = UsageStatus | 'rejected';

/** Why admission or the scheduler turned a request away (a closed set of `WeirErrorCode`s). */
export type RejectionReason = Extract<
  WeirErrorCode,
  'rate_limited' | 'concurrency_limited' | 'budget_exhausted' | 'queue_full' | 'deadline_unmeetable' | 'shutting_down'
>;

/**
 * One finished request, for {@link WeirMetrics.recordRequest}. Times are seconds, measured from
 * the same start (the request's arrival); token counts are the billable ones. Every string
 * must come from a bounded set (config ids, enums, error codes): never request ids or text.
 */
export interface RequestMetrics {
  /** Tenant id (from configuration). */
  tenant: string;
  operation: GenAiOperation;
  /** The alias the client asked for (a configured alias name). */
  requestModel: string;
  /** The revision that answered; absent when none was pinned (label value `none`). */
  responseModel?: string;
  /** Engine kind (`llamacpp`, `openai-compatible`); absent when no engine was involved. */
  provider?: string;
  /** The scheduler pool of the replica that served (label `pool` on duration, TTFT and TPOT); absent when none did (`none`). */
  pool?: string;
  status: RequestStatus;
  /** Low-cardinality error class (a Weir error code or provider error code); see `recordRequest`. */
  errorType?: string;
  /** End-to-end duration (s). */
  durationS: number;
  /** Time to first token (s), when a token arrived. */
  ttftS?: number;
  /** Time per output token after the first (s); computed from the other fields when absent. */
  tpotS?: number;
  inputTokens: number;
  outputTokens: number;
}

/** Labels of the in-flight gauge. */
export interface InFlightAttributes {
  tenant: string;
  /** The pinned revision; absent before routing (label value `none`). */
  revision?: string;
}

/**
 * Weir's metrics façade: typed calls that emit the GenAI semantic-convention instruments and
 * Weir's own (see `metric-names.ts` for names, units and buckets). All methods are cheap,
 * synchronous and never throw; values that are not finite numbers ≥ 0 are skipped, and label
 * values that are not short identifiers become `_OTHER`.
 */
export interface WeirMetrics {
  /**
   * Records a finished request:
   * - `weir.requests` +1 by `tenant`, `revision` (= responseModel or `none`), `status` — always;
   * - unless `status` is `rejected`: `gen_ai.server.request.duration`, and when given
   *   `gen_ai.server.time_to_first_token` and `gen_ai.server.time_per_output_token` (computed as
   *   (durationS − ttftS) / (outputTokens − 1) per semconv when `tpotS` is absent and
   *   outputTokens > 1), `gen_ai.client.token.usage` once per token type, and `weir.tokens`.
   * GenAI attributes: `gen_ai.operation.name`, `gen_ai.provider.name` (default `weir`),
   * `gen_ai.request.model`, `gen_ai.response.model`, and `error.type` when the request did not
   * succeed: `errorType`, else `_OTHER` for `failed`, or the status itself for `cancelled` and
   * `deadline`.
   * A rejected request is recorded twice: `recordRejection` (the reason) and
   * `recordRequest({status: 'rejected'})` (so `weir.requests` counts every request).
   */
  recordRequest(request: RequestMetrics): void;
  /** `weir.admission.rejections` +1 by `tenant` and `reason`; rejections are not errors. */
  recordRejection(rejection: { tenant: string; reason: RejectionReason }): void;
  /** `weir.queue.duration` (s) by `tenant` and `revision`, once per request that left the queue. */
  recordQueueTime(sample: { tenant: string; revision?: string; queueS: number }): void;
  /** Adds `delta` (±1) to `weir.inflight.requests`. Prefer {@link WeirMetrics.trackInFlight}. */
  addInFlight(attributes: InFlightAttributes, delta: number): void;
  /** Adds 1 to `weir.inflight.requests` and returns a release function that subtracts it once (idempotent). */
  trackInFlight(attributes: InFlightAttributes): () => void;
  /** `weir.scheduler.expired_leases` +1 by `replica`: a lease whose holder vanished was reclaimed. */
  recordExpiredLease(attributes: { replica: string }): void;
  /** `weir.scheduler.rejections` +1 by `pool`, `tenant`, `priority` and `reason`: the scheduler granted no lease. */
  recordSchedulerRejection(rejection: { pool: string; tenant: string; priority: string; reason: string }): void;
  /** `weir.scheduler.queue.duration` (s) by `pool`, `tenant`, `priority` and `outcome`: a request left the scheduler's queue. */
  recordSchedulerQueueTime(sample: { pool: string; tenant: string; priority: string; outcome: string; queueS: number }): void;
  /**
   * `weir.tenant.burn_rate_ratio` (gauge) by `tenant`: the last hour's spend ÷ the trailing
   * hourly baseline. +Infinity is kept (exported as `+Inf`: spend with no baseline); NaN and
   * negative values are skipped.
   */
  recordBurnRate(sample: { tenant: string; ratio: number }): void;
  /** `weir.burn_rate_alerts` +1 by `tenant`: a burn-rate alert was published. */
  recordBurnRateAlert(alert: { tenant: string }): void;
  /** `weir.admission.decisions` +1 by `outcome` and `reason` (`none` when admitted): every reserve, on the admission side. */
  recordAdmissionDecision(decision: { outcome: 'admitted' | 'rejected'; reason?: string }): void;
  /** `weir.admission.reservations_held` (gauge): reservations held now. */
  recordReservationsHeld(count: number): void;
  /** `weir.admission.reconciled` + the counts of one reconciliation pass, by `action`. */
  recordReconciliation(report: { expiredSettled: number; expiredReleased: number; corrected: number }): void;
  /** `weir.admission.overspends` +1 by `tenant`: a settlement above its worst case. */
  recordAdmissionOverspend(event: { tenant: string }): void;
  /**
   * `weir.circuit_breaker.transitions` +1 by `key`, `scope`, `from` and `to`: a circuit breaker
   * changed state (`@weir/routing`'s `breakerTransitionRecorder` calls it). `scope` defaults to
   * {@link circuitBreakerScopeOf} the key.
   */
  recordCircuitBreakerTransition(transition: { key: string; scope?: CircuitBreakerScope; from: CircuitBreakerStateName; to: CircuitBreakerStateName }): void;
  /**
   * `weir.redactions` + `count` by `type` (a recognizer id or a configured custom pattern name:
   * a bounded set) and `surface` (`content_log`, `upstream`): spans redacted. Never content.
   */
  recordRedactions(sample: { type: string; surface: string; count: number }): void;
  /** `weir.redaction.failures` +1 by `reason` (`error`, `timeout`) and `surface`: a redaction failed closed. */
  recordRedactionFailure(failure: { reason: string; surface: string }): void;
  /**
   * One response-cache outcome (docs/caching.md): `weir.cache.lookups` +1 by `tenant`,
   * `revision`, `tier` (`none` unless a hit) and `result`; on a hit also `weir.cache.saved_usd`
   * += `savedUsd` and `weir.cache.saved_seconds` += `savedS` (each when given and ≥ 0).
   */
  recordCacheLookup(lookup: { tenant: string; revision: string; tier?: 'exact' | 'semantic'; result: 'hit' | 'miss' | 'bypass'; savedUsd?: number; savedS?: number }): void;
}

/** A circuit breaker's state, as `@weir/routing` names it (the keys of `CIRCUIT_BREAKER_STATE_VALUES`). */
export type CircuitBreakerStateName = keyof typeof CIRCUIT_BREAKER_STATE_VALUES;

/** What a circuit breaker guards, as `@weir/routing` names it: one revision, or one provider. */
export type CircuitBreakerScope = 'revision' | 'provider';

/** A breaker key's scope when none is given: `provider` for `provider:<name>` keys, else `revision`. */
export function circuitBreakerScopeOf(key: string): CircuitBreakerScope {
  return key.startsWith('provider:') ? 'provider' : 'revision';
}

const LABEL_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9._:@/-]{0,127}$/;
/** semconv's fallback value for an unknown `error.type`, used here for any unacceptable label. */
const OTHER = '_OTHER';
const NONE = 'none';

/** Keeps label values bounded and text-free: anything that is not a short identifier becomes `_OTHER`. */
export function label(value: string | undefined, absent: string): string {
  if (value === undefined || value === '') return absent;
  return LABEL_PATTERN.test(value) ? value : OTHER;
}

function usable(value: number | undefined): value is number {
  return value !== undefined && Number.isFinite(value) && value >= 0;
}

/** A histogram as the façade records it: `key` names the series (its label values in a fixed order). */
interface Histogram {
  record(value: number, attributes: Attributes, key: string): void;
}
/** A monotonic counter as the façade records it (see {@link Histogram}). */
interface Counter {
  add(value: number, attributes: Attributes, key: string): void;
}

/** Joins label values into a series key (labels are bounded identifiers: no U+0001 in them). */
const key = (...values: string[]) => values.join('\u0001');

/**
 * Creates the {@link WeirMetrics} instruments on `meter` (once per process). Pass
 * `createNoopMeter()` from `@opentelemetry/api` where metrics are not wanted. With `local`
 * (`createTelemetry` passes one, registered with its exporter), the series recorded on every
 * request — the GenAI histograms, requests, tokens, rejections, queue times and admission
 * decisions — are aggregated there instead of by the SDK's instruments: the same exported
 * series at a fraction of the CPU (see `local-metrics.ts`).
 */
export function createWeirMetrics(meter: Meter, local?: LocalMetrics): WeirMetrics {
  const histogramOf = (name: string, options: { unit: string; description: string; advice: { explicitBucketBoundaries: number[] } }): Histogram => {
    if (local) return local.histogram({ name, unit: options.unit, description: options.description }, options.advice.explicitBucketBoundaries);
    const h = meter.createHistogram(name, options);
    return { record: (value, attributes) => h.record(value, attributes) };
  };
  const counterOf = (name: string, options: { unit: string; description: string }): Counter => {
    if (local) return local.counter({ name, unit: options.unit, description: options.description });
    const c = meter.createCounter(name, options);
    return { add: (value, attributes) => c.add(value, attributes) };
  };
  const duration = histogramOf(M.serverRequestDuration, {
    unit: 's',
    description: 'Generative AI server request duration, such as time-to-last byte or last output token',
    advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_S] },
  });
  const ttft = histogramOf(M.serverTimeToFirstToken, {
    unit: 's',
    description: 'Time to generate first token for successful responses',
    advice: { explicitBucketBoundaries: [...TTFT_BUCKETS_S] },
  });
  const tpot = histogramOf(M.serverTimePerOutputToken, {
    unit: 's',
    description: 'Time per output token generated after the first token for successful responses',
    advice: { explicitBucketBoundaries: [...TPOT_BUCKETS_S] },
  });
  const tokenUsage = histogramOf(M.tokenUsage, {
    unit: '{token}',
    description: 'Number of input and output tokens used',
    advice: { explicitBucketBoundaries: [...TOKEN_BUCKETS] },
  });
  const requests = counterOf(M.requests, { unit: '{request}', description: 'Finished requests by tenant, revision and status' });
  const rejections = counterOf(M.admissionRejections, {
    unit: '{request}',
    description: 'Requests turned away by admission or scheduling, by reason (not errors)',
  });
  const tokens = counterOf(M.tokens, { unit: '{token}', description: 'Billable tokens by tenant, revision and direction' });
  const expiredLeases = meter.createCounter(M.expiredLeases, {
    unit: '{lease}',
    description: 'Scheduler leases reclaimed after their holder vanished',
  });
  const schedulerRejections = counterOf(M.schedulerRejections, {
    unit: '{request}',
    description: 'Requests the scheduler did not grant, by pool, tenant, priority and reason',
  });
  const schedulerQueue = histogramOf(M.schedulerQueueDuration, {
    unit: 's',
    description: "Time requests spent in the scheduler's queue, by pool, tenant, priority and outcome",
    advice: { explicitBucketBoundaries: [...QUEUE_BUCKETS_S] },
  });
  const queue = histogramOf(M.queueDuration, {
    unit: 's',
    description: 'Time requests waited in the scheduler queue',
    advice: { explicitBucketBoundaries: [...QUEUE_BUCKETS_S] },
  });
  const inflight = meter.createUpDownCounter(M.inflightRequests, { unit: '{request}', description: 'Requests in flight' });
  const burnRate = meter.createGauge(M.tenantBurnRateRatio, { unit: '1', description: "A tenant's spend in the last hour divided by its trailing hourly baseline" });
  const burnRateAlerts = meter.createCounter(M.burnRateAlerts, { unit: '{alert}', description: 'Burn-rate alerts published, by tenant' });
  const admissionDecisions = counterOf(M.admissionDecisions, { unit: '{request}', description: 'Admission decisions by outcome and reason' });
  const reservationsHeld = meter.createGauge(M.admissionReservationsHeld, { unit: '{reservation}', description: 'Reservations held now' });
  const reconciled = meter.createCounter(M.admissionReconciled, { unit: '{reservation}', description: 'Reservations reconciled with the ledger, by action' });
  const overspends = meter.createCounter(M.admissionOverspends, { unit: '{reservation}', description: 'Settlements above the reservation worst case' });
  const breakerTransitions = meter.createCounter(M.circuitBreakerTransitions, { unit: '{transition}', description: 'Circuit-breaker state changes, by key, from and to' });
  const redactions = meter.createCounter(M.redactions, { unit: '{span}', description: 'PII and secret spans redacted, by type and surface' });
  const redactionFailures = meter.createCounter(M.redactionFailures, { unit: '{redaction}', description: 'Redactions that failed closed (nothing logged or sent), by reason and surface' });
  const cacheLookups = counterOf(M.cacheLookups, { unit: '{request}', description: 'Response-cache lookups by tenant, revision, tier and result' });
  const cacheSavedUsd = counterOf(M.cacheSavedUsd, { unit: 'USD', description: 'What response-cache hits saved: the price of the cached usage minus what was billed' });
  const cacheSavedSeconds = counterOf(M.cacheSavedSeconds, { unit: 's', description: "Latency response-cache hits saved: the cached answer's original duration minus the hit's" });

  const addInFlight = (attributes: InFlightAttributes, delta: number): void => {
    if (!Number.isFinite(delta)) return;
    inflight.add(delta, { [A.tenant]: label(attributes.tenant, NONE), [A.revision]: label(attributes.revision, NONE) });
  };

  return {
    recordCacheLookup(c) {
      const tenant = label(c.tenant, NONE);
      const revision = label(c.revision, NONE);
      const tier = c.tier ?? NONE;
      cacheLookups.add(1, { [A.tenant]: tenant, [A.revision]: revision, [A.cacheTier]: tier, [A.cacheResult]: c.result }, key(tenant, revision, tier, c.result));
      if (c.result !== 'hit') return;
      const attrs = { [A.tenant]: tenant, [A.revision]: revision, [A.cacheTier]: tier };
      const series = key(tenant, revision, tier);
      if (usable(c.savedUsd)) cacheSavedUsd.add(c.savedUsd, attrs, series);
      if (usable(c.savedS)) cacheSavedSeconds.add(c.savedS, attrs, series);
    },
    recordRequest(r) {
      const tenant = label(r.tenant, NONE);
      const revision = label(r.responseModel, NONE);
      requests.add(1, { [A.tenant]: tenant, [A.revision]: revision, [A.status]: r.status }, key(tenant, revision, r.status));
      if (r.status === 'rejected') return;

      const attrs: Attributes = {
        [A.operationName]: r.operation,
        [A.providerName]: label(r.provider, 'weir'),
        [A.requestModel]: label(r.requestModel, NONE),
        [A.responseModel]: revision,
        // Weir's own dimensions, so latency targets can be read per tenant and pool (issue 5).
        [A.tenant]: tenant,
        [A.pool]: label(r.pool, NONE),
      };
      const errorType = errorTypeOf(r);
      if (errorType !== undefined) attrs[A.errorType] = errorType;
      const series = key(r.operation, attrs[A.providerName] as string, attrs[A.requestModel] as string, revision, tenant, attrs[A.pool] as string, errorType ?? '');

      if (usable(r.durationS)) duration.record(r.durationS, attrs, series);
      if (usable(r.ttftS)) ttft.record(r.ttftS, attrs, series);
      const perToken = r.tpotS ?? (usable(r.ttftS) && usable(r.durationS) && r.outputTokens > 1 ? (r.durationS - r.ttftS) / (r.outputTokens - 1) : undefined);
      if (usable(perToken)) tpot.record(perToken, attrs, series);

      if (usable(r.inputTokens)) {
        tokenUsage.record(r.inputTokens, { ...attrs, [A.tokenType]: 'input' }, `${series}\u0001input`);
        if (r.inputTokens > 0) tokens.add(r.inputTokens, { [A.tenant]: tenant, [A.revision]: revision, [A.direction]: 'input' }, key(tenant, revision, 'input'));
      }
      if (usable(r.outputTokens)) {
        tokenUsage.record(r.outputTokens, { ...attrs, [A.tokenType]: 'output' }, `${series}\u0001output`);
        if (r.outputTokens > 0) tokens.add(r.outputTokens, { [A.tenant]: tenant, [A.revision]: revision, [A.direction]: 'output' }, key(tenant, revision, 'output'));
      }
    },
    recordRejection({ tenant, reason }) {
      const t = label(tenant, NONE);
      rejections.add(1, { [A.tenant]: t, [A.reason]: reason }, key(t, reason));
    },
    recordQueueTime({ tenant, revision, queueS }) {
      if (!usable(queueS)) return;
      const t = label(tenant, NONE);
      const rev = label(revision, NONE);
      queue.record(queueS, { [A.tenant]: t, [A.revision]: rev }, key(t, rev));
    },
    addInFlight,
    trackInFlight(attributes) {
      addInFlight(attributes, 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        addInFlight(attributes, -1);
      };
    },
    recordSchedulerRejection({ pool, tenant, priority, reason }) {
      const labels = [label(pool, NONE), label(tenant, NONE), label(priority, NONE), label(reason, NONE)] as const;
      schedulerRejections.add(1, { [A.pool]: labels[0], [A.tenant]: labels[1], [A.priority]: labels[2], [A.reason]: labels[3] }, key(...labels));
    },
    recordSchedulerQueueTime({ pool, tenant, priority, outcome, queueS }) {
      if (!usable(queueS)) return;
      const labels = [label(pool, NONE), label(tenant, NONE), label(priority, NONE), label(outcome, NONE)] as const;
      schedulerQueue.record(queueS, { [A.pool]: labels[0], [A.tenant]: labels[1], [A.priority]: labels[2], [A.outcome]: labels[3] }, key(...labels));
    },
    recordExpiredLease({ replica }) {
      expiredLeases.add(1, { replica: label(replica, NONE) });
    },
    recordBurnRate({ tenant, ratio }) {
      if (typeof ratio === 'number' && ratio >= 0) burnRate.record(ratio, { [A.tenant]: label(tenant, NONE) });
    },
    recordBurnRateAlert({ tenant }) {
      burnRateAlerts.add(1, { [A.tenant]: label(tenant, NONE) });
    },
    recordAdmissionDecision({ outcome, reason }) {
      const why = label(reason, NONE);
      admissionDecisions.add(1, { outcome, [A.reason]: why }, key(outcome, why));
    },
    recordReservationsHeld(count) {
      if (usable(count)) reservationsHeld.record(count);
    },
    recordReconciliation(report) {
      for (const [action, n] of [
        ['expired_settled', report.expiredSettled],
        ['expired_released', report.expiredReleased],
        ['corrected', report.corrected],
      ] as const) {
        if (usable(n) && n > 0) reconciled.add(n, { action });
      }
    },
    recordAdmissionOverspend({ tenant }) {
      overspends.add(1, { [A.tenant]: label(tenant, NONE) });
    },
    recordCircuitBreakerTransition({ key, scope, from, to }) {
      if (!Object.hasOwn(CIRCUIT_BREAKER_STATE_VALUES, from) || !Object.hasOwn(CIRCUIT_BREAKER_STATE_VALUES, to)) return;
      breakerTransitions.add(1, { [A.breakerKey]: label(key, NONE), [A.breakerScope]: scope === 'provider' || scope === 'revision' ? scope : circuitBreakerScopeOf(key), [A.from]: from, [A.to]: to });
    },
    recordRedactions({ type, surface, count }) {
      if (!Number.isFinite(count) || count <= 0) return;
      redactions.add(count, { [A.redactionType]: label(type, OTHER), [A.surface]: label(surface, OTHER) });
    },
    recordRedactionFailure({ reason, surface }) {
      redactionFailures.add(1, { [A.reason]: label(reason, OTHER), [A.surface]: label(surface, OTHER) });
    },
  };
}

function errorTypeOf(r: RequestMetrics): string | undefined {
  switch (r.status) {
    case 'completed':
    case 'filtered':
    case 'rejected':
      return undefined;
    case 'failed':
      return label(r.errorType, OTHER);
    case 'cancelled':
    case 'deadline':
      return label(r.errorType, r.status);
    default: {
      const unreachable: never = r.status;
      return unreachable;
    }
  }
}

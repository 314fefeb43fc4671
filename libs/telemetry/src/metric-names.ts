/**
 * Every metric name, attribute key and bucket boundary Weir emits, in one place.
 *
 * GenAI names are copied from OpenTelemetry semantic conventions v1.41.0
 * (`docs/gen-ai/gen-ai-metrics.md`; status Development), as the
 * `@opentelemetry/semantic-conventions` README advises instead of importing `/incubating`.
 * Weir's own metrics use the `weir.` prefix. Units are base units (seconds, tokens).
 *
 * The pinned `@opentelemetry/exporter-prometheus` 0.223.0 maps names by replacing `.` with `_`,
 * appends `_total` to monotonic counters and does NOT append a unit suffix (see
 * CONVENTIONS.md §6); {@link PROMETHEUS_SERIES} lists the names as they are actually scraped,
 * for dashboards, alerts and HPA queries.
 */

/** OpenTelemetry metric names. */
export const METRIC_NAMES = {
  /** Histogram, s: end-to-end server-side request duration. semconv `gen_ai.server.request.duration`. */
  serverRequestDuration: 'gen_ai.server.request.duration',
  /** Histogram, s: time to the first output token. semconv `gen_ai.server.time_to_first_token`. */
  serverTimeToFirstToken: 'gen_ai.server.time_to_first_token',
  /** Histogram, s: time per output token after the first. semconv `gen_ai.server.time_per_output_token`. */
  serverTimePerOutputToken: 'gen_ai.server.time_per_output_token',
  /** Histogram, {token}: billable tokens per request, by `gen_ai.token.type`. semconv `gen_ai.client.token.usage`. */
  tokenUsage: 'gen_ai.client.token.usage',
  /** Counter, {request}: finished requests by tenant, revision and status (rejections included). */
  requests: 'weir.requests',
  /** Counter, {request}: admission/scheduling rejections by tenant and reason, apart from errors. */
  admissionRejections: 'weir.admission.rejections',
  /** Counter, {token}: tokens by tenant, revision and direction (input/output). */
  tokens: 'weir.tokens',
  /** Histogram, s: time a request waited in the scheduler's queue. */
  queueDuration: 'weir.queue.duration',
  /** Up-down counter, {request}: requests in flight, by tenant and revision. */
  inflightRequests: 'weir.inflight.requests',
  /** Observable counter, {token}: output tokens an engine replica produced, by its own count (reconciliation source). */
  engineOutputTokens: 'weir.engine.output_tokens',
  /** Observable counter, {token}: prompt tokens an engine replica evaluated, by its own count. */
  engineInputTokens: 'weir.engine.input_tokens',
  /** Observable gauge, {sequence}: sequences an engine replica is decoding now. */
  engineActiveSequences: 'weir.engine.active_sequences',
  /** Observable gauge, {request}: requests waiting in the scheduler's queue, by revision. */
  queueDepth: 'weir.queue.depth',
  /** Counter, {lease}: scheduler leases reclaimed after their holder (a gateway) vanished. */
  expiredLeases: 'weir.scheduler.expired_leases',
  /** Observable gauge, 1 or 0: the replica answers health probes and is in rotation. */
  replicaUp: 'weir.replica.up',
  /** Observable gauge, {sequence}: slots of the replica held by leases now. */
  replicaSlotsInUse: 'weir.replica.slots_in_use',
  /** Observable gauge, {sequence}: slots the replica has. */
  replicaSlots: 'weir.replica.slots',
  /** Observable gauge, {sequence}: sequences the scheduler may give the replica now (its slots, or fewer while a TPOT target holds it back). */
  replicaSlotLimit: 'weir.replica.slot_limit',
  /** Observable gauge, {token}: KV-cache tokens (input + output limit) held by the replica's leases now. */
  replicaKvTokensInUse: 'weir.replica.kv_tokens_in_use',
  /** Observable gauge, {token}: KV-cache tokens the replica has (absent when unbounded). */
  replicaKvTokens: 'weir.replica.kv_tokens',
  /** Observable gauge, {token}/s: the scheduler's measured per-sequence decode throughput of the replica (EWMA; the prior before any measurement). */
  replicaDecodeRate: 'weir.replica.decode_rate',
  /** Observable gauge, {token}/s: the measured per-sequence prefill throughput (EWMA; the prior before any measurement). */
  replicaPrefillRate: 'weir.replica.prefill_rate',
  /** Counter, {request}: requests the scheduler did not grant, by `pool`, `tenant`, `priority` and `reason` (queue_full, deadline_unmeetable, shed, deadline, cancelled, no_replica). */
  schedulerRejections: 'weir.scheduler.rejections',
  /** Histogram, s: time a request spent in the scheduler's queue, by `pool`, `tenant`, `priority` and `outcome` (granted, deadline, cancelled, shed). */
  schedulerQueueDuration: 'weir.scheduler.queue.duration',
  /** Observable gauge, {request}: requests queued, by `pool`, `revision`, `tenant` and `priority`. */
  schedulerQueueRequests: 'weir.scheduler.queue.requests',
  /** Observable gauge, {token}: context tokens (input + output limit) queued, by `pool`, `revision`, `tenant` and `priority`. */
  schedulerQueueTokens: 'weir.scheduler.queue.tokens',
  /** Observable gauge, 1: a pool queue's remaining capacity ÷ its configured capacity (replica-equivalents), by `pool` and `revision`. */
  poolCapacityRatio: 'weir.pool.capacity_ratio',
  /** Observable gauge, 1 or 0: the pool queue is in brownout (lost capacity: batch shed, bounds shrunk). */
  poolBrownout: 'weir.pool.brownout',
  /** Observable gauge, {request}: the pool queue's current length bound (shrinks with capacity). */
  poolQueueBound: 'weir.pool.queue_bound',
  /**
   * Gauge, 1: a tenant's spend in the last hour ÷ its trailing hourly baseline, by `tenant`, set
   * by each burn-rate check (+Inf with spend and no baseline; 0 with no spend).
   */
  tenantBurnRateRatio: 'weir.tenant.burn_rate_ratio',
  /** Counter, {alert}: burn-rate alerts published, by `tenant`. */
  burnRateAlerts: 'weir.burn_rate_alerts',
  /** Counter, {request}: admission decisions by `outcome` (admitted/rejected) and `reason` (`none` when admitted). */
  admissionDecisions: 'weir.admission.decisions',
  /** Gauge, {reservation}: reservations held now (every tenant), set by each reconciliation pass. */
  admissionReservationsHeld: 'weir.admission.reservations_held',
  /** Counter, {reservation}: reconciliation actions by `action` (expired_settled, expired_released, corrected). */
  admissionReconciled: 'weir.admission.reconciled',
  /** Counter, {reservation}: settlements above their reservation's worst case, by `tenant` (should stay 0). */
  admissionOverspends: 'weir.admission.overspends',
  /**
   * Observable gauge, 1: a circuit breaker's state by `key` (a revision id, or `provider:<name>`)
   * and `scope` (`revision` or `provider`), encoded as {@link CIRCUIT_BREAKER_STATE_VALUES}: 0
   * closed, 1 half-open, 2 open, so a higher value is worse and `max by (key)` across gateways
   * shows the worst view.
   */
  circuitBreakerState: 'weir.circuit_breaker.state',
  /** Counter, {transition}: circuit-breaker state changes by `key`, `scope`, `from` and `to` (`closed`, `half_open`, `open`). */
  circuitBreakerTransitions: 'weir.circuit_breaker.transitions',
  /** Counter, {span}: PII and secret spans redacted, by `type` (a recognizer id or a configured custom pattern name) and `surface` (`content_log`, `upstream`). Never content. */
  redactions: 'weir.redactions',
  /** Counter, {redaction}: redactions that failed or ran over their budget (nothing was logged or sent), by `reason` (`error`, `timeout`) and `surface`. */
  redactionFailures: 'weir.redaction.failures',
  /**
   * Observable gauge, {replica}: the capacity controller's latest desired replicas, by `pool`
   * (the control plane; what a HorizontalPodAutoscaler reads, docs/capacity.md).
   */
  poolDesiredReplicas: 'weir.pool.desired_replicas',
  /** Observable gauge, 1: the latest configuration snapshot version the control plane published (absent before the first). */
  configPublishedVersion: 'weir.config.published_version',
  /** Observable gauge, 1: the latest configuration snapshot version the control plane stored (published or not: above the published one while publishing fails). */
  configStoredVersion: 'weir.config.stored_version',
  /** Counter, {request}: response-cache lookups of tenants whose cache policy is on, by `tenant`, `revision`, `tier` (`exact`, `semantic`, `none`) and `result` (`hit`, `miss`, `bypass`). */
  cacheLookups: 'weir.cache.lookups',
  /** Counter, USD: what cache hits saved — the revision's price of the cached usage minus what the hit was billed — by `tenant`, `revision` and `tier`. */
  cacheSavedUsd: 'weir.cache.saved_usd',
  /** Counter, s: latency cache hits saved — the cached answer's original duration minus the hit's — by `tenant`, `revision` and `tier`. */
  cacheSavedSeconds: 'weir.cache.saved_seconds',
} as const;

/** The values of `weir.circuit_breaker.state`: ordered by severity (closed < half-open < open). */
export const CIRCUIT_BREAKER_STATE_VALUES = { closed: 0, half_open: 1, open: 2 } as const;

/** Attribute (label) keys. Values are bounded: config ids, enums, error codes; never ids of requests or text. */
export const ATTRIBUTE_NAMES = {
  operationName: 'gen_ai.operation.name',
  providerName: 'gen_ai.provider.name',
  requestModel: 'gen_ai.request.model',
  responseModel: 'gen_ai.response.model',
  tokenType: 'gen_ai.token.type',
  errorType: 'error.type',
  tenant: 'tenant',
  revision: 'revision',
  status: 'status',
  reason: 'reason',
  direction: 'direction',
  pool: 'pool',
  priority: 'priority',
  outcome: 'outcome',
  /** A circuit breaker's key: a revision id, or `provider:<name>`. */
  breakerKey: 'key',
  /** What a circuit breaker guards: `revision` or `provider` (every revision of one upstream). */
  breakerScope: 'scope',
  /** A transition's previous and next state. */
  from: 'from',
  to: 'to',
  /** Redactions: the span's type (a recognizer id or a custom pattern name). */
  redactionType: 'type',
  /** Redactions: where it ran (`content_log`, `upstream`). */
  surface: 'surface',
  /** A response-cache tier: `exact`, `semantic`, or `none` (a miss or bypass). */
  cacheTier: 'tier',
  /** A response-cache lookup's result: `hit`, `miss` or `bypass`. */
  cacheResult: 'result',
} as const;

/** semconv bucket boundaries (s) for `gen_ai.server.request.duration`: 0.01 × 2ⁿ up to 81.92. */
export const DURATION_BUCKETS_S: readonly number[] = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

/** semconv bucket boundaries (s) for `gen_ai.server.time_to_first_token`. */
export const TTFT_BUCKETS_S: readonly number[] = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** semconv bucket boundaries (s) for `gen_ai.server.time_per_output_token`. */
export const TPOT_BUCKETS_S: readonly number[] = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];

/** semconv bucket boundaries (tokens) for `gen_ai.client.token.usage`: 4ⁿ from 1 to 67,108,864. */
export const TOKEN_BUCKETS: readonly number[] = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];

/**
 * Weir's bucket boundaries (s) for `weir.queue.duration`: from 1 ms (an idle queue) to 120 s
 * (the default deadline), roughly ×2–2.5 per step.
 */
export const QUEUE_BUCKETS_S: readonly number[] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/**
 * The Prometheus series as the pinned exporter prints them (histograms also have `_bucket`,
 * `_sum` and `_count`; labels are the attribute keys with `.` → `_`, e.g. `gen_ai_operation_name`).
 */
export const PROMETHEUS_SERIES = {
  serverRequestDuration: 'gen_ai_server_request_duration',
  serverTimeToFirstToken: 'gen_ai_server_time_to_first_token',
  serverTimePerOutputToken: 'gen_ai_server_time_per_output_token',
  tokenUsage: 'gen_ai_client_token_usage',
  requests: 'weir_requests_total',
  admissionRejections: 'weir_admission_rejections_total',
  tokens: 'weir_tokens_total',
  queueDuration: 'weir_queue_duration',
  inflightRequests: 'weir_inflight_requests',
  engineOutputTokens: 'weir_engine_output_tokens_total',
  engineInputTokens: 'weir_engine_input_tokens_total',
  engineActiveSequences: 'weir_engine_active_sequences',
  queueDepth: 'weir_queue_depth',
  expiredLeases: 'weir_scheduler_expired_leases_total',
  replicaUp: 'weir_replica_up',
  replicaSlotsInUse: 'weir_replica_slots_in_use',
  replicaSlots: 'weir_replica_slots',
  replicaSlotLimit: 'weir_replica_slot_limit',
  replicaKvTokensInUse: 'weir_replica_kv_tokens_in_use',
  replicaKvTokens: 'weir_replica_kv_tokens',
  replicaDecodeRate: 'weir_replica_decode_rate',
  replicaPrefillRate: 'weir_replica_prefill_rate',
  schedulerRejections: 'weir_scheduler_rejections_total',
  schedulerQueueDuration: 'weir_scheduler_queue_duration',
  schedulerQueueRequests: 'weir_scheduler_queue_requests',
  schedulerQueueTokens: 'weir_scheduler_queue_tokens',
  poolCapacityRatio: 'weir_pool_capacity_ratio',
  poolBrownout: 'weir_pool_brownout',
  poolQueueBound: 'weir_pool_queue_bound',
  tenantBurnRateRatio: 'weir_tenant_burn_rate_ratio',
  burnRateAlerts: 'weir_burn_rate_alerts_total',
  admissionDecisions: 'weir_admission_decisions_total',
  admissionReservationsHeld: 'weir_admission_reservations_held',
  admissionReconciled: 'weir_admission_reconciled_total',
  admissionOverspends: 'weir_admission_overspends_total',
  circuitBreakerState: 'weir_circuit_breaker_state',
  circuitBreakerTransitions: 'weir_circuit_breaker_transitions_total',
  redactions: 'weir_redactions_total',
  redactionFailures: 'weir_redaction_failures_total',
  poolDesiredReplicas: 'weir_pool_desired_replicas',
  configPublishedVersion: 'weir_config_published_version',
  configStoredVersion: 'weir_config_stored_version',
  cacheLookups: 'weir_cache_lookups_total',
  cacheSavedUsd: 'weir_cache_saved_usd_total',
  cacheSavedSeconds: 'weir_cache_saved_seconds_total',
} as const satisfies Record<keyof typeof METRIC_NAMES, string>;

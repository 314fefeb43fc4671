import type { IncomingMessage, ServerResponse } from 'node:http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import type { Meter } from '@opentelemetry/api';
import { createLocalMetrics } from './local-metrics';
import { ATTRIBUTE_NAMES, CIRCUIT_BREAKER_STATE_VALUES, METRIC_NAMES } from './metric-names';
import { circuitBreakerScopeOf, createWeirMetrics, label, type CircuitBreakerScope, type CircuitBreakerStateName, type WeirMetrics } from './weir-metrics';

/** Options of {@link createTelemetry}. */
export interface TelemetryOptions {
  /** Resource attribute `service.name` (shown on `target_info`), e.g. `weir-all-in-one`. */
  serviceName: string;
  /** Resource attribute `service.version`. */
  serviceVersion?: string;
}

/** A process's metrics: the typed façade, the Prometheus scrape handler, and shutdown. */
export interface Telemetry {
  metrics: WeirMetrics;
  /**
   * Serves the Prometheus text exposition (status 200, `content-type: text/plain`) of every
   * metric on each call, whatever the path: mount it at `GET /metrics`. A plain
   * `node:http` handler, so it also works as an express handler.
   */
  metricsHandler(req: IncomingMessage, res: ServerResponse): void;
  /**
   * Registers a callback read at each scrape for the engines' own counters
   * (`weir.engine.output_tokens`, `weir.engine.input_tokens`, monotonic, by `replica` and
   * `revision`; `weir.engine.active_sequences`, a gauge). These are the independent count that
   * reconciliation compares with the ledger. Call once per process.
   */
  observeEngines(read: () => readonly EngineSample[]): void;
  /** Registers a callback read at each scrape for queue depth by revision (`weir.queue.depth`). */
  observeQueues(read: () => Readonly<Record<string, number>>): void;
  /**
   * Registers a callback read at each scrape for the scheduler's view of each replica:
   * `weir.replica.up` (1/0), `weir.replica.slots_in_use` and `weir.replica.slots`, by
   * `replica` and `revision`.
   */
  observeReplicas(read: () => readonly ReplicaSample[]): void;
  /**
   * Registers a callback read at each scrape for the scheduler's queues and pools:
   * `weir.scheduler.queue.requests` / `.tokens` by `pool`, `revision`, `tenant`, `priority`;
   * `weir.pool.capacity_ratio`, `weir.pool.brownout` (1/0) and `weir.pool.queue_bound` by
   * `pool` and `revision`. Call once per process.
   */
  observeScheduler(read: () => SchedulerSample): void;
  /**
   * Registers a callback read at each scrape for `weir.circuit_breaker.state` by `key` and
   * `scope`: 0 closed, 1 half-open, 2 open ({@link CIRCUIT_BREAKER_STATE_VALUES}). `@weir/routing`'s
   * `BreakerRegistry.snapshot(now)` fits. Call once per process.
   */
  observeCircuitBreakers(read: () => readonly CircuitBreakerSample[]): void;
  /**
   * Registers a callback read at each scrape for the capacity controller's decisions:
   * `weir.pool.desired_replicas` by `pool` (Prometheus `weir_pool_desired_replicas{pool}`, the
   * series a HorizontalPodAutoscaler reads as an External metric; docs/capacity.md).
   * `@weir/capacity`'s `CapacityController.decisions()` fits. Call once per process.
   */
  observeCapacity(read: () => readonly CapacitySample[]): void;
  /**
   * Registers a callback read at each scrape for the control plane's configuration
   * publication: `weir.config.published_version` (the latest snapshot version published to the
   * bucket) and `weir.config.stored_version` (the latest stored in Postgres); a gap between
   * them means publishing is failing. Either is skipped while undefined. Call once per process.
   */
  observeConfigPublication(read: () => ConfigPublicationSample): void;
  /**
   * The process's OpenTelemetry meter, for instruments other libraries define themselves (e.g.
   * `@weir/config-sync`'s snapshot version, age and rejections); they appear on `/metrics` too.
   */
  meter: Meter;
  /** Stops the meter provider; later recordings are dropped. Call once at shutdown. */
  shutdown(): Promise<void>;
}

/** The scheduler's view of one replica, for {@link Telemetry.observeReplicas}. */
export interface ReplicaSample {
  replica: string;
  revision: string;
  up: boolean;
  slotsInUse: number;
  slots: number;
  /** Sequences the scheduler may give it now (`weir.replica.slot_limit`); omitted when absent. */
  slotLimit?: number;
  /** Its pool (label `pool`). Default `interactive`. */
  pool?: string;
  /** KV tokens held by leases (`weir.replica.kv_tokens_in_use`); omitted when absent. */
  kvTokensInUse?: number;
  /** KV tokens it has (`weir.replica.kv_tokens`); omitted when absent or not finite. */
  kvTokens?: number;
  /** Measured per-sequence decode throughput (tokens/s, `weir.replica.decode_rate`). */
  decodeTokensPerS?: number;
  /** Measured per-sequence prefill throughput (tokens/s, `weir.replica.prefill_rate`). */
  prefillTokensPerS?: number;
}

/** The scheduler's queues and pools, for {@link Telemetry.observeScheduler}. */
export interface SchedulerSample {
  /** Queued work per pool, revision, tenant and priority (only non-empty ones). */
  queues: ReadonlyArray<{ pool: string; revision: string; tenant: string; priority: string; requests: number; tokens: number }>;
  /** Every pool queue (pool × revision). */
  pools: ReadonlyArray<{ pool: string; revision: string; capacityRatio: number; brownout: boolean; queueBound: number }>;
}

/** One circuit breaker, for {@link Telemetry.observeCircuitBreakers}. */
export interface CircuitBreakerSample {
  /** A revision id, or `provider:<name>`. */
  key: string;
  /** `revision` or `provider`; default {@link circuitBreakerScopeOf} the key. */
  scope?: CircuitBreakerScope;
  state: CircuitBreakerStateName;
}

/** One pool's capacity decision, for {@link Telemetry.observeCapacity}. */
export interface CapacitySample {
  pool: string;
  /** Replicas the pool should run (integer ≥ 0). */
  desiredReplicas: number;
}

/** The control plane's publication state, for {@link Telemetry.observeConfigPublication}. */
export interface ConfigPublicationSample {
  /** The latest snapshot version published; undefined before the first. */
  publishedVersion?: number;
  /** The latest snapshot version stored; undefined before the first. */
  storedVersion?: number;
}

/** One engine replica's own counters, for {@link Telemetry.observeEngines}. */
export interface EngineSample {
  replica: string;
  revision: string;
  /** Output tokens produced since the replica started (monotonic). */
  outputTokens: number;
  /** Prompt tokens evaluated since the replica started (monotonic). */
  inputTokens: number;
  /** Sequences decoding now. */
  activeSequences: number;
}

/** The instrumentation scope name every Weir series carries (`otel_scope_name`). */
export const METER_NAME = '@weir/telemetry';

/**
 * Creates a process's metrics: an OpenTelemetry SDK `MeterProvider` whose one reader is the
 * Prometheus exporter, with its own HTTP server disabled (`preventServerStart`) so the scrape
 * endpoint is mounted on the app's server instead. The provider is not registered globally.
 */
export function createTelemetry(options: TelemetryOptions): Telemetry {
  const resource = resourceFromAttributes({
    'service.name': options.serviceName,
    ...(options.serviceVersion !== undefined ? { 'service.version': options.serviceVersion } : {}),
  });
  // The per-request series are aggregated in memory and exported alongside the SDK's (see local-metrics.ts).
  const local = createLocalMetrics(METER_NAME, resource);
  const exporter = new PrometheusExporter({ preventServerStart: true, metricProducers: [local] });
  const provider = new MeterProvider({ resource, readers: [exporter] });
  const meter = provider.getMeter(METER_NAME);
  const metrics = createWeirMetrics(meter, local);
  let stopped: Promise<void> | undefined;
  return {
    metrics,
    meter,
    metricsHandler: (req, res) => exporter.getMetricsRequestHandler(req, res),
    observeEngines(read) {
      const output = meter.createObservableCounter(METRIC_NAMES.engineOutputTokens, { unit: '{token}', description: "Output tokens produced, by the engine's own count" });
      const input = meter.createObservableCounter(METRIC_NAMES.engineInputTokens, { unit: '{token}', description: "Prompt tokens evaluated, by the engine's own count" });
      const active = meter.createObservableGauge(METRIC_NAMES.engineActiveSequences, { unit: '{sequence}', description: 'Sequences decoding now' });
      meter.addBatchObservableCallback(
        (result) => {
          for (const e of read()) {
            const attrs = { replica: e.replica, revision: e.revision };
            result.observe(output, e.outputTokens, attrs);
            result.observe(input, e.inputTokens, attrs);
            result.observe(active, e.activeSequences, attrs);
          }
        },
        [output, input, active],
      );
    },
    observeQueues(read) {
      const depth = meter.createObservableGauge(METRIC_NAMES.queueDepth, { unit: '{request}', description: "Requests waiting in the scheduler's queue" });
      depth.addCallback((result) => {
        for (const [revision, n] of Object.entries(read())) result.observe(n, { revision });
      });
    },
    observeReplicas(read) {
      const up = meter.createObservableGauge(METRIC_NAMES.replicaUp, { unit: '1', description: 'The replica answers health probes and is in rotation' });
      const inUse = meter.createObservableGauge(METRIC_NAMES.replicaSlotsInUse, { unit: '{sequence}', description: 'Slots held by leases' });
      const slots = meter.createObservableGauge(METRIC_NAMES.replicaSlots, { unit: '{sequence}', description: 'Slots of the replica' });
      const slotLimit = meter.createObservableGauge(METRIC_NAMES.replicaSlotLimit, { unit: '{sequence}', description: 'Sequences the scheduler may give the replica now (below its slots while a TPOT target holds it back)' });
      const kvInUse = meter.createObservableGauge(METRIC_NAMES.replicaKvTokensInUse, { unit: '{token}', description: 'KV-cache tokens held by leases' });
      const kv = meter.createObservableGauge(METRIC_NAMES.replicaKvTokens, { unit: '{token}', description: 'KV-cache tokens of the replica' });
      const decode = meter.createObservableGauge(METRIC_NAMES.replicaDecodeRate, { unit: '{token}/s', description: 'Measured per-sequence decode throughput (EWMA)' });
      const prefill = meter.createObservableGauge(METRIC_NAMES.replicaPrefillRate, { unit: '{token}/s', description: 'Measured per-sequence prefill throughput (EWMA)' });
      meter.addBatchObservableCallback(
        (result) => {
          for (const r of read()) {
            const attrs = { replica: r.replica, revision: r.revision, pool: r.pool ?? 'interactive' };
            result.observe(up, r.up ? 1 : 0, attrs);
            result.observe(inUse, r.slotsInUse, attrs);
            result.observe(slots, r.slots, attrs);
            if (r.slotLimit !== undefined) result.observe(slotLimit, r.slotLimit, attrs);
            if (r.kvTokensInUse !== undefined) result.observe(kvInUse, r.kvTokensInUse, attrs);
            if (r.kvTokens !== undefined && Number.isFinite(r.kvTokens)) result.observe(kv, r.kvTokens, attrs);
            if (r.decodeTokensPerS !== undefined && Number.isFinite(r.decodeTokensPerS)) result.observe(decode, r.decodeTokensPerS, attrs);
            if (r.prefillTokensPerS !== undefined && Number.isFinite(r.prefillTokensPerS)) result.observe(prefill, r.prefillTokensPerS, attrs);
          }
        },
        [up, inUse, slots, slotLimit, kvInUse, kv, decode, prefill],
      );
    },
    observeScheduler(read) {
      const requests = meter.createObservableGauge(METRIC_NAMES.schedulerQueueRequests, { unit: '{request}', description: 'Requests queued in the scheduler' });
      const tokens = meter.createObservableGauge(METRIC_NAMES.schedulerQueueTokens, { unit: '{token}', description: 'Context tokens queued in the scheduler' });
      const ratio = meter.createObservableGauge(METRIC_NAMES.poolCapacityRatio, { unit: '1', description: 'Remaining capacity of a pool queue over its configured capacity' });
      const brownout = meter.createObservableGauge(METRIC_NAMES.poolBrownout, { unit: '1', description: 'The pool queue lost capacity: batch shed, bounds shrunk' });
      const bound = meter.createObservableGauge(METRIC_NAMES.poolQueueBound, { unit: '{request}', description: 'Current length bound of the pool queue' });
      meter.addBatchObservableCallback(
        (result) => {
          const sample = read();
          for (const q of sample.queues) {
            const attrs = { pool: q.pool, revision: q.revision, tenant: q.tenant, priority: q.priority };
            result.observe(requests, q.requests, attrs);
            result.observe(tokens, q.tokens, attrs);
          }
          for (const p of sample.pools) {
            const attrs = { pool: p.pool, revision: p.revision };
            result.observe(ratio, p.capacityRatio, attrs);
            result.observe(brownout, p.brownout ? 1 : 0, attrs);
            result.observe(bound, p.queueBound, attrs);
          }
        },
        [requests, tokens, ratio, brownout, bound],
      );
    },
    observeCircuitBreakers(read) {
      const state = meter.createObservableGauge(METRIC_NAMES.circuitBreakerState, { unit: '1', description: 'Circuit-breaker state: 0 closed, 1 half-open, 2 open' });
      state.addCallback((result) => {
        for (const b of read()) {
          if (!Object.hasOwn(CIRCUIT_BREAKER_STATE_VALUES, b.state)) continue;
          const scope = b.scope === 'provider' || b.scope === 'revision' ? b.scope : circuitBreakerScopeOf(b.key);
          result.observe(CIRCUIT_BREAKER_STATE_VALUES[b.state], { [ATTRIBUTE_NAMES.breakerKey]: label(b.key, 'none'), [ATTRIBUTE_NAMES.breakerScope]: scope });
        }
      });
    },
    observeCapacity(read) {
      const desired = meter.createObservableGauge(METRIC_NAMES.poolDesiredReplicas, { unit: '{replica}', description: "The capacity controller's desired replicas of a pool" });
      desired.addCallback((result) => {
        for (const d of read()) if (Number.isFinite(d.desiredReplicas)) result.observe(d.desiredReplicas, { [ATTRIBUTE_NAMES.pool]: d.pool });
      });
    },
    observeConfigPublication(read) {
      const published = meter.createObservableGauge(METRIC_NAMES.configPublishedVersion, { unit: '1', description: 'Latest configuration snapshot version published' });
      const stored = meter.createObservableGauge(METRIC_NAMES.configStoredVersion, { unit: '1', description: 'Latest configuration snapshot version stored' });
      meter.addBatchObservableCallback(
        (result) => {
          const s = read();
          if (s.publishedVersion !== undefined) result.observe(published, s.publishedVersion);
          if (s.storedVersion !== undefined) result.observe(stored, s.storedVersion);
        },
        [published, stored],
      );
    },
    shutdown: () => (stopped ??= provider.shutdown()),
  };
}

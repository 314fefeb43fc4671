/**
 * The scheduler's figures in the plain shapes a metrics sink takes (`@weir/telemetry`'s
 * `observeScheduler`/`observeReplicas` and façade calls), so compositions wire metrics without
 * this domain library importing an exporter.
 */
import type { PoolScheduler, SchedulerObserver, SchedulerStats } from './pool-scheduler';

/** What {@link schedulerMetricsObserver} records into (`WeirMetrics` fits). */
export interface SchedulerMetricsSink {
  recordSchedulerRejection(rejection: { pool: string; tenant: string; priority: string; reason: string }): void;
  recordSchedulerQueueTime(sample: { pool: string; tenant: string; priority: string; outcome: string; queueS: number }): void;
  recordExpiredLease(attributes: { replica: string }): void;
}

/**
 * An observer that records rejections (by pool, tenant, priority, reason), queue time (s, by
 * outcome) and expired leases; `onBrownout`, `onSlotLimit` and `onLeaseExpired` are also forwarded to `also`
 * (for log lines).
 */
export function schedulerMetricsObserver(sink: SchedulerMetricsSink, also: SchedulerObserver = {}): SchedulerObserver {
  return {
    onRejected(e) {
      sink.recordSchedulerRejection({ pool: e.pool, tenant: e.tenant, priority: e.priority, reason: e.reason });
      also.onRejected?.(e);
    },
    onDequeued(e) {
      sink.recordSchedulerQueueTime({ pool: e.pool, tenant: e.tenant, priority: e.priority, outcome: e.outcome, queueS: e.queueMs / 1000 });
      also.onDequeued?.(e);
    },
    onBrownout: (e) => also.onBrownout?.(e),
    onSlotLimit: (e) => also.onSlotLimit?.(e),
    onLeaseExpired(replicaId) {
      sink.recordExpiredLease({ replica: replicaId });
      also.onLeaseExpired?.(replicaId);
    },
  };
}

/** Queued work and pool state for `observeScheduler` (only non-empty queues). */
export function schedulerSample(stats: SchedulerStats): {
  queues: Array<{ pool: string; revision: string; tenant: string; priority: string; requests: number; tokens: number }>;
  pools: Array<{ pool: string; revision: string; capacityRatio: number; brownout: boolean; queueBound: number }>;
} {
  return {
    queues: stats.lanes.flatMap((l) => l.byTenant.map((t) => ({ pool: l.pool, revision: l.revisionId, tenant: t.tenant, priority: t.priority, requests: t.requests, tokens: t.tokens }))),
    pools: stats.lanes.map((l) => ({ pool: l.pool, revision: l.revisionId, capacityRatio: l.capacityRatio, brownout: l.brownout, queueBound: l.bounds.length })),
  };
}

/**
 * Per-replica figures for `observeReplicas`. `up(id)` overrides the scheduler's view of health
 * (the prober's: answering probes); default: in rotation.
 */
export function replicaSamples(
  scheduler: Pick<PoolScheduler, 'stats'>,
  up?: (replicaId: string, inRotation: boolean) => boolean,
): Array<{ replica: string; revision: string; pool: string; up: boolean; slotsInUse: number; slots: number; slotLimit: number; kvTokensInUse: number; kvTokens: number; decodeTokensPerS: number; prefillTokensPerS: number }> {
  return scheduler.stats().replicas.map((r) => ({
    replica: r.id,
    revision: r.revisionId,
    pool: r.pool,
    up: up ? up(r.id, r.healthy) : r.healthy,
    slotsInUse: r.inFlight,
    slots: r.slots,
    slotLimit: r.slotLimit,
    kvTokensInUse: r.kvTokensInUse,
    kvTokens: r.kvTokens,
    decodeTokensPerS: r.decodeTokensPerS,
    prefillTokensPerS: r.prefillTokensPerS,
  }));
}

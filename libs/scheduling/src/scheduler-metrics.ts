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

/** What {@link schedulerSample} returns: queued work per queue and tenant, and pool state. */
export interface SchedulerSample {
  queues: Array<{ pool: string; revision: string; tenant: string; priority: string; requests: number; tokens: number }>;
  pools: Array<{ pool: string; revision: string; capacityRatio: number; brownout: boolean; queueBound: number }>;
}

/** Queued work and pool state for `observeScheduler` (only non-empty queues; see {@link createSchedulerSampler}). */
export function schedulerSample(stats: SchedulerStats): SchedulerSample {
  return {
    queues: stats.lanes.flatMap((l) => l.byTenant.map((t) => ({ pool: l.pool, revision: l.revisionId, tenant: t.tenant, priority: t.priority, requests: t.requests, tokens: t.tokens }))),
    pools: stats.lanes.map((l) => ({ pool: l.pool, revision: l.revisionId, capacityRatio: l.capacityRatio, brownout: l.brownout, queueBound: l.bounds.length })),
  };
}

/**
 * {@link schedulerSample} that also reports 0 for every queue it reported before and that is
 * empty now. An observable gauge keeps the last value of a series it is no longer given, so
 * without the zeros a tenant's queue depth would read its last non-zero value forever. The
 * series remembered are bounded by configuration (pools × revisions × tenants × 2 classes).
 */
export function createSchedulerSampler(): (stats: SchedulerStats) => SchedulerSample {
  const seen = new Map<string, SchedulerSample['queues'][number]>();
  return (stats) => {
    const sample = schedulerSample(stats);
    const now = new Set<string>();
    for (const q of sample.queues) {
      const key = `${q.pool}\u0000${q.revision}\u0000${q.tenant}\u0000${q.priority}`;
      now.add(key);
      seen.set(key, { ...q, requests: 0, tokens: 0 });
    }
    for (const [key, zero] of seen) if (!now.has(key)) sample.queues.push(zero);
    return sample;
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

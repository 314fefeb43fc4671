/**
 * The scheduler's side of the capacity controller (`@weir/capacity`'s
 * `createCapacityController`): one {@link PoolTelemetrySample} per pool, taken every few
 * seconds and published (NATS in the split topology, a direct call in the all-in-one).
 *
 * `stats()` gives the queue and the replicas now; the rest — requests admitted, output and
 * prompt tokens produced, and the time each replica was busy — are events, so
 * {@link createCapacityTelemetry} wraps the scheduler: serve through `telemetry.scheduler`
 * and every grant and release is counted on the way. The counters are cumulative (a missed
 * sample loses nothing) and the controller differences them over its window.
 *
 * - **Busy time**: a replica is busy while it holds at least one lease; its busy
 *   replica-seconds are the controller's denominator for "output tokens/s per busy replica".
 *   At low occupancy (one sequence on a replica that batches 32) that rate is below what the
 *   replica could do, so the controller errs towards more replicas until load fills them.
 * - **Tokens** are counted when a lease is released with its usage report (a long stream counts
 *   when it ends); a release without a report (nothing measured) counts no tokens and no
 *   completed request.
 * - **Queued output tokens** are the queued requests' output limits (from the requests the
 *   wrapper saw) × the pool's measured fill (EWMA of output tokens ÷ output limit; prior 1),
 *   as the scheduler's own estimator does.
 * - **Expired leases** (a holder that vanished) are released inside the scheduler without the
 *   wrapper seeing it; each sample re-reads the leases held from `stats()` and corrects its
 *   count, so such a replica counts as busy until the next sample at most.
 */
import { type Clock, INTERACTIVE_POOL, type ScheduleRequest } from '@weir/core';
import type { PoolTelemetrySample } from '@weir/capacity';
import type { PoolScheduler } from './pool-scheduler';

/** Options of {@link createCapacityTelemetry}. */
export interface CapacityTelemetryOptions {
  /**
   * Names this sampler in every sample, e.g. `scheduler-<host>-<pid>-<start ms>`: a new name
   * tells the controller that the counters restarted.
   */
  source: string;
  /** Wall clock (ms since the epoch): each sample's `at` and the busy-time integral. */
  clock: Clock;
  /** Weight of each released lease in the pool's output-fill EWMA, in (0, 1]. Default 0.2. */
  fillAlpha?: number;
}

/** The wrapped scheduler and its sampler. */
export interface CapacityTelemetry {
  /** Serve with this one: the same scheduler, counting grants, releases and busy time. */
  readonly scheduler: PoolScheduler;
  /** One sample per pool that has replicas, now, sorted by pool name. */
  sample(): PoolTelemetrySample[];
}

interface PoolCounters {
  admitted: number;
  completed: number;
  outputTokens: number;
  inputTokens: number;
  /** Busy replica-seconds of intervals already closed. */
  busyClosed: number;
  /** EWMA of output tokens ÷ output limit (prior 1). */
  fill?: number;
}

interface ReplicaBusy {
  pool: string;
  /** Leases held, as far as the wrapper knows (corrected from `stats()` at each sample). */
  inFlight: number;
  /** Start of the current busy interval (ms) while `inFlight > 0`. */
  since: number;
}

/** Queued requests the wrapper has seen, by revision, tenant and priority (which fixes their pool). */
interface Pending {
  requests: number;
  outputTokens: number;
}

const pendingKey = (revisionId: string, tenant: string, priority: string) => `${revisionId}\u0000${tenant}\u0000${priority}`;

/**
 * Wraps `scheduler` to count what the capacity controller needs; see the module comment.
 * `telemetry.scheduler` must be the one requests go through (the gRPC server, the pipeline);
 * `setReplicaHealth` and `stats` pass straight through.
 * @throws RangeError when `fillAlpha` is not in (0, 1].
 */
export function createCapacityTelemetry(scheduler: PoolScheduler, options: CapacityTelemetryOptions): CapacityTelemetry {
  const { clock, source } = options;
  const alpha = options.fillAlpha ?? 0.2;
  if (!(alpha > 0 && alpha <= 1)) throw new RangeError(`fillAlpha must be in (0, 1], got ${alpha}`);

  const pools = new Map<string, PoolCounters>();
  const replicas = new Map<string, ReplicaBusy>();
  for (const r of scheduler.replicas()) {
    const pool = r.pool ?? INTERACTIVE_POOL;
    replicas.set(r.id, { pool, inFlight: 0, since: 0 });
    if (!pools.has(pool)) pools.set(pool, { admitted: 0, completed: 0, outputTokens: 0, inputTokens: 0, busyClosed: 0 });
  }
  const pending = new Map<string, Pending>();

  const setInFlight = (r: ReplicaBusy, inFlight: number, now: number) => {
    const next = Math.max(0, inFlight);
    if (r.inFlight === 0 && next > 0) r.since = now;
    if (r.inFlight > 0 && next === 0) (pools.get(r.pool) as PoolCounters).busyClosed += Math.max(0, now - r.since) / 1000;
    r.inFlight = next;
  };

  const track = (request: ScheduleRequest, delta: 1 | -1) => {
    const key = pendingKey(request.revisionId, request.caller.tenantId, request.priority ?? 'interactive');
    const input = Math.min(Math.max(0, request.inputTokens ?? 0), request.tokens);
    const p = pending.get(key) ?? { requests: 0, outputTokens: 0 };
    p.requests += delta;
    p.outputTokens += delta * (request.tokens - input);
    if (p.requests <= 0) pending.delete(key);
    else pending.set(key, p);
    return request.tokens - input;
  };

  const wrapped: PoolScheduler = {
    stats: () => scheduler.stats(),
    setReplicaHealth: (id, healthy) => scheduler.setReplicaHealth(id, healthy),
    replicas: () => scheduler.replicas(),
    async acquire(request) {
      const outputLimit = track(request, 1);
      let result;
      try {
        result = await scheduler.acquire(request);
      } finally {
        track(request, -1);
      }
      if (!result.ok) return result;
      const lease = result.lease;
      const replica = replicas.get(lease.replicaId);
      if (!replica) return result;
      const counters = pools.get(replica.pool) as PoolCounters;
      counters.admitted++;
      setInFlight(replica, replica.inFlight + 1, clock.now());
      let released = false;
      return {
        ok: true,
        lease: {
          replicaId: lease.replicaId,
          queueMs: lease.queueMs,
          release(report) {
            if (!released) {
              released = true;
              setInFlight(replica, replica.inFlight - 1, clock.now());
              if (report) {
                counters.completed++;
                counters.outputTokens += report.outputTokens;
                counters.inputTokens += report.inputTokens;
                if (outputLimit > 0) {
                  const fill = Math.min(1, report.outputTokens / outputLimit);
                  counters.fill = counters.fill === undefined ? fill : counters.fill + alpha * (fill - counters.fill);
                }
              }
            }
            lease.release(report);
          },
        },
      };
    },
  };

  return {
    scheduler: wrapped,
    sample() {
      const now = clock.now();
      const stats = scheduler.stats();
      const running = new Map<string, number>();
      const replicaCount = new Map<string, { replicas: number; healthy: number }>();
      for (const r of stats.replicas) {
        const busy = replicas.get(r.id);
        // The scheduler's count is the truth (a lease may have expired unseen).
        if (busy && busy.inFlight !== r.inFlight) setInFlight(busy, r.inFlight, now);
        running.set(r.pool, (running.get(r.pool) ?? 0) + r.inFlight);
        const c = replicaCount.get(r.pool) ?? { replicas: 0, healthy: 0 };
        c.replicas++;
        if (r.healthy) c.healthy++;
        replicaCount.set(r.pool, c);
      }
      const queued = new Map<string, { requests: number; outputTokens: number }>();
      for (const lane of stats.lanes) {
        const q = queued.get(lane.pool) ?? { requests: 0, outputTokens: 0 };
        q.requests += lane.requests;
        for (const t of lane.byTenant) {
          const seen = pending.get(pendingKey(lane.revisionId, t.tenant, t.priority));
          // Requests the wrapper did not see (acquired on the inner scheduler) count their
          // whole context (input + output limit): an overestimate rather than nothing.
          q.outputTokens += seen ? seen.outputTokens * Math.min(1, t.requests / seen.requests) : t.tokens;
        }
        queued.set(lane.pool, q);
      }
      const samples: PoolTelemetrySample[] = [];
      for (const [pool, counters] of [...pools].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
        let busy = counters.busyClosed;
        for (const r of replicas.values()) if (r.pool === pool && r.inFlight > 0) busy += Math.max(0, now - r.since) / 1000;
        const q = queued.get(pool) ?? { requests: 0, outputTokens: 0 };
        const c = replicaCount.get(pool) ?? { replicas: 0, healthy: 0 };
        samples.push({
          pool,
          source,
          at: now,
          queuedRequests: q.requests,
          queuedOutputTokens: Math.round(q.outputTokens * (counters.fill ?? 1)),
          runningRequests: running.get(pool) ?? 0,
          replicas: c.replicas,
          healthyReplicas: c.healthy,
          admittedRequestsTotal: counters.admitted,
          completedRequestsTotal: counters.completed,
          outputTokensTotal: counters.outputTokens,
          inputTokensTotal: counters.inputTokens,
          busyReplicaSecondsTotal: Math.round(busy * 1000) / 1000,
        });
      }
      return samples;
    },
  };
}

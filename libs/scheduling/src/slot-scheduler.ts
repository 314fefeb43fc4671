/**
 * The scheduler for one process's replicas: each replica has a fixed number of slots
 * (concurrent sequences); a request takes a slot on the least-loaded replica of its
 * revision, or waits in that revision's bounded FIFO queue. A waiter leaves the queue when
 * its client goes away (`cancelled`) or its deadline passes (`deadline`), so a queued
 * request never holds anything. The llama.cpp engine therefore never sees more concurrent
 * generations than it has sequences.
 *
 * Issue 5 replaces FIFO with tenant-fair, deadline-aware queues measured in tokens; the
 * `SchedulerService` port stays the same.
 */
import type { Clock, ScheduleRequest, ScheduleResult, SchedulerService, SlotLease } from '@weir/core';

/** A replica the scheduler may place work on. */
export interface ReplicaSlots {
  id: string;
  revisionId: string;
  /** Concurrent sequences (≥ 1). */
  slots: number;
}

/** Options of {@link createSlotScheduler}. */
export interface SlotSchedulerOptions {
  replicas: ReplicaSlots[];
  /** Queue bound per replica of a revision (entries); the queue holds `bound × replicas`. Default 256. */
  maxQueuePerReplica?: number;
  /**
   * A lease not released by its deadline plus this (ms) is released automatically, so a
   * caller that vanished (a crashed gateway) cannot hold a slot forever. Default 30,000.
   */
  leaseGraceMs?: number;
  /** Told when a lease expires unreleased (for a log line and a metric). */
  onLeaseExpired?: (replicaId: string) => void;
  clock: Clock;
}

/** Point-in-time scheduler figures, for metrics and tests. */
export interface SlotSchedulerStats {
  queued: Record<string, number>;
  inFlight: Record<string, number>;
  /** Replicas currently out of rotation. */
  unhealthy: string[];
}

/** The scheduler plus its live figures and replica health. */
export interface SlotScheduler extends SchedulerService {
  stats(): SlotSchedulerStats;
  /**
   * Takes a replica out of rotation (`false`: no new leases; leases held run on) or puts it
   * back (`true`, and queued work is dispatched to it). Unknown ids are ignored.
   */
  setReplicaHealth(replicaId: string, healthy: boolean): void;
  /** Every replica the scheduler knows. */
  replicas(): readonly ReplicaSlots[];
}

interface ReplicaState extends ReplicaSlots {
  inFlight: number;
  healthy: boolean;
}

interface Waiter {
  request: ScheduleRequest;
  enqueuedAt: number;
  settle(result: ScheduleResult): void;
}

/** Creates the slot scheduler. */
export function createSlotScheduler(options: SlotSchedulerOptions): SlotScheduler {
  const { clock } = options;
  const bound = options.maxQueuePerReplica ?? 256;
  const leaseGraceMs = options.leaseGraceMs ?? 30_000;
  const byRevision = new Map<string, ReplicaState[]>();
  const byId = new Map<string, ReplicaState>();
  for (const r of options.replicas) {
    const list = byRevision.get(r.revisionId) ?? [];
    const state = { ...r, inFlight: 0, healthy: true };
    list.push(state);
    byId.set(r.id, state);
    byRevision.set(r.revisionId, list);
  }
  const queues = new Map<string, Waiter[]>();

  // Panic routing (Envoy's panic threshold at 0 %): when no replica of a revision is healthy,
  // health is ignored for it, so a prober that misjudges every replica (a starved host, a
  // network blip) cannot turn a working fleet into 503s; a truly dead replica then fails its
  // request fast and the relay reports it.
  const anyHealthy = (revisionId: string) => (byRevision.get(revisionId) ?? []).some((r) => r.healthy);
  const usable = (r: ReplicaState, avoid?: readonly string[]) => (r.healthy || !anyHealthy(r.revisionId)) && !(avoid && avoid.includes(r.id));
  const freeReplica = (revisionId: string, avoid?: readonly string[]): ReplicaState | undefined => {
    let best: ReplicaState | undefined;
    for (const r of byRevision.get(revisionId) ?? []) {
      if (usable(r, avoid) && r.inFlight < r.slots && (!best || r.inFlight / r.slots < best.inFlight / best.slots)) best = r;
    }
    return best;
  };

  const lease = (replica: ReplicaState, queueMs: number, deadlineAt: number): SlotLease => {
    replica.inFlight++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      clearTimeout(expiry);
      replica.inFlight--;
      dispatch(replica.revisionId);
    };
    const expiry = setTimeout(() => {
      options.onLeaseExpired?.(replica.id);
      release();
    }, Math.max(0, deadlineAt - clock.now()) + leaseGraceMs);
    expiry.unref();
    return { replicaId: replica.id, queueMs, release };
  };

  const dispatch = (revisionId: string) => {
    const queue = queues.get(revisionId);
    if (!queue) return;
    // FIFO, except that a waiter avoiding the only free replica lets the next one go first.
    for (let i = 0; i < queue.length; ) {
      const waiter = queue[i];
      const replica = freeReplica(revisionId, waiter.request.avoidReplicas);
      if (!replica) {
        if (!freeReplica(revisionId)) return;
        i++;
        continue;
      }
      queue.splice(i, 1);
      waiter.settle({ ok: true, lease: lease(replica, clock.now() - waiter.enqueuedAt, waiter.request.deadlineAt) });
    }
  };

  return {
    acquire(request) {
      const replicas = (byRevision.get(request.revisionId) ?? []).filter((r) => usable(r, request.avoidReplicas));
      if (replicas.length === 0) {
        return Promise.resolve({ ok: false, reason: 'no_replica', message: `no healthy replica serves ${request.revisionId}; retry shortly`, queueMs: 0 });
      }
      if (request.signal.aborted) {
        return Promise.resolve({ ok: false, reason: 'cancelled', message: 'the request was cancelled', queueMs: 0 });
      }
      // A deadline already past never starts an engine (it would produce a token and bill it).
      if (request.deadlineAt <= clock.now()) {
        return Promise.resolve({ ok: false, reason: 'deadline', message: 'the deadline passed before the request could start', queueMs: 0 });
      }
      const queue = queues.get(request.revisionId) ?? [];
      queues.set(request.revisionId, queue);
      const replica = queue.length === 0 ? freeReplica(request.revisionId, request.avoidReplicas) : undefined;
      if (replica) return Promise.resolve({ ok: true, lease: lease(replica, 0, request.deadlineAt) });
      if (queue.length >= bound * replicas.length) {
        return Promise.resolve({
          ok: false,
          reason: 'queue_full',
          message: `the queue for ${request.revisionId} is full (${queue.length} waiting); retry later`,
          queueMs: 0,
        });
      }

      return new Promise<ScheduleResult>((resolve) => {
        const enqueuedAt = clock.now();
        const timers: { deadline?: NodeJS.Timeout } = {};
        const onAbort = () => leave({ ok: false, reason: 'cancelled', message: 'the request was cancelled while queued', queueMs: clock.now() - enqueuedAt });
        const waiter: Waiter = {
          request,
          enqueuedAt,
          settle(result) {
            clearTimeout(timers.deadline);
            request.signal.removeEventListener('abort', onAbort);
            resolve(result);
          },
        };
        const leave = (result: ScheduleResult) => {
          const i = queue.indexOf(waiter);
          if (i >= 0) queue.splice(i, 1);
          waiter.settle(result);
        };
        const timer = setTimeout(
          () => leave({ ok: false, reason: 'deadline', message: 'the deadline passed while the request was queued', queueMs: clock.now() - enqueuedAt }),
          Math.max(0, request.deadlineAt - enqueuedAt),
        );
        timer.unref(); // a queued waiter alone must not keep a process alive
        timers.deadline = timer;
        request.signal.addEventListener('abort', onAbort, { once: true });
        queue.push(waiter);
      });
    },
    stats() {
      const queued: Record<string, number> = {};
      for (const [rev, q] of queues) queued[rev] = q.length;
      const inFlight: Record<string, number> = {};
      for (const r of byId.values()) inFlight[r.id] = r.inFlight;
      return { queued, inFlight, unhealthy: [...byId.values()].filter((r) => !r.healthy).map((r) => r.id) };
    },
    setReplicaHealth(replicaId, healthy) {
      const r = byId.get(replicaId);
      if (!r || r.healthy === healthy) return;
      r.healthy = healthy;
      if (healthy) dispatch(r.revisionId);
    },
    replicas: () => [...byId.values()].map(({ id, revisionId, slots }) => ({ id, revisionId, slots })),
  };
}

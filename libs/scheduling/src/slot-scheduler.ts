/**
 * The slot scheduler's original entry point, kept for callers (tests, older compositions) that
 * build a scheduler from replicas and slots alone: every replica in the `interactive` pool,
 * no KV bound, no tenant bound and no `deadline_unmeetable` estimate — FIFO per tenant (earliest
 * deadline first), which for one tenant and equal deadlines is the old FIFO queue.
 * New code uses {@link createPoolScheduler}.
 */
import type { Clock } from '@weir/core';
import { createPoolScheduler, type PoolScheduler, type SchedulerStats } from './pool-scheduler';

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
  /** Queue bound per replica of a revision (entries); the queue holds `bound × healthy replicas`. Default 256. */
  maxQueuePerReplica?: number;
  /** A lease not released by its deadline plus this (ms) is released automatically. Default 30,000. */
  leaseGraceMs?: number;
  /** Told when a lease expires unreleased (for a log line and a metric). */
  onLeaseExpired?: (replicaId: string) => void;
  clock: Clock;
}

/** Point-in-time scheduler figures. */
export type SlotSchedulerStats = SchedulerStats;

/** The scheduler plus its live figures and replica health. */
export type SlotScheduler = PoolScheduler;

/** Creates a scheduler over `replicas` in one `interactive` pool (see the module comment). */
export function createSlotScheduler(options: SlotSchedulerOptions): SlotScheduler {
  return createPoolScheduler({
    replicas: options.replicas,
    ...(options.maxQueuePerReplica !== undefined ? { maxQueuePerReplica: options.maxQueuePerReplica } : {}),
    ...(options.leaseGraceMs !== undefined ? { leaseGraceMs: options.leaseGraceMs } : {}),
    settings: { tenantQueueShare: 1, maxQueueBytesPerReplica: Number.MAX_SAFE_INTEGER },
    rejectUnmeetable: false,
    observer: { ...(options.onLeaseExpired ? { onLeaseExpired: options.onLeaseExpired } : {}) },
    clock: options.clock,
  });
}

import {
  type JournalPosition,
  type OverspendEvent,
  type SettlementApplier,
  type SettlementApplyResult,
  type SettlementItem,
  isLogWorthyAttempt,
  retryDelayMs,
} from '@weir/core';
import type { StoreLogger } from '../logger';
import { type RejectedSettlement, applyIsolating } from '../settlement-isolation';

/** An item handed to the loop, with where its journal line ends. */
export interface QueuedSettlement {
  item: SettlementItem;
  /** The journal position just past the item's line (segment, byte offset). */
  position: JournalPosition;
}

/** Options of {@link createApplierLoop}. */
export interface ApplierLoopOptions {
  /** The journal's name in `journal_positions`. */
  journal: string;
  /** Longest an item waits for its batch to fill (ms). */
  applyIntervalMs: number;
  /** Most items per transaction. */
  maxBatch: number;
  /** Unapplied items at which `saturated()` turns true. */
  capacity: number;
  /** First retry delay after a failed transaction (ms), doubling per attempt up to `retryMaxMs`. */
  retryBaseMs: number;
  retryMaxMs: number;
  logger?: Pick<StoreLogger, 'warn' | 'error'>;
  /** Called after each committed batch with its items and what the applier did. Must not throw. */
  onApplied?: (items: readonly QueuedSettlement[], result: SettlementApplyResult) => void;
  /** Called with every overspend a batch reported (after it is logged). Must not throw. */
  onOverspend?: (events: readonly OverspendEvent[]) => void;
  /** Called with a settlement the database refused even degraded (see `applyIsolating`); it is skipped. Must not throw. */
  onRejected?: (rejected: RejectedSettlement) => void;
  random?: () => number;
}

/** The loop that feeds a journal's items to the applier, in order, in batches. */
export interface ApplierLoop {
  /** Queues an item (already durable in the journal); it is applied within `applyIntervalMs`, or at once when a batch is full. */
  push(item: QueuedSettlement): void;
  /** Resolves once every item pushed before the call is applied (retrying for as long as it takes). */
  flush(): Promise<void>;
  /** Items pushed and not yet applied (including a batch in flight). */
  pending(): number;
  saturated(): boolean;
  /**
   * Applies what is queued, then stops. With `timeoutMs`, gives up after that long and returns
   * how many were left (they stay in the journal and are applied at the next start).
   */
  close(timeoutMs?: number): Promise<number>;
}

/**
 * Creates the applier loop (ADR 0002 §2): one writer at a time; a batch is the oldest
 * `maxBatch` items and leaves the queue only when its transaction committed, with the position
 * of its last item, so the stored position never passes an unapplied item. A failed
 * transaction is retried after `min(retryMaxMs, retryBaseMs × 2^(attempt−1))` ms (50–100 %
 * jitter) until it commits; it changed nothing, and the applier's insert is idempotent anyway.
 * A batch the database refuses for its data is applied item by item (`applyIsolating`), so a
 * bad settlement is set aside (`onRejected`) instead of wedging every one behind it.
 */
export function createApplierLoop(applier: SettlementApplier, options: ApplierLoopOptions): ApplierLoop {
  const { journal, applyIntervalMs, maxBatch, capacity, logger, onApplied, onOverspend, onRejected } = options;
  const backoff = { baseMs: options.retryBaseMs, maxMs: Math.max(options.retryBaseMs, options.retryMaxMs) };
  const random = options.random ?? Math.random;
  let queue: QueuedSettlement[] = [];
  let pushed = 0;
  let applied = 0;
  let running = false;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let timerDue = Infinity;
  let wakeRetry: (() => void) | undefined;
  let waiters: { target: number; resolve: () => void }[] = [];

  function schedule(delay: number): void {
    if (running || stopped || queue.length === 0) return;
    const due = Date.now() + delay;
    if (timer !== undefined && timerDue <= due) return;
    if (timer !== undefined) clearTimeout(timer);
    timerDue = due;
    timer = setTimeout(() => {
      timer = undefined;
      timerDue = Infinity;
      void run();
    }, delay);
  }

  const urgent = () => queue.length >= maxBatch || waiters.length > 0;

  function sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        wakeRetry = undefined;
        resolve();
      }
      wakeRetry = done;
    });
  }

  async function run(): Promise<void> {
    running = true;
    let attempt = 0;
    try {
      while (queue.length > 0 && !stopped) {
        const batch = queue.slice(0, maxBatch);
        let result: SettlementApplyResult;
        try {
          result = await applyIsolating(applier, { journal, items: batch.map((q) => q.item), position: batch[batch.length - 1].position }, (rejected) => {
            const usage = rejected.item.kind === 'settle' ? rejected.item.entry.usage : undefined;
            logger?.error({ err: rejected.error, generationId: usage?.generationId, tenantId: usage?.tenantId, costNanoUsd: usage?.costNanoUsd }, 'settlement refused by the database; set aside');
            quietly(() => onRejected?.(rejected));
          });
        } catch (error) {
          attempt++;
          const retryInMs = retryDelayMs(attempt, backoff, random);
          if (isLogWorthyAttempt(attempt)) logger?.warn({ err: error, attempt, batchSize: batch.length, pending: queue.length, retryInMs }, 'settlement batch failed; will retry');
          await sleep(retryInMs);
          continue;
        }
        attempt = 0;
        queue = queue.slice(batch.length);
        applied += batch.length;
        if (result.overspends.length > 0) {
          logger?.error({ overspends: result.overspends.map(({ leaseId, reason, excessNano }) => ({ leaseId, reason, excessNano })) }, 'settlement exceeded its leases');
          quietly(() => onOverspend?.(result.overspends));
        }
        quietly(() => onApplied?.(batch, result));
        settleWaiters();
        if (!urgent()) break;
      }
    } finally {
      running = false;
    }
    if (queue.length > 0) schedule(urgent() ? 0 : applyIntervalMs);
  }

  function settleWaiters(): void {
    if (waiters.length === 0) return;
    const still: typeof waiters = [];
    for (const w of waiters) {
      if (applied >= w.target) w.resolve();
      else still.push(w);
    }
    waiters = still;
  }

  function flush(): Promise<void> {
    if (applied >= pushed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      waiters.push({ target: pushed, resolve });
      schedule(0);
    });
  }

  return {
    push(item) {
      queue.push(item);
      pushed++;
      schedule(queue.length >= maxBatch ? 0 : applyIntervalMs);
    },
    flush,
    pending: () => queue.length,
    saturated: () => queue.length >= capacity,
    async close(timeoutMs) {
      let timeout: ReturnType<typeof setTimeout> | undefined;
      const expired =
        timeoutMs === undefined ? undefined : new Promise<void>((resolve) => (timeout = setTimeout(resolve, timeoutMs)));
      await (expired ? Promise.race([flush(), expired]) : flush());
      clearTimeout(timeout);
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      wakeRetry?.();
      for (const w of waiters) w.resolve();
      waiters = [];
      return queue.length;
    },
  };
}

function quietly(fn: () => void): void {
  try {
    fn();
  } catch {
    // A faulty hook must not stop the applier.
  }
}

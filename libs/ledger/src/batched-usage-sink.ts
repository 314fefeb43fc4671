import { type UsageRecord, type UsageRepository, type UsageSink, WeirError, isLogWorthyAttempt, retryDelayMs, usageRecordFault } from '@weir/core';

/**
 * The slice of a structured logger the sink uses; a `pino` logger satisfies it. Fields are
 * metadata only (counts, attempt numbers, the error), never record contents.
 */
export interface LedgerLogger {
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/** What {@link BatchedUsageSinkOptions.onError} learns about a failed write. */
export interface UsageWriteFailure {
  /** Consecutive failed attempts for this batch (1, 2, …). */
  attempt: number;
  /** Records in the batch that failed. */
  batchSize: number;
  /** Records waiting in the sink, including the failed batch. */
  pending: number;
  /** Delay before the next attempt (ms). */
  retryInMs: number;
}

/** Options for {@link createBatchedUsageSink}. */
export interface BatchedUsageSinkOptions {
  /** Most records per `insertMany` call. Default 256. */
  maxBatch?: number;
  /**
   * Longest a record waits for its batch to fill before it is written anyway (ms). Default 50.
   * A full batch is written at once.
   */
  flushIntervalMs?: number;
  /**
   * Pending records at which {@link BatchedUsageSink.saturated} turns true (the gateway
   * then refuses new requests with 503). Records beyond it are still kept. Default 10,000.
   */
  capacity?: number;
  /** First retry delay after a failed write (ms); doubles per attempt. Default 100. */
  retryBaseMs?: number;
  /** Longest retry delay (ms). Default 5,000. */
  retryMaxMs?: number;
  /** Warned on write failures (1st, 2nd, 4th, 8th… attempt) and on saturation. Default: silent. */
  logger?: LedgerLogger;
  /** Called on every failed write (for metrics). Must not throw. */
  onError?: (error: unknown, failure: UsageWriteFailure) => void;
}

/** Dependencies of {@link createBatchedUsageSink}. */
export interface BatchedUsageSinkDeps {
  /** Uniform [0, 1) source for retry jitter. Default `Math.random`. */
  random?: () => number;
}

/** The result of {@link BatchedUsageSink.close}. */
export interface UsageSinkCloseResult {
  /** Records not written when close gave up (0 unless `timeoutMs` elapsed). */
  unwritten: number;
}

/** A {@link UsageSink} that writes in batches off the request path. */
export interface BatchedUsageSink extends UsageSink {
  /**
   * Enqueues a record and returns at once; never awaits the database. Records are written
   * in the order recorded.
   * @throws WeirError `internal` when the record is malformed (token counts or cost not
   *   non-negative safe integers, timings negative or not finite, invalid dates): a bug in
   *   the caller, refused here so one bad record can never block the queue behind it.
   * @throws WeirError `shutting_down` after {@link close} has finished.
   */
  record(record: UsageRecord): void;
  /**
   * Resolves once every record recorded before the call is written, retrying failed writes
   * for as long as it takes (bound it with your own timeout, or use `close({timeoutMs})`).
   */
  flush(): Promise<void>;
  /** Records recorded and not yet written (including a batch being written). */
  pending(): number;
  /** True when `pending() >= capacity`: refuse new work (503) rather than lose records. */
  saturated(): boolean;
  /**
   * Drains everything (like {@link flush}, including records recorded while closing) and
   * then refuses further records. With `timeoutMs`, stops retrying after that long, logs
   * and reports what is left (it stays in memory; nothing is silently dropped). Idempotent.
   */
  close(options?: { timeoutMs?: number }): Promise<UsageSinkCloseResult>;
}

/**
 * Creates the batched usage sink in front of an idempotent {@link UsageRepository}
 * (STYLE.md: nothing on the hot path awaits a ledger write; the queue is bounded, batched
 * and drained on SIGTERM).
 *
 * One writer at a time: a batch is the oldest `maxBatch` pending records, and it leaves
 * the queue only after `insertMany` succeeds. On failure the same records are retried after
 * `min(retryMaxMs, retryBaseMs × 2^(attempt−1))` ms (with 50–100 % jitter) until they are
 * written. A write that failed after the database committed it is retried too, which is safe
 * because the repository ignores generation ids it already has: records are never dropped
 * and never billed twice.
 */
export function createBatchedUsageSink(
  repo: UsageRepository,
  options: BatchedUsageSinkOptions = {},
  deps: BatchedUsageSinkDeps = {},
): BatchedUsageSink {
  const maxBatch = Math.max(1, options.maxBatch ?? 256);
  const flushIntervalMs = Math.max(0, options.flushIntervalMs ?? 50);
  const capacity = Math.max(1, options.capacity ?? 10_000);
  const retryBaseMs = Math.max(0, options.retryBaseMs ?? 100);
  const retryMaxMs = Math.max(retryBaseMs, options.retryMaxMs ?? 5_000);
  const { logger, onError } = options;
  const random = deps.random ?? Math.random;

  const queue: UsageRecord[] = [];
  let recorded = 0;
  let written = 0;
  let writing = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let timerDelay = Infinity;
  let waiters: { target: number; resolve: () => void }[] = [];
  let wasSaturated = false;
  // Cuts a retry wait short when close() times out.
  let stopped = false;
  let wakeRetry: (() => void) | undefined;
  let closing: Promise<UsageSinkCloseResult> | undefined;
  let closed = false;

  const pending = () => queue.length;

  function schedule(delay: number): void {
    if (writing || stopped || queue.length === 0) return;
    if (timer !== undefined && timerDelay <= delay) return;
    if (timer !== undefined) clearTimeout(timer);
    timerDelay = delay;
    timer = setTimeout(() => {
      timer = undefined;
      timerDelay = Infinity;
      void run();
    }, delay);
  }

  function urgent(): boolean {
    return queue.length >= maxBatch || waiters.length > 0;
  }

  function settleWaiters(): void {
    if (waiters.length === 0) return;
    const still: typeof waiters = [];
    for (const w of waiters) {
      if (written >= w.target) w.resolve();
      else still.push(w);
    }
    waiters = still;
  }

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
    writing = true;
    let attempt = 0;
    try {
      while (queue.length > 0 && !stopped) {
        const batch = queue.slice(0, maxBatch);
        try {
          await repo.insertMany(batch);
        } catch (error) {
          attempt++;
          const retryInMs = retryDelayMs(attempt, { baseMs: retryBaseMs, maxMs: retryMaxMs }, random);
          const failure: UsageWriteFailure = { attempt, batchSize: batch.length, pending: queue.length, retryInMs };
          // Powers of two only: a long outage must not flood the log.
          if (isLogWorthyAttempt(attempt)) logger?.warn({ err: error, ...failure }, 'usage write failed; will retry');
          try {
            onError?.(error, failure);
          } catch {
            // A faulty metrics hook must not stop the writer.
          }
          await sleep(retryInMs);
          continue;
        }
        attempt = 0;
        queue.splice(0, batch.length);
        written += batch.length;
        settleWaiters();
        if (wasSaturated && queue.length < capacity) wasSaturated = false;
        if (!urgent()) break;
      }
    } finally {
      writing = false;
    }
    if (queue.length > 0) schedule(urgent() ? 0 : flushIntervalMs);
  }

  function flush(): Promise<void> {
    if (written >= recorded) return Promise.resolve();
    return new Promise<void>((resolve) => {
      waiters.push({ target: recorded, resolve });
      schedule(0);
    });
  }

  return {
    record(record) {
      if (closed) throw new WeirError('shutting_down', 'the usage sink is closed');
      const fault = usageRecordFault(record);
      if (fault) throw new WeirError('internal', `malformed usage record: ${fault}`);
      queue.push(record);
      recorded++;
      if (!wasSaturated && queue.length >= capacity) {
        wasSaturated = true;
        logger?.warn({ pending: queue.length, capacity }, 'usage sink saturated; new requests should be refused');
      }
      schedule(queue.length >= maxBatch ? 0 : flushIntervalMs);
    },

    flush,
    pending,
    saturated: () => queue.length >= capacity,

    close(closeOptions = {}) {
      closing ??= (async () => {
        const { timeoutMs } = closeOptions;
        let timedOut = false;
        let timeout: ReturnType<typeof setTimeout> | undefined;
        const expired =
          timeoutMs === undefined
            ? undefined
            : new Promise<void>((resolve) => {
                timeout = setTimeout(() => {
                  timedOut = true;
                  resolve();
                }, timeoutMs);
              });
        // Records may arrive while earlier ones drain: go on until none is left, then close,
        // then drain once more for any recorded in the same tick as the last write.
        const drain = async () => {
          while (written < recorded && !timedOut) await (expired ? Promise.race([flush(), expired]) : flush());
        };
        await drain();
        closed = true;
        await drain();
        clearTimeout(timeout);
        if (queue.length > 0) {
          stopped = true;
          if (timer !== undefined) clearTimeout(timer);
          wakeRetry?.();
          for (const w of waiters) w.resolve();
          waiters = [];
          logger?.error({ unwritten: queue.length }, 'usage sink closed with records not written');
        }
        return { unwritten: queue.length };
      })();
      return closing;
    },
  };
}

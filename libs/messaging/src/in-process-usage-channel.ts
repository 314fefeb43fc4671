import { type UsageRecord, type UsageRecordSource, type UsageSink, WeirError, isLogWorthyAttempt, retryDelayMs, usageRecordFault } from '@weir/core';
import type { MessagingLogger } from './logger';

/** Options for {@link createInProcessUsageChannel}. */
export interface InProcessUsageChannelOptions {
  /** Most records per handler call. Default 256. */
  batchSize?: number;
  /** Pending records at which {@link InProcessUsageSink.saturated} turns true. Records beyond it are kept. Default 10,000. */
  capacity?: number;
  /** Delay before redelivering a batch whose handler rejected (ms); doubles per attempt. Default 100. */
  retryBaseMs?: number;
  /** Longest redelivery delay (ms). Default 5,000. */
  retryMaxMs?: number;
  /** Warned on handler rejections (1st, 2nd, 4th, 8th… attempt) and on saturation. Default: silent. */
  logger?: MessagingLogger;
}

/** Dependencies of {@link createInProcessUsageChannel}. */
export interface InProcessUsageChannelDeps {
  /** Uniform [0, 1) source for retry jitter. Default `Math.random`. */
  random?: () => number;
}

/** The producer side of the in-process channel. */
export interface InProcessUsageSink extends UsageSink {
  /**
   * Enqueues a record and returns at once (never awaits the handler).
   * @throws WeirError `internal` when the record is malformed (see `usageRecordFault`): a bug in
   *   the caller, refused here so one bad record can never block the queue behind it.
   */
  record(record: UsageRecord): void;
  /**
   * Resolves once every record recorded before the call has been accepted by a handler (its
   * promise resolved). With no source started it waits for one: in-process, the handler is
   * the only durability there is.
   */
  flush(): Promise<void>;
  /** Records recorded and not yet accepted by a handler (including a batch being handled). */
  pending(): number;
  /** True when `pending() >= capacity`: refuse new work (503) rather than lose records. */
  saturated(): boolean;
}

/** The consumer side of the in-process channel. */
export interface InProcessUsageSource extends UsageRecordSource {
  /**
   * Starts delivering batches (oldest first, at most `batchSize` records) to `handler`, one
   * batch at a time. A batch leaves the queue only when the handler resolves; when it rejects,
   * the same batch is delivered again after `min(retryMaxMs, retryBaseMs × 2^(attempt−1))` ms
   * (50–100 % jitter). Resolves at once.
   * @throws WeirError `internal` when already started.
   */
  start(handler: (records: readonly UsageRecord[]) => Promise<void>): Promise<void>;
  /**
   * Drains: delivers everything recorded before the call (retrying rejected batches), then
   * detaches the handler. Records recorded later stay queued for the next `start`. With
   * `timeoutMs`, gives up after that long (once the batch in flight settles) and keeps the
   * rest queued: nothing is dropped. Idempotent; a no-op when not started.
   */
  stop(options?: { timeoutMs?: number }): Promise<void>;
}

/** A usage sink wired to a usage record source inside one process. */
export interface InProcessUsageChannel {
  sink: InProcessUsageSink;
  source: InProcessUsageSource;
}

type Handler = (records: readonly UsageRecord[]) => Promise<void>;

/**
 * Creates the in-process usage channel used by the all-in-one composition: the same
 * {@link UsageSink} → {@link UsageRecordSource} seam that NATS JetStream fills in the split
 * topology, with the same guarantees short of surviving a crash (records live in memory):
 * in order, at-least-once, never dropped.
 */
export function createInProcessUsageChannel(
  options: InProcessUsageChannelOptions = {},
  deps: InProcessUsageChannelDeps = {},
): InProcessUsageChannel {
  const batchSize = Math.max(1, options.batchSize ?? 256);
  const capacity = Math.max(1, options.capacity ?? 10_000);
  const backoff = { baseMs: Math.max(0, options.retryBaseMs ?? 100), maxMs: 0 };
  backoff.maxMs = Math.max(backoff.baseMs, options.retryMaxMs ?? 5_000);
  const { logger } = options;
  const random = deps.random ?? Math.random;

  const queue: UsageRecord[] = [];
  let recorded = 0;
  let delivered = 0;
  let handler: Handler | undefined;
  let running: Promise<void> | undefined;
  let kickScheduled = false;
  let waiters: { target: number; resolve: () => void }[] = [];
  let wasSaturated = false;
  // Set by a timed-out stop: the loop ends after the attempt in flight.
  let halt = false;
  let wakeRetry: (() => void) | undefined;

  function settleWaiters(): void {
    if (waiters.length === 0) return;
    const still: typeof waiters = [];
    for (const w of waiters) {
      if (delivered >= w.target) w.resolve();
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

  function kick(): void {
    if (!handler || running || kickScheduled || queue.length === 0) return;
    kickScheduled = true;
    // Deliver on a later macrotask: record() must never run the handler synchronously.
    setImmediate(() => {
      kickScheduled = false;
      if (!handler || running || queue.length === 0) return;
      running = run(handler).finally(() => {
        running = undefined;
        kick();
      });
    });
  }

  async function run(h: Handler): Promise<void> {
    let attempt = 0;
    while (queue.length > 0 && handler === h && !halt) {
      const batch = queue.slice(0, batchSize);
      try {
        await h(batch);
      } catch (error) {
        attempt++;
        const retryInMs = retryDelayMs(attempt, backoff, random);
        if (isLogWorthyAttempt(attempt)) {
          logger?.warn({ err: error, attempt, batchSize: batch.length, pending: queue.length, retryInMs }, 'usage handler rejected a batch; will redeliver');
        }
        await sleep(retryInMs);
        continue;
      }
      attempt = 0;
      queue.splice(0, batch.length);
      delivered += batch.length;
      settleWaiters();
      if (wasSaturated && queue.length < capacity) wasSaturated = false;
    }
  }

  const sink: InProcessUsageSink = {
    record(record) {
      const fault = usageRecordFault(record);
      if (fault) throw new WeirError('internal', `malformed usage record: ${fault}`);
      queue.push(record);
      recorded++;
      if (!wasSaturated && queue.length >= capacity) {
        wasSaturated = true;
        logger?.warn({ pending: queue.length, capacity }, 'usage channel saturated; new requests should be refused');
      }
      kick();
    },
    flush() {
      if (delivered >= recorded) return Promise.resolve();
      return new Promise<void>((resolve) => waiters.push({ target: recorded, resolve }));
    },
    pending: () => queue.length,
    saturated: () => queue.length >= capacity,
  };

  const source: InProcessUsageSource = {
    async start(h) {
      if (handler) throw new WeirError('internal', 'the usage source is already started');
      halt = false;
      handler = h;
      kick();
    },
    async stop(stopOptions = {}) {
      const h = handler;
      if (!h) return;
      const target = recorded;
      const drained = new Promise<void>((resolve) => {
        if (delivered >= target) resolve();
        else waiters.push({ target, resolve });
      });
      const { timeoutMs } = stopOptions;
      let timeout: ReturnType<typeof setTimeout> | undefined;
      const expired =
        timeoutMs === undefined ? undefined : new Promise<void>((resolve) => (timeout = setTimeout(resolve, timeoutMs)));
      await (expired ? Promise.race([drained, expired]) : drained);
      clearTimeout(timeout);
      if (delivered < target) {
        halt = true;
        wakeRetry?.();
        logger?.error({ pending: queue.length }, 'usage source stopped with records not delivered; they stay queued');
      }
      if (handler === h) handler = undefined;
      await running;
    },
  };

  return { sink, source };
}

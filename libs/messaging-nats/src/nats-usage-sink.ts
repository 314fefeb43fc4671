import { jetstream, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type UsageRecord, type UsageSink, WeirError } from '@weir/core';
import { isLogWorthyAttempt, retryDelayMs, usageRecordFault } from '@weir/core';
import type { MessagingLogger } from '@weir/messaging';
import { captureTraceHeaders, traceHeadersToNats } from './trace-headers';
import { encodeUsageRecord } from './usage-record-codec';
import { USAGE_SUBJECT_PREFIX, usageSubject } from './usage-stream';

/** Options for {@link createNatsUsageSink}. */
export interface NatsUsageSinkOptions {
  /** Records go to `<subjectPrefix>.<tenantId>` (see `usageSubject`). Default `weir.usage`. */
  subjectPrefix?: string;
  /**
   * Pending records at which {@link NatsUsageSink.saturated} turns true (the gateway then
   * refuses new requests with 503). Records beyond it are still kept. Default 10,000.
   */
  capacity?: number;
  /** Most publishes awaiting their PubAck at once (pipelining). Default 64. */
  maxInFlight?: number;
  /** How long one publish waits for its PubAck before it counts as failed and is retried (ms). Default 5,000. */
  publishTimeoutMs?: number;
  /** First retry delay after a failed publish round (ms); doubles per attempt. Default 100. */
  retryBaseMs?: number;
  /** Longest retry delay (ms). Default 5,000. */
  retryMaxMs?: number;
  /** Warned on publish failures (1st, 2nd, 4th, 8th… attempt) and on saturation. Default: silent. */
  logger?: MessagingLogger;
  /** Called on every failed publish round (for metrics). Must not throw. */
  onError?: (error: unknown, failure: UsagePublishFailure) => void;
}

/** What {@link NatsUsageSinkOptions.onError} learns about a failed publish round. */
export interface UsagePublishFailure {
  /** Consecutive failed rounds (1, 2, …). */
  attempt: number;
  /** Publishes in the round that got no PubAck. */
  failed: number;
  /** Records waiting in the sink, including the failed ones. */
  pending: number;
  /** Delay before the next round (ms). */
  retryInMs: number;
}

/** Dependencies of {@link createNatsUsageSink}. */
export interface NatsUsageSinkDeps {
  /** Uniform [0, 1) source for retry jitter. Default `Math.random`. */
  random?: () => number;
}

/** Counters of a {@link NatsUsageSink} since it was created. */
export interface NatsUsageSinkStats {
  /** Records recorded. */
  recorded: number;
  /** Records with a PubAck (stored, or already stored: see `duplicates`). */
  acked: number;
  /** PubAcks that said the stream already had the generation id (a retry of a stored record). */
  duplicates: number;
  /** Publishes that failed (timed out, no stream, disconnected) and were retried. */
  failedPublishes: number;
}

/** The result of {@link NatsUsageSink.close}. */
export interface NatsUsageSinkCloseResult {
  /** Records without a PubAck when close gave up (0 unless `timeoutMs` elapsed). */
  unwritten: number;
}

/** A {@link UsageSink} that publishes to the JetStream usage stream off the request path. */
export interface NatsUsageSink extends UsageSink {
  /**
   * Enqueues a record (serialized at once, with the trace headers of the active context) and
   * returns; never awaits NATS.
   * @throws WeirError `internal` when the record is malformed (see `usageRecordFault`).
   * @throws WeirError `shutting_down` after {@link close} has finished.
   */
  record(record: UsageRecord): void;
  /**
   * Resolves once every record recorded before the call has a JetStream PubAck, retrying for as
   * long as it takes (bound it with your own timeout, or use `close({timeoutMs})`).
   */
  flush(): Promise<void>;
  /** Records recorded and not yet acknowledged by JetStream (including those in flight). */
  pending(): number;
  /** True when `pending() >= capacity`: refuse new work (503) rather than lose records. */
  saturated(): boolean;
  /** Counters since creation (for metrics and tests). */
  stats(): NatsUsageSinkStats;
  /**
   * Drains everything (like {@link flush}, including records recorded while closing), then
   * refuses further records. With `timeoutMs`, stops retrying after that long, logs and reports
   * what is left (it stays in memory; nothing is silently dropped). Idempotent. Does not close
   * the NATS connection.
   */
  close(options?: { timeoutMs?: number }): Promise<NatsUsageSinkCloseResult>;
}

interface Entry {
  seq: number;
  subject: string;
  msgId: string;
  data: Uint8Array;
  trace: Record<string, string>;
}

/**
 * Creates the NATS JetStream usage sink (the gateway / relay side of the split data plane).
 *
 * Records are published in the order recorded, up to `maxInFlight` at once, each with
 * `Nats-Msg-Id` = `generationId`, to `<subjectPrefix>.<tenantId>`, and leave the buffer only
 * when JetStream acknowledges them. A publish that fails (NATS down, PubAck timeout, stream
 * missing) is retried after `min(retryMaxMs, retryBaseMs × 2^(attempt−1))` ms (50–100 % jitter)
 * for as long as it takes; records recorded meanwhile are buffered, beyond `capacity` too
 * (reported by `saturated()`, never dropped). A retry of a record JetStream already stored is
 * dropped by the stream's duplicate window (and, beyond it, by the ledger's idempotent insert),
 * so retries never bill twice. After a failed round, a retried record may land after records
 * recorded later; billing does not depend on stream order.
 *
 * The stream must exist (`ensureUsageStream`); until it does, publishes fail and are retried.
 */
export function createNatsUsageSink(nc: NatsConnection, options: NatsUsageSinkOptions = {}, deps: NatsUsageSinkDeps = {}): NatsUsageSink {
  const subjectPrefix = options.subjectPrefix ?? USAGE_SUBJECT_PREFIX;
  const capacity = Math.max(1, options.capacity ?? 10_000);
  const maxInFlight = Math.max(1, options.maxInFlight ?? 64);
  const publishTimeoutMs = Math.max(1, options.publishTimeoutMs ?? 5_000);
  const backoff = { baseMs: Math.max(0, options.retryBaseMs ?? 100), maxMs: 0 };
  backoff.maxMs = Math.max(backoff.baseMs, options.retryMaxMs ?? 5_000);
  const { logger, onError } = options;
  const random = deps.random ?? Math.random;
  const js: JetStreamClient = jetstream(nc, { timeout: publishTimeoutMs });

  const stats: NatsUsageSinkStats = { recorded: 0, acked: 0, duplicates: 0, failedPublishes: 0 };
  let queue: Entry[] = [];
  let seq = 0;
  let writing = false;
  let scheduled = false;
  let waiters: { target: number; resolve: () => void }[] = [];
  let wasSaturated = false;
  let stopped = false;
  let wakeRetry: (() => void) | undefined;
  let closing: Promise<NatsUsageSinkCloseResult> | undefined;
  let closed = false;

  /** True when every record with seq ≤ target has a PubAck (the queue stays in seq order). */
  const doneUpTo = (target: number) => queue.length === 0 || queue[0].seq > target;

  function settleWaiters(): void {
    if (waiters.length === 0) return;
    const still: typeof waiters = [];
    for (const w of waiters) {
      if (doneUpTo(w.target)) w.resolve();
      else still.push(w);
    }
    waiters = still;
  }

  function schedule(): void {
    if (writing || scheduled || stopped || queue.length === 0) return;
    scheduled = true;
    // A later macrotask: record() does no I/O, and records recorded in the same tick share a round.
    setImmediate(() => {
      scheduled = false;
      if (!writing && !stopped && queue.length > 0) void run();
    });
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
        const round = queue.slice(0, maxInFlight);
        const results = await Promise.allSettled(
          round.map((e) =>
            js.publish(e.subject, e.data, { msgID: e.msgId, headers: traceHeadersToNats(e.trace), timeout: publishTimeoutMs }),
          ),
        );
        const keep: Entry[] = [];
        let firstError: unknown;
        results.forEach((r, i) => {
          if (r.status === 'fulfilled') {
            stats.acked++;
            if (r.value.duplicate) stats.duplicates++;
          } else {
            stats.failedPublishes++;
            firstError ??= r.reason;
            keep.push(round[i]);
          }
        });
        queue = [...keep, ...queue.slice(round.length)];
        settleWaiters();
        if (wasSaturated && queue.length < capacity) wasSaturated = false;
        if (keep.length === 0) {
          attempt = 0;
          continue;
        }
        attempt++;
        const failure: UsagePublishFailure = { attempt, failed: keep.length, pending: queue.length, retryInMs: retryDelayMs(attempt, backoff, random) };
        if (isLogWorthyAttempt(attempt)) logger?.warn({ err: firstError, ...failure }, 'usage publish failed; will retry');
        try {
          onError?.(firstError, failure);
        } catch {
          // A faulty metrics hook must not stop the publisher.
        }
        await sleep(failure.retryInMs);
      }
    } finally {
      writing = false;
    }
    schedule();
  }

  function flush(): Promise<void> {
    if (doneUpTo(seq)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      waiters.push({ target: seq, resolve });
      schedule();
    });
  }

  return {
    record(record) {
      if (closed) throw new WeirError('shutting_down', 'the usage sink is closed');
      const fault = usageRecordFault(record);
      if (fault) throw new WeirError('internal', `malformed usage record: ${fault}`);
      queue.push({
        seq: ++seq,
        subject: usageSubject(subjectPrefix, record.tenantId),
        msgId: record.generationId,
        data: encodeUsageRecord(record),
        trace: captureTraceHeaders(),
      });
      stats.recorded++;
      if (!wasSaturated && queue.length >= capacity) {
        wasSaturated = true;
        logger?.warn({ pending: queue.length, capacity }, 'usage sink saturated; new requests should be refused');
      }
      schedule();
    },

    flush,
    pending: () => queue.length,
    saturated: () => queue.length >= capacity,
    stats: () => ({ ...stats }),

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
        const drain = async () => {
          while (!doneUpTo(seq) && !timedOut) await (expired ? Promise.race([flush(), expired]) : flush());
        };
        await drain();
        closed = true;
        await drain();
        clearTimeout(timeout);
        if (queue.length > 0) {
          stopped = true;
          wakeRetry?.();
          for (const w of waiters) w.resolve();
          waiters = [];
          logger?.error({ unwritten: queue.length }, 'usage sink closed with records not published');
        }
        return { unwritten: queue.length };
      })();
      return closing;
    },
  };
}

import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
  JetStreamApiError,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { WeirError, isLogWorthyAttempt, retryDelayMs } from '@weir/core';
import type { MessagingLogger } from '@weir/messaging';
import { USAGE_STREAM } from './usage-stream';

/** Options for {@link createJetStreamBatchSource} (and the usage and settlement sources built on it). */
export interface NatsUsageSourceOptions {
  /** The usage stream. Default `WEIR_USAGE`. */
  stream?: string;
  /** Durable consumer name, shared by every ledger instance (they split the work). Default `weir-ledger`. */
  durable?: string;
  /** Most records per handler call. Default 256. */
  batchSize?: number;
  /**
   * How long a batch that is not full waits for more messages before it is handed over (ms).
   * A few ms turn a trickle of one-message batches (one database transaction each) into fewer,
   * larger ones, at the price of that much delay before the records are written. Default 0:
   * a batch is whatever arrived by the time the previous one was done.
   */
  lingerMs?: number;
  /**
   * How long JetStream waits for an ack before redelivering (ms). While the handler runs, the
   * source tells JetStream it is still working every `ackWaitMs / 3`, so a slow handler is not
   * redelivered behind its back. Default 30,000.
   */
  ackWaitMs?: number;
  /** Unacknowledged messages JetStream lets the consumer hold (all instances together). Default `4 × batchSize`. */
  maxAckPending?: number;
  /** Redelivery delay after a handler rejection (ms), doubling per delivery. Default 500. */
  retryBaseMs?: number;
  /** Longest redelivery delay (ms). Default 30,000. */
  retryMaxMs?: number;
  /** Lifetime of each pull request (ms, ≥ 1,000); the client renews them. Default 30,000. */
  pullExpiresMs?: number;
  /** Handler rejections, malformed messages and consumer trouble are logged here (never payloads). Default: silent. */
  logger?: MessagingLogger;
  /** Called for each malformed message (after it is logged and acked). Must not throw. */
  onMalformed?: (info: MalformedUsageMessage) => void;
}

/** A message a source could not decode (it was acked and skipped). */
export interface MalformedUsageMessage {
  subject: string;
  /** Stream sequence. */
  streamSeq: number;
  /** Why it was refused (names a field, never a value). */
  reason: string;
}

/** Dependencies of the JetStream sources. */
export interface NatsUsageSourceDeps {
  /** Uniform [0, 1) source for redelivery jitter. Default `Math.random`. */
  random?: () => number;
}

/** Counters of a JetStream source since it was created. */
export interface NatsUsageSourceStats {
  /** Handler calls that resolved. */
  batches: number;
  /** Records handed to a handler that resolved, and acked. */
  acked: number;
  /** Messages negatively acknowledged (handler rejected; or buffered at stop). */
  nakked: number;
  /** Malformed messages acked and skipped. */
  malformed: number;
}

/** What a decoder makes of one message: a value and its de-duplication key, or why it was refused. */
export type BatchDecodeResult<T> = { ok: true; value: T; key: string } | { ok: false; reason: string };

/** Where a batch came from: the highest stream sequence in it. */
export interface BatchInfo {
  lastSequence: number;
}

/** A source of decoded values over a JetStream durable pull consumer, delivered in batches. */
export interface JetStreamBatchSource<T> {
  /**
   * Creates the durable consumer if missing (explicit acks, deliver all, unlimited
   * deliveries) or updates its `ackWaitMs` / `maxAckPending`, then delivers batches to `handler`
   * one at a time. May be called again after {@link stop}.
   * @throws WeirError `internal` when already started.
   * @throws the JetStream API error when the stream does not exist or the server refuses.
   */
  start(handler: (values: readonly T[], info: BatchInfo) => Promise<void>): Promise<void>;
  /**
   * Stops pulling, waits for the batch in flight to be handled and acked (or nakked), and
   * nakks (no delay) messages received but not yet handed over, so another instance gets them
   * at once. Messages the server had sent that had not arrived are redelivered after
   * `ackWaitMs`. Idempotent; does not close the NATS connection.
   */
  stop(): Promise<void>;
  /** Counters since creation. */
  stats(): NatsUsageSourceStats;
}

const NS_PER_MS = 1_000_000;

/**
 * Creates a batch source over a JetStream stream: at-least-once delivery of decoded values in
 * batches. A message is acked (a plain ack: a lost one only means a redelivery) only after the
 * handler resolved for its batch; when the handler rejects, the batch and everything buffered behind it
 * are nakked with a delay of `min(retryMaxMs, retryBaseMs × 2^(deliveries−1))` ms, so JetStream
 * redelivers them. A crash before the ack redelivers too; the handler's effect must therefore be
 * idempotent. Within a batch, values are unique by their decoder's key (a redelivered copy is
 * acked with its twin). A malformed message is logged, counted, acked and skipped: it can never
 * wedge the consumer.
 */
export function createJetStreamBatchSource<T>(
  nc: NatsConnection,
  decode: (data: Uint8Array) => BatchDecodeResult<T>,
  options: NatsUsageSourceOptions = {},
  deps: NatsUsageSourceDeps = {},
): JetStreamBatchSource<T> {
  const stream = options.stream ?? USAGE_STREAM;
  const durable = options.durable ?? 'weir-ledger';
  const batchSize = Math.max(1, options.batchSize ?? 256);
  const ackWaitMs = Math.max(1_000, options.ackWaitMs ?? 30_000);
  const maxAckPending = Math.max(batchSize, options.maxAckPending ?? 4 * batchSize);
  const backoff = { baseMs: Math.max(0, options.retryBaseMs ?? 500), maxMs: 0 };
  backoff.maxMs = Math.max(backoff.baseMs, options.retryMaxMs ?? 30_000);
  const pullExpiresMs = Math.max(1_000, options.pullExpiresMs ?? 30_000);
  const lingerMs = Math.max(0, options.lingerMs ?? 0);
  const { logger, onMalformed } = options;
  const random = deps.random ?? Math.random;
  const stats: NatsUsageSourceStats = { batches: 0, acked: 0, nakked: 0, malformed: 0 };

  let run: { messages: ConsumerMessages; done: Promise<void>; stop: () => void } | undefined;
  let starting = false;

  async function ensureConsumer(): Promise<void> {
    const jsm = await jetstreamManager(nc);
    const wanted = { ack_wait: ackWaitMs * NS_PER_MS, max_ack_pending: maxAckPending };
    try {
      const info = await jsm.consumers.info(stream, durable);
      if (info.config.ack_wait !== wanted.ack_wait || info.config.max_ack_pending !== wanted.max_ack_pending) {
        await jsm.consumers.update(stream, durable, wanted);
      }
      return;
    } catch (error) {
      if (!(error instanceof JetStreamApiError) || error.code !== 10014) throw error;
    }
    await jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      max_deliver: -1,
      ...wanted,
    });
  }

  async function handleBatch(
    msgs: JsMsg[],
    handler: (values: readonly T[], info: BatchInfo) => Promise<void>,
    buffer: JsMsg[],
  ): Promise<void> {
    const records: T[] = [];
    const carrying: JsMsg[] = [];
    const seen = new Set<string>();
    for (const m of msgs) {
      const decoded = decode(m.data);
      if (!decoded.ok) {
        const info: MalformedUsageMessage = { subject: m.subject, streamSeq: m.seq, reason: decoded.reason };
        stats.malformed++;
        logger?.error({ stream, durable, ...info }, 'malformed usage message; acked and skipped');
        quietly(() => m.ack());
        try {
          onMalformed?.(info);
        } catch {
          // A faulty metrics hook must not stop the consumer.
        }
        continue;
      }
      carrying.push(m);
      if (seen.has(decoded.key)) continue;
      seen.add(decoded.key);
      records.push(decoded.value);
    }
    if (records.length === 0) return;
    const info: BatchInfo = { lastSequence: Math.max(...carrying.map((m) => m.seq)) };

    const keepAlive = setInterval(() => carrying.forEach((m) => quietly(() => m.working())), Math.max(300, Math.floor(ackWaitMs / 3)));
    try {
      await Promise.resolve().then(() => handler(records, info));
    } catch (error) {
      const deliveries = Math.max(...carrying.map((m) => m.info.deliveryCount));
      const delay = retryDelayMs(deliveries, backoff, random);
      // Everything buffered behind the batch backs off too: the store is likely down.
      const rest = buffer.splice(0, buffer.length);
      for (const m of [...carrying, ...rest]) quietly(() => m.nak(delay));
      stats.nakked += carrying.length + rest.length;
      if (isLogWorthyAttempt(deliveries)) {
        logger?.warn({ stream, durable, err: error, deliveries, batchSize: records.length, retryInMs: delay }, 'usage handler rejected a batch; nakked for redelivery');
      }
      return;
    } finally {
      clearInterval(keepAlive);
    }
    stats.batches++;
    // A plain ack, not a confirmed one (`ackAck`: a request per message, each with its own
    // inbox, timer and stack-trace Error): a lost ack is harmless — JetStream redelivers after
    // ackWait and the insert is idempotent.
    let failed = 0;
    for (const m of carrying) {
      try {
        m.ack();
      } catch {
        failed++;
      }
    }
    stats.acked += carrying.length - failed;
    if (failed > 0) {
      // Not lost: JetStream redelivers after ackWait and the insert is idempotent.
      logger?.warn({ stream, durable, failed }, 'usage ack not sent; the records may be redelivered');
    }
  }

  async function watchStatus(messages: ConsumerMessages): Promise<void> {
    try {
      for await (const s of messages.status()) {
        switch (s.type) {
          case 'heartbeats_missed':
          case 'no_responders':
          case 'exceeded_limits':
            logger?.warn({ stream, durable, type: s.type }, 'usage consumer status');
            break;
          case 'consumer_not_found':
          case 'stream_not_found':
          case 'consumer_deleted':
            logger?.error({ stream, durable, type: s.type }, 'usage consumer status');
            break;
          default:
            break;
        }
      }
    } catch {
      // The status iterator ends with the messages iterator.
    }
  }

  return {
    async start(handler) {
      if (run || starting) throw new WeirError('internal', 'the JetStream source is already started');
      starting = true;
      try {
        await ensureConsumer();
        const consumer = await jetstream(nc).consumers.get(stream, durable);
        const messages = await consumer.consume({ max_messages: batchSize, expires: pullExpiresMs });
        void watchStatus(messages);

        const buffer: JsMsg[] = [];
        let stopping = false;
        let pumpDone = false;
        let wake: (() => void) | undefined;
        const signal = () => {
          wake?.();
          wake = undefined;
        };
        const pump = (async () => {
          try {
            for await (const m of messages) {
              buffer.push(m);
              signal();
            }
          } catch (error) {
            logger?.error({ stream, durable, err: error }, 'usage consumer ended');
          } finally {
            pumpDone = true;
            signal();
          }
        })();
        const processor = (async () => {
          while (!stopping) {
            if (buffer.length === 0) {
              if (pumpDone) break;
              await new Promise<void>((resolve) => (wake = resolve));
              // Let the pump take in what already arrived, so a burst becomes one batch.
              await new Promise((resolve) => setImmediate(resolve));
              // Then, with a linger, wait a little for more (a stop or a full batch ends the wait).
              const until = Date.now() + lingerMs;
              while (buffer.length > 0 && buffer.length < batchSize && !stopping && !pumpDone) {
                const left = until - Date.now();
                if (left <= 0) break;
                await new Promise<void>((resolve) => {
                  const timer = setTimeout(resolve, left);
                  wake = () => {
                    clearTimeout(timer);
                    resolve();
                  };
                });
              }
              continue;
            }
            await handleBatch(buffer.splice(0, batchSize), handler, buffer);
          }
        })();
        run = {
          messages,
          done: (async () => {
            await processor;
            await pump;
            const rest = buffer.splice(0, buffer.length);
            for (const m of rest) quietly(() => m.nak());
            stats.nakked += rest.length;
            await nc.flush().catch(() => undefined);
          })(),
          stop: () => {
            stopping = true;
            // Stop pulling now; what already arrived is yielded to the pump, then nakked.
            messages.stop();
            signal();
          },
        };
      } finally {
        starting = false;
      }
    },

    async stop() {
      const current = run;
      if (!current) return;
      current.stop();
      await current.done;
      if (run === current) run = undefined;
    },

    stats: () => ({ ...stats }),
  };
}

/**
 * Runs an ack/nak/working call that may throw on a closed connection. Swallowing is safe: an
 * unacknowledged message is redelivered after ackWait, and the insert is idempotent.
 */
function quietly(fn: () => void): void {
  try {
    fn();
  } catch {
    // See above.
  }
}

import { context } from '@opentelemetry/api';
import { headers as natsHeaders, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import type { Topic } from '@weir/core';
import type { MessagingLogger } from '@weir/messaging';
import { extractTraceContext, injectTraceHeaders } from './trace-headers';
import type { TopicCodec } from './topic-codecs';

/** Options for {@link createNatsTopic}. */
export interface NatsTopicOptions {
  /** Undecodable messages, throwing handlers and publish faults are logged here (never payloads). Default: silent. */
  logger?: MessagingLogger;
  /** Called when a handler throws or a message cannot be decoded (for metrics). Must not throw. */
  onError?: (error: unknown, kind: 'decode' | 'handler' | 'publish') => void;
}

/**
 * A {@link Topic} over core NATS (at-most-once fan-out, no JetStream): every subscription in
 * every process receives every message published on `subject` after the server registered
 * it. Used for cancellation (`weir.cancel`) and replica health (`weir.health`), where a lost
 * message is tolerable (the sender has a timeout or a later event supersedes it) and latency
 * matters.
 *
 * `publish` encodes with `codec`, adds `traceparent` / `tracestate` from the active OTel
 * context, and hands the message to the client, which buffers it while reconnecting; it never
 * throws (an encoding or closed-connection fault is logged). Each `subscribe` opens its own
 * NATS subscription; the handler runs inside the context extracted from the message's
 * headers, so its spans join the publisher's trace. A message that fails to decode, or a
 * handler that throws, is logged and skipped; the subscription lives on. A subscription is
 * registered with the server asynchronously: to be sure it is in place before publishing from
 * elsewhere, `await nc.flush()`.
 */
export function createNatsTopic<T>(nc: NatsConnection, subject: string, codec: TopicCodec<T>, options: NatsTopicOptions = {}): Topic<T> {
  const { logger, onError } = options;
  const report = (error: unknown, kind: 'decode' | 'handler' | 'publish') => {
    logger?.warn({ subject, err: error, kind }, 'nats topic fault');
    try {
      onError?.(error, kind);
    } catch {
      // A faulty metrics hook must not break the topic.
    }
  };

  return {
    publish(message) {
      try {
        const h = natsHeaders();
        injectTraceHeaders(h);
        nc.publish(subject, codec.encode(message), { headers: h });
      } catch (error) {
        report(error, 'publish');
      }
    },

    subscribe(handler) {
      let sub: Subscription | undefined;
      try {
        sub = nc.subscribe(subject, {
          callback: (err, msg) => {
            if (err) {
              report(err, 'handler');
              return;
            }
            let value: T;
            try {
              value = codec.decode(msg.data);
            } catch (error) {
              report(error, 'decode');
              return;
            }
            try {
              context.with(extractTraceContext(msg.headers), () => handler(value));
            } catch (error) {
              report(error, 'handler');
            }
          },
        });
      } catch (error) {
        // A closed connection: nothing will ever arrive; the unsubscribe below is a no-op.
        report(error, 'handler');
      }
      let done = false;
      return () => {
        if (done) return;
        done = true;
        try {
          sub?.unsubscribe();
        } catch {
          // Already closed with its connection.
        }
      };
    },
  };
}

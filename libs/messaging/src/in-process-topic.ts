import type { Topic } from '@weir/core';

/** Options for {@link createInProcessTopic}. */
export interface InProcessTopicOptions {
  /**
   * Called when a subscriber's handler throws (for logging or metrics); the message is not
   * passed, so a logger wired here cannot leak payloads. Must not throw. Default: ignored.
   */
  onHandlerError?: (error: unknown) => void;
}

/**
 * A {@link Topic} inside one process (the all-in-one composition): `publish` calls every
 * handler subscribed at that moment, synchronously and in subscription order, before it
 * returns. A handler that throws is isolated: the error goes to `onHandlerError` and the
 * remaining handlers still run. Handlers added or removed during a publish take effect from
 * the next publish. The returned unsubscribe function is idempotent.
 */
export function createInProcessTopic<T>(options: InProcessTopicOptions = {}): Topic<T> {
  const { onHandlerError } = options;
  // Copy-on-write: publish iterates a snapshot, so (un)subscribing inside a handler is safe.
  let handlers: ReadonlyArray<(message: T) => void> = [];

  return {
    publish(message) {
      for (const handler of handlers) {
        try {
          handler(message);
        } catch (error) {
          try {
            onHandlerError?.(error);
          } catch {
            // A faulty error hook must not stop the fan-out.
          }
        }
      }
    },
    subscribe(handler) {
      // Wrap so the same function subscribed twice gets two independent subscriptions.
      const entry = (message: T) => handler(message);
      handlers = [...handlers, entry];
      return () => {
        handlers = handlers.filter((h) => h !== entry);
      };
    },
  };
}

/**
 * Bridges a callback producer (node-llama-cpp's `onTextChunk`) to an async iterator. The
 * producer cannot be paused, so items wait here until the consumer pulls them; the queue
 * only ever holds what was produced and not yet consumed (never the whole answer unless the
 * consumer stops pulling).
 */
export interface EventQueue<T> {
  /** Adds an item; ignored after `close`/`fail`. */
  push(item: T): void;
  /** Ends the iteration after the queued items. */
  close(): void;
  /** Ends the iteration with `error` after the queued items. */
  fail(error: unknown): void;
  /** Pulls the next item; `done` after close; rejects after fail. */
  next(): Promise<IteratorResult<T, undefined>>;
}

/** Creates an unbounded single-consumer {@link EventQueue}. */
export function createEventQueue<T>(): EventQueue<T> {
  const items: T[] = [];
  let finished = false;
  let failure: { error: unknown } | undefined;
  let waiter: ((value: void) => void) | undefined;

  const wake = (): void => {
    const w = waiter;
    waiter = undefined;
    w?.();
  };

  return {
    push(item) {
      if (finished) return;
      items.push(item);
      wake();
    },
    close() {
      finished = true;
      wake();
    },
    fail(error) {
      if (finished) return;
      finished = true;
      failure = { error };
      wake();
    },
    async next() {
      for (;;) {
        if (items.length > 0) return { done: false, value: items.shift() as T };
        if (failure) throw failure.error;
        if (finished) return { done: true, value: undefined };
        await new Promise<void>((resolve) => (waiter = resolve));
      }
    },
  };
}

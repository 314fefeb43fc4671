/**
 * A single-consumer async queue: the gRPC stream pushes without awaiting, the consumer
 * iterates. The stream is drained whether or not anyone reads, so `done` resolves even when
 * the caller only awaits the outcome. Memory is bounded by the generation: at most
 * `maxOutputTokens` deltas plus one end.
 */
export interface EventQueue<T> extends AsyncIterable<T> {
  push(value: T): void;
  /** No more values; iteration finishes once drained. */
  end(): void;
}

/** Creates an {@link EventQueue}. Iterating twice throws. */
export function createEventQueue<T>(): EventQueue<T> {
  const items: T[] = [];
  let ended = false;
  let iterated = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  return {
    push(value) {
      if (ended) return;
      items.push(value);
      notify();
    },
    end() {
      ended = true;
      notify();
    },
    async *[Symbol.asyncIterator]() {
      if (iterated) throw new Error('this event stream has one consumer');
      iterated = true;
      for (;;) {
        if (items.length > 0) {
          yield items.shift() as T;
          continue;
        }
        if (ended) return;
        await new Promise<void>((resolve) => (wake = resolve));
      }
    },
  };
}

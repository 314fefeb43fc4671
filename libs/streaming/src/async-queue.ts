/**
 * A single-consumer async queue: the producer pushes without awaiting, the consumer iterates.
 * Used to decouple the relay's pump (which must finish and bill even if nobody reads) from
 * the HTTP writer. Memory is bounded by the producer: a generation yields at most
 * `maxOutputTokens` deltas plus one end.
 */
export interface AsyncQueue<T> extends AsyncIterable<T> {
  push(value: T): void;
  /** No more values; the iterator finishes once drained. */
  end(): void;
}

/** Creates an {@link AsyncQueue}. Iterating twice is an error. */
export function createAsyncQueue<T>(): AsyncQueue<T> {
  const items: T[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  let iterated = false;
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
      if (iterated) throw new Error('AsyncQueue supports one consumer');
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

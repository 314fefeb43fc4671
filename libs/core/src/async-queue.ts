/**
 * A single-consumer async queue: a producer that cannot wait (an engine callback, a gRPC
 * stream, the relay's pump) pushes without awaiting; the consumer pulls with `next()` or
 * iterates. It holds only what was produced and not yet consumed; producers bound it (a
 * generation yields at most `maxOutputTokens` deltas plus one end).
 */
export interface AsyncQueue<T> extends AsyncIterable<T> {
  /** Adds an item; ignored after `end`/`fail`. */
  push(item: T): void;
  /** Ends the iteration after the queued items. */
  end(): void;
  /** Ends the iteration with `error` after the queued items. */
  fail(error: unknown): void;
  /** The next item; `done` after `end`; rejects after `fail` once the queued items are taken. */
  next(): Promise<IteratorResult<T, undefined>>;
}

/** Creates an {@link AsyncQueue}. Iterating it twice throws. */
export function createAsyncQueue<T>(): AsyncQueue<T> {
  const items: T[] = [];
  let closed = false;
  let failure: { error: unknown } | undefined;
  let iterated = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const next = async (): Promise<IteratorResult<T, undefined>> => {
    for (;;) {
      if (items.length > 0) return { done: false, value: items.shift() as T };
      if (failure) throw failure.error;
      if (closed) return { done: true, value: undefined };
      await new Promise<void>((resolve) => (wake = resolve));
    }
  };
  return {
    push(item) {
      if (closed) return;
      items.push(item);
      notify();
    },
    end() {
      closed = true;
      notify();
    },
    fail(error) {
      if (closed) return;
      closed = true;
      failure = { error };
      notify();
    },
    next,
    async *[Symbol.asyncIterator]() {
      if (iterated) throw new Error('this queue has one consumer');
      iterated = true;
      for (;;) {
        const r = await next();
        if (r.done) return;
        yield r.value;
      }
    },
  };
}

/**
 * A single-consumer async queue: a producer that cannot wait (an engine callback, a gRPC
 * stream, the relay's pump) pushes without awaiting; the consumer pulls with `next()` or
 * iterates, or takes everything queued at once with `nextBatch()`. It holds only what was
 * produced and not yet consumed; producers bound it (a generation yields at most
 * `maxOutputTokens` deltas plus one end).
 */
export interface AsyncQueue<T> extends BatchedAsyncIterable<T> {
  /** Adds an item; ignored after `end`/`fail`. */
  push(item: T): void;
  /** Ends the iteration after the queued items. */
  end(): void;
  /** Ends the iteration with `error` after the queued items. */
  fail(error: unknown): void;
  /** The next item; `done` after `end`; rejects after `fail` once the queued items are taken. */
  next(): Promise<IteratorResult<T, undefined>>;
}

/**
 * An async iterable that can also hand over everything available at once. `nextBatch()`
 * resolves with at least one item, or undefined at the end (rejects like the iterator after a
 * failure). A consumer waiting for a batch is woken once per event-loop turn — after the
 * turn's promise jobs ran — so the items a producer pushed in one chain of promise jobs (the
 * deltas of one upstream read) arrive together: one wake and one hand-over per turn rather
 * than a promise per item. Mixing `nextBatch` with iteration on one queue is not supported.
 */
export interface BatchedAsyncIterable<T> extends AsyncIterable<T> {
  nextBatch(): Promise<readonly T[] | undefined>;
  /** Ends a batch consumer's reading early (what `return()` is to an iterator). Default: nothing to close. */
  closeBatches?(): Promise<void>;
}

/**
 * Calls `each` with the items of `source` in order, a batch at a time when `source` offers
 * `nextBatch()` ({@link BatchedAsyncIterable}), else one by one from its iterator (sync
 * iterables too). `each` may return a promise: the next batch is read once it settles. `each` returns `false` to stop early: the source is then closed (its
 * iterator's `return()`, or `closeBatches()`), as a `break` out of `for await` would; so it is
 * when `each` throws (rethrown). Resolves at the end; rejects with the source's error.
 */
export async function forEachBatch<T>(source: AsyncIterable<T> | Iterable<T>, each: (items: readonly T[]) => boolean | void | Promise<boolean | void>): Promise<void> {
  const batched = source as Partial<BatchedAsyncIterable<T>>;
  if (typeof batched.nextBatch === 'function') {
    for (let items = await batched.nextBatch(); items !== undefined; items = await batched.nextBatch()) {
      let go: boolean | void | Promise<boolean | void>;
      try {
        go = each(items);
        // An asynchronous consumer (output moderation) is awaited before the next batch is read.
        if (go instanceof Promise) go = await go;
      } catch (err) {
        await batched.closeBatches?.();
        throw err;
      }
      if (go === false) {
        await batched.closeBatches?.();
        return;
      }
    }
    return;
  }
  for await (const item of source) {
    let go = each([item]);
    if (go instanceof Promise) go = await go;
    if (go === false) return;
  }
}

/**
 * Presents an async generator of batches as a {@link BatchedAsyncIterable}: batch consumers
 * take one batch per `nextBatch()` (one promise per batch, not per item); iterating yields the
 * items one by one (less `options.skipWhenIterating`). Either way, stopping early closes the
 * generator (its `finally` runs).
 */
export function batchedIterable<T>(batches: AsyncGenerator<readonly T[], void, undefined>, options: BatchedIterableOptions<T> = {}): BatchedAsyncIterable<T> {
  const { skipWhenIterating } = options;
  return {
    async nextBatch() {
      const r = await batches.next();
      return r.done ? undefined : r.value;
    },
    async closeBatches() {
      await batches.return(undefined);
    },
    async *[Symbol.asyncIterator]() {
      for await (const batch of batches) {
        for (const item of batch) if (!skipWhenIterating?.(item)) yield item;
      }
    },
  };
}

/** Options of {@link batchedIterable}. */
export interface BatchedIterableOptions<T> {
  /**
   * Items an item-by-item reader no longer gets, checked as each is about to be yielded (e.g.
   * an engine's deltas once its request was aborted — the reader's own doing, between two items
   * of one batch). Batch consumers get whole batches. Default none.
   */
  skipWhenIterating?: (item: T) => boolean;
}

/** Creates an {@link AsyncQueue}. Iterating it twice throws. */
export function createAsyncQueue<T>(): AsyncQueue<T> {
  let items: T[] = [];
  let head = 0;
  let closed = false;
  let failure: { error: unknown } | undefined;
  let iterated = false;
  let wake: (() => void) | undefined;
  // A batch consumer's wake waits for the end of the turn (see BatchedAsyncIterable).
  let batchWake: (() => void) | undefined;
  let batchWakeQueued = false;
  const wakeBatch = () => {
    batchWakeQueued = false;
    const w = batchWake;
    batchWake = undefined;
    w?.();
  };
  const wakeBatchAtTurnEnd = () => process.nextTick(wakeBatch);
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
    if (batchWake && !batchWakeQueued) {
      batchWakeQueued = true;
      queueMicrotask(wakeBatchAtTurnEnd);
    }
  };
  const take = (): T => {
    const item = items[head] as T;
    items[head++] = undefined as T;
    if (head === items.length) {
      items = [];
      head = 0;
    }
    return item;
  };
  const next = async (): Promise<IteratorResult<T, undefined>> => {
    for (;;) {
      if (head < items.length) return { done: false, value: take() };
      if (failure) throw failure.error;
      if (closed) return { done: true, value: undefined };
      await new Promise<void>((resolve) => (wake = resolve));
    }
  };
  const nextBatch = async (): Promise<readonly T[] | undefined> => {
    for (;;) {
      if (head < items.length) {
        const out = head === 0 ? items : items.slice(head);
        items = [];
        head = 0;
        return out;
      }
      if (failure) throw failure.error;
      if (closed) return undefined;
      await new Promise<void>((resolve) => (batchWake = resolve));
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
    nextBatch,
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

import { batchedIterable, createAsyncQueue, forEachBatch } from './async-queue';

describe('createAsyncQueue', () => {
  it('hands items to a waiting consumer in order, then ends', async () => {
    const q = createAsyncQueue<number>();
    const seen: number[] = [];
    const consumer = (async () => {
      for await (const n of q) seen.push(n);
    })();
    q.push(1);
    await Promise.resolve();
    q.push(2);
    q.push(3);
    q.end();
    q.push(4); // ignored after end
    await consumer;
    expect(seen).toEqual([1, 2, 3]);
  });

  it('delivers queued items before a failure, then rejects', async () => {
    const q = createAsyncQueue<string>();
    q.push('a');
    q.fail(new Error('boom'));
    await expect(q.next()).resolves.toEqual({ done: false, value: 'a' });
    await expect(q.next()).rejects.toThrow('boom');
  });

  it('has one consumer', async () => {
    const q = createAsyncQueue<number>();
    q.end();
    for await (const _ of q) void _;
    await expect((async () => {
      for await (const _ of q) void _;
    })()).rejects.toThrow('one consumer');
  });

  it('hands a batch consumer everything pushed in one chain of promise jobs in one batch, then undefined at the end', async () => {
    const q = createAsyncQueue<number>();
    const batches: number[][] = [];
    const consumer = (async () => {
      for (let b = await q.nextBatch(); b !== undefined; b = await q.nextBatch()) batches.push([...b]);
    })();
    // A producer pushing from promise jobs, one per item (as an engine's deltas arrive).
    await (async () => {
      for (let i = 0; i < 5; i++) {
        q.push(i);
        await Promise.resolve();
      }
    })();
    await new Promise((r) => setImmediate(r));
    q.push(5);
    q.end();
    await consumer;
    expect(batches).toEqual([[0, 1, 2, 3, 4], [5]]);
  });

  it('rejects a batch consumer after the queued items when failed', async () => {
    const q = createAsyncQueue<string>();
    q.push('a');
    q.fail(new Error('boom'));
    await expect(q.nextBatch()).resolves.toEqual(['a']);
    await expect(q.nextBatch()).rejects.toThrow('boom');
  });

  it('forEachBatch reads a batched queue in batches and any other iterable item by item', async () => {
    const q = createAsyncQueue<number>();
    q.push(1);
    q.push(2);
    q.end();
    const fromQueue: number[][] = [];
    await forEachBatch(q, (b) => void fromQueue.push([...b]));
    expect(fromQueue).toEqual([[1, 2]]);
    async function* gen() {
      yield 'x';
      yield 'y';
    }
    const fromGen: string[][] = [];
    await forEachBatch(gen(), (b) => void fromGen.push([...b]));
    expect(fromGen).toEqual([['x'], ['y']]);
  });

  it('batchedIterable hands batch consumers whole batches and iterators single items, closing the source when either stops early', async () => {
    let closed = 0;
    async function* batches() {
      try {
        yield [1, 2, 3];
        yield [4];
        yield [5, 6];
      } finally {
        closed++;
      }
    }
    const seen: number[][] = [];
    await forEachBatch(batchedIterable(batches()), (b) => {
      seen.push([...b]);
      return b[0] !== 4;
    });
    expect(seen).toEqual([[1, 2, 3], [4]]);
    expect(closed).toBe(1);
    const items: number[] = [];
    for await (const n of batchedIterable(batches())) {
      items.push(n);
      if (n === 5) break;
    }
    expect(items).toEqual([1, 2, 3, 4, 5]);
    expect(closed).toBe(2);
  });

  it('batchedIterable skips what skipWhenIterating says for item-by-item readers only, and forEachBatch closes the source when its callback throws', async () => {
    let stop = false;
    async function* batches() {
      yield [1, 2, 3];
    }
    const items: number[] = [];
    for await (const n of batchedIterable(batches(), { skipWhenIterating: () => stop })) {
      items.push(n);
      if (n === 1) stop = true;
    }
    expect(items).toEqual([1]);
    let closed = false;
    async function* forever() {
      try {
        for (;;) yield [0];
      } finally {
        closed = true;
      }
    }
    await expect(
      forEachBatch(batchedIterable(forever()), () => {
        throw new Error('consumer failed');
      }),
    ).rejects.toThrow('consumer failed');
    expect(closed).toBe(true);
  });
});

import { createAsyncQueue } from './async-queue';

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
});

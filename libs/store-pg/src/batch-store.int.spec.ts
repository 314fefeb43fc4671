/**
 * The Postgres batch store on PGlite and on the machine's real Postgres: files in chunks scoped
 * to their tenant, batches and the item queue (leases, SKIP LOCKED between concurrent runners,
 * retry after a lease expires, fenced results: never two results or two counts for one item),
 * validation outcomes, cancel, expiry and finalization into output and error files.
 */
import { sql } from 'kysely';
import type { BatchStore, Caller, LeasedItem } from '@weir/core';
import { createPgBatchStore } from './batch-store';
import { createTestDatabase, type TestDatabase } from './testing';

const A = 'acme~00000000000000a1';
const B = 'beta~00000000000000b2';
const caller: Caller = { tenantId: 'acme', appId: 'app', apiKeyId: 'k1', tenantUid: A };

async function readAll(s: BatchStore, tenant: string, id: string): Promise<string> {
  const parts: Buffer[] = [];
  for await (const c of s.readFile(tenant, id)) parts.push(c);
  return Buffer.concat(parts).toString('utf8');
}

/** A batch of `n` items, validated and in progress. */
async function runningBatch(s: BatchStore, n: number, tenantKey = A, expiresAtS = 10_000_000_000): Promise<string> {
  const f = await s.createFile(tenantKey, 'batch', 'in.jsonl');
  await f.commit(0, n);
  const id = `batch_${Math.random().toString(36).slice(2)}`;
  await s.createBatch({ id, tenantKey, caller, endpoint: '/v1/chat/completions', inputFileId: f.id, completionWindow: '24h', metadata: null, createdAtS: 1, expiresAtS });
  const owner = 'v';
  const leased = await s.leaseBatch('validate', owner, 1_000, 60_000);
  expect(leased?.id).toBe(id);
  await s.addItems(
    id,
    Array.from({ length: n }, (_, i) => ({ index: i, customId: `c${i}`, body: { i } })),
  );
  await s.finishValidation(id, { total: n, model: 'm' }, 2);
  return id;
}

const line = (it: LeasedItem, ok = true) => ({ ok, line: JSON.stringify({ custom_id: it.customId, ok }), usage: { inputTokens: 3, outputTokens: 2, cachedTokens: 0 } });

describe.each([['pglite' as const], ['postgres' as const]])('pg batch store on %s', (kind) => {
  let database: TestDatabase;
  let s: BatchStore;
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
    s = createPgBatchStore(database.db, { outputChunkBytes: 40, finalizePageSize: 3 });
  }, 30_000);
  afterAll(() => database.close());
  beforeEach(async () => {
    await sql`DELETE FROM batches`.execute(database.db);
    await sql`DELETE FROM batch_files`.execute(database.db);
  });

  it('keeps a file in chunks, invisible until committed, and only for its tenant', async () => {
    const w = await s.createFile(A, 'batch', 'a.jsonl');
    await w.append(Buffer.from('{"a":1}\n'));
    await w.append(Buffer.from('{"b":2}\n'));
    expect(await s.getFile(A, w.id)).toBeUndefined();
    await w.commit(16, 2);
    expect(await s.getFile(A, w.id)).toMatchObject({ id: w.id, bytes: 16, lines: 2, purpose: 'batch', filename: 'a.jsonl' });
    expect(await readAll(s, A, w.id)).toBe('{"a":1}\n{"b":2}\n');
    expect(await s.getFile(B, w.id)).toBeUndefined();
    expect(await readAll(s, B, w.id)).toBe('');
    expect(await s.deleteFile(B, w.id)).toBe(false);
    expect((await s.listFiles(B, { limit: 10, order: 'desc' })).data).toEqual([]);
    expect(await s.deleteFile(A, w.id)).toBe(true);
    expect(await s.getFile(A, w.id)).toBeUndefined();
    const chunks = await sql<{ n: string }>`SELECT count(*) AS n FROM batch_file_chunks WHERE file_id = ${w.id}`.execute(database.db);
    expect(Number(chunks.rows[0].n)).toBe(0);
  });

  it('pages files and batches with `after`, newest first', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const w = await s.createFile(A, 'batch', `${i}.jsonl`);
      await w.commit(1, 1);
      ids.push(w.id);
    }
    // Created within the same second: still listed in creation order.
    const first = await s.listFiles(A, { limit: 2, order: 'desc' });
    const second = await s.listFiles(A, { limit: 2, order: 'desc', after: first.data[1].id });
    const third = await s.listFiles(A, { limit: 2, order: 'desc', after: second.data[1].id });
    const all = [...first.data, ...second.data, ...third.data].map((f) => f.id);
    expect(all).toEqual([...ids].reverse());
    const asc = await s.listFiles(A, { limit: 3, order: 'asc', after: ids[0] });
    expect(asc.data.map((f) => f.id)).toEqual(ids.slice(1, 4));
    expect([first.hasMore, second.hasMore, third.hasMore]).toEqual([true, true, false]);
    const batchIds = [await runningBatch(s, 1), await runningBatch(s, 1), await runningBatch(s, 1)];
    const p1 = await s.listBatches(A, { limit: 2 });
    const p2 = await s.listBatches(A, { limit: 2, after: p1.data[1].id });
    expect([...p1.data, ...p2.data].map((b) => b.id)).toEqual([...batchIds].reverse());
    expect([p1.hasMore, p2.hasMore]).toEqual([true, false]);
    expect((await s.listBatches(B, { limit: 10 })).data).toEqual([]);
  });

  it('leases each item to one runner, completes under the lease, and finalizes when all are done', async () => {
    const id = await runningBatch(s, 4);
    const a = await s.leaseItems('r1', 3, 10_000, 5_000);
    const b = await s.leaseItems('r2', 3, 10_000, 5_000);
    expect(a.map((i) => i.index)).toEqual([0, 1, 2]);
    expect(b.map((i) => i.index)).toEqual([3]);
    expect(await s.leaseItems('r3', 3, 10_000, 5_000)).toEqual([]);
    for (const it of [...a, ...b]) expect(await s.completeItem(it, line(it, it.index !== 2))).toBe(true);
    const done = await s.getBatch(A, id);
    expect(done).toMatchObject({ status: 'finalizing', finalStatus: 'completed', completed: 3, failed: 1, usage: { inputTokens: 12, outputTokens: 8, cachedTokens: 0 } });
    const f = await s.leaseBatch('finalize', 'fin', 10_000, 60_000);
    expect(f?.id).toBe(id);
    const final = await s.finalizeBatch(id, 'fin', () => 'never', 7);
    expect(final).toMatchObject({ status: 'completed', completedAtS: 7, completed: 3, failed: 1 });
    const out = await readAll(s, A, final?.outputFileId as string);
    expect(out.trim().split('\n').map((l) => JSON.parse(l).custom_id)).toEqual(['c0', 'c1', 'c3']);
    expect((await s.getFile(A, final?.outputFileId as string))?.lines).toBe(3);
    const err = await readAll(s, A, final?.errorFileId as string);
    expect(err.trim().split('\n').map((l) => JSON.parse(l).custom_id)).toEqual(['c2']);
    // The output spans several chunks (40 bytes each): read back whole and in order.
    const chunks = await sql<{ n: string }>`SELECT count(*) AS n FROM batch_file_chunks WHERE file_id = ${final?.outputFileId as string}`.execute(database.db);
    expect(Number(chunks.rows[0].n)).toBeGreaterThan(1);
  });

  it('shares the runners between running batches, round-robin, oldest first', async () => {
    const older = await runningBatch(s, 3);
    const newer = await runningBatch(s, 3, B);
    const got = await s.leaseItems('r', 4, 10_000, 5_000);
    expect(got.map((i) => [i.batchId, i.index])).toEqual(
      [
        [older, 0],
        [older, 1],
        [newer, 0],
        [newer, 1],
      ].sort((a, b) => (a[0] === b[0] ? (a[1] as number) - (b[1] as number) : a[0] < b[0] ? -1 : 1)),
    );
    expect(got.find((i) => i.batchId === newer)?.caller).toEqual(caller);
  });

  it('retries an item whose lease expired, and drops the late result of the runner that lost it', async () => {
    const id = await runningBatch(s, 1);
    const [first] = await s.leaseItems('dead', 1, 10_000, 1_000);
    expect(await s.leaseItems('r2', 1, 10_500, 1_000)).toEqual([]);
    const [again] = await s.leaseItems('r2', 1, 11_001, 1_000);
    expect(again).toMatchObject({ index: 0, attempts: 2 });
    expect(await s.renewItem(first, 11_002, 1_000)).toBe(false);
    expect(await s.completeItem(first, line(first))).toBe(false);
    expect(await s.completeItem(again, line(again))).toBe(true);
    expect(await s.completeItem(again, line(again))).toBe(false);
    expect(await s.getBatch(A, id)).toMatchObject({ completed: 1, failed: 0, usage: { inputTokens: 3 } });
  });

  it('gives a released item back without counting the attempt, runnable only from its time', async () => {
    await runningBatch(s, 1);
    const [it] = await s.leaseItems('r', 1, 10_000, 1_000);
    expect(await s.releaseItem(it, 20_000)).toBe(true);
    expect(await s.leaseItems('r', 1, 19_999, 1_000)).toEqual([]);
    const [back] = await s.leaseItems('r', 1, 20_000, 1_000);
    expect(back.attempts).toBe(1);
  });

  it('holds a paused batch’s items until the pause ends', async () => {
    const id = await runningBatch(s, 1);
    await s.pauseBatch(id, { reason: 'budget_exhausted', message: 'spent', untilMs: 50_000 });
    expect((await s.getBatch(A, id))?.paused).toEqual({ reason: 'budget_exhausted', message: 'spent', untilMs: 50_000 });
    expect(await s.leaseItems('r', 1, 49_999, 1_000)).toEqual([]);
    expect(await s.leaseItems('r', 1, 50_000, 1_000)).toHaveLength(1);
  });

  it('takes a validation run again (its first runner died) without duplicating items', async () => {
    const f = await s.createFile(A, 'batch', 'in.jsonl');
    await f.commit(1, 2);
    await s.createBatch({ id: 'batch_again', tenantKey: A, caller, endpoint: '/v1/embeddings', inputFileId: f.id, completionWindow: '24h', metadata: null, createdAtS: 1, expiresAtS: 99_999_999_999 });
    expect((await s.leaseBatch('validate', 'dead', 1_000, 1_000))?.id).toBe('batch_again');
    await s.addItems('batch_again', [{ index: 0, customId: 'a', body: {} }]);
    expect(await s.leaseBatch('validate', 'v2', 1_500, 1_000)).toBeUndefined();
    expect((await s.leaseBatch('validate', 'v2', 2_001, 1_000))?.id).toBe('batch_again');
    await s.addItems('batch_again', [
      { index: 0, customId: 'a', body: {} },
      { index: 1, customId: 'b', body: {} },
    ]);
    await s.finishValidation('batch_again', { total: 2, model: null }, 3);
    expect(await s.getBatch(A, 'batch_again')).toMatchObject({ status: 'in_progress', total: 2 });
    expect((await s.leaseItems('r', 5, 3_000, 1_000)).map((i) => i.customId)).toEqual(['a', 'b']);
  });

  it('fails a batch with its validation errors and runs none of its items', async () => {
    const f = await s.createFile(A, 'batch', 'in.jsonl');
    await f.commit(1, 1);
    await s.createBatch({ id: 'batch_bad', tenantKey: A, caller, endpoint: '/v1/embeddings', inputFileId: f.id, completionWindow: '24h', metadata: { k: 'v' }, createdAtS: 1, expiresAtS: 99 });
    await s.leaseBatch('validate', 'v', 1, 1_000);
    await s.addItems('batch_bad', [{ index: 0, customId: 'x', body: {} }]);
    const errors = [{ code: 'invalid_json_line', message: 'bad', param: null, line: 2 }];
    await s.finishValidation('batch_bad', { errors }, 5);
    expect(await s.getBatch(A, 'batch_bad')).toMatchObject({ status: 'failed', failedAtS: 5, errors, metadata: { k: 'v' } });
    expect(await s.leaseItems('r', 5, 10, 1_000)).toEqual([]);
  });

  it('cancels: a validating batch at once, a running one through cancelling with the rest as errors; never another tenant’s', async () => {
    const f = await s.createFile(A, 'batch', 'in.jsonl');
    await f.commit(1, 1);
    await s.createBatch({ id: 'batch_v', tenantKey: A, caller, endpoint: '/v1/embeddings', inputFileId: f.id, completionWindow: '24h', metadata: null, createdAtS: 1, expiresAtS: 99 });
    expect((await s.cancelBatch(B, 'batch_v', 3))).toBeUndefined();
    expect(await s.cancelBatch(A, 'batch_v', 3)).toMatchObject({ status: 'cancelled', cancelledAtS: 3 });
    const id = await runningBatch(s, 3);
    const [held] = await s.leaseItems('r', 1, 10_000, 5_000);
    expect(await s.cancelBatch(A, id, 4)).toMatchObject({ status: 'cancelling', cancellingAtS: 4 });
    expect(await s.leaseItems('r', 5, 10_001, 5_000)).toEqual([]);
    // Not finalized while an item is still held under a live lease.
    expect(await s.leaseBatch('finalize', 'fin', 10_002, 60_000)).toBeUndefined();
    expect(await s.completeItem(held, line(held))).toBe(true);
    expect((await s.leaseBatch('finalize', 'fin', 10_003, 60_000))?.id).toBe(id);
    const final = await s.finalizeBatch(id, 'fin', (c, i, st) => JSON.stringify({ custom_id: c, i, st }), 9);
    expect(final).toMatchObject({ status: 'cancelled', cancelledAtS: 9, completed: 1, failed: 2 });
    expect((await readAll(s, A, final?.errorFileId as string)).trim().split('\n').map((l) => JSON.parse(l))).toEqual([
      { custom_id: 'c1', i: 1, st: 'cancelled' },
      { custom_id: 'c2', i: 2, st: 'cancelled' },
    ]);
  });

  it('expires a running batch at its window and finalizes it as expired', async () => {
    const id = await runningBatch(s, 2, A, 100);
    const [it] = await s.leaseItems('r', 1, 10_000, 5_000);
    await s.completeItem(it, line(it));
    expect(await s.expireDue(99)).toBe(0);
    expect(await s.expireDue(100)).toBe(1);
    expect(await s.getBatch(A, id)).toMatchObject({ status: 'finalizing', finalStatus: 'expired' });
    await s.leaseBatch('finalize', 'fin', 10_001, 60_000);
    const final = await s.finalizeBatch(id, 'fin', (c, _i, st) => JSON.stringify({ custom_id: c, st }), 101);
    expect(final).toMatchObject({ status: 'expired', expiredAtS: 101, completed: 1, failed: 1 });
    expect(await readAll(s, A, final?.errorFileId as string)).toBe('{"custom_id":"c1","st":"expired"}\n');
  });

  if (kind === 'postgres') {
    it('hands every item to exactly one of several concurrent runners (SKIP LOCKED)', async () => {
      const id = await runningBatch(s, 60);
      const taken: number[] = [];
      await Promise.all(
        Array.from({ length: 4 }, async (_, r) => {
          for (;;) {
            const got = await s.leaseItems(`r${r}`, 5, 10_000, 60_000);
            if (got.length === 0) return;
            for (const it of got) {
              taken.push(it.index);
              expect(await s.completeItem(it, line(it))).toBe(true);
            }
          }
        }),
      );
      expect(taken.sort((x, y) => x - y)).toEqual(Array.from({ length: 60 }, (_, i) => i));
      expect(await s.getBatch(A, id)).toMatchObject({ completed: 60, failed: 0, status: 'finalizing' });
    });
  }
});

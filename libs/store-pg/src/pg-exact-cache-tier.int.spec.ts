/**
 * The Postgres exact cache tier (migration 0013) on PGlite and on the machine's real Postgres:
 * a stored answer comes back exactly, never across a partition, never after its TTL; an upsert
 * replaces; a tenant's entries are dropped alone; expired rows are purged.
 */
import type { CachedAnswer, CacheQuery } from '@weir/cache';
import { sql } from 'kysely';
import { createPgExactCacheTier } from './pg-exact-cache-tier';
import { createTestDatabase, type TestDatabase } from './testing';

const answer = (text: string): CachedAnswer => ({
  modelRevision: 'm@1',
  deltas: ['Once', ' upon', ` ${text} — ✓`],
  deltaToolCalls: [null, [{ index: 0, id: 'call_1', name: 'f', argumentsDelta: '{"a":' }], null],
  finishReason: 'stop',
  usage: { inputTokens: 3, outputTokens: 3, cachedInputTokens: 0 },
  storedAtMs: 1,
  originalTotalMs: 1234,
  originalTtftMs: 56,
});
const query = (tenantKey: string, key = 'k1'): CacheQuery => ({ partition: { tenantKey, revisionId: 'm@1', template: '', paramsKey: 'p'.repeat(64) }, exactKey: `${tenantKey}:${key}`, promptText: 'hi' });

describe.each([['pglite' as const], ['postgres' as const]])('pg exact cache tier on %s', (kind) => {
  let database: TestDatabase;
  let now = Date.parse('2026-12-07T12:00:00Z');
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
  }, 30_000);
  afterAll(() => database.close());
  beforeEach(async () => {
    await database.db.deleteFrom('response_cache').execute();
    now = Date.parse('2026-12-07T12:00:00Z');
  });
  const tier = () => createPgExactCacheTier(database.db, { now: () => now });

  it('returns the stored answer exactly, until its TTL', async () => {
    const t = tier();
    await t.store(query('acme~1'), answer('a time'), 10_000);
    await expect(t.lookup(query('acme~1'))).resolves.toEqual({ tier: 'exact', answer: answer('a time') });
    now += 9_999;
    await expect(t.lookup(query('acme~1'))).resolves.toBeDefined();
    now += 1;
    await expect(t.lookup(query('acme~1'))).resolves.toBeUndefined();
    await expect(t.purgeExpired()).resolves.toBe(1);
    await expect(t.purgeExpired()).resolves.toBe(0);
  });

  it('never answers another partition under the same exact key', async () => {
    const t = tier();
    const q = query('acme~1');
    await t.store(q, answer('x'), 60_000);
    for (const partition of [{ ...q.partition, tenantKey: 'other~2' }, { ...q.partition, revisionId: 'm@2' }, { ...q.partition, template: 'faq@1' }, { ...q.partition, paramsKey: 'q'.repeat(64) }]) {
      await expect(t.lookup({ ...q, partition })).resolves.toBeUndefined();
    }
  });

  it('an upsert replaces the answer and its expiry; dropTenant removes only that tenant', async () => {
    const t = tier();
    await t.store(query('acme~1'), answer('one'), 1_000);
    await t.store(query('acme~1'), answer('two'), 60_000);
    await t.store(query('other~2'), answer('three'), 60_000);
    now += 5_000;
    await expect(t.lookup(query('acme~1'))).resolves.toMatchObject({ answer: { deltas: ['Once', ' upon', ' two — ✓'] } });
    t.dropTenant('acme~1');
    const until = Date.now() + 5_000;
    while ((await database.db.selectFrom('response_cache').select('exact_key').where('tenant_key', '=', 'acme~1').execute()).length > 0) {
      if (Date.now() > until) throw new Error('tenant not dropped');
      await new Promise((r) => setTimeout(r, 10));
    }
    await expect(t.lookup(query('other~2'))).resolves.toBeDefined();
  });

  it('forget drops the one entry a query hits, and nothing else', async () => {
    const t = tier();
    await t.store(query('acme~1', 'f1'), answer('one'), 60_000);
    await t.store(query('acme~1', 'f2'), answer('two'), 60_000);
    t.forget?.(query('acme~1', 'f1'));
    const until = Date.now() + 5_000;
    while (await t.lookup(query('acme~1', 'f1'))) {
      if (Date.now() > until) throw new Error('entry not forgotten');
      await new Promise((r) => setTimeout(r, 10));
    }
    await expect(t.lookup(query('acme~1', 'f2'))).resolves.toBeDefined();
  });

  it('skips an answer larger than its entry limit', async () => {
    const t = createPgExactCacheTier(database.db, { now: () => now, maxEntryBytes: 100 });
    await t.store(query('acme~1'), answer('x'.repeat(200)), 60_000);
    await expect(t.lookup(query('acme~1'))).resolves.toBeUndefined();
  });

  const bytesOf = async (tenantKey?: string) => {
    let q = database.db.selectFrom('response_cache').select((eb) => eb.fn.coalesce(eb.fn.sum<number>('bytes'), eb.lit(0)).as('b'));
    if (tenantKey !== undefined) q = q.where('tenant_key', '=', tenantKey);
    return Number((await q.executeTakeFirstOrThrow()).b);
  };
  const keysOf = async (tenantKey: string) =>
    (await database.db.selectFrom('response_cache').select('exact_key').where('tenant_key', '=', tenantKey).orderBy('exact_key').execute()).map((r) => r.exact_key);

  it('a tenant past its byte cap loses its own oldest entries on the next store, never another tenant’s', async () => {
    const entryBytes = JSON.stringify(answer('e0')).length;
    // Room for three entries of this size per tenant, ten in all.
    const t = createPgExactCacheTier(database.db, { now: () => now, maxBytes: entryBytes * 10, maxBytesPerTenant: entryBytes * 3 + 1 });
    await t.store(query('other~2', 'o0'), answer('o0'), 60_000);
    for (let i = 0; i < 5; i++) {
      now += 1_000;
      await t.store(query('acme~1', `e${i}`), answer(`e${i}`), 60_000);
      expect(await bytesOf('acme~1')).toBeLessThanOrEqual(entryBytes * 3 + 1);
    }
    expect(await keysOf('acme~1')).toEqual(['acme~1:e2', 'acme~1:e3', 'acme~1:e4']);
    await expect(t.lookup(query('acme~1', 'e1'))).resolves.toBeUndefined();
    await expect(t.lookup(query('acme~1', 'e4'))).resolves.toBeDefined();
    // The other tenant's entry, stored first of all, is untouched.
    expect(await keysOf('other~2')).toEqual(['other~2:o0']);
    // Re-storing an existing key replaces it (counted once) and makes it the newest.
    now += 1_000;
    await t.store(query('acme~1', 'e2'), answer('e2'), 60_000);
    now += 1_000;
    await t.store(query('acme~1', 'e5'), answer('e5'), 60_000);
    expect(await keysOf('acme~1')).toEqual(['acme~1:e2', 'acme~1:e4', 'acme~1:e5']);
  });

  it('an entry larger than the tenant cap is not stored and evicts nothing', async () => {
    const entryBytes = JSON.stringify(answer('e0')).length;
    const t = createPgExactCacheTier(database.db, { now: () => now, maxBytes: entryBytes * 10, maxBytesPerTenant: entryBytes * 2 });
    await t.store(query('acme~1', 'a'), answer('e0'), 60_000);
    await t.store(query('acme~1', 'big'), answer('x'.repeat(entryBytes * 2)), 60_000);
    expect(await keysOf('acme~1')).toEqual(['acme~1:a']);
  });

  it('the purge trims the table to its total cap, oldest first, after deleting expired rows', async () => {
    const entryBytes = JSON.stringify(answer('e0')).length;
    const t = createPgExactCacheTier(database.db, { now: () => now, maxBytes: entryBytes * 4, maxBytesPerTenant: entryBytes * 4 });
    await t.store(query('gone~9', 'x'), answer('e0'), 500);
    for (const [tenant, key] of [['a~1', 'e0'], ['b~2', 'e1'], ['c~3', 'e2'], ['a~1', 'e3'], ['b~2', 'e4']] as const) {
      now += 1_000;
      await t.store(query(tenant, key), answer(key), 60_000);
    }
    // 6 rows, 1 expired; 5 live ones of which the total cap keeps the newest 4.
    await expect(t.purgeExpired()).resolves.toBe(2);
    expect(await bytesOf()).toBeLessThanOrEqual(entryBytes * 4);
    expect([...(await keysOf('a~1')), ...(await keysOf('b~2')), ...(await keysOf('c~3')), ...(await keysOf('gone~9'))]).toEqual(['a~1:e3', 'b~2:e1', 'b~2:e4', 'c~3:e2']);
    await expect(t.purgeExpired()).resolves.toBe(0);
  });

  it('the tenant sum of a store and the purge’s total can be served by their indexes (no table scan needed)', async () => {
    await database.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL enable_seqscan = off`.execute(trx);
      const explain = async (query: ReturnType<typeof sql>) => (await query.execute(trx)).rows.map((r) => Object.values(r as object)[0] as string).join('\n');
      const tenantPlan = await explain(sql`EXPLAIN SELECT exact_key, sum(bytes) OVER (ORDER BY stored_at DESC, exact_key DESC) FROM response_cache WHERE tenant_key = 'acme~1' AND exact_key <> 'k'`);
      expect(tenantPlan).toContain('response_cache_tenant_stored_idx');
      const totalPlan = await explain(sql`EXPLAIN SELECT exact_key, sum(bytes) OVER (ORDER BY stored_at DESC, exact_key DESC) FROM response_cache`);
      expect(totalPlan).toContain('response_cache_stored_idx');
    });
  });
});


/**
 * The Postgres exact cache tier (migration 0013) on PGlite and on the machine's real Postgres:
 * a stored answer comes back exactly, never across a partition, never after its TTL; an upsert
 * replaces; a tenant's entries are dropped alone; expired rows are purged.
 */
import type { CachedAnswer, CacheQuery } from '@weir/cache';
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
});

import { sql } from 'kysely';
import { hashApiKey, mintApiKey, newId, type UsageRecord, WeirError } from '@weir/core';
import { createBatchedUsageSink } from '@weir/ledger';
import { createApiKeyRepository } from './api-key-repository';
import { createCachedApiKeyStore } from './cached-api-key-store';
import { openDatabase, type WeirDatabase } from './database';
import { migrateToLatest } from './migrate';
import { createTenantRepository } from './tenant-repository';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from './testing';
import { createUsageRepository, MAX_ROWS_PER_INSERT } from './usage-repository';

// The same suite runs on embedded PGlite (in memory) and on the machine's real Postgres
// (a throwaway database per run, WEIR_TEST_DATABASE_URL overrides the server).
const backends: [string, () => Promise<{ database: WeirDatabase; cleanup(): Promise<void> }>][] = [
  [
    'pglite (in memory)',
    async () => {
      const database = await openDatabase();
      return { database, cleanup: () => database.close() };
    },
  ],
  [
    'postgres',
    async () => {
      const temp: TemporaryPostgresDatabase = await createTemporaryPostgresDatabase();
      const database = await openDatabase({ databaseUrl: temp.url, maxConnections: 4 });
      return {
        database,
        cleanup: async () => {
          await database.close();
          await temp.drop();
        },
      };
    },
  ],
];

let seq = 0;
function usageRecord(overrides: Partial<UsageRecord> = {}): UsageRecord {
  seq++;
  const finishedAt = new Date(Date.UTC(2026, 10, 1, 12, 0, 0) + seq * 1000);
  return {
    generationId: newId('gen'),
    requestId: `req-${seq}`,
    tenantId: 'acme',
    appId: 'acme-web',
    apiKeyId: 'key_1',
    route: 'chat.completions',
    modelAlias: 'stories',
    modelRevision: 'stories260k@1',
    inputTokens: 10,
    outputTokens: 20,
    cachedInputTokens: 0,
    costNanoUsd: 1234,
    status: 'completed',
    finishReason: 'stop',
    errorCode: null,
    queueMs: 1,
    ttftMs: 5,
    totalMs: 40,
    startedAt: new Date(finishedAt.getTime() - 40),
    finishedAt,
    ...overrides,
  };
}

describe.each(backends)('store-pg repositories on %s', (_name, open) => {
  let database: WeirDatabase;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    ({ database, cleanup } = await open());
  }, 60_000);
  afterAll(() => cleanup?.());

  it('opens migrated and re-running migrations is a no-op', async () => {
    const { rows } = await sql<{ v: string }>`select version() as v`.execute(database.db);
    // Guards against PGlite's pg config silently falling back to a TCP server on :5432.
    expect(rows[0].v.includes('PGlite')).toBe(database.kind === 'pglite');
    expect(await migrateToLatest(database.db as never)).toEqual([]);
    const tables = await database.db.introspection.getTables();
    expect(tables.map((t) => t.name)).toEqual(expect.arrayContaining(['tenants', 'apps', 'api_keys', 'usage_ledger']));
    const ledger = tables.find((t) => t.name === 'usage_ledger');
    // Metadata only: no column can hold prompt or output text.
    expect(ledger?.columns.map((c) => c.name).filter((n) => /prompt|input$|output$|text|content/.test(n))).toEqual([]);
  });

  describe('usage ledger', () => {
    it('round-trips a record exactly, including cost and timestamps', async () => {
      const repo = createUsageRepository(database.db);
      const rec = usageRecord({ tenantId: newId('t'), costNanoUsd: 123_456_789_012, ttftMs: null, errorCode: 'upstream_error', status: 'failed', finishReason: 'error' });
      await repo.insertMany([rec]);
      // A record that names no source was reported (the default), and reads back so.
      expect(await repo.getUsage(rec.generationId)).toEqual({ ...rec, usageSource: 'reported' });
      expect(await repo.getUsage('gen_missing')).toBeUndefined();
    });

    it('keeps the uncertain mark of a record made after a lost relay', async () => {
      const repo = createUsageRepository(database.db);
      const rec = usageRecord({ uncertain: true, status: 'failed', finishReason: 'error', errorCode: 'upstream_error', usageSource: 'estimated' });
      await repo.insertMany([rec]);
      expect(await repo.getUsage(rec.generationId)).toEqual(rec);
    });

    it('rounds fractional timings (performance.now() ms) to whole ms', async () => {
      const repo = createUsageRepository(database.db);
      const rec = usageRecord({ queueMs: 0.4, ttftMs: 3.6, totalMs: 12.5 });
      await repo.insertMany([rec]);
      expect(await repo.getUsage(rec.generationId)).toMatchObject({ queueMs: 0, ttftMs: 4, totalMs: 13 });
    });

    it('is idempotent on generation_id: redelivery never double-bills', async () => {
      const repo = createUsageRepository(database.db);
      const tenantId = newId('t');
      const a = usageRecord({ tenantId, costNanoUsd: 1_000 });
      const b = usageRecord({ tenantId, costNanoUsd: 2_000 });
      await repo.insertMany([a, b]);
      await repo.insertMany([a, b, { ...a, costNanoUsd: 999_999 }]);
      await repo.insertMany([]);
      const since = new Date(0);
      const totals = await repo.usageTotals({ tenantId, since });
      expect(totals.requests).toBe(2);
      expect(totals.costNanoUsd).toBe(3_000);
      expect((await repo.getUsage(a.generationId))?.costNanoUsd).toBe(1_000);
    });

    it('lists a tenant’s records oldest first, filtered by since', async () => {
      const repo = createUsageRepository(database.db);
      const tenantId = newId('t');
      const recs = [usageRecord({ tenantId }), usageRecord({ tenantId }), usageRecord({ tenantId })];
      await repo.insertMany([recs[2], recs[0], recs[1], usageRecord({ tenantId: newId('other') })]);
      expect((await repo.listUsage({ tenantId })).map((r) => r.generationId)).toEqual(recs.map((r) => r.generationId));
      expect((await repo.listUsage({ tenantId, since: recs[1].finishedAt })).map((r) => r.generationId)).toEqual(
        recs.slice(1).map((r) => r.generationId),
      );
      expect(await repo.listUsage({ tenantId, limit: 1 })).toHaveLength(1);
    });

    it('sums totals in SQL, exactly, since an instant', async () => {
      const repo = createUsageRepository(database.db);
      const tenantId = newId('t');
      const old = usageRecord({ tenantId, finishedAt: new Date('2026-01-01T00:00:00Z') });
      // 0.1 + 0.2 USD in floats is not 0.3; in nano-USD integers and numeric it is.
      const r1 = usageRecord({ tenantId, inputTokens: 100, outputTokens: 7, cachedInputTokens: 40, costNanoUsd: 100_000_000 });
      const r2 = usageRecord({ tenantId, inputTokens: 5, outputTokens: 3, cachedInputTokens: 0, costNanoUsd: 200_000_001 });
      await repo.insertMany([old, r1, r2]);
      const totals = await repo.usageTotals({ tenantId, since: new Date('2026-06-01T00:00:00Z') });
      expect(totals).toEqual({
        tokens: { input: 105, output: 10, cachedInput: 40 },
        costNanoUsd: 300_000_001,
        costUsd: '0.300000001',
        requests: 2,
      });
      expect(await repo.usageTotals({ tenantId: newId('none'), since: new Date(0) })).toEqual({
        tokens: { input: 0, output: 0, cachedInput: 0 },
        costNanoUsd: 0,
        costUsd: '0.000000000',
        requests: 0,
      });
    });

    it('stores large costs exactly (numeric(20,9))', async () => {
      const repo = createUsageRepository(database.db);
      const tenantId = newId('t');
      const big = Number.MAX_SAFE_INTEGER - 1; // ≈ 9.0 million USD
      await repo.insertMany([usageRecord({ tenantId, costNanoUsd: big }), usageRecord({ tenantId, costNanoUsd: 1 })]);
      const totals = await repo.usageTotals({ tenantId, since: new Date(0) });
      expect(totals.costUsd).toBe('9007199.254740991');
      expect(totals.costNanoUsd).toBe(Number.MAX_SAFE_INTEGER);
      await repo.insertMany([usageRecord({ tenantId, costNanoUsd: 5 })]);
      // Past 2^53 nano-USD the integer form refuses to round; the decimal stays exact.
      await expect(repo.usageTotals({ tenantId, since: new Date(0) })).rejects.toThrow(RangeError);
    });

    it('takes records from the batched sink, redelivery included, with exact totals', async () => {
      const repo = createUsageRepository(database.db);
      const sink = createBatchedUsageSink(repo, { maxBatch: 50, flushIntervalMs: 5 });
      const tenantId = newId('t');
      const recs = Array.from({ length: 120 }, (_, i) => usageRecord({ tenantId, costNanoUsd: i + 1 }));
      recs.forEach((r) => sink.record(r));
      recs.slice(0, 30).forEach((r) => sink.record(r)); // a redelivered prefix
      await sink.close();
      const totals = await repo.usageTotals({ tenantId, since: new Date(0) });
      expect(totals.requests).toBe(120);
      expect(totals.costNanoUsd).toBe((120 * 121) / 2);
    });

    it('rejects a non-integer cost before writing', async () => {
      const repo = createUsageRepository(database.db);
      const rec = usageRecord({ costNanoUsd: 1.5 });
      await expect(repo.insertMany([rec])).rejects.toThrow(RangeError);
      expect(await repo.getUsage(rec.generationId)).toBeUndefined();
    });

    it(`splits inserts above ${MAX_ROWS_PER_INSERT} rows into one transaction`, async () => {
      const repo = createUsageRepository(database.db);
      const tenantId = newId('t');
      const recs = Array.from({ length: MAX_ROWS_PER_INSERT + 5 }, () => usageRecord({ tenantId, costNanoUsd: 1 }));
      await repo.insertMany(recs);
      await repo.insertMany(recs);
      const totals = await repo.usageTotals({ tenantId, since: new Date(0) });
      expect(totals.requests).toBe(recs.length);
      expect(totals.costNanoUsd).toBe(recs.length);
    });
  });

  describe('tenants and API keys', () => {
    async function seedTenant() {
      const tenants = createTenantRepository(database.db);
      const tenantId = newId('t');
      const appId = newId('app');
      await tenants.upsertTenant({ id: tenantId, name: 'Acme' });
      await tenants.upsertApp({ id: appId, tenantId, name: 'web' });
      return { tenants, tenantId, appId };
    }

    it('upserts tenants and apps and reads them back', async () => {
      const { tenants, tenantId, appId } = await seedTenant();
      await tenants.upsertTenant({ id: tenantId, name: 'Acme Corp' });
      await tenants.upsertApp({ id: appId, tenantId, name: 'web app' });
      await tenants.upsertApp({ id: `${appId}-2`, tenantId, name: 'batch' });
      const stored = await tenants.getTenant(tenantId);
      expect(stored).toEqual({
        id: tenantId,
        name: 'Acme Corp',
        createdAt: expect.any(Date),
        apps: [
          { id: appId, name: 'web app' },
          { id: `${appId}-2`, name: 'batch' },
        ],
      });
      expect(await tenants.getTenant('nobody')).toBeUndefined();
    });

    it('refuses to move an app to another tenant', async () => {
      const { tenants, appId } = await seedTenant();
      const other = newId('t');
      await tenants.upsertTenant({ id: other, name: 'Other' });
      const err = await tenants.upsertApp({ id: appId, tenantId: other, name: 'stolen' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WeirError);
      expect((err as WeirError).code).toBe('conflict');
    });

    it('finds keys by SHA-256, ignores revoked ones, counts active keys', async () => {
      const { tenantId, appId } = await seedTenant();
      const keys = createApiKeyRepository(database.db);
      const k1 = mintApiKey();
      const k2 = mintApiKey();
      await keys.insertKey({ id: 'k1-' + tenantId, prefix: k1.prefix, sha256: k1.sha256, tenantId, appId, label: 'ci' });
      await keys.insertKey({ id: 'k2-' + tenantId, prefix: k2.prefix, sha256: k2.sha256, tenantId, appId });
      expect(await keys.findByHash(hashApiKey(k1.plaintext))).toEqual({
        keyId: 'k1-' + tenantId,
        prefix: k1.prefix,
        tenantId,
        appId,
        tenantUid: expect.stringMatching(new RegExp(`^${tenantId}~[0-9a-f]{16}$`)),
        appUid: expect.stringMatching(new RegExp(`^${appId}~[0-9a-f]{16}$`)),
      });
      expect(await keys.findByHash(hashApiKey('wk_nothere0_xxxxxxxxxxxxxxxxxxxxxxxx'))).toBeUndefined();
      expect(await keys.countKeys(tenantId)).toBe(2);

      expect(await keys.revoke('k1-' + tenantId)).toBe(true);
      expect(await keys.revoke('k1-' + tenantId)).toBe(true);
      expect(await keys.revoke('no-such-key')).toBe(false);
      expect(await keys.findByHash(k1.sha256)).toBeUndefined();
      expect(await keys.findByHash(k2.sha256)).toBeDefined();
      expect(await keys.countKeys(tenantId)).toBe(1);
    });

    it('gives a tenant and app created again under a deleted id new internal ids, which keys resolve to (issue 14 §4)', async () => {
      const { tenants, tenantId, appId } = await seedTenant();
      const keys = createApiKeyRepository(database.db);
      const old = mintApiKey();
      await keys.insertKey({ id: newId('key'), prefix: old.prefix, sha256: old.sha256, tenantId, appId });
      const before = await keys.findByHash(old.sha256);
      await database.db.deleteFrom('tenants').where('id', '=', tenantId).execute();
      expect(await keys.findByHash(old.sha256)).toBeUndefined();
      await tenants.upsertTenant({ id: tenantId, name: 'Acme again' });
      await tenants.upsertApp({ id: appId, tenantId, name: 'web app' });
      const fresh = mintApiKey();
      await keys.insertKey({ id: newId('key'), prefix: fresh.prefix, sha256: fresh.sha256, tenantId, appId });
      const after = await keys.findByHash(fresh.sha256);
      expect(after).toMatchObject({ tenantId, appId });
      expect(after?.tenantUid).toMatch(/~[0-9a-f]{16}$/);
      expect(after?.tenantUid).not.toBe(before?.tenantUid);
      expect(after?.appUid).not.toBe(before?.appUid);
      // An upsert of the live tenant keeps its internal id.
      await tenants.upsertTenant({ id: tenantId, name: 'renamed' });
      expect((await keys.findByHash(fresh.sha256))?.tenantUid).toBe(after?.tenantUid);
    });

    it('stores only hashes: refuses a plaintext key and duplicate hashes/prefixes', async () => {
      const { tenantId, appId } = await seedTenant();
      const keys = createApiKeyRepository(database.db);
      const k = mintApiKey();
      await expect(keys.insertKey({ id: newId('key'), prefix: k.prefix, sha256: k.plaintext, tenantId, appId })).rejects.toThrow(
        WeirError,
      );
      await keys.insertKey({ id: newId('key'), prefix: k.prefix, sha256: k.sha256, tenantId, appId });
      await expect(keys.insertKey({ id: newId('key'), prefix: 'zzzzzzzz', sha256: k.sha256, tenantId, appId })).rejects.toThrow();
      await expect(
        keys.insertKey({ id: newId('key'), prefix: k.prefix, sha256: mintApiKey().sha256, tenantId, appId }),
      ).rejects.toThrow();
    });

    it('serves lookups from the cache in front of the repository', async () => {
      const { tenantId, appId } = await seedTenant();
      const keys = createApiKeyRepository(database.db);
      const k = mintApiKey();
      await keys.insertKey({ id: newId('key'), prefix: k.prefix, sha256: k.sha256, tenantId, appId });
      const cached = createCachedApiKeyStore(keys);
      const first = await cached.findByHash(k.sha256);
      expect(first?.tenantId).toBe(tenantId);
      await keys.revoke(first!.keyId);
      // Within the TTL the cache still answers (documented revocation latency) …
      expect(await cached.findByHash(k.sha256)).toEqual(first);
      // … until the revocation fast path invalidates it.
      cached.invalidate(k.sha256);
      expect(await cached.findByHash(k.sha256)).toBeUndefined();
    });
  });
});

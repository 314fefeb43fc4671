import { sql } from 'kysely';
import { newId, type UsageRecord } from '@weir/core';
import { createTestDatabase, type TestDatabase } from './testing';
import { createUsageQueries } from './usage-query';
import { createUsageRepository } from './usage-repository';

const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 10, 30, 12, 0, 0); // 2026-11-30T12:00Z

let seq = 0;
function record(finishedAtMs: number, overrides: Partial<UsageRecord> = {}): UsageRecord {
  seq++;
  return {
    generationId: newId('gen'),
    requestId: `req-${seq}`,
    tenantId: 'acme',
    appId: 'web',
    apiKeyId: 'key_1',
    route: 'generations',
    modelAlias: 'tiny',
    modelRevision: 'tiny@1',
    inputTokens: 10,
    outputTokens: 20,
    cachedInputTokens: 0,
    costNanoUsd: 1_000,
    status: 'completed',
    finishReason: 'stop',
    errorCode: null,
    queueMs: 0,
    ttftMs: 1,
    totalMs: 10,
    startedAt: new Date(finishedAtMs - 10),
    finishedAt: new Date(finishedAtMs),
    ...overrides,
  };
}

describe.each<['pglite' | 'postgres']>([['pglite'], ['postgres']])('usage queries on %s', (kind) => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
  }, 60_000);
  afterAll(() => database?.close());

  it('stores and reads back the use case (null when none was named)', async () => {
    const repo = createUsageRepository(database.db);
    const named = record(T0, { tenantId: newId('t'), useCase: 'support:triage.v2' });
    const unnamed = record(T0, { tenantId: named.tenantId });
    await repo.insertMany([named, unnamed]);
    expect(await repo.getUsage(named.generationId)).toEqual({ ...named, usageSource: 'reported' });
    expect(await repo.getUsage(unnamed.generationId)).toEqual({ ...unnamed, usageSource: 'reported' });
    const { rows } = await sql<{ use_case: string | null }>`select use_case from usage_ledger where generation_id = ${unnamed.generationId}`.execute(database.db);
    expect(rows[0].use_case).toBeNull();
  });

  it('files rows under the tenant’s internal id: a deleted tenant’s rows stay, unseen by a same-slug successor (issue 14 §4)', async () => {
    const repo = createUsageRepository(database.db);
    const slug = newId('t');
    const legacy = record(T0 - HOUR, { tenantId: slug, costNanoUsd: 10 });
    const deleted = record(T0 - HOUR, { tenantId: slug, tenantUid: `${slug}~00000000000000aa`, appUid: 'web~00000000000000bb', costNanoUsd: 200 });
    const successor = record(T0 - HOUR, { tenantId: slug, tenantUid: `${slug}~00000000000000cc`, costNanoUsd: 3_000 });
    await repo.insertMany([legacy, deleted, successor]);
    const q = createUsageQueries(database.db);
    const window = { since: new Date(T0 - 2 * HOUR), until: new Date(T0) };
    // The legacy row (no internal id) belongs to the slug itself, the tenant's pre-0012 internal id.
    expect(await q.summarize({ tenantId: slug, ...window })).toMatchObject({ costNanoUsd: 10n, requests: 1 });
    expect(await q.summarize({ tenantId: `${slug}~00000000000000aa`, ...window })).toMatchObject({ costNanoUsd: 200n, requests: 1 });
    expect(await q.summarize({ tenantId: `${slug}~00000000000000cc`, ...window })).toMatchObject({ costNanoUsd: 3_000n, requests: 1 });
    // The rows keep both ids: invoices by slug still see all three.
    expect(await repo.getUsage(deleted.generationId)).toEqual({ ...deleted, usageSource: 'reported' });
    expect((await repo.listUsage({ tenantId: slug })).map((r) => r.costNanoUsd).sort((a, b) => a - b)).toEqual([10, 200, 3_000]);
  });

  describe('summarize', () => {
    const tenantId = newId('t');
    const since = new Date(T0 - 2 * HOUR);
    const until = new Date(T0);

    beforeAll(async () => {
      const at = T0 - HOUR;
      await createUsageRepository(database.db).insertMany([
        record(at, { tenantId, appId: 'web', useCase: 'chat', inputTokens: 100, outputTokens: 50, cachedInputTokens: 40, costNanoUsd: 1_500_000_001 }),
        record(at, { tenantId, appId: 'web', useCase: 'chat', modelRevision: 'tiny@2', inputTokens: 1, outputTokens: 2, costNanoUsd: 7, cacheHit: 'exact' }),
        record(at, { tenantId, appId: 'batch', modelAlias: 'big', modelRevision: 'big@1', inputTokens: 1000, outputTokens: 10, costNanoUsd: 3_000_000_000 }),
        record(at, { tenantId, appId: 'batch', useCase: 'chat', inputTokens: 5, outputTokens: 5, costNanoUsd: 999_999_999 }),
        // At the edges: `since` is inside, `until` is outside.
        record(since.getTime(), { tenantId, appId: 'web', inputTokens: 1, outputTokens: 1, costNanoUsd: 1 }),
        record(until.getTime(), { tenantId, costNanoUsd: 123_456 }),
        record(since.getTime() - 1, { tenantId, costNanoUsd: 123_456 }),
        // Another tenant in the same period.
        record(at, { tenantId: newId('other'), costNanoUsd: 5_000_000_000 }),
      ]);
    });

    it('sums the tenant’s records in [since, until), exactly, with totals equal to each breakdown', async () => {
      const s = await createUsageQueries(database.db).summarize({ tenantId, since, until });
      expect(s).toMatchObject({ inputTokens: 1107, outputTokens: 68, cachedInputTokens: 40, costNanoUsd: 5_500_000_008n, requests: 5, cacheHits: 1 });
      for (const breakdown of [s.byModel, s.byApp, s.byUseCase]) {
        expect(breakdown.reduce((n, b) => n + b.costNanoUsd, 0n)).toBe(s.costNanoUsd);
        expect(breakdown.reduce((n, b) => n + b.requests, 0)).toBe(s.requests);
      }
    });

    it('breaks down by model revision, app and use case (null: none named), highest cost first', async () => {
      const s = await createUsageQueries(database.db).summarize({ tenantId, since, until });
      expect(s.byModel).toEqual([
        { modelAlias: 'big', modelRevision: 'big@1', inputTokens: 1000, outputTokens: 10, cachedInputTokens: 0, cacheWriteInputTokens: 0, reasoningTokens: 0, costNanoUsd: 3_000_000_000n, requests: 1, cacheHits: 0 },
        { modelAlias: 'tiny', modelRevision: 'tiny@1', inputTokens: 106, outputTokens: 56, cachedInputTokens: 40, cacheWriteInputTokens: 0, reasoningTokens: 0, costNanoUsd: 2_500_000_001n, requests: 3, cacheHits: 0 },
        { modelAlias: 'tiny', modelRevision: 'tiny@2', inputTokens: 1, outputTokens: 2, cachedInputTokens: 0, cacheWriteInputTokens: 0, reasoningTokens: 0, costNanoUsd: 7n, requests: 1, cacheHits: 1 },
      ]);
      expect(s.byApp.map((a) => [a.appId, a.costNanoUsd, a.requests])).toEqual([
        ['batch', 3_999_999_999n, 2],
        ['web', 1_500_000_009n, 3],
      ]);
      expect(s.byUseCase.map((u) => [u.useCase, u.costNanoUsd, u.requests])).toEqual([
        [null, 3_000_000_001n, 2],
        ['chat', 2_500_000_007n, 3],
      ]);
    });

    it('answers zeros and empty breakdowns for a tenant with no records', async () => {
      expect(await createUsageQueries(database.db).summarize({ tenantId: newId('none'), since, until })).toEqual({
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteInputTokens: 0,
        reasoningTokens: 0,
        costNanoUsd: 0n,
        requests: 0,
        cacheHits: 0,
        byModel: [],
        byApp: [],
        byUseCase: [],
      });
    });
  });

  describe('spendByTenant', () => {
    it('splits each tenant’s spend into the recent hour and the baseline before it, exactly', async () => {
      // A window of its own far from the other tests' rows.
      const until = Date.UTC(2027, 0, 10, 0, 0, 0);
      const recentSince = until - HOUR;
      const baselineSince = recentSince - 24 * HOUR;
      const a = newId('a');
      const b = newId('b');
      await createUsageRepository(database.db).insertMany([
        record(until - 1, { tenantId: a, costNanoUsd: 2_000_000_001 }),
        record(recentSince, { tenantId: a, costNanoUsd: 1 }), // the first instant of the recent hour
        record(recentSince - 1, { tenantId: a, costNanoUsd: 24_000_000_000 }), // the last of the baseline
        record(baselineSince, { tenantId: a, costNanoUsd: 5 }),
        record(baselineSince - 1, { tenantId: a, costNanoUsd: 1_000_000_000_000 }), // before the baseline: ignored
        record(until, { tenantId: a, costNanoUsd: 1_000_000_000_000 }), // not yet: ignored
        record(until - 2 * HOUR, { tenantId: b, costNanoUsd: 3 }), // baseline only
      ]);
      const spend = await createUsageQueries(database.db).spendByTenant({
        baselineSince: new Date(baselineSince),
        recentSince: new Date(recentSince),
        until: new Date(until),
      });
      expect(spend.filter((s) => s.tenantId === a || s.tenantId === b)).toEqual([
        { tenantId: a, recentNanoUsd: 2_000_000_002n, baselineNanoUsd: 24_000_000_005n },
        { tenantId: b, recentNanoUsd: 0n, baselineNanoUsd: 3n },
      ]);
    });

    it('leaves out a deleted tenant’s spend once its id names a new tenant (issue 14 §4)', async () => {
      const until = Date.UTC(2027, 1, 10, 0, 0, 0);
      const slug = newId('c');
      const { uid } = await database.db.insertInto('tenants').values({ id: slug, name: 'new' }).returning('uid').executeTakeFirstOrThrow();
      await createUsageRepository(database.db).insertMany([
        record(until - 2 * HOUR, { tenantId: slug, tenantUid: `${slug}~00000000000000aa`, costNanoUsd: 1_000 }), // the deleted one's
        record(until - 2 * HOUR, { tenantId: slug, tenantUid: uid, costNanoUsd: 7 }),
      ]);
      const spend = await createUsageQueries(database.db).spendByTenant({ baselineSince: new Date(until - 24 * HOUR), recentSince: new Date(until - HOUR), until: new Date(until) });
      expect(spend.filter((s) => s.tenantId === slug)).toEqual([{ tenantId: slug, recentNanoUsd: 0n, baselineNanoUsd: 7n }]);
    });

    it('has the indexes both reads range over (tenant, finished_at) and (finished_at)', async () => {
      const { rows } = await sql<{ indexname: string }>`select indexname from pg_indexes where tablename = 'usage_ledger'`.execute(database.db);
      expect(rows.map((r) => r.indexname)).toEqual(expect.arrayContaining(['usage_ledger_finished_idx', 'usage_ledger_tenant_finished_idx', 'usage_ledger_tenant_uid_finished_idx']));
    });

    it('refuses windows out of order', async () => {
      const now = new Date(T0);
      await expect(createUsageQueries(database.db).spendByTenant({ baselineSince: now, recentSince: new Date(T0 - 1), until: now })).rejects.toThrow(RangeError);
    });
  });
});

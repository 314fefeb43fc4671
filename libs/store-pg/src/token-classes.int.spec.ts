/**
 * Token classes in the ledger (issue 16 §4, migration 0017) on PGlite and on the machine's real
 * Postgres: the migration over rows written before it, the settlement applier's and the
 * repository's writes, the read back, and `/v1/usage`'s sums per class.
 */
import { type Kysely, Migrator, sql } from 'kysely';
import { newId, type SettlementItem, type UsageRecord } from '@weir/core';
import { buildSettlementEntry, uniqueTag } from '@weir/testing';
import { openDatabase, type WeirDatabase } from './database';
import { migrationProvider } from './migrations';
import { createReconcileQueries } from './reconcile-queries';
import { createPgSettlementApplier } from './settlement-applier';
import { createTemporaryPostgresDatabase, createTestDatabase, type TestDatabase } from './testing';
import { createUsageQueries } from './usage-query';
import { createUsageRepository } from './usage-repository';

const T0 = Date.UTC(2026, 10, 30, 12, 0, 0);

function record(overrides: Partial<UsageRecord> = {}): UsageRecord {
  return {
    generationId: newId('gen'),
    requestId: newId('req'),
    tenantId: 'acme',
    appId: 'web',
    apiKeyId: 'key_1',
    route: 'chat.completions',
    modelAlias: 'claude',
    modelRevision: 'claude@1',
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
    startedAt: new Date(T0 - 10),
    finishedAt: new Date(T0),
    ...overrides,
  };
}

/** A database with no migration run: in-memory PGlite, or a temporary Postgres database. */
async function unmigrated(kind: 'pglite' | 'postgres'): Promise<{ database: WeirDatabase; drop: () => Promise<void> }> {
  if (kind === 'pglite') {
    const database = await openDatabase({ migrate: false });
    return { database, drop: () => database.close() };
  }
  const temp = await createTemporaryPostgresDatabase();
  const database = await openDatabase({ databaseUrl: temp.url, maxConnections: 1, migrate: false });
  return {
    database,
    drop: async () => {
      await database.close();
      await temp.drop();
    },
  };
}

describe.each<['pglite' | 'postgres']>([['pglite'], ['postgres']])('token classes in the ledger on %s', (kind) => {
  it('0017 gives rows written before it 0 cache writes and 0 reasoning tokens, and its down migration drops the columns', async () => {
    const { database, drop } = await unmigrated(kind);
    try {
      const migrator = new Migrator({ db: database.db as unknown as Kysely<unknown>, provider: migrationProvider });
      expect((await migrator.migrateTo('0016_response_cache_bounds')).error).toBeUndefined();
      const old = record();
      await sql`insert into usage_ledger (generation_id, request_id, tenant_id, app_id, api_key_id, route, model_alias, model_revision,
          input_tokens, output_tokens, cached_input_tokens, cost_usd, status, finish_reason, queue_ms, ttft_ms, total_ms, started_at, finished_at)
        values (${old.generationId}, ${old.requestId}, 'acme', 'web', 'key_1', 'chat.completions', 'claude', 'claude@1',
          10, 20, 0, 0.000001000, 'completed', 'stop', 0, 1, 10, ${old.startedAt}, ${old.finishedAt})`.execute(database.db);
      expect((await migrator.migrateToLatest()).error).toBeUndefined();
      const { rows } = await sql<{ w: number; r: number }>`select cache_write_input_tokens as w, reasoning_tokens as r from usage_ledger where generation_id = ${old.generationId}`.execute(database.db);
      expect(rows).toEqual([{ w: 0, r: 0 }]);
      // Read back as a record without the classes (absent means 0).
      const back = await createUsageRepository(database.db).getUsage(old.generationId);
      expect(back).toBeDefined();
      expect(back?.cacheWriteInputTokens).toBeUndefined();
      expect(back?.reasoningTokens).toBeUndefined();

      expect((await migrator.migrateTo('0016_response_cache_bounds')).error).toBeUndefined();
      const { rows: columns } = await sql<{ column_name: string }>`
        select column_name from information_schema.columns where table_name = 'usage_ledger' and column_name in ('cache_write_input_tokens', 'reasoning_tokens')`.execute(database.db);
      expect(columns).toEqual([]);
    } finally {
      await drop();
    }
  }, 60_000);

  describe('on a migrated database', () => {
    let database: TestDatabase;
    beforeAll(async () => {
      database = await createTestDatabase({ kind });
    }, 60_000);
    afterAll(() => database?.close());

    it('the repository writes and reads back every class', async () => {
      const repo = createUsageRepository(database.db);
      const r = record({ tenantId: newId('t'), inputTokens: 3_100, cachedInputTokens: 2_000, cacheWriteInputTokens: 1_000, outputTokens: 500, reasoningTokens: 400 });
      await repo.insertMany([r]);
      expect(await repo.getUsage(r.generationId)).toEqual({ ...r, usageSource: 'reported' });
    });

    it('the settlement applier writes every class on the row', async () => {
      const tag = uniqueTag();
      const entry = buildSettlementEntry(0, { tenantId: `t_${tag}`, appId: 'web', inputTokens: 1_200, cachedInputTokens: 1_024, outputTokens: 300, reasoningTokens: 256 }, tag);
      const anthropic = buildSettlementEntry(1, { tenantId: `t_${tag}`, appId: 'web', inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, outputTokens: 40 }, tag);
      const items: SettlementItem[] = [entry, anthropic].map((e) => ({ kind: 'settle', entry: e }));
      expect(await createPgSettlementApplier(database.db, { now: () => T0 }).apply({ journal: `j_${tag}`, items, position: { segment: 1, offset: 1 } })).toMatchObject({ inserted: 2 });
      const { rows } = await sql<{ generation_id: string; input_tokens: number; cached_input_tokens: number; cache_write_input_tokens: number; output_tokens: number; reasoning_tokens: number }>`
        select generation_id, input_tokens, cached_input_tokens, cache_write_input_tokens, output_tokens, reasoning_tokens
        from usage_ledger where generation_id in (${entry.usage.generationId}, ${anthropic.usage.generationId}) order by input_tokens`.execute(database.db);
      expect(rows).toEqual([
        { generation_id: entry.usage.generationId, input_tokens: 1_200, cached_input_tokens: 1_024, cache_write_input_tokens: 0, output_tokens: 300, reasoning_tokens: 256 },
        { generation_id: anthropic.usage.generationId, input_tokens: 4_512, cached_input_tokens: 3_000, cache_write_input_tokens: 1_500, output_tokens: 40, reasoning_tokens: 0 },
      ]);
    });

    it('reconciliation reads each row with its classes, so its cost check prices them', async () => {
      const tenantId = newId('t');
      const finished = T0 + 5 * 60_000;
      const r = record({ tenantId, inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, outputTokens: 300, reasoningTokens: 256, finishedAt: new Date(finished), startedAt: new Date(finished - 10) });
      const plain = record({ tenantId, finishedAt: new Date(finished), startedAt: new Date(finished - 10) });
      await createUsageRepository(database.db).insertMany([r, plain]);
      const rows = (await createReconcileQueries(database.db).ledgerRows({ since: new Date(finished), until: new Date(finished + 1) })).filter((x) => x.tenantId === tenantId);
      expect(rows.find((x) => x.generationId === r.generationId)).toMatchObject({ inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, outputTokens: 300, reasoningTokens: 256 });
      const other = rows.find((x) => x.generationId === plain.generationId);
      expect(other?.cacheWriteInputTokens).toBeUndefined();
      expect(other?.reasoningTokens).toBeUndefined();
    });

    it('usage sums split by class, in total and in each breakdown', async () => {
      const tenantId = newId('t');
      const repo = createUsageRepository(database.db);
      await repo.insertMany([
        record({ tenantId, modelRevision: 'claude@1', inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, outputTokens: 40, costNanoUsd: 7_000 }),
        record({ tenantId, modelAlias: 'o4', modelRevision: 'o4@1', inputTokens: 1_200, cachedInputTokens: 1_024, outputTokens: 300, reasoningTokens: 256, costNanoUsd: 5_000 }),
        record({ tenantId, modelAlias: 'o4', modelRevision: 'o4@1', inputTokens: 10, outputTokens: 20, costNanoUsd: 1_000 }),
      ]);
      const summary = await createUsageQueries(database.db).summarize({ tenantId, since: new Date(T0 - 1_000), until: new Date(T0 + 1_000) });
      expect(summary).toMatchObject({ inputTokens: 5_722, cachedInputTokens: 4_024, cacheWriteInputTokens: 1_500, outputTokens: 360, reasoningTokens: 256, costNanoUsd: 13_000n, requests: 3 });
      expect(summary.byModel).toEqual([
        expect.objectContaining({ modelRevision: 'claude@1', inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, reasoningTokens: 0 }),
        expect.objectContaining({ modelRevision: 'o4@1', inputTokens: 1_210, cachedInputTokens: 1_024, cacheWriteInputTokens: 0, outputTokens: 320, reasoningTokens: 256 }),
      ]);
    });
  });
});

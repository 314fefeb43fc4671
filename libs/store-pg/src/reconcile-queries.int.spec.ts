import { newId, type UsageRecord } from '@weir/core';
import { openDatabase, type WeirDatabase } from './database';
import { createReconcileQueries } from './reconcile-queries';
import { createTemporaryPostgresDatabase } from './testing';
import { createUsageRepository } from './usage-repository';

// PGlite (in memory) and the machine's Postgres (a throwaway database), as the repositories' suite.
const backends: [string, () => Promise<{ database: WeirDatabase; cleanup(): Promise<void> }>][] = [
  ['pglite (in memory)', async () => {
    const database = await openDatabase();
    return { database, cleanup: () => database.close() };
  }],
  ['postgres', async () => {
    const temp = await createTemporaryPostgresDatabase();
    const database = await openDatabase({ databaseUrl: temp.url, maxConnections: 4 });
    return { database, cleanup: async () => { await database.close(); await temp.drop(); } };
  }],
];

const base = Date.UTC(2026, 10, 1, 12, 0, 0);
let seq = 0;
function record(overrides: Partial<UsageRecord> = {}): UsageRecord {
  seq++;
  const finishedAt = new Date(base + seq * 1000);
  return {
    generationId: newId('gen'), requestId: `req-${seq}`, tenantId: 'acme', appId: 'web', apiKeyId: 'key_1', route: 'generations',
    modelAlias: 'tiny', modelRevision: 'stories260k@1', inputTokens: 5, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: 1_300,
    status: 'failed', finishReason: 'error', errorCode: 'upstream_error', queueMs: 1, ttftMs: 3, totalMs: 30,
    startedAt: new Date(finishedAt.getTime() - 30), finishedAt, ...overrides,
  };
}

describe.each(backends)('reconcile queries on %s', (_name, open) => {
  let database: WeirDatabase;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ database, cleanup } = await open());
  }, 60_000);
  afterAll(() => cleanup?.());

  it('lists reservations that expired with no usage record, and reads every budget row', async () => {
    const q = createReconcileQueries(database.db);
    const recorded = record();
    await createUsageRepository(database.db).insertMany([recorded]);
    const row = (id: string, generationId: string, state: 'expired' | 'settled', createdAt: number) => ({
      id, tenant_id: 'acme', app_id: 'web', request_id: id, generation_id: generationId, state,
      input_tokens: 1, max_output_tokens: 2, worst_case_nano: 10, month_starts_on: '2026-11-01', day_starts_on: '2026-11-01',
      created_at: new Date(createdAt), expires_at: new Date(createdAt + 1_000),
    });
    await database.db.insertInto('reservations').values([
      row('rsv_lost', 'gen_lost', 'expired', base + 100),
      row('rsv_recorded', recorded.generationId, 'expired', base + 200),
      row('rsv_settled', 'gen_settled', 'settled', base + 300),
      row('rsv_old', 'gen_old', 'expired', base - 86_400_000),
    ] as never).execute();
    expect(await q.listExpiredWithoutUsage({ since: new Date(base) })).toEqual(['gen_lost']);
    await database.db.insertInto('budget_periods').values({ scope: 'tenant:acme', period: 'month', starts_on: '2026-11-01', settled_nano: 12_345, reserved_nano: 10 }).execute();
    expect(await q.budgetRows()).toContainEqual({ scope: 'tenant:acme', period: 'month', startsOn: '2026-11-01', settledNano: 12_345, reservedNano: 10 });
  });

  it('settles an uncertain row exactly once, keeping its first-recorded counts', async () => {
    const uncertain = record({ uncertain: true });
    const certain = record();
    await createUsageRepository(database.db).insertMany([uncertain, certain]);
    const q = createReconcileQueries(database.db);
    const listed = await q.listUncertain({ since: new Date(base) });
    expect(listed.map((r) => r.generationId)).toContain(uncertain.generationId);
    expect(listed.map((r) => r.generationId)).not.toContain(certain.generationId);

    const write = { generationId: uncertain.generationId, inputTokens: 5, outputTokens: 11, cachedInputTokens: 0, costNanoUsd: 2_700, source: 'engine:r/0' };
    // Two reconcilers at once: one settles, the other finds nothing to do.
    const outcomes = await Promise.all([q.settleUncertain(write), q.settleUncertain({ ...write, outputTokens: 99, costNanoUsd: 9 })]);
    expect(outcomes.filter(Boolean)).toHaveLength(1);
    expect(await q.settleUncertain(write)).toBe(false);
    expect(await q.settleUncertain({ ...write, generationId: certain.generationId })).toBe(false);

    const rows = await q.ledgerRows({ since: new Date(uncertain.finishedAt.getTime()), until: new Date(certain.finishedAt.getTime() + 1) });
    const settled = rows.find((r) => r.generationId === uncertain.generationId);
    expect(settled?.uncertain).toBe(false);
    expect([settled?.outputTokens, settled?.costNanoUsd]).toEqual(outcomes[0] ? [11, 2_700] : [99, 9]);
    expect(settled?.recorded).toEqual({ inputTokens: 5, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: 1_300 });
    expect(rows.find((r) => r.generationId === certain.generationId)).toEqual({
      generationId: certain.generationId, tenantId: 'acme', modelRevision: 'stories260k@1', inputTokens: 5, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: 1_300, uncertain: false,
    });
    expect(await q.listUncertain({ since: new Date(base) })).toEqual([]);
  });

  it('reads a window page by page, half-open, oldest first', async () => {
    const records = Array.from({ length: 7 }, () => record({ costNanoUsd: 123_456_789_012 }));
    await createUsageRepository(database.db).insertMany(records);
    const q = createReconcileQueries(database.db);
    const window = { since: records[1].finishedAt, until: records[6].finishedAt };
    const rows = await q.ledgerRows(window, 2);
    expect(rows.map((r) => r.generationId)).toEqual(records.slice(1, 6).map((r) => r.generationId));
    expect(rows.every((r) => r.costNanoUsd === 123_456_789_012)).toBe(true);
  });

  it('counts reservations held past their expiry', async () => {
    const q = createReconcileQueries(database.db);
    const now = new Date(base);
    const reservation = (id: string, state: 'held' | 'settled', expiresAt: Date) => ({
      id, tenant_id: 'acme', app_id: 'web', request_id: id, generation_id: id, state, input_tokens: 1, max_output_tokens: 1,
      worst_case_nano: 1, month_starts_on: '2026-11-01', day_starts_on: '2026-11-01', expires_at: expiresAt,
    });
    await database.db.insertInto('reservations').values([
      reservation('res_1', 'held', new Date(base - 1)),
      reservation('res_2', 'held', new Date(base + 60_000)),
      reservation('res_3', 'settled', new Date(base - 1)),
    ]).execute();
    expect(await q.countHeldPastExpiry(now)).toBe(1);
  });
});

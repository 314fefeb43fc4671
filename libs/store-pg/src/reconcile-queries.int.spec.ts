import { sql } from 'kysely';
import { newId, type UsageRecord } from '@weir/core';
import { buildReservationRef, buildUsageRecord, uniqueTag } from '@weir/testing';
import { openDatabase, type WeirDatabase } from './database';
import { createReconcileQueries } from './reconcile-queries';
import { createPgSettlementApplier } from './settlement-applier';
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
    expect(await q.budgetRows()).toContainEqual({ scope: 'tenant:acme', period: 'month', startsOn: '2026-11-01', settledNano: 12_345, reservedNano: 10, leasedNano: 0 });
  });

  it('settles an older uncertain row exactly once, keeping its first-recorded counts; its reservation moves the money', async () => {
    const uncertain = record({ uncertain: true });
    const certain = record();
    await createUsageRepository(database.db).insertMany([uncertain, certain]);
    const q = createReconcileQueries(database.db);
    const listed = await q.listUnsettled({ since: new Date(base) });
    expect(listed.map((r) => r.generationId)).toContain(uncertain.generationId);
    expect(listed.map((r) => r.generationId)).not.toContain(certain.generationId);
    expect(listed.find((r) => r.generationId === uncertain.generationId)).toMatchObject({ appId: 'web', uncertain: true, usageSource: 'reported', budgetPeriods: null, leaseIds: [] });

    const write = { generationId: uncertain.generationId, inputTokens: 5, outputTokens: 11, cachedInputTokens: 0, costNanoUsd: 2_700, source: 'engine:r/0' };
    // Two reconcilers at once: one settles, the other finds nothing to do.
    const outcomes = await Promise.all([q.settleFromCount(write), q.settleFromCount({ ...write, outputTokens: 99, costNanoUsd: 9 })]);
    expect(outcomes.filter((o) => o.settled)).toHaveLength(1);
    const first = outcomes.find((o) => o.settled);
    // An older row (no budget periods): its reservation's correction moves the money, not this.
    expect(first).toMatchObject({ settled: true, budgetsMoved: false, overspends: [] });
    expect(await q.settleFromCount(write)).toEqual({ settled: false });
    expect(await q.settleFromCount({ ...write, generationId: certain.generationId })).toEqual({ settled: false });

    const rows = await q.ledgerRows({ since: new Date(uncertain.finishedAt.getTime()), until: new Date(certain.finishedAt.getTime() + 1) });
    const settled = rows.find((r) => r.generationId === uncertain.generationId);
    expect(settled).toMatchObject({ uncertain: false, usageSource: 'reported' });
    expect([settled?.outputTokens, settled?.costNanoUsd]).toEqual(outcomes[0].settled ? [11, 2_700] : [99, 9]);
    expect(settled?.recorded).toEqual({ inputTokens: 5, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: 1_300 });
    expect(rows.find((r) => r.generationId === certain.generationId)).toEqual({
      generationId: certain.generationId, tenantId: 'acme', modelRevision: 'stories260k@1', inputTokens: 5, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: 1_300,
      uncertain: false, usageSource: 'reported', finishedAt: certain.finishedAt,
    });
    expect((await q.listUnsettled({ since: new Date(base) })).map((r) => r.generationId)).not.toContain(uncertain.generationId);
  });

  it('settles an estimated row the applier wrote, moving the difference through its budget rows and lease', async () => {
    const tag = uniqueTag();
    const tenant = `t_${tag}`;
    const scope = `tenant:${tenant}`;
    // A live lease of 10,000 on the tenant's month row.
    await sql`insert into admission_leases (lease_id, holder, scope, kind, period, starts_on, granted_nano, hold_until_ms, created_at_ms, updated_at_ms)
      values (${`lease_${tag}`}, 'holder_1', ${scope}, 'budget', 'month', '2026-01-01', 10000, ${base + 600_000}, ${base}, ${base})`.execute(database.db);
    await sql`insert into budget_periods (scope, period, starts_on, leased_nano) values (${scope}, 'month', '2026-01-01', 10000)`.execute(database.db);
    const reservation = buildReservationRef(`gen_${tag}_up`, [`lease_${tag}`]);
    const up = buildUsageRecord(1, { tenantId: tenant, appId: 'web', generationId: `gen_${tag}_up`, uncertain: true, usageSource: 'estimated', costNanoUsd: 1_000, reservation }, tag);
    const down = buildUsageRecord(2, { tenantId: tenant, appId: 'web', generationId: `gen_${tag}_down`, usageSource: 'estimated', costNanoUsd: 3_000, reservation: buildReservationRef(`gen_${tag}_down`, [`lease_${tag}`]) }, tag);
    const applier = createPgSettlementApplier(database.db);
    await applier.apply({ journal: 'test', items: [{ kind: 'settle', entry: { usage: up } }, { kind: 'settle', entry: { usage: down } }] });
    const money = async () => {
      const { rows } = await sql<{ scope: string; period: string; settled: string; leased: string }>`select scope, period, settled_nano::text as settled, leased_nano::text as leased
        from budget_periods where scope in (${scope}, ${`app:${tenant}/web`}) order by scope, period`.execute(database.db);
      const lease = await sql<{ consumed: string }>`select consumed_nano::text as consumed from admission_leases where lease_id = ${`lease_${tag}`}`.execute(database.db);
      return { rows: rows.map((r) => [r.scope, r.period, Number(r.settled), Number(r.leased)]), consumed: Number(lease.rows[0].consumed) };
    };
    // The applier charged 4,000 to the four rows and moved it from the lease.
    expect(await money()).toEqual({
      rows: [[`app:${tenant}/web`, 'day', 4_000, 0], [`app:${tenant}/web`, 'month', 4_000, 0], [scope, 'day', 4_000, 0], [scope, 'month', 4_000, 6_000]],
      consumed: 4_000,
    });
    const q = createReconcileQueries(database.db, { now: () => base });
    const listed = (await q.listUnsettled({})).filter((r) => r.tenantId === tenant);
    // The estimated row that is not uncertain is listed too.
    expect(listed.map((r) => [r.generationId, r.uncertain, r.usageSource, r.budgetPeriods, r.leaseIds])).toEqual([
      [up.generationId, true, 'estimated', { monthStartsOn: '2026-01-01', dayStartsOn: '2026-01-01' }, [`lease_${tag}`]],
      [down.generationId, false, 'estimated', { monthStartsOn: '2026-01-01', dayStartsOn: '2026-01-01' }, [`lease_${tag}`]],
    ]);

    // The engine counted more: +1,500 settled on the four rows, moved from the lease.
    expect(await q.settleFromCount({ generationId: up.generationId, inputTokens: 11, outputTokens: 40, cachedInputTokens: 0, costNanoUsd: 2_500, source: 'engine:e/0' })).toEqual({
      settled: true, deltaNano: 1_500, budgetsMoved: true, overspends: [],
    });
    // The engine counted less: −2,000 off the four rows' settled spend; the lease keeps what it consumed.
    expect(await q.settleFromCount({ generationId: down.generationId, inputTokens: 11, outputTokens: 2, cachedInputTokens: 0, costNanoUsd: 1_000, source: 'engine:e/0', usageSource: 'counted' })).toMatchObject({
      settled: true, deltaNano: -2_000, budgetsMoved: true,
    });
    expect(await money()).toEqual({
      rows: [[`app:${tenant}/web`, 'day', 3_500, 0], [`app:${tenant}/web`, 'month', 3_500, 0], [scope, 'day', 3_500, 0], [scope, 'month', 3_500, 4_500]],
      consumed: 5_500,
    });
    const rows = await database.db.selectFrom('usage_ledger').select(['generation_id', 'output_tokens', 'uncertain', 'usage_source']).where('tenant_id', '=', tenant).orderBy('generation_id').execute();
    expect(rows).toEqual([
      { generation_id: down.generationId, output_tokens: 2, uncertain: false, usage_source: 'counted' },
      { generation_id: up.generationId, output_tokens: 40, uncertain: false, usage_source: 'reported' },
    ]);
    expect(await q.leasedMismatches()).toEqual([]);

    // A lease that was reclaimed: the difference is settled anyway and reported as an overspend.
    const gone = buildUsageRecord(3, { tenantId: tenant, appId: 'web', generationId: `gen_${tag}_gone`, usageSource: 'estimated', costNanoUsd: 100, reservation: buildReservationRef(`gen_${tag}_gone`, [`lease_${tag}_gone`]) }, tag);
    await applier.apply({ journal: 'test', items: [{ kind: 'settle', entry: { usage: gone } }] });
    expect(await q.settleFromCount({ generationId: gone.generationId, inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, costNanoUsd: 400, source: 'engine:e/0' })).toEqual({
      settled: true, deltaNano: 300, budgetsMoved: true, overspends: [{ leaseId: `lease_${tag}_gone`, reason: 'lease_gone', excessNano: 300, generationIds: [gone.generationId] }],
    });
  });

  it('leaves the difference of a row with a per-request reservation to its reservation\'s correction', async () => {
    const tag = uniqueTag();
    const tenant = `t_${tag}`;
    const usage = buildUsageRecord(1, { tenantId: tenant, appId: 'web', generationId: `gen_${tag}_r`, usageSource: 'estimated', costNanoUsd: 1_000, reservation: buildReservationRef(`gen_${tag}_r`) }, tag);
    await createPgSettlementApplier(database.db).apply({ journal: 'test', items: [{ kind: 'settle', entry: { usage } }] });
    await database.db.insertInto('reservations').values({
      id: `rsv_${tag}`, tenant_id: tenant, app_id: 'web', request_id: usage.requestId, generation_id: usage.generationId, state: 'settled', input_tokens: 1, max_output_tokens: 1,
      worst_case_nano: 5_000, month_starts_on: '2026-01-01', day_starts_on: '2026-01-01', expires_at: new Date(base),
    }).execute();
    const q = createReconcileQueries(database.db);
    expect(await q.settleFromCount({ generationId: usage.generationId, inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, costNanoUsd: 3_000, source: 'engine:e/0' })).toEqual({
      settled: true, deltaNano: 2_000, budgetsMoved: false, overspends: [],
    });
    const { rows } = await sql<{ settled: string }>`select settled_nano::text as settled from budget_periods where scope = ${`tenant:${tenant}`} and period = 'month'`.execute(database.db);
    expect(rows).toEqual([{ settled: '1000' }]);
  });

  it('finds budget rows whose leased money is not what their leases hold, and lists leases with their holders', async () => {
    const tag = uniqueTag();
    const q = createReconcileQueries(database.db);
    const scope = (s: string) => `tenant:${tag}_${s}`;
    await sql`insert into admission_holders (holder, mode, started_at_ms, heartbeat_at_ms, expires_at_ms) values (${`h_${tag}`}, 'shared', 1, 1, 5000)`.execute(database.db);
    const lease = (id: string, s: string, granted: number, consumed: number, holder = `h_${tag}`) =>
      sql`insert into admission_leases (lease_id, holder, scope, kind, period, starts_on, granted_nano, consumed_nano, hold_until_ms, created_at_ms, updated_at_ms)
        values (${`${tag}_${id}`}, ${holder}, ${scope(s)}, 'budget', 'month', '2026-01-01', ${granted}, ${consumed}, 7000, 1, 1)`.execute(database.db);
    const row = (s: string, leased: number) => sql`insert into budget_periods (scope, period, starts_on, leased_nano) values (${scope(s)}, 'month', '2026-01-01', ${leased})`.execute(database.db);
    await row('ok', 700);
    await lease('a', 'ok', 500, 100);
    await lease('b', 'ok', 300, 0);
    await row('high', 900);
    await lease('c', 'high', 500, 0);
    await row('low', 0);
    await lease('d', 'low', 50, 0, `gone_${tag}`);
    await lease('e', 'orphan', 20, 0);
    await sql`insert into admission_leases (lease_id, holder, scope, kind, slots, hold_until_ms, created_at_ms, updated_at_ms)
      values (${`${tag}_r`}, ${`h_${tag}`}, ${scope('ok')}, 'rate', 3, 7000, 1, 1)`.execute(database.db);
    const mine = (await q.leasedMismatches()).filter((m) => m.scope.startsWith(`tenant:${tag}`));
    expect(mine).toEqual([
      { scope: scope('high'), period: 'month', startsOn: '2026-01-01', leasedNano: 900, leasesHoldNano: 500, leases: 1 },
      { scope: scope('low'), period: 'month', startsOn: '2026-01-01', leasedNano: 0, leasesHoldNano: 50, leases: 1 },
      { scope: scope('orphan'), period: 'month', startsOn: '2026-01-01', leasedNano: 0, leasesHoldNano: 20, leases: 1 },
    ]);
    const leases = (await q.leases()).filter((l) => l.leaseId.startsWith(tag));
    expect(leases.map((l) => [l.leaseId, l.kind, l.heldNano, l.slots, l.holdUntilMs, l.holderExpiresAtMs])).toEqual([
      [`${tag}_a`, 'budget', 400, 0, 7000, 5000],
      [`${tag}_b`, 'budget', 300, 0, 7000, 5000],
      [`${tag}_c`, 'budget', 500, 0, 7000, 5000],
      [`${tag}_d`, 'budget', 50, 0, 7000, null],
      [`${tag}_e`, 'budget', 20, 0, 7000, 5000],
      [`${tag}_r`, 'rate', 0, 3, 7000, 5000],
    ]);
    await sql`delete from admission_leases where lease_id like ${`${tag}_%`}`.execute(database.db);
    await sql`delete from budget_periods where scope like ${`tenant:${tag}_%`}`.execute(database.db);
  });

  it('reads the stored configuration snapshots: the latest whole, and every revisions section', async () => {
    const q = createReconcileQueries(database.db);
    expect(await q.latestConfigSnapshot()).toBeUndefined();
    expect(await q.snapshotRevisions()).toEqual([]);
    const at = (i: number) => new Date(base + i * 60_000);
    const config = (price: number) => ({ revisions: [{ id: 'm@1', pricing: { input_per_mtok: price, output_per_mtok: 1 } }], tenants: [] });
    await database.db.insertInto('config_snapshots').values([
      { version: 1, schema_version: 1, issued_at: at(1), config: JSON.stringify(config(0.1)), created_by: 'test' },
      { version: 2, schema_version: 1, issued_at: at(2), config: JSON.stringify(config(0.3)), created_by: 'test' },
    ] as never).execute();
    expect(await q.latestConfigSnapshot()).toEqual({ version: 2, issuedAt: at(2), config: config(0.3) });
    expect(await q.snapshotRevisions()).toEqual([
      { version: 1, issuedAt: at(1), revisions: config(0.1).revisions },
      { version: 2, issuedAt: at(2), revisions: config(0.3).revisions },
    ]);
    await database.db.deleteFrom('config_snapshots').execute();
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

  it('counts reservations held past their expiry, with the worst cases they hold, and running idempotency keys', async () => {
    const q = createReconcileQueries(database.db);
    const now = new Date(base);
    const reservation = (id: string, state: 'held' | 'settled', expiresAt: Date, worst: number) => ({
      id, tenant_id: 'acme', app_id: 'web', request_id: id, generation_id: id, state, input_tokens: 1, max_output_tokens: 1,
      worst_case_nano: worst, month_starts_on: '2026-11-01', day_starts_on: '2026-11-01', expires_at: expiresAt,
    });
    await database.db.insertInto('reservations').values([
      reservation('res_1', 'held', new Date(base - 1), 10),
      reservation('res_2', 'held', new Date(base + 60_000), 200),
      reservation('res_3', 'settled', new Date(base - 1), 3_000),
    ]).execute();
    expect(await q.countHeldPastExpiry(now)).toBe(1);
    expect(await q.heldReservations(now)).toEqual({ held: 2, heldNano: 210, pastExpiry: 1, pastExpiryNano: 10 });
    const key = (id: string, state: 'running' | 'done') => ({ tenant_id: 'acme', request_id: id, body_sha256: 'a'.repeat(64), generation_id: `gen_${id}`, route: 'generations', state, expires_at: new Date(base + 60_000) });
    await database.db.insertInto('idempotency_keys').values([key('k1', 'running'), key('k2', 'done')] as never).execute();
    expect(await q.countRunningKeys()).toBe(1);
  });
});

/**
 * The settlement applier on PGlite and on the machine's real Postgres: usage rows with their
 * migration-0010 columns and attempts, budget rows and lease balances moved exactly by the
 * costs, idempotency results and interruptions, exactly once per generation, atomically.
 */
import { sql } from 'kysely';
import type { GenerationOutcome, RetainedResult, SettlementBatch, SettlementEntry, SettlementItem, UpstreamAttempt } from '@weir/core';
import { buildReservationRef, buildSettlementEntry, uniqueTag } from '@weir/testing';
import { createPgIdempotencyStore } from './idempotency-store';
import { createPgSettlementApplier } from './settlement-applier';
import { type RejectedSettlement, applyIsolating } from './settlement-isolation';
import { createTestDatabase, type TestDatabase } from './testing';
import { createUsageRepository } from './usage-repository';

const NOW = Date.UTC(2026, 0, 1, 12);
const outcome: GenerationOutcome = {
  finishReason: 'stop',
  usage: { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0 },
  costNanoUsd: 5_000,
  modelRevision: 'm@1',
  timings: { queueMs: 1, ttftMs: 2, totalMs: 3 },
};
const retained = (generationId: string, requestId: string): RetainedResult => ({ generationId, requestId, route: 'generations', modelRevision: 'm@1', createdS: 1, deltas: ['Once', ' upon ✓'], outcome });
const settle = (entry: SettlementEntry): SettlementItem => ({ kind: 'settle', entry });

describe.each([['pglite' as const], ['postgres' as const]])('settlement applier on %s', (kind) => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
  }, 60_000);
  afterAll(() => database?.close());

  const applier = () => createPgSettlementApplier(database.db, { now: () => NOW });
  /** Entries of a fresh tenant (so tests never share budget rows), app `web`. */
  function entries(n: number, usage: (i: number) => Partial<SettlementEntry['usage']> = () => ({})): SettlementEntry[] {
    const tag = uniqueTag();
    return Array.from({ length: n }, (_, i) => buildSettlementEntry(i, { tenantId: `t_${tag}`, appId: 'web', ...usage(i) }, tag));
  }
  async function budget(scope: string, period: 'month' | 'day', startsOn = '2026-01-01'): Promise<{ settled: number; leased: number } | undefined> {
    const { rows } = await sql<{ settled: string; leased: string }>`
      select settled_nano::text as settled, leased_nano::text as leased from budget_periods
      where scope = ${scope} and period = ${period} and starts_on = ${startsOn}::date`.execute(database.db);
    return rows[0] && { settled: Number(rows[0].settled), leased: Number(rows[0].leased) };
  }
  async function lease(leaseId: string, scope: string, grantedNano: number, period: 'month' | 'day' = 'month'): Promise<void> {
    await sql`insert into admission_leases (lease_id, holder, scope, kind, period, starts_on, granted_nano, hold_until_ms, created_at_ms, updated_at_ms)
      values (${leaseId}, 'holder_1', ${scope}, 'budget', ${period}, '2026-01-01', ${grantedNano}, ${NOW + 60_000}, ${NOW}, ${NOW})`.execute(database.db);
    await sql`insert into budget_periods (scope, period, starts_on, leased_nano) values (${scope}, ${period}, '2026-01-01', ${grantedNano})
      on conflict (scope, period, starts_on) do update set leased_nano = budget_periods.leased_nano + excluded.leased_nano`.execute(database.db);
  }
  async function consumed(leaseId: string): Promise<number> {
    const { rows } = await sql<{ c: string }>`select consumed_nano::text as c from admission_leases where lease_id = ${leaseId}`.execute(database.db);
    return Number(rows[0].c);
  }

  it('inserts each usage row with its source, reservation, periods and attempts, and charges the four budget rows', async () => {
    const attempts: UpstreamAttempt[] = [
      { attempt: 1, revisionId: 'a@1', provider: 'openai-compatible', replicaId: 'r1', outcome: 'failed', errorCode: 'upstream_error', startedAtMs: NOW - 50, ttftMs: null, durationMs: 10.4, inputTokens: 0, outputTokens: 0 },
      { attempt: 2, revisionId: 'b@1', provider: 'llamacpp', outcome: 'answered', startedAtMs: NOW - 40, ttftMs: 5.6, durationMs: 30, inputTokens: 7, outputTokens: 9 },
    ];
    const [a, b] = entries(2, (i) => ({
      costNanoUsd: 1_000 * (i + 1),
      usageSource: i === 0 ? 'counted' : 'reported',
      ...(i === 0 ? { attempts, reservation: buildReservationRef(`g${i}`, ['lease_none']) } : {}),
    }));
    const tenant = a.usage.tenantId;
    const result = await applier().apply({ journal: 'j', items: [settle(a), settle(b)], position: { segment: 1, offset: 100 } });
    expect(result).toMatchObject({ inserted: 2, duplicates: 0, idempotencyWritten: 0 });

    const repo = createUsageRepository(database.db);
    const { reservation: _notReadBack, ...stored } = a.usage;
    // Timings are stored in whole ms.
    expect(await repo.getUsage(a.usage.generationId)).toEqual({ ...stored, queueMs: 2, attempts: [{ ...attempts[0], durationMs: 10 }, { ...attempts[1], ttftMs: 6 }] });
    expect((await repo.getUsage(b.usage.generationId))?.usageSource).toBe('reported');
    const { rows } = await sql<{ reservation_id: string | null; lease_ids: string[] | null; budget_month: string; budget_day: string }>`
      select reservation_id, lease_ids, budget_month::text, budget_day::text from usage_ledger where generation_id = ${a.usage.generationId}`.execute(database.db);
    expect(rows[0]).toEqual({ reservation_id: `res_g0`, lease_ids: ['lease_none'], budget_month: '2026-01-01', budget_day: '2026-01-01' });

    // Both finished on 2026-01-01: the four rows get 1,000 + 2,000.
    for (const scope of [`tenant:${tenant}`, `app:${tenant}/web`]) {
      for (const period of ['month', 'day'] as const) expect(await budget(scope, period)).toEqual({ settled: 3_000, leased: 0 });
    }
    expect(await applier().position('j')).toEqual({ segment: 1, offset: 100 });
    // A reclaimed lease: the cost is settled anyway and the excess reported.
    expect(result.overspends).toEqual([{ leaseId: 'lease_none', reason: 'lease_gone', excessNano: 1_000, generationIds: [a.usage.generationId] }]);
  });

  it('keeps a cache hit’s tier on its row (migration 0013) and none on a live answer', async () => {
    const [hit, live] = entries(2, (i) => ({ costNanoUsd: 250, ...(i === 0 ? { cacheHit: 'exact' as const } : {}) }));
    expect(await applier().apply({ journal: 'c', items: [settle(hit), settle(live)], position: { segment: 1, offset: 1 } })).toMatchObject({ inserted: 2 });
    const repo = createUsageRepository(database.db);
    expect((await repo.getUsage(hit.usage.generationId))?.cacheHit).toBe('exact');
    expect((await repo.getUsage(live.usage.generationId))?.cacheHit).toBeUndefined();
    const { rows } = await sql<{ cache_hit: string | null }>`select cache_hit from usage_ledger where generation_id = ${live.usage.generationId}`.execute(database.db);
    expect(rows[0].cache_hit).toBeNull();
  });

  it('applies each generation once: a batch applied again, or a generation twice in a batch, changes nothing more', async () => {
    const [a, b] = entries(2, () => ({ costNanoUsd: 500 }));
    const scope = `tenant:${a.usage.tenantId}`;
    const batch: SettlementBatch = { journal: 'k', items: [settle(a), settle(b), settle({ ...a, usage: { ...a.usage, costNanoUsd: 9_999 } })], position: { segment: 2, offset: 10 } };
    expect(await applier().apply(batch)).toMatchObject({ inserted: 2, duplicates: 1 });
    expect(await applier().apply(batch)).toMatchObject({ inserted: 0, duplicates: 3 });
    expect(await budget(scope, 'month')).toEqual({ settled: 1_000, leased: 0 });
    expect((await createUsageRepository(database.db).getUsage(a.usage.generationId))?.costNanoUsd).toBe(500);
    // The position never moves back.
    await applier().apply({ journal: 'k', items: [], position: { segment: 1, offset: 999 } });
    expect(await applier().position('k')).toEqual({ segment: 2, offset: 10 });
  });

  it('applies the new generations of a batch that also holds stored ones: their rows, money and keys, and only theirs', async () => {
    const tag = uniqueTag();
    const tenant = `t_${tag}`;
    await lease(`lm_${tag}`, `tenant:${tenant}`, 100_000);
    const keyed = (e: SettlementEntry, key: string): SettlementEntry => ({
      ...e,
      idempotency: { tenantId: tenant, key, outcome: { kind: 'result', result: retained(e.usage.generationId, key) }, retainUntilMs: NOW + 60_000, bodySha256: 'e'.repeat(64), route: 'generations' },
    });
    const [a, b, c] = entries(3, (i) => ({ tenantId: tenant, costNanoUsd: [1_000, 2_000, 4_000][i], reservation: buildReservationRef(`g${i}`, [`lm_${tag}`]) }));
    await applier().apply({ journal: 's', items: [settle(keyed(a, 'ka'))] });
    const store = createPgIdempotencyStore(database.db, { now: () => NOW });
    await sql`update idempotency_keys set result = '{"kept":true}'::jsonb where tenant_id = ${tenant} and request_id = 'ka'`.execute(database.db);

    // a is stored: the batch fails on it once, then b and c are applied without it.
    const result = await applier().apply({ journal: 's', items: [settle(keyed(a, 'ka')), settle(b), settle(keyed(c, 'kc'))], position: { segment: 1, offset: 7 } });
    expect(result).toMatchObject({ inserted: 2, duplicates: 1, idempotencyWritten: 1, overspends: [] });
    expect(await consumed(`lm_${tag}`)).toBe(7_000);
    expect(await budget(`tenant:${tenant}`, 'month')).toEqual({ settled: 7_000, leased: 93_000 });
    expect(await budget(`app:${tenant}/web`, 'day')).toEqual({ settled: 7_000, leased: 0 });
    expect((await store.get(tenant, 'ka'))?.result).toEqual({ kept: true });
    expect(await store.get(tenant, 'kc')).toMatchObject({ state: 'done', result: retained(c.usage.generationId, 'kc') });
    expect(await applier().position('s')).toEqual({ segment: 1, offset: 7 });
  });

  it('stores a request id equal to the generation id, lease ids of any characters, and attempts only when there is more than the answering one', async () => {
    const odd = `l"\\,{} ${uniqueTag()}`;
    const attempt = { attempt: 1, revisionId: 'm@1', provider: 'llamacpp', outcome: 'answered' as const, startedAtMs: NOW, ttftMs: 2, durationMs: 9, inputTokens: 3, outputTokens: 2 };
    const failed = { ...attempt, outcome: 'failed' as const, errorCode: 'upstream_error', ttftMs: null, outputTokens: 0 };
    const [same, answered, failedOnly] = entries(3, (i) => ({
      ...(i === 0 ? { reservation: buildReservationRef('g0', [odd, 'plain']) } : {}),
      attempts: [[attempt], [attempt], [failed]][i],
    }));
    same.usage.requestId = same.usage.generationId;
    await applier().apply({ journal: 't', items: [settle(same), settle(answered), settle(failedOnly)] });
    const { rows } = await sql<{ generation_id: string; request_id: string; lease_ids: string[] | null; attempts: unknown }>`
      select generation_id, request_id, lease_ids, attempts from usage_ledger where tenant_id = ${same.usage.tenantId} order by generation_id`.execute(database.db);
    expect(rows).toEqual([
      { generation_id: same.usage.generationId, request_id: same.usage.generationId, lease_ids: [odd, 'plain'], attempts: null },
      { generation_id: answered.usage.generationId, request_id: answered.usage.requestId, lease_ids: null, attempts: null },
      { generation_id: failedOnly.usage.generationId, request_id: failedOnly.usage.requestId, lease_ids: null, attempts: [failed] },
    ]);
    expect(answered.usage.requestId).not.toBe(answered.usage.generationId);
    const repo = createUsageRepository(database.db);
    expect((await repo.getUsage(answered.usage.generationId))?.attempts).toBeUndefined();
    expect((await repo.getUsage(failedOnly.usage.generationId))?.attempts).toEqual([failed]);
  });

  it('moves each cost from its leases to the rows, exactly, and reports what a lease could not cover', async () => {
    const tag = uniqueTag();
    const tenant = `t_${tag}`;
    const [monthLease, dayLease] = [`lm_${tag}`, `ld_${tag}`];
    await lease(monthLease, `tenant:${tenant}`, 10_000, 'month');
    await lease(dayLease, `tenant:${tenant}`, 10_000, 'day');
    const ref = (g: string) => buildReservationRef(g, [monthLease, dayLease]);
    const [a, b, c] = entries(3, (i) => ({ tenantId: tenant, costNanoUsd: [3_000, 4_000, 5_000][i], reservation: ref(`g${i}`) }));

    const first = await applier().apply({ journal: 'm', items: [settle(a), settle(b)] });
    expect(first.overspends).toEqual([]);
    expect([await consumed(monthLease), await consumed(dayLease)]).toEqual([7_000, 7_000]);
    expect(await budget(`tenant:${tenant}`, 'month')).toEqual({ settled: 7_000, leased: 3_000 });
    expect(await budget(`tenant:${tenant}`, 'day')).toEqual({ settled: 7_000, leased: 3_000 });
    expect(await budget(`app:${tenant}/web`, 'month')).toEqual({ settled: 7_000, leased: 0 });

    const second = await applier().apply({ journal: 'm', items: [settle(c)] });
    expect(second.overspends).toEqual([
      { leaseId: dayLease, reason: 'lease_exhausted', excessNano: 2_000, generationIds: [c.usage.generationId] },
      { leaseId: monthLease, reason: 'lease_exhausted', excessNano: 2_000, generationIds: [c.usage.generationId] },
    ].sort((x, y) => (x.leaseId < y.leaseId ? -1 : 1)));
    expect(await consumed(monthLease)).toBe(10_000);
    expect(await budget(`tenant:${tenant}`, 'month')).toEqual({ settled: 12_000, leased: 0 });

    // Applied again: nothing moves.
    await applier().apply({ journal: 'm', items: [settle(a), settle(b), settle(c)] });
    expect(await consumed(monthLease)).toBe(10_000);
    expect(await budget(`tenant:${tenant}`, 'month')).toEqual({ settled: 12_000, leased: 0 });
  });

  it("charges an entry without a reservation to its finish time's periods", async () => {
    const [a] = entries(1, () => ({ costNanoUsd: 42, finishedAt: new Date('2026-02-28T23:59:59Z') }));
    await applier().apply({ journal: 'n', items: [settle(a)] });
    expect(await budget(`app:${a.usage.tenantId}/web`, 'month', '2026-02-01')).toEqual({ settled: 42, leased: 0 });
    expect(await budget(`app:${a.usage.tenantId}/web`, 'day', '2026-02-28')).toEqual({ settled: 42, leased: 0 });
  });

  it('files the row and its budget rows under the internal ids the record names (issue 14 §4)', async () => {
    const [a] = entries(1, () => ({ costNanoUsd: 42, appUid: 'web~00000000000000bb', finishedAt: new Date('2026-03-02T10:00:00Z') }));
    a.usage.tenantUid = `${a.usage.tenantId}~00000000000000aa`;
    await applier().apply({ journal: 'n', items: [settle(a)] });
    const { rows } = await sql<{ tenant_id: string; tenant_uid: string; app_uid: string }>`
      select tenant_id, tenant_uid, app_uid from usage_ledger where generation_id = ${a.usage.generationId}`.execute(database.db);
    expect(rows).toEqual([{ tenant_id: a.usage.tenantId, tenant_uid: `${a.usage.tenantId}~00000000000000aa`, app_uid: 'web~00000000000000bb' }]);
    expect(await budget(`tenant:${a.usage.tenantId}~00000000000000aa`, 'month', '2026-03-01')).toEqual({ settled: 42, leased: 0 });
    expect(await budget(`app:${a.usage.tenantId}~00000000000000aa/web~00000000000000bb`, 'day', '2026-03-02')).toEqual({ settled: 42, leased: 0 });
    // Nothing on the slug's rows: a same-slug tenant's budget starts elsewhere.
    expect(await budget(`tenant:${a.usage.tenantId}`, 'month', '2026-03-01')).toBeUndefined();
  });

  it('stores idempotency results only for keys the generation still holds, and interruptions', async () => {
    const store = createPgIdempotencyStore(database.db, { now: () => NOW });
    const tag = uniqueTag();
    const tenant = `t_${tag}`;
    const claim = (requestId: string, generationId: string) =>
      store.claim({ tenantId: tenant, requestId, bodySha256: 'b'.repeat(64), generationId, route: 'generations', leaseUntilMs: NOW + 60_000 });
    await claim('held', 'gen_held');
    await claim('taken', 'gen_other');
    await claim('dying', 'gen_dying');
    const keyed = (generationId: string, key: string, extra: object = {}): SettlementEntry => ({
      usage: buildSettlementEntry(1, { tenantId: tenant, generationId }).usage,
      idempotency: { tenantId: tenant, key, outcome: { kind: 'result', result: retained(generationId, key) }, retainUntilMs: NOW + 3_600_000, ...extra },
    });
    const result = await applier().apply({
      journal: 'o',
      items: [
        settle(keyed('gen_held', 'held')),
        settle(keyed('gen_mine', 'taken')),
        // A claim the database never saw (held in memory): written from the entry's body hash and route.
        settle(keyed('gen_mem', 'memory', { bodySha256: 'c'.repeat(64), route: 'completions' })),
        { kind: 'interrupted', idempotency: { tenantId: tenant, key: 'dying', outcome: { kind: 'interrupted', generationId: 'gen_dying', message: 'generation gen_dying was interrupted' }, retainUntilMs: NOW + 1_000, bodySha256: 'b'.repeat(64), route: 'generations' } },
      ],
    });
    expect(result.idempotencyWritten).toBe(3);
    expect(await store.get(tenant, 'held')).toMatchObject({ state: 'done', result: retained('gen_held', 'held') });
    expect(await store.get(tenant, 'taken')).toMatchObject({ state: 'running', generationId: 'gen_other' });
    expect(await store.get(tenant, 'memory')).toMatchObject({ state: 'done', generationId: 'gen_mem', bodySha256: 'c'.repeat(64), route: 'completions' });
    expect(await store.get(tenant, 'dying')).toMatchObject({ state: 'interrupted', generationId: 'gen_dying', interruption: 'generation gen_dying was interrupted' });

    // A duplicate settlement does not touch the key again (the first one's result stands).
    await sql`update idempotency_keys set result = '{"x":1}'::jsonb where tenant_id = ${tenant} and request_id = 'held'`.execute(database.db);
    expect(await applier().apply({ journal: 'o', items: [settle(keyed('gen_held', 'held'))] })).toMatchObject({ duplicates: 1, idempotencyWritten: 0 });
  });

  it('is all or nothing: a batch that fails leaves no row, no charge, no key and no position', async () => {
    const [a, b] = entries(2, () => ({ costNanoUsd: 100 }));
    // total_ms is an integer column: 3e9 ms is out of its range.
    const bad = { ...b, usage: { ...b.usage, totalMs: 3e9 } };
    await expect(applier().apply({ journal: 'p', items: [settle(a), settle(bad)], position: { segment: 1, offset: 1 } })).rejects.toThrow();
    expect(await createUsageRepository(database.db).getUsage(a.usage.generationId)).toBeUndefined();
    expect(await budget(`tenant:${a.usage.tenantId}`, 'month')).toBeUndefined();
    expect(await applier().position('p')).toBeUndefined();
  });

  it('stores a result holding NUL characters (U+FFFD in their place), keeping a literal "\\u0000" as text', async () => {
    const tenant = `t_${uniqueTag()}`;
    const e: SettlementEntry = {
      usage: buildSettlementEntry(1, { tenantId: tenant, generationId: `gen_nul_${tenant}` }).usage,
      idempotency: {
        tenantId: tenant,
        key: 'nul',
        outcome: { kind: 'result', result: { ...retained(`gen_nul_${tenant}`, 'nul'), deltas: ['a\u0000b', 'literal \\u0000'] } },
        retainUntilMs: NOW + 60_000,
        bodySha256: 'd'.repeat(64),
        route: 'generations',
      },
    };
    await applier().apply({ journal: 'q', items: [settle(e)] });
    const got = await createPgIdempotencyStore(database.db, { now: () => NOW }).get(tenant, 'nul');
    expect(got?.result?.deltas).toEqual(['a\ufffdb', 'literal \\u0000']);
  });

  it('sets aside a settlement the database refuses, after trying it without its attempts, and applies the rest of its batch', async () => {
    const [good, badAttempt, badRow] = entries(3, () => ({ costNanoUsd: 10 }));
    // A lone surrogate is valid in a JS string and JSON text but not in jsonb (SQLSTATE 22P02).
    badAttempt.usage.attempts = [
      { attempt: 1, revisionId: 'a@1', provider: 'x', replicaId: 'r\ud800', outcome: 'failed', startedAtMs: NOW, ttftMs: null, durationMs: 1, inputTokens: 0, outputTokens: 0 },
      { attempt: 2, revisionId: 'a@1', provider: 'x', outcome: 'answered', startedAtMs: NOW, ttftMs: 1, durationMs: 1, inputTokens: 1, outputTokens: 1 },
    ];
    // total_ms is an integer column: 3e9 ms is out of its range (SQLSTATE 22003).
    badRow.usage.totalMs = 3e9;
    const rejected: RejectedSettlement[] = [];
    const result = await applyIsolating(applier(), { journal: 'r', items: [settle(good), settle(badAttempt), settle(badRow)], position: { segment: 3, offset: 3 } }, (r) => rejected.push(r));
    expect(result.inserted).toBe(2);
    expect(rejected.map((r) => r.item.kind === 'settle' && r.item.entry.usage.generationId)).toEqual([badRow.usage.generationId]);
    expect((rejected[0].error as { code?: string }).code).toBe('22003');
    const repo = createUsageRepository(database.db);
    expect((await repo.getUsage(badAttempt.usage.generationId))?.attempts).toBeUndefined();
    expect(await repo.getUsage(badRow.usage.generationId)).toBeUndefined();
    expect(await budget(`tenant:${good.usage.tenantId}`, 'month')).toEqual({ settled: 20, leased: 0 });
    expect(await applier().position('r')).toEqual({ segment: 3, offset: 3 });
  });
});

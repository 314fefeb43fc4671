/**
 * Reconciliation of the money path on a real Postgres, with the configuration in the control
 * plane's store (seeded from a file, then changed by an import) and a scripted engine replica
 * over HTTP that knows one generation's own count:
 *
 * - the split's failure from issue 13: a relay killed mid-stream leaves its reservation held
 *   past expiry and an uncertain ledger row no engine knows, on a revision whose prices are in
 *   the store but not in the configuration file given, with $0.000067 of the tenant's $0.0001
 *   spent: the tenant is refused; `--fix` settles the reservation from its row (priced from the
 *   store) and the tenant is admitted again;
 * - the same on leases (ADR 0002): an admission instance killed with a budget lease, its relay
 *   killed mid-stream (the gateway's estimated row, applied by the settlement applier): the row
 *   is settled from the engine's count with the difference moved through its budget rows and
 *   lease, the lease reclaimed after hold_until + grace, the tenant's whole remaining budget
 *   usable again, and every invariant holds;
 * - a revision removed from the configuration is still priced, from the snapshot current when
 *   its row finished.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { createAdmission, createLeasedAdmission } from '@weir/admission';
import { createControlPlane, createInMemorySnapshotSink, importConfig, readConfigFileObject, seedFromConfigFile } from '@weir/control-plane';
import type { Caller, UsageRecord } from '@weir/core';
import { priceUsage } from '@weir/ledger';
import {
  createPgAdmissionStore,
  createPgLeaseStore,
  createPgSettlementApplier,
  createReconcileQueries,
  createTestDatabase,
  createUsageRepository,
  type TestDatabase,
} from '@weir/store-pg';
import { buildUsageRecord, manualClock } from '@weir/testing';
import { loadReconcileConfig, type ReconcileConfig, describeConfigSource } from './reconcile-config';
import { type RunReconciliationOptions, runReconciliation } from './run-reconciliation';

jest.setTimeout(60_000);

const T1 = Date.UTC(2026, 0, 5, 10, 0);
const T2 = T1 + 3_600_000;
const NOW = Date.now();

let database: TestDatabase;
let dir: string;
let engine: Server;
let engineUrl: string;
let cfg: ReconcileConfig;
/** The engine's own counts, by generation id. */
const engineCounts = new Map<string, { prompt_tokens: number; completion_tokens: number }>();

const configYaml = (o: { hostedPrice: number; withOld: boolean }) => `
revisions:
  - id: hosted@2
    model: m
    engine: { kind: simulated }
    context_window: 4096
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: ${o.hostedPrice}, output_per_mtok: ${2 * o.hostedPrice} }
    replicas: [{ id: hosted@2/0, base_url: '${engineUrl}/v1', slots: 4 }]
${
  o.withOld
    ? `  - id: old@1
    model: m
    engine: { kind: simulated }
    context_window: 4096
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.05, output_per_mtok: 0.07 }`
    : ''
}
aliases:
  - name: hosted
    revision: hosted@2
tenants:
  - id: acme
    name: Acme
    apps: [{ id: web, name: Web }]
    limits: { max_concurrent: 8, monthly_budget_usd: 0.0001 }
  - id: beta
    name: Beta
    apps: [{ id: beta-web, name: Web }]
    limits: { max_concurrent: 8, monthly_budget_usd: 0.001 }
`;

beforeAll(async () => {
  engine = createServer((req, res) => {
    const m = /^\/v1\/generations\/([^/]+)\/usage$/.exec(req.url ?? '');
    const counts = m ? engineCounts.get(decodeURIComponent(m[1])) : undefined;
    res.setHeader('content-type', 'application/json');
    if (!counts) {
      res.statusCode = 404;
      return res.end('{"error":{"code":"not_found"}}');
    }
    res.end(JSON.stringify({ ...counts, finished: true, finish_reason: 'aborted' }));
  });
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  engineUrl = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;

  database = await createTestDatabase();
  dir = mkdtempSync(path.join(os.tmpdir(), 'weir-reconcile-money-'));
  // The store: seeded with hosted@2 (0.2/0.4 USD per M tokens: 200/400 nano-USD a token) and old@1, then old@1 removed by an import.
  writeFileSync(path.join(dir, 'seed.yaml'), configYaml({ hostedPrice: 0.2, withOld: true }));
  expect(await seedFromConfigFile(database.db, path.join(dir, 'seed.yaml'), { now: () => new Date(T1) })).toMatchObject({ seeded: true, version: 1 });
  writeFileSync(path.join(dir, 'next.yaml'), configYaml({ hostedPrice: 0.2, withOld: false }));
  const cp = createControlPlane({ publishWaitMs: 0 }, { db: database.db, sink: createInMemorySnapshotSink(), now: () => new Date(T2) });
  await importConfig(cp, readConfigFileObject(path.join(dir, 'next.yaml')), { id: 'test', label: 'test' });
  await cp.close();
  // The file an operator might pass as WEIR_CONFIG: other prices. The store wins.
  writeFileSync(path.join(dir, 'weir.yaml'), configYaml({ hostedPrice: 0.099, withOld: false }));
  cfg = await loadReconcileConfig(createReconcileQueries(database.db), { configPath: path.join(dir, 'weir.yaml') });
}, 60_000);

afterAll(async () => {
  engine?.closeAllConnections();
  await new Promise((r) => engine?.close(r));
  await database?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const options = (over: Partial<RunReconciliationOptions> = {}): RunReconciliationOptions => ({
  tenants: cfg.config.tenants,
  pricing: cfg.prices,
  enginesByRevision: new Map(cfg.config.revisions.map((r) => [r.id, (r.replicas ?? []).map((x) => ({ replicaId: x.id, baseUrl: x.baseUrl }))])),
  engineCounters: 'off',
  configSource: describeConfigSource(cfg.source),
  ...over,
});
/** 200 and 400 nano-USD a token. */
const hosted = { inputPerMTok: 0.2, outputPerMTok: 0.4, cachedInputPerMTok: 0.2, cacheWriteInputPerMTok: 0.2, reasoningPerMTok: 0.4 };
const row = (i: number, over: Partial<UsageRecord>): UsageRecord => {
  const r = buildUsageRecord(i, { modelRevision: 'hosted@2', cachedInputTokens: 0, finishedAt: new Date(NOW - 60_000), startedAt: new Date(NOW - 61_000), ...over }, 'money');
  return { ...r, costNanoUsd: priceUsage(hosted, r) };
};

it('reads the configuration from the control plane’s store, not from the file, with the prices of every snapshot', () => {
  expect(cfg.source).toMatchObject({ kind: 'store', version: 2, snapshots: 2 });
  expect(cfg.config.revisions.map((r) => r.id)).toEqual(['hosted@2']);
  expect(cfg.prices.priceAt('hosted@2')).toEqual(hosted);
  // Removed by the import at T2, still priced for rows of its time.
  expect(cfg.prices.priceAt('old@1', new Date(T1 + 60_000))).toEqual({ inputPerMTok: 0.05, outputPerMTok: 0.07, cachedInputPerMTok: 0.05, cacheWriteInputPerMTok: 0.05, reasoningPerMTok: 0.07 });
});

it('a killed relay’s reservation held past expiry: reported, then settled from its row by --fix, and the tenant is admitted again', async () => {
  const acme: Caller = { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' };
  const admission = createAdmission({ tenants: cfg.config.tenants, uncertainHoldMs: 0 }, { store: createPgAdmissionStore(database.db) });
  const reserve = (generationId: string, worst: number, expiresAtMs: number) =>
    admission.reserve({ caller: acme, requestId: generationId, generationId, inputTokens: 100, maxOutputTokens: 100, worstCaseCostNanoUsd: worst, expiresAtMs });
  // A finished request: $0.000060 settled.
  const done = row(1, { tenantId: 'acme', appId: 'web', inputTokens: 100, outputTokens: 100 });
  const first = await reserve(done.generationId, 70_000, NOW + 60_000);
  if (!first.ok) throw new Error('first reservation refused');
  await admission.settle(first.reservationId, { usage: { inputTokens: 100, outputTokens: 100, cachedInputTokens: 0 }, costNanoUsd: done.costNanoUsd });
  // The relay killed mid-stream: the gateway recorded 15 + 10 tokens ($0.000007), uncertain; the reservation stays held (its worst case $0.00003), expired a minute ago.
  const lost = row(2, { tenantId: 'acme', appId: 'web', inputTokens: 15, outputTokens: 10, uncertain: true, status: 'failed', finishReason: 'error', errorCode: 'upstream_error' });
  expect(await reserve(lost.generationId, 30_000, NOW - 60_000)).toMatchObject({ ok: true });
  // An old@1 row of its time (priced by the snapshot that then listed it).
  const old = buildUsageRecord(3, { tenantId: 'acme', appId: 'web', modelRevision: 'old@1', inputTokens: 3, outputTokens: 2, cachedInputTokens: 0, costNanoUsd: 3 * 50 + 2 * 70, finishedAt: new Date(T1 + 60_000), startedAt: new Date(T1 + 59_000) }, 'money');
  await createUsageRepository(database.db).insertMany([done, lost, old]);
  expect(done.costNanoUsd + lost.costNanoUsd).toBe(67_000);
  // $0.000060 settled + $0.000030 held: a request of $0.00002 is refused.
  expect(await reserve('gen_next_1', 20_000, NOW + 60_000)).toMatchObject({ ok: false, reason: 'budget_exhausted' });

  const queries = createReconcileQueries(database.db);
  const deps = { queries, reconcileReservations: () => admission.reconcileReservations(), leaseStore: createPgLeaseStore(database.db) };
  const before = await runReconciliation(options(), deps);
  expect(before.ok).toBe(false);
  expect(before.differences).toEqual(['1 reservation(s) held past their expiry, holding $0.000030000: --fix settles them from their ledger rows or releases them']);
  expect(before.uncertain.unresolved).toEqual([{ generationId: lost.generationId, modelRevision: 'hosted@2', reason: 'hosted@2/0: unknown to this replica' }]);

  const fixed = await runReconciliation(options({ fix: true }), deps);
  expect(fixed.differences).toEqual([]);
  expect(fixed.ok).toBe(true);
  expect(fixed.reservations).toMatchObject({ ran: true, held: 0, expiredHeld: 0, result: { expiredSettled: 1 } });
  // Every row at the store's prices (the file's 0.099/0.198 would differ), old@1 at its snapshot's.
  expect(fixed.usage.cost).toMatchObject({ ok: true, mismatches: { count: 0 } });
  expect(fixed.config).toMatch(/^the control plane's store \(snapshot v2/);
  const [month] = await sql<{ settled: string; reserved: string }>`select settled_nano::text as settled, reserved_nano::text as reserved from budget_periods
    where scope = 'tenant:acme' and period = 'month' and starts_on = date_trunc('month', now() at time zone 'utc')::date`.execute(database.db).then((r) => r.rows);
  expect(month).toEqual({ settled: '67000', reserved: '0' });
  // Now the tenant is admitted: $0.000067 spent, nothing held.
  const next = await reserve('gen_next_2', 20_000, NOW + 60_000);
  expect(next).toMatchObject({ ok: true });
  if (next.ok) await admission.release(next.reservationId);
});

it('on leases: a killed admission instance and relay — the estimated row settled from the engine through its lease, the lease reclaimed, the budget whole again', async () => {
  const beta: Caller = { tenantId: 'beta', appId: 'beta-web', apiKeyId: 'key_2' };
  const clock = manualClock(NOW);
  const store = createPgLeaseStore(database.db);
  const noTimer = { every: () => () => undefined };
  const holder = createLeasedAdmission({ tenants: cfg.config.tenants, mode: 'shared', holderId: 'adm-killed' }, { store, clock, timer: noTimer });
  await holder.start();
  const lost = row(10, { tenantId: 'beta', appId: 'beta-web', generationId: 'gen_money_beta_lost', inputTokens: 20, outputTokens: 5 });
  const res = await holder.reserve({ caller: beta, requestId: lost.generationId, generationId: lost.generationId, inputTokens: 20, maxOutputTokens: 100, worstCaseCostNanoUsd: 50_000, expiresAtMs: NOW + 60_000 });
  if (!res.ok || !res.reservation) throw new Error('reservation refused');
  // The relay died mid-stream: the gateway settled what it relayed, estimated, through the journal's applier.
  const estimated: UsageRecord = { ...lost, uncertain: true, usageSource: 'estimated', status: 'failed', finishReason: 'error', errorCode: 'upstream_error', reservation: res.reservation };
  await createPgSettlementApplier(database.db).apply({ journal: 'test', items: [{ kind: 'settle', entry: { usage: estimated } }] });
  // The engine produced 20 + 30.
  engineCounts.set(lost.generationId, { prompt_tokens: 20, completion_tokens: 30 });
  // The admission instance is killed (nothing returned); 5 minutes later its leases (held 4 min) are past hold_until + grace.
  await holder.stop({ returnLeases: false });
  clock.advance(5 * 60_000);
  const leasedBefore = await store.readBudget({ scope: 'tenant:beta', period: 'month', startsOn: res.reservation.monthStartsOn });
  expect(leasedBefore?.leasedNano).toBeGreaterThan(0);

  const queries = createReconcileQueries(database.db, { now: clock.now });
  const deps = { queries, leaseStore: store, now: clock.now };
  const before = await runReconciliation(options(), deps);
  expect(before.ok).toBe(false);
  expect(before.differences).toEqual([expect.stringMatching(/^2 lease\(s\) past hold_until \+ 5000 ms grace still outstanding, holding \$.* \(holders adm-killed\): --fix reclaims them/)]);
  expect(before.uncertain.settled).toEqual([
    expect.objectContaining({ generationId: lost.generationId, was: 'estimated', source: 'engine:hosted@2/0', after: expect.objectContaining({ outputTokens: 30, costNanoUsd: 20 * 200 + 30 * 400 }) }),
  ]);

  const fixed = await runReconciliation(options({ fix: true }), deps);
  expect(fixed.differences).toEqual([]);
  expect(fixed.ok).toBe(true);
  expect(fixed.uncertain.settled).toEqual([expect.objectContaining({ generationId: lost.generationId, budgetsMoved: true, overspends: [] })]);
  expect(fixed.leases).toMatchObject({ reclaimed: { leases: 2, holders: 1 }, outstanding: 0, heldNano: 0, mismatches: [] });
  const settled = 20 * 200 + 30 * 400;
  for (const scope of ['tenant:beta', 'app:beta/beta-web']) {
    for (const [period, startsOn] of [['month', res.reservation.monthStartsOn], ['day', res.reservation.dayStartsOn]] as const) {
      expect(await store.readBudget({ scope, period, startsOn })).toEqual({ settledNano: settled, reservedNano: 0, leasedNano: 0 });
    }
  }
  const [settledRow] = await database.db.selectFrom('usage_ledger').select(['output_tokens', 'uncertain', 'usage_source']).where('generation_id', '=', lost.generationId).execute();
  expect(settledRow).toEqual({ output_tokens: 30, uncertain: false, usage_source: 'reported' });
  // The tenant is not refused: a new instance can lease (and spend) everything that is left.
  const next = createLeasedAdmission({ tenants: cfg.config.tenants, mode: 'shared', holderId: 'adm-next' }, { store, clock, timer: noTimer });
  const rest = 1_000_000 - settled;
  expect(await next.reserve({ caller: beta, requestId: 'r2', generationId: 'gen_money_beta_next', inputTokens: 1, maxOutputTokens: 1, worstCaseCostNanoUsd: rest, expiresAtMs: clock.now() + 60_000 })).toMatchObject({ ok: true });
  await next.stop({ returnLeases: true });
});

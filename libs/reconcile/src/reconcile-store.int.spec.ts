/**
 * Reconciling a stopped all-in-one's data directory (its embedded PGlite database and file
 * settlement journal, under its lock), left as a kill -9 leaves it: a settlement journaled and
 * not applied, a generation abandoned mid-stream after a progress mark, a keyed one abandoned
 * before any output, the exclusive holder's leases over the whole budget, and — from before
 * leases — a held reservation and a running idempotency key. Report only lists each of them
 * and writes nothing; `--fix` does what the all-in-one's next start would, and then everything
 * agrees; the lock refuses a running all-in-one.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createAdmission, createLeasedAdmission } from '@weir/admission';
import { seedFromConfigFile } from '@weir/control-plane';
import type { Caller, ProgressMark, UsageRecord } from '@weir/core';
import { priceUsage } from '@weir/ledger';
import { type Kysely, Migrator } from 'kysely';
import {
  createPgAdmissionStore,
  createPgLeaseStore,
  createReconcileQueries,
  dataDirLayout,
  encodeJournalLine,
  expireOrphans,
  journalSegmentPath,
  MIGRATIONS,
  migrationProvider,
  openDatabase,
} from '@weir/store-pg';
import { buildClaimMark, buildProgressMark, buildUsageRecord } from '@weir/testing';
import { loadReconcileConfig } from './reconcile-config';
import { openReconcileStore, ReconcileStoreError } from './reconcile-store';
import { type ReconciliationReport, runReconciliation } from './run-reconciliation';

jest.setTimeout(120_000);

const CONFIG = `
revisions:
  - id: tiny@1
    model: m
    engine: { kind: simulated }
    context_window: 4096
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.2, output_per_mtok: 0.4 }
aliases:
  - name: tiny
    revision: tiny@1
tenants:
  - id: acme
    name: Acme
    apps: [{ id: web, name: Web }]
    limits: { max_concurrent: 8, monthly_budget_usd: 0.001 }
`;
const prices = { inputPerMTok: 0.2, outputPerMTok: 0.4, cachedInputPerMTok: 0.2 };
const acme: Caller = { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' };
const NOW = Date.now();

let root: string;
let dataDir: string;
let applied: UsageRecord;
let abandoned: ProgressMark;
let keyed: ReturnType<typeof buildClaimMark>;

async function reconcile(fix: boolean): Promise<ReconciliationReport> {
  const store = await openReconcileStore({ kind: 'embedded', dataDir }, { fix });
  try {
    const queries = createReconcileQueries(store.database.db);
    const cfg = await loadReconcileConfig(queries);
    return await runReconciliation(
      { tenants: cfg.config.tenants, pricing: cfg.prices, enginesByRevision: new Map(), engineCounters: 'off', fix, ownerStopped: store.ownerStopped },
      {
        queries,
        journal: store.journal,
        expireOrphans: () => expireOrphans(store.database.db),
        reconcileReservations: () => createAdmission({ tenants: cfg.config.tenants, uncertainHoldMs: 0 }, { store: createPgAdmissionStore(store.database.db) }).reconcileReservations(),
        leaseStore: createPgLeaseStore(store.database.db),
      },
    );
  } finally {
    await store.close();
  }
}

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'weir-reconcile-store-'));
  dataDir = path.join(root, 'data');
  const layout = dataDirLayout(dataDir);
  writeFileSync(path.join(root, 'weir.yaml'), CONFIG);
  // The all-in-one ran: its database, configuration, an exclusive holder's leases, in-flight work.
  mkdirSync(dataDir, { recursive: true });
  const database = await openDatabase({ dataDir: layout.database });
  try {
    await seedFromConfigFile(database.db, path.join(root, 'weir.yaml'));
    const cfg = await loadReconcileConfig(createReconcileQueries(database.db));
    // From before leases: a reservation held (its worst case on the budget rows) and a key running.
    const month = `${new Date(NOW).toISOString().slice(0, 7)}-01`;
    const day = new Date(NOW).toISOString().slice(0, 10);
    await database.db
      .insertInto('reservations')
      .values({
        id: 'rsv_old', tenant_id: 'acme', app_id: 'web', request_id: 'r_old', generation_id: 'gen_old', state: 'held', input_tokens: 1, max_output_tokens: 1,
        worst_case_nano: 700, month_starts_on: month, day_starts_on: day, expires_at: new Date(NOW + 600_000),
      })
      .execute();
    for (const scope of ['tenant:acme', 'app:acme/web']) {
      await database.db.insertInto('budget_periods').values([{ scope, period: 'month', starts_on: month, reserved_nano: 700 }, { scope, period: 'day', starts_on: day, reserved_nano: 700 }]).execute();
    }
    await database.db.insertInto('idempotency_keys').values({ tenant_id: 'acme', request_id: 'k_old', body_sha256: 'a'.repeat(64), generation_id: 'gen_old', route: 'generations', state: 'running', expires_at: new Date(NOW + 600_000) }).execute();
    const holder = createLeasedAdmission({ tenants: cfg.config.tenants, mode: 'exclusive', holderId: 'aio-1' }, { store: createPgLeaseStore(database.db), timer: { every: () => () => undefined } });
    await holder.start();
    const reserve = async (generationId: string) => {
      const r = await holder.reserve({ caller: acme, requestId: generationId, generationId, inputTokens: 10, maxOutputTokens: 100, worstCaseCostNanoUsd: 50_000, expiresAtMs: NOW + 120_000 });
      if (!r.ok || !r.reservation) throw new Error('refused');
      return r.reservation;
    };
    // A finished request whose settlement was journaled, not yet applied.
    const a = buildUsageRecord(1, { tenantId: 'acme', appId: 'web', modelRevision: 'tiny@1', inputTokens: 10, outputTokens: 20, cachedInputTokens: 0, generationId: 'gen_store_a', finishedAt: new Date(NOW - 5_000) }, 'store');
    applied = { ...a, costNanoUsd: priceUsage(prices, a), reservation: await reserve(a.generationId) };
    // A stream cut by the kill after a progress mark: 10 + 7 tokens so far.
    abandoned = buildProgressMark(2, {
      generationId: 'gen_store_b',
      tenantId: 'acme',
      appId: 'web',
      modelRevision: 'tiny@1',
      inputTokens: 10,
      outputTokens: 7,
      costNanoUsd: priceUsage(prices, { inputTokens: 10, outputTokens: 7, cachedInputTokens: 0 }),
      startedAtMs: NOW - 3_000,
      atMs: NOW - 2_000,
      reservation: await reserve('gen_store_b'),
    });
    // A keyed request that had produced nothing.
    keyed = buildClaimMark(3, { tenantId: 'acme', generationId: 'gen_store_c', retainUntilMs: NOW + 86_400_000 }, 'store');
    mkdirSync(layout.journal, { recursive: true });
    writeFileSync(
      journalSegmentPath(layout.journal, 1),
      [
        encodeJournalLine({ kind: 'claim', claim: keyed }),
        encodeJournalLine({ kind: 'progress', mark: abandoned }),
        encodeJournalLine({ kind: 'settle', entry: { usage: applied } }),
      ].join(''),
    );
    // kill -9: nothing returned, the holder row stays.
    await holder.stop({ returnLeases: false });
  } finally {
    await database.close();
  }
}, 120_000);

afterAll(() => {
  if (root) rmSync(root, { recursive: true, force: true });
});

it('refuses a data directory without a database, and one the all-in-one is running on, naming its pid', async () => {
  await expect(openReconcileStore({ kind: 'embedded', dataDir: path.join(root, 'nothing') }, { fix: false })).rejects.toThrow(/no embedded database at .*nothing\/pg/);
  expect(existsSync(path.join(root, 'nothing'))).toBe(false);
  const running = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)']);
  try {
    writeFileSync(dataDirLayout(dataDir).lock, String(running.pid));
    const refused = openReconcileStore({ kind: 'embedded', dataDir }, { fix: true });
    await expect(refused).rejects.toThrow(ReconcileStoreError);
    await expect(openReconcileStore({ kind: 'embedded', dataDir }, { fix: true })).rejects.toThrow(new RegExp(`the all-in-one \\(pid ${running.pid}\\) is running on .*: .*Stop it first`));
    expect(readFileSync(dataDirLayout(dataDir).lock, 'utf8')).toBe(String(running.pid));
  } finally {
    running.kill('SIGKILL');
    await new Promise((r) => running.on('exit', r));
  }
});

it('report only: lists what the kill left, and writes nothing', async () => {
  const journalBefore = readdirSync(dataDirLayout(dataDir).journal);
  const report = await reconcile(false);
  expect(report.ok).toBe(false);
  expect(report.journal?.inspection).toMatchObject({ present: true, unapplied: { settlements: 1 }, abandoned: { estimated: 1, interrupted: 1, keys: 1 } });
  expect(report.differences).toEqual([
    expect.stringMatching(/^the settlement journal holds 1 settlement\(s\) and 0 interruption\(s\) not yet applied to the ledger \(gen_store_a\): --fix applies them/),
    expect.stringMatching(/^the settlement journal holds 2 generation\(s\) abandoned mid-stream \(gen_store_c, gen_store_b\): --fix bills 1 from their last progress as estimated \(1 had produced nothing\) and marks 1 idempotency key\(s\) interrupted/),
    expect.stringMatching(/^1 budget lease\(s\) of the stopped all-in-one hold \$0\.000999300 its budgets cannot use/),
    '1 reservation(s) of the stopped all-in-one still held, holding $0.000000700: --fix settles them from their ledger rows or releases them, as its next start would',
    '1 idempotency key(s) still running from the stopped all-in-one (a retry of them waits for their claim): --fix frees them, as its next start would',
  ]);
  expect(readdirSync(dataDirLayout(dataDir).journal)).toEqual(journalBefore);
  expect(report.usage.ledgerTotals.records).toBe(0);
  expect(existsSync(dataDirLayout(dataDir).lock)).toBe(false);
});

it('--fix does what the next start would, then everything agrees; a second run finds nothing', async () => {
  const fixed = await reconcile(true);
  expect(fixed.differences).toEqual([]);
  expect(fixed.ok).toBe(true);
  expect(fixed.journal?.recovered?.recovery).toMatchObject({ replayed: 1, estimated: 1, interrupted: 1 });
  expect(fixed.orphans).toEqual({ claimsFreed: 1, reservationsExpired: 1 });
  // The tenant's month budget lease and its concurrency (rate) lease.
  expect(fixed.leases).toMatchObject({ reclaimed: { leases: 2, holders: 1 }, outstanding: 0, mismatches: [] });
  expect(fixed.reservations).toMatchObject({ held: 0 });

  const database = await openDatabase({ dataDir: dataDirLayout(dataDir).database, migrate: false });
  try {
    const rows = await database.db.selectFrom('usage_ledger').select(['generation_id', 'output_tokens', 'usage_source', 'uncertain', 'error_code']).orderBy('generation_id').execute();
    expect(rows).toEqual([
      { generation_id: 'gen_store_a', output_tokens: 20, usage_source: 'reported', uncertain: false, error_code: null },
      { generation_id: 'gen_store_b', output_tokens: 7, usage_source: 'estimated', uncertain: true, error_code: 'interrupted' },
    ]);
    const keys = await database.db.selectFrom('idempotency_keys').select(['request_id', 'state']).orderBy('request_id').execute();
    expect(keys).toEqual([{ request_id: keyed.key, state: 'interrupted' }]);
    const spent = applied.costNanoUsd + abandoned.costNanoUsd;
    const money = await database.db.selectFrom('budget_periods').select(['scope', 'period', 'settled_nano', 'reserved_nano', 'leased_nano']).orderBy('scope').orderBy('period').execute();
    expect(money.map((m) => [m.scope, m.period, Number(m.settled_nano), Number(m.reserved_nano), Number(m.leased_nano)])).toEqual([
      ['app:acme/web', 'day', spent, 0, 0],
      ['app:acme/web', 'month', spent, 0, 0],
      ['tenant:acme', 'day', spent, 0, 0],
      ['tenant:acme', 'month', spent, 0, 0],
    ]);
    expect(await database.db.selectFrom('reservations').select('state').execute()).toEqual([{ state: 'expired' }]);
  } finally {
    await database.close();
  }

  const again = await reconcile(false);
  expect(again.differences).toEqual([]);
  expect(again.ok).toBe(true);
  expect(again.journal?.inspection).toMatchObject({ present: true, unapplied: { settlements: 0, interruptions: 0 }, abandoned: { estimated: 0, interrupted: 0 } });
});

it('refuses, report only, a data directory whose schema is behind; --fix migrates it first, as the next start would', async () => {
  const old = path.join(root, 'old');
  mkdirSync(old, { recursive: true });
  const database = await openDatabase({ dataDir: dataDirLayout(old).database, migrate: false });
  try {
    const { error } = await new Migrator({ db: database.db as Kysely<unknown>, provider: migrationProvider }).migrateTo('0009_evals');
    expect(error).toBeUndefined();
  } finally {
    await database.close();
  }
  // Every migration after 0009, in the order they run (0010 onwards, whatever later issues add).
  const pending = Object.keys(MIGRATIONS).filter((name) => name > '0009_evals');
  expect(pending.slice(0, 3)).toEqual(['0010_money_path', '0011_lease_demand', '0012_internal_ids']);
  await expect(openReconcileStore({ kind: 'embedded', dataDir: old }, { fix: false })).rejects.toThrow(`schema is behind this Weir (${pending.join(', ')} not applied): run with --fix`);
  const store = await openReconcileStore({ kind: 'embedded', dataDir: old }, { fix: true });
  try {
    expect(store.migrated).toEqual(pending);
    expect(await createReconcileQueries(store.database.db).leases()).toEqual([]);
  } finally {
    await store.close();
  }
});

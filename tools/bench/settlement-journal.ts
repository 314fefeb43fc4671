/**
 * Cost of the settlement path (ADR 0002 §2), not a timed test:
 * - the file journal's `append` (encode, checksum, write(2); group fdatasync in the background):
 *   CPU µs per append at 1 and 16 appends per event-loop turn, after a warm-up (the first few
 *   thousand appends run unoptimized code and cost 3–4× as much);
 * - the settlement applier's transaction on PGlite (a data directory, as the all-in-one runs it;
 *   in memory with `--memory`) and on the machine's Postgres: wall and this process's CPU µs per
 *   entry, by batch size. Entries are realistic: a reservation over two live leases, one
 *   answering attempt (every 25th a failed attempt before it), every fifth with an idempotency
 *   result of 50 deltas. The ledger is first filled with `--fill` rows (default 20,000) so index
 *   inserts are not into an empty table.
 *
 * - with `--usage-rows N`: `GET /v1/usage`'s query (`createUsageQueries().summarize`) for one tenant
 *   holding N rows in the month (spread over 30 days, several apps, models and use cases), for
 *   the month and for one day, on PGlite (data dir): ms of CPU and wall per call.
 *
 *   node --import tsx tools/bench/settlement-journal.ts [--entries 4096] [--fill 20000] [--memory] [--no-postgres] [--usage-rows 100000]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type { SettlementApplier, SettlementEntry, SettlementItem } from '@weir/core';
import { createPgSettlementApplier, createTemporaryPostgresDatabase, createUsageQueries, openDatabase, openFileSettlementJournal, type WeirDatabase } from '@weir/store-pg';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const ENTRIES = arg('--entries', 4096);
const FILL = arg('--fill', 20_000);
const USAGE_ROWS = arg('--usage-rows', 0);
const BATCHES = [1, 16, 64, 128, 256];
const T0 = Date.UTC(2026, 0, 1, 12);
let seq = 0;

function entry(tenant: string, leases: string[]): SettlementEntry {
  const i = seq++;
  const generationId = `gen_bench_${process.pid}_${i}_${Math.random().toString(36).slice(2, 10)}`;
  const answering = { attempt: 1, revisionId: 'tiny@1', provider: 'openai-compatible', replicaId: 'r1', outcome: 'answered' as const, startedAtMs: T0, ttftMs: 3, durationMs: 40, inputTokens: 40, outputTokens: 50 };
  const e: SettlementEntry = {
    usage: {
      generationId,
      requestId: generationId,
      tenantId: tenant,
      appId: 'web',
      apiKeyId: 'key_1',
      route: 'chat.completions',
      modelAlias: 'tiny',
      modelRevision: 'tiny@1',
      inputTokens: 40,
      outputTokens: 50,
      cachedInputTokens: 0,
      costNanoUsd: 9_000,
      status: 'completed',
      finishReason: 'stop',
      errorCode: null,
      queueMs: 0.2,
      ttftMs: 3.1,
      totalMs: 40.5,
      startedAt: new Date(T0 + i),
      finishedAt: new Date(T0 + i + 40),
      usageSource: 'reported',
      attempts:
        i % 25 === 0
          ? [{ ...answering, replicaId: 'r0', outcome: 'failed', errorCode: 'upstream_unavailable', ttftMs: null, durationMs: 2, inputTokens: 0, outputTokens: 0 }, { ...answering, attempt: 2 }]
          : [answering],
      reservation: { reservationId: `res_${i}`, worstCaseNano: 100_000, monthStartsOn: '2026-01-01', dayStartsOn: '2026-01-01', leaseIds: leases },
    },
  };
  if (i % 5 === 0) {
    e.idempotency = {
      tenantId: tenant,
      key: `key_${generationId}`,
      outcome: { kind: 'result', result: { generationId, requestId: `key_${generationId}`, route: 'chat.completions', modelRevision: 'tiny@1', createdS: 1, deltas: Array.from({ length: 50 }, () => ' token'), outcome: { finishReason: 'stop' } as never } },
      retainUntilMs: T0 + 86_400_000,
      bodySha256: 'a'.repeat(64),
      route: 'chat.completions',
    };
  }
  return e;
}

async function leases(db: WeirDatabase, tenant: string): Promise<string[]> {
  const ids = [`lm_${tenant}`, `ld_${tenant}`];
  for (const [id, period] of [[ids[0], 'month'], [ids[1], 'day']] as const) {
    await sql`insert into admission_leases (lease_id, holder, scope, kind, period, starts_on, granted_nano, hold_until_ms, created_at_ms, updated_at_ms)
      values (${id}, 'bench', ${`tenant:${tenant}`}, 'budget', ${period}, '2026-01-01', 1000000000000000, 0, 0, 0)`.execute(db.db);
    await sql`insert into budget_periods (scope, period, starts_on, leased_nano) values (${`tenant:${tenant}`}, ${period}, '2026-01-01', 1000000000000000)`.execute(db.db);
  }
  return ids;
}

async function measureApplier(label: string, db: WeirDatabase): Promise<void> {
  const applier: SettlementApplier = createPgSettlementApplier(db.db);
  if (FILL > 0) {
    const ids = await leases(db, 'bench_fill');
    for (let i = 0; i < FILL; i += 512) {
      await applier.apply({ journal: 'bench', items: Array.from({ length: Math.min(512, FILL - i) }, () => ({ kind: 'settle' as const, entry: entry('bench_fill', ids) })) });
    }
  }
  for (const batchSize of BATCHES) {
    const tenant = `bench_${label.replace(/\W/g, '')}_${batchSize}`;
    const ids = await leases(db, tenant);
    const n = batchSize === 1 ? Math.min(ENTRIES, 512) : ENTRIES;
    const items: SettlementItem[] = Array.from({ length: n }, () => ({ kind: 'settle', entry: entry(tenant, ids) }));
    // Warm up (plans, prepared statements, JIT).
    for (let w = 0; w < 4; w++) await applier.apply({ journal: 'bench', items: Array.from({ length: batchSize }, () => ({ kind: 'settle' as const, entry: entry(tenant, ids) })) });
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < items.length; i += batchSize) {
      await applier.apply({ journal: 'bench', items: items.slice(i, i + batchSize), position: { segment: 1, offset: i } });
    }
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const perEntryWall = (wall * 1_000) / items.length;
    const perEntryCpu = (cpu.user + cpu.system) / items.length;
    const transactions = Math.ceil(items.length / batchSize);
    console.log(
      `${label.padEnd(22)} batch ${String(batchSize).padStart(3)}: ${perEntryWall.toFixed(1).padStart(7)} µs/entry wall, ${perEntryCpu.toFixed(1).padStart(7)} µs/entry CPU (this process), ${((cpu.user + cpu.system) / 1_000 / transactions).toFixed(2)} ms CPU/transaction`,
    );
  }
}

/** `/v1/usage`'s query over a tenant with USAGE_ROWS rows in January 2026. */
async function measureUsageQuery(db: WeirDatabase): Promise<void> {
  const applier = createPgSettlementApplier(db.db);
  const tenant = 'bench_usage';
  const DAY = 86_400_000;
  for (let i = 0; i < USAGE_ROWS; i += 1_000) {
    const items: SettlementItem[] = Array.from({ length: Math.min(1_000, USAGE_ROWS - i) }, (_, k) => {
      const n = i + k;
      const e = entry(tenant, []);
      const finishedAt = new Date(T0 - 11 * 3_600_000 + Math.floor((n / USAGE_ROWS) * 30 * DAY));
      e.usage = { ...e.usage, appId: `app_${n % 5}`, modelAlias: `m${n % 3}`, modelRevision: `m${n % 3}@1`, useCase: n % 4 === 0 ? undefined : `uc_${n % 4}`, startedAt: finishedAt, finishedAt, reservation: undefined };
      return { kind: 'settle', entry: e };
    });
    await applier.apply({ journal: 'bench_usage', items });
  }
  const queries = createUsageQueries(db.db);
  const windows = [
    ['month', new Date(Date.UTC(2026, 0, 1)), new Date(Date.UTC(2026, 1, 1))],
    ['day', new Date(Date.UTC(2026, 0, 15)), new Date(Date.UTC(2026, 0, 16))],
  ] as const;
  for (const [label, since, until] of windows) {
    const summary = await queries.summarize({ tenantId: tenant, since, until });
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < 10; i++) await queries.summarize({ tenantId: tenant, since, until });
    const wall = (performance.now() - t0) / 10;
    const cpu = process.cpuUsage(cpu0);
    console.log(`/v1/usage summarize, ${label} (${summary.requests} of ${USAGE_ROWS} rows): ${wall.toFixed(1)} ms wall, ${((cpu.user + cpu.system) / 10_000).toFixed(1)} ms CPU per call`);
  }
}

async function measureAppend(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-journal-'));
  const applier: SettlementApplier = { apply: async () => ({ inserted: 0, duplicates: 0, idempotencyWritten: 0, overspends: [] }), position: async () => undefined };
  const journal = await openFileSettlementJournal({ dir }, { applier });
  try {
    const run = async (perTurn: number, count: number) => {
      const entries = Array.from({ length: count }, () => entry('bench_append', ['l1', 'l2']));
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < entries.length; i += perTurn) {
        if (perTurn === 1) await journal.append(entries[i]);
        else await Promise.all(entries.slice(i, i + perTurn).map((e) => journal.append(e)));
      }
      return { wall: performance.now() - t0, cpu: process.cpuUsage(cpu0) };
    };
    await run(1, 10_000);
    await run(16, 10_000);
    for (const perTurn of [1, 16]) {
      const count = Math.max(ENTRIES, 20_000);
      const writes0 = journal.stats().writes;
      const { wall, cpu } = await run(perTurn, count);
      console.log(
        `file journal append, ${String(perTurn).padStart(2)} per turn: ${((wall * 1_000) / count).toFixed(1).padStart(6)} µs wall, ${((cpu.user + cpu.system) / count).toFixed(1).padStart(6)} µs CPU per append (${journal.stats().writes - writes0} writes)`,
      );
    }
  } finally {
    await journal.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  console.log(`node ${process.version}, ${os.cpus().length} cores, load ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}; ${ENTRIES} entries per series, ledger filled with ${FILL} rows first`);
  await measureAppend();

  if (process.argv.includes('--memory')) {
    const memory = await openDatabase();
    try {
      await measureApplier('PGlite (memory)', memory);
    } finally {
      await memory.close();
    }
  }
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-pglite-'));
  const disk = await openDatabase({ dataDir });
  try {
    await measureApplier('PGlite (data dir)', disk);
    if (USAGE_ROWS > 0) await measureUsageQuery(disk);
  } finally {
    await disk.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  if (process.argv.includes('--no-postgres')) return;
  const temp = await createTemporaryPostgresDatabase();
  const pg = await openDatabase({ databaseUrl: temp.url, maxConnections: 2 });
  try {
    await measureApplier('Postgres (loopback)', pg);
  } finally {
    await pg.close();
    await temp.drop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

/**
 * Cost of the settlement path (ADR 0002 §2), not a timed test:
 * - the file journal's `append` (encode, checksum, write(2); group fdatasync in the background):
 *   CPU µs per append, appends of one turn sharing a write;
 * - the settlement applier's transaction on PGlite (in memory and in a data directory) and on the
 *   machine's Postgres: wall and this process's CPU µs per entry, by batch size. Entries are
 *   realistic: a reservation over two live leases, one attempt each, every fifth with an
 *   idempotency result of 50 deltas.
 *
 *   node --import tsx tools/bench/settlement-journal.ts [--entries 4096]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type { SettlementApplier, SettlementEntry, SettlementItem } from '@weir/core';
import { createPgSettlementApplier, createTemporaryPostgresDatabase, openDatabase, openFileSettlementJournal, type WeirDatabase } from '@weir/store-pg';

const argEntries = process.argv.indexOf('--entries');
const ENTRIES = argEntries > 0 ? Number(process.argv[argEntries + 1]) : 4096;
const T0 = Date.UTC(2026, 0, 1, 12);
let seq = 0;

function entry(tenant: string, leases: string[]): SettlementEntry {
  const i = seq++;
  const generationId = `gen_bench_${process.pid}_${i}`;
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
      startedAt: new Date(T0),
      finishedAt: new Date(T0 + 40),
      usageSource: 'reported',
      attempts: [{ attempt: 1, revisionId: 'tiny@1', provider: 'openai-compatible', replicaId: 'r1', outcome: 'answered', startedAtMs: T0, ttftMs: 3, durationMs: 40, inputTokens: 40, outputTokens: 50 }],
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
  for (const batchSize of [1, 64, 128, 512]) {
    const tenant = `bench_${label.replace(/\W/g, '')}_${batchSize}`;
    const ids = await leases(db, tenant);
    const items: SettlementItem[] = Array.from({ length: Math.min(ENTRIES, batchSize === 1 ? 512 : ENTRIES) }, () => ({ kind: 'settle', entry: entry(tenant, ids) }));
    // Warm up (plans, caches).
    await applier.apply({ journal: 'bench', items: items.slice(0, Math.min(batchSize, 8)) });
    const rest = items.slice(Math.min(batchSize, 8));
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < rest.length; i += batchSize) {
      await applier.apply({ journal: 'bench', items: rest.slice(i, i + batchSize), position: { segment: 1, offset: i } });
    }
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const perEntryWall = (wall * 1_000) / rest.length;
    const perEntryCpu = (cpu.user + cpu.system) / rest.length;
    console.log(`${label.padEnd(22)} batch ${String(batchSize).padStart(3)}: ${perEntryWall.toFixed(1).padStart(7)} µs/entry wall, ${perEntryCpu.toFixed(1).padStart(7)} µs/entry CPU (this process), ${(wall / Math.ceil(rest.length / batchSize)).toFixed(2)} ms/transaction`);
  }
}

async function measureAppend(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-journal-'));
  const applier: SettlementApplier = { apply: async () => ({ inserted: 0, duplicates: 0, idempotencyWritten: 0, overspends: [] }), position: async () => undefined };
  const journal = await openFileSettlementJournal({ dir }, { applier });
  try {
    for (const perTurn of [1, 16]) {
      const entries = Array.from({ length: ENTRIES }, () => entry('bench_append', ['l1', 'l2']));
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < entries.length; i += perTurn) await Promise.all(entries.slice(i, i + perTurn).map((e) => journal.append(e)));
      const wall = performance.now() - t0;
      const cpu = process.cpuUsage(cpu0);
      console.log(`file journal append, ${String(perTurn).padStart(2)} per turn: ${((wall * 1_000) / entries.length).toFixed(1).padStart(6)} µs wall, ${((cpu.user + cpu.system) / entries.length).toFixed(1).padStart(6)} µs CPU per append (${journal.stats().writes} writes, ${journal.stats().syncs} syncs so far)`);
    }
  } finally {
    await journal.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  console.log(`node ${process.version}, ${os.cpus().length} cores, load ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}; ${ENTRIES} entries per series`);
  await measureAppend();

  const memory = await openDatabase();
  try {
    await measureApplier('PGlite (memory)', memory);
  } finally {
    await memory.close();
  }
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-pglite-'));
  const disk = await openDatabase({ dataDir });
  try {
    await measureApplier('PGlite (data dir)', disk);
  } finally {
    await disk.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
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

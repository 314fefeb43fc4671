/**
 * Admission on leases (ADR 0002 §1, issue 13 item 1): admissions per second for one tenant at
 * the admission engine, and whether the cap held. A benchmark, not a test.
 *
 *   node --import tsx tools/bench/admission-leases.ts [--duration-ms 5000] [--callers 64] [--only shared,exclusive] [--cpu-prof-dir DIR] [--out FILE]
 *
 * Scenarios:
 * - `shared`: two admission instances as two processes, each with its own connection pool to
 *   one throwaway database on the machine's Postgres, `mode: 'shared'`. One tenant with a
 *   monthly budget, tokens per minute and a concurrency limit (and an app with its own daily
 *   budget). Each process runs `--callers` async callers doing reserve → settle (a random actual
 *   cost ≤ the worst case) loops for `--duration-ms`, yielding to the event loop after each
 *   (a request arrives by I/O), and its own applier: every 50 ms one transaction applies the
 *   settlements of the batch (`applyLeaseSettlements`), as the ledger's applier will. Two runs:
 *   `steady` (a budget never reached: throughput) and `edge` (a budget that runs out mid-run:
 *   the cap). The parent samples the budget rows every ~10 ms (settled + leased ≤ budget) and
 *   at the end checks settled = Σ the costs the processes settled ≤ budget.
 * - `exclusive`: one process on an in-memory PGlite, `mode: 'exclusive'` (the all-in-one's
 *   case), same loop and applier.
 *
 * Reports admissions/s per instance and in total, transactions issued (lease store and applier,
 * counted by the processes; Postgres's own `xact_commit` for the database as a cross-check),
 * CPU µs per admission (reserve + settle + the applier's share) and the cap checks. Writes the
 * JSON to `--out` (default tools/bench/results/<date>-admission-leases.json) and prints markdown.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { sql } from 'kysely';
import { type HolderMode, type LeaseSettlement, type LeasedAdmission, NANO_PER_USD, createLeasedAdmission } from '@weir/admission';
import type { TenantSpec } from '@weir/core';
import { applyLeaseSettlements, createPgLeaseStore, createTemporaryPostgresDatabase, openDatabase, type WeirDatabase } from '@weir/store-pg';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const DURATION_MS = Number(value('--duration-ms') ?? 5_000);
const CALLERS = Number(value('--callers') ?? 64);
const ONLY = (value('--only') ?? 'shared,exclusive').split(',');
const WORST_NANO = 30_000; // 10 input + 20 output tokens at $1/M tokens: $0.00003
const APPLY_EVERY_MS = 50;
/** `--cpu-prof-dir DIR`: the admission processes write V8 CPU profiles there (summarize with cpuprofile-summary.ts). */
const PROFILE_DIR = value('--cpu-prof-dir');

/** The one tenant: a month budget, tokens per minute, concurrency; its app has a day budget. */
function tenants(monthlyUsd: number): TenantSpec[] {
  return [
    {
      id: 'bench',
      name: 'Bench',
      apps: [{ id: 'api', name: 'api', limits: { dailyBudgetUsd: monthlyUsd } }],
      allowedAliases: ['*'],
      defaultDeadlineMs: 120_000,
      limits: { monthlyBudgetUsd: monthlyUsd, tokensPerMinute: 100_000_000, maxConcurrent: 1_024 },
    },
  ];
}

const STEADY_USD = 10_000;
const EDGE_USD = 0.1; // ~7,000 admissions at an average cost of half the worst case: runs out mid-run

/** What one admission process measured. */
interface WorkerResult {
  id: string;
  mode: HolderMode;
  admitted: number;
  rejected: number;
  rejectedBy: Record<string, number>;
  elapsedMs: number;
  /** Σ actual costs settled (nano-USD). */
  settledNano: number;
  leaseTransactions: number;
  syncDraws: number;
  backgroundDraws: number;
  applierTransactions: number;
  cpuUserMs: number;
  cpuSystemMs: number;
}

// ---- worker ---------------------------------------------------------------------------------

async function worker(): Promise<void> {
  const id = value('--id') ?? 'w';
  const mode = (value('--mode') ?? 'shared') as HolderMode;
  const budgetUsd = Number(value('--budget-usd'));
  const url = value('--url');
  const database = await openDatabase(url ? { databaseUrl: url, maxConnections: 4, migrate: false } : {});
  const result = await runInstance(database, id, mode, budgetUsd, async () => {
    process.stdout.write('ready\n');
    const rl = createInterface({ input: process.stdin });
    await new Promise<void>((resolve) => rl.once('line', () => resolve()));
    rl.close();
  });
  await database.close();
  process.stdout.write(`result ${JSON.stringify(result)}\n`);
}

/** Runs one admission instance's callers and applier on `database` for DURATION_MS after `ready` resolves. */
async function runInstance(database: WeirDatabase, id: string, mode: HolderMode, budgetUsd: number, ready: () => Promise<void>): Promise<WorkerResult> {
  const admission: LeasedAdmission = createLeasedAdmission({ tenants: tenants(budgetUsd), mode, holderId: `bench_${id}_${process.pid}` }, { store: createPgLeaseStore(database.db) });
  await admission.start();
  let queue: LeaseSettlement[] = [];
  let applierTransactions = 0;
  let applying: Promise<void> = Promise.resolve();
  const applyBatch = () => {
    const batch = queue;
    queue = [];
    if (batch.length === 0) return applying;
    applierTransactions++;
    applying = applying.then(() => database.db.transaction().execute((trx) => applyLeaseSettlements(trx, batch)));
    return applying;
  };
  const applier = setInterval(() => void applyBatch(), APPLY_EVERY_MS);

  await ready();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const endAt = t0 + DURATION_MS;
  let admitted = 0;
  let rejected = 0;
  let settledNano = 0;
  const rejectedBy: Record<string, number> = {};
  let seq = 0;
  const caller = async () => {
    while (performance.now() < endAt) {
      seq++;
      const worst = WORST_NANO - (seq % 1_000);
      const r = await admission.reserve({
        caller: { tenantId: 'bench', appId: 'api', apiKeyId: 'key_bench' },
        requestId: `${id}_${seq}`,
        generationId: `gen_${id}_${seq}`,
        inputTokens: 10,
        maxOutputTokens: 20,
        worstCaseCostNanoUsd: worst,
        expiresAtMs: Date.now() + 120_000,
      });
      if (r.ok) {
        admitted++;
        const cost = Math.floor(Math.random() * worst);
        await admission.settle(r.reservationId, { usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 0 }, costNanoUsd: cost });
        settledNano += cost;
        queue.push({ tenantId: 'bench', appId: 'api', costNano: cost, reservation: r.reservation! });
      } else {
        rejected++;
        rejectedBy[r.reason] = (rejectedBy[r.reason] ?? 0) + 1;
      }
      // A real request arrives by I/O: let timers, the applier and the driver run.
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  await Promise.all(Array.from({ length: CALLERS }, caller));
  const elapsedMs = performance.now() - t0;
  clearInterval(applier);
  await applyBatch();
  const cpu = process.cpuUsage(cpu0);
  await admission.stop();
  const counters = admission.snapshot().counters;
  return {
    id,
    mode,
    admitted,
    rejected,
    rejectedBy,
    elapsedMs,
    settledNano,
    leaseTransactions: counters.transactions,
    syncDraws: counters.syncDraws,
    backgroundDraws: counters.backgroundDraws,
    applierTransactions,
    cpuUserMs: cpu.user / 1_000,
    cpuSystemMs: cpu.system / 1_000,
  };
}

// ---- parent ---------------------------------------------------------------------------------

interface ScenarioResult {
  scenario: string;
  budgetUsd: number;
  instances: WorkerResult[];
  admissionsPerSecond: { total: number; perInstance: number[] };
  transactions: { lease: number; applier: number; postgresXactCommit?: number };
  cpuMicrosPerAdmission: number[];
  cap: { samples: number; maxHeldPlusSettledNano: number; budgetNano: number; settledNano: number; settledByInstancesNano: number; held: boolean };
}

async function sharedScenario(name: string, budgetUsd: number): Promise<ScenarioResult> {
  const temp = await createTemporaryPostgresDatabase();
  const admin = await openDatabase({ databaseUrl: temp.url, maxConnections: 2 });
  try {
    const children = ['a', 'b'].map((id) =>
      spawn(process.execPath, [...(PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []), '--import', 'tsx', process.argv[1], '--worker', '--id', id, '--mode', 'shared', '--url', temp.url, '--budget-usd', String(budgetUsd), '--duration-ms', String(DURATION_MS), '--callers', String(CALLERS)], {
        stdio: ['pipe', 'pipe', 'inherit'],
      }),
    );
    const lines = children.map(lineReader);
    await Promise.all(lines.map((l) => l.next('ready')));
    const xact0 = await xactCommit(admin);
    let sampling = true;
    const cap = { samples: 0, maxHeldPlusSettledNano: 0 };
    const rows = [
      { scope: 'tenant:bench', period: 'month' as const, startsOn: periodStart('month') },
      { scope: 'app:bench/api', period: 'day' as const, startsOn: periodStart('day') },
    ];
    const store = createPgLeaseStore(admin.db);
    const sampler = (async () => {
      while (sampling) {
        for (const key of rows) {
          const row = await store.readBudget(key);
          if (row) cap.maxHeldPlusSettledNano = Math.max(cap.maxHeldPlusSettledNano, row.settledNano + row.leasedNano + row.reservedNano);
        }
        cap.samples++;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    for (const c of children) c.stdin?.write('go\n');
    const results = (await Promise.all(lines.map((l) => l.next('result ')))).map((line) => JSON.parse(line.slice('result '.length)) as WorkerResult);
    sampling = false;
    await sampler;
    await Promise.all(children.map((c) => new Promise((resolve) => (c.exitCode !== null ? resolve(undefined) : c.once('exit', resolve)))));
    const xact1 = await xactCommit(admin);
    const settled = Math.max(...(await Promise.all(rows.map(async (k) => (await store.readBudget(k))?.settledNano ?? 0))));
    return summarize(name, budgetUsd, results, cap, settled, xact1 - xact0 - cap.samples * rows.length);
  } finally {
    await admin.close();
    await temp.drop();
  }
}

async function exclusiveScenario(name: string, budgetUsd: number): Promise<ScenarioResult> {
  const database = await openDatabase();
  try {
    const result = await runInstance(database, 'x', 'exclusive', budgetUsd, async () => undefined);
    const store = createPgLeaseStore(database.db);
    const key = { scope: 'tenant:bench', period: 'month' as const, startsOn: periodStart('month') };
    const row = await store.readBudget(key);
    return summarize(name, budgetUsd, [result], { samples: 0, maxHeldPlusSettledNano: (row?.settledNano ?? 0) + (row?.leasedNano ?? 0) }, row?.settledNano ?? 0, undefined);
  } finally {
    await database.close();
  }
}

function summarize(scenario: string, budgetUsd: number, instances: WorkerResult[], cap: { samples: number; maxHeldPlusSettledNano: number }, settledNano: number, xact: number | undefined): ScenarioResult {
  const budgetNano = Math.round(budgetUsd * NANO_PER_USD);
  const perInstance = instances.map((r) => (r.admitted * 1_000) / r.elapsedMs);
  const settledByInstancesNano = instances.reduce((s, r) => s + r.settledNano, 0);
  return {
    scenario,
    budgetUsd,
    instances,
    admissionsPerSecond: { total: perInstance.reduce((a, b) => a + b, 0), perInstance },
    transactions: {
      lease: instances.reduce((s, r) => s + r.leaseTransactions, 0),
      applier: instances.reduce((s, r) => s + r.applierTransactions, 0),
      ...(xact === undefined ? {} : { postgresXactCommit: xact }),
    },
    cpuMicrosPerAdmission: instances.map((r) => ((r.cpuUserMs + r.cpuSystemMs) * 1_000) / Math.max(1, r.admitted + r.rejected)),
    cap: {
      ...cap,
      budgetNano,
      settledNano,
      settledByInstancesNano,
      held: cap.maxHeldPlusSettledNano <= budgetNano && settledNano === settledByInstancesNano && settledNano <= budgetNano,
    },
  };
}

function periodStart(period: 'month' | 'day'): string {
  const day = new Date().toISOString().slice(0, 10);
  return period === 'day' ? day : `${day.slice(0, 8)}01`;
}

async function xactCommit(db: WeirDatabase): Promise<number> {
  await sql`SELECT pg_stat_clear_snapshot()`.execute(db.db);
  const { rows } = await sql<{ n: string }>`SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()`.execute(db.db);
  return Number(rows[0]?.n ?? 0);
}

/** Reads a child's stdout line by line; `next(prefix)` resolves with the next line starting with it. */
function lineReader(child: ChildProcess) {
  const waiting: { prefix: string; resolve(line: string): void }[] = [];
  const seen: string[] = [];
  const rl = createInterface({ input: child.stdout! });
  rl.on('line', (line) => {
    const i = waiting.findIndex((w) => line.startsWith(w.prefix));
    if (i >= 0) waiting.splice(i, 1)[0].resolve(line);
    else seen.push(line);
  });
  return {
    next: (prefix: string) =>
      new Promise<string>((resolve, reject) => {
        const i = seen.findIndex((l) => l.startsWith(prefix));
        if (i >= 0) return resolve(seen.splice(i, 1)[0]);
        waiting.push({ prefix, resolve });
        child.once('exit', (code) => reject(new Error(`worker exited with ${code} before "${prefix}"`)));
      }),
  };
}

function markdown(results: ScenarioResult[]): string {
  const out = [
    `Admission on leases, ${DURATION_MS} ms per run, ${CALLERS} callers per instance (reserve → settle loops), worst case $${WORST_NANO / NANO_PER_USD}.`,
    '',
    '| scenario | admissions/s total | per instance | admitted | rejected | lease tx | applier tx | Postgres commits | CPU µs / decision | settled / budget | max settled + held | cap held |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const usd = (nano: number) => `$${(nano / NANO_PER_USD).toFixed(6)}`;
  for (const r of results) {
    out.push(
      `| ${r.scenario} | ${r.admissionsPerSecond.total.toFixed(0)} | ${r.admissionsPerSecond.perInstance.map((x) => x.toFixed(0)).join(' / ')} | ${r.instances.reduce((s, i) => s + i.admitted, 0)} | ${r.instances.reduce((s, i) => s + i.rejected, 0)} | ${r.transactions.lease} | ${r.transactions.applier} | ${r.transactions.postgresXactCommit ?? '–'} | ${r.cpuMicrosPerAdmission.map((x) => x.toFixed(1)).join(' / ')} | ${usd(r.cap.settledNano)} / $${r.budgetUsd} | ${usd(r.cap.maxHeldPlusSettledNano)} | ${r.cap.held ? 'yes' : '**NO**'} |`,
    );
  }
  out.push('', 'In the edge runs admissions are bounded by the budget (it runs out within the first seconds); what they show is the cap and the transactions near it.');
  return out.join('\n');
}

async function main(): Promise<void> {
  if (argv.includes('--worker')) return worker();
  const results: ScenarioResult[] = [];
  if (ONLY.includes('shared')) {
    results.push(await sharedScenario('shared ×2, Postgres, steady', STEADY_USD));
    results.push(await sharedScenario('shared ×2, Postgres, edge', EDGE_USD));
  }
  if (ONLY.includes('exclusive')) {
    results.push(await exclusiveScenario('exclusive ×1, PGlite, steady', STEADY_USD));
    results.push(await exclusiveScenario('exclusive ×1, PGlite, edge', EDGE_USD));
  }
  const md = markdown(results);
  process.stdout.write(`${md}\n`);
  const out = value('--out') ?? path.join('tools/bench/results', `${new Date().toISOString().slice(0, 10)}-admission-leases.json`);
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ meta: { durationMs: DURATION_MS, callers: CALLERS, node: process.version, at: new Date().toISOString() }, results }, null, 2)}\n`);
  if (results.some((r) => !r.cap.held)) process.exitCode = 1;
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});

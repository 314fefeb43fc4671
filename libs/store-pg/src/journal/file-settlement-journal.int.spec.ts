/**
 * The file settlement journal with the real applier, on PGlite and on the machine's Postgres:
 * a child process appending settlements is killed with SIGKILL at a random instant, and while
 * its applier's transaction is open; on reopen every settlement whose `append` had returned is
 * applied exactly once (rows, budget rows, the lease, keys). Generations that died mid-stream
 * are settled from their last progress (estimated, capped), keyed ones without progress become
 * `interrupted`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { buildClaimMark, buildProgressMark, buildReservationRef, repoPath, uniqueTag, waitUntil } from '@weir/testing';
import { openDatabase, type WeirDatabase } from '../database';
import { createPgIdempotencyStore } from '../idempotency-store';
import { createPgSettlementApplier } from '../settlement-applier';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from '../testing';
import { crashEntry } from './crash-child';
import { openFileSettlementJournal } from './file-settlement-journal';
import { encodeJournalLine } from './journal-line';

const GRANTED = 1_000_000_000_000;

/** A seeded uniform [0, 1) source (mulberry32), so a failing run can be replayed from its seed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

interface ChildRun {
  acked: Set<string>;
  applying: { first: string; last: string; n: number }[];
  stderr: string;
}

describe.each([['pglite' as const], ['postgres' as const]])('file settlement journal on %s', (kind) => {
  let root: string;
  let pg: TemporaryPostgresDatabase | undefined;
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), 'weir-journal-int-'));
    if (kind === 'postgres') pg = await createTemporaryPostgresDatabase();
  });
  afterAll(async () => {
    await pg?.drop();
    rmSync(root, { recursive: true, force: true });
  });

  const pgliteDir = () => path.join(root, 'db');
  const dbOptions = () => (kind === 'postgres' ? { databaseUrl: pg!.url, maxConnections: 2 } : { dataDir: pgliteDir() });
  /** Opens the database (migrating it), runs `fn`, closes it (PGlite's directory must be free for the child). */
  async function withDb<T>(fn: (db: WeirDatabase) => Promise<T>): Promise<T> {
    const database = await openDatabase(dbOptions());
    try {
      return await fn(database);
    } finally {
      await database.close();
    }
  }
  async function createLease(db: WeirDatabase, leaseId: string, scope: string): Promise<void> {
    await sql`insert into admission_leases (lease_id, holder, scope, kind, period, starts_on, granted_nano, hold_until_ms, created_at_ms, updated_at_ms)
      values (${leaseId}, 'crash-child', ${scope}, 'budget', 'month', '2026-01-01', ${GRANTED}, 0, 0, 0)`.execute(db.db);
    await sql`insert into budget_periods (scope, period, starts_on, leased_nano) values (${scope}, 'month', '2026-01-01', ${GRANTED})`.execute(db.db);
  }

  /** Runs the crash child until `killWhen` resolves, then SIGKILLs it. */
  function runChild(env: Record<string, string>, killWhen: (run: ChildRun, child: ChildProcess) => Promise<void>): Promise<ChildRun> {
    const child = spawn(process.execPath, ['--import', 'tsx', repoPath('libs/store-pg/src/journal/crash-child.ts')], {
      env: { ...process.env, TSX_TSCONFIG_PATH: repoPath('tsconfig.json'), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const run: ChildRun = { acked: new Set(), applying: [], stderr: '' };
    let buffered = '';
    let ready = false;
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        const [word, ...rest] = line.split(' ');
        if (word === 'ready') ready = true;
        else if (word === 'acked') run.acked.add(rest[0]);
        else if (word === 'applying') run.applying.push({ first: rest[0], last: rest[1], n: Number(rest[2]) });
      }
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => (run.stderr += chunk));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return (async () => {
      try {
        await Promise.race([
          waitUntil(() => ready, 60_000, 'crash child ready', 20),
          exited.then(() => {
            throw new Error(`crash child exited early: ${run.stderr}`);
          }),
        ]);
        await killWhen(run, child);
      } finally {
        child.kill('SIGKILL');
        await exited;
      }
      return run;
    })();
  }

  /** Reopens the journal (recovery), then checks every acked settlement was applied exactly once. */
  async function recoverAndVerify(tag: string, lease: string, journalDir: string, acked: Set<string>): Promise<void> {
    await withDb(async (database) => {
      const journal = await openFileSettlementJournal({ dir: journalDir }, { applier: createPgSettlementApplier(database.db) });
      await journal.close();
      const { rows } = await sql<{ generation_id: string; cost: string }>`
        select generation_id, (cost_usd * 1000000000)::bigint::text as cost from usage_ledger where tenant_id = ${`t_${tag}`}`.execute(database.db);
      const ids = new Set(rows.map((r) => r.generation_id));
      const missing = [...acked].filter((g) => !ids.has(g));
      expect(missing).toEqual([]);
      let total = 0;
      for (const r of rows) {
        const i = Number(r.generation_id.split('_').pop());
        expect(Number(r.cost)).toBe(crashEntry(tag, lease, i).usage.costNanoUsd);
        total += Number(r.cost);
      }
      // Each row's cost reached the four budget rows and the lease exactly once.
      const { rows: budgets } = await sql<{ scope: string; period: string; settled: string; leased: string }>`
        select scope, period, settled_nano::text as settled, leased_nano::text as leased from budget_periods
        where scope in (${`tenant:t_${tag}`}, ${`app:t_${tag}/web`}) order by scope, period`.execute(database.db);
      expect(budgets.map((b) => [b.scope, b.period, Number(b.settled)])).toEqual([
        [`app:t_${tag}/web`, 'day', total],
        [`app:t_${tag}/web`, 'month', total],
        [`tenant:t_${tag}`, 'day', total],
        [`tenant:t_${tag}`, 'month', total],
      ]);
      expect(Number(budgets.find((b) => b.scope === `tenant:t_${tag}` && b.period === 'month')!.leased)).toBe(GRANTED - total);
      const { rows: leaseRows } = await sql<{ consumed: string }>`select consumed_nano::text as consumed from admission_leases where lease_id = ${lease}`.execute(database.db);
      expect(Number(leaseRows[0].consumed)).toBe(total);
      // Keyed settlements left their result.
      const { rows: keys } = await sql<{ n: string }>`select count(*)::text as n from idempotency_keys where tenant_id = ${`t_${tag}`} and state = 'done'`.execute(database.db);
      expect(Number(keys[0].n)).toBe(rows.filter((r) => Number(r.generation_id.split('_').pop()) % 5 === 0).length);

      // Another restart changes nothing.
      const again = await openFileSettlementJournal({ dir: journalDir }, { applier: createPgSettlementApplier(database.db) });
      expect(again.recovery).toMatchObject({ replayed: 0, estimated: 0, interrupted: 0 });
      await again.close();
      const { rows: after } = await sql<{ n: string }>`select count(*)::text as n from usage_ledger where tenant_id = ${`t_${tag}`}`.execute(database.db);
      expect(Number(after[0].n)).toBe(rows.length);
    });
  }

  it('applies every settlement whose append returned exactly once after a SIGKILL at a random instant', async () => {
    const seed = Number(process.env.WEIR_CRASH_SEED ?? Date.now() % 1_000_000);
    const random = seeded(seed);
    const tag = uniqueTag();
    const lease = `lease_${tag}`;
    const journalDir = path.join(root, `journal_${tag}`);
    await withDb((db) => createLease(db, lease, `tenant:t_${tag}`));
    const killAfterMs = Math.floor(random() * 1_000);
    const run = await runChild(
      { CRASH_TAG: tag, CRASH_LEASE: lease, CRASH_JOURNAL_DIR: journalDir, CRASH_SEGMENT_BYTES: '65536', ...(kind === 'postgres' ? { CRASH_DATABASE_URL: pg!.url } : { CRASH_PGLITE_DIR: pgliteDir() }) },
      async (r) => {
        // Some work applied and more in flight, then a random instant (slow machines included).
        await waitUntil(() => r.acked.size > 50 && r.applying.length > 0, 60_000, 'appends and a first transaction', 5);
        await new Promise((resolve) => setTimeout(resolve, killAfterMs));
      },
    );
    try {
      await recoverAndVerify(tag, lease, journalDir, run.acked);
    } catch (err) {
      // Replay with WEIR_CRASH_SEED=<seed>.
      (err as Error).message = `seed ${seed}, killed ${killAfterMs} ms after the first transaction: ${(err as Error).message}`;
      throw err;
    }
  }, 120_000);

  it("applies a batch exactly once after a SIGKILL inside the applier's transaction", async () => {
    const tag = uniqueTag();
    const lease = `lease_${tag}`;
    const journalDir = path.join(root, `journal_${tag}`);
    await withDb(async (db) => {
      await createLease(db, lease, `tenant:t_${tag}`);
      // Every position write (the transaction's last statement) waits, holding the transaction open.
      await sql`create or replace function weir_test_slow_position() returns trigger language plpgsql as $$ begin perform pg_sleep(0.8); return new; end $$`.execute(db.db);
      await sql`create trigger weir_test_slow_position before insert or update on journal_positions for each row execute function weir_test_slow_position()`.execute(db.db);
    });
    const run = await runChild(
      { CRASH_TAG: tag, CRASH_LEASE: lease, CRASH_JOURNAL_DIR: journalDir, ...(kind === 'postgres' ? { CRASH_DATABASE_URL: pg!.url } : { CRASH_PGLITE_DIR: pgliteDir() }) },
      async (r) => {
        await waitUntil(() => r.applying.length >= 3, 60_000, 'third applier transaction', 5);
        // 0.2 s into a transaction that lasts at least 0.8 s.
        await new Promise((resolve) => setTimeout(resolve, 200));
      },
    );
    const killed = run.applying[run.applying.length - 1];
    await withDb(async (db) => {
      // The killed transaction committed nothing (it was open when the process died)…
      const { rows } = await sql<{ generation_id: string }>`select generation_id from usage_ledger where generation_id in (${killed.first}, ${killed.last})`.execute(db.db);
      expect(rows).toEqual([]);
      await sql`drop trigger weir_test_slow_position on journal_positions`.execute(db.db);
    });
    // …and after the restart it is applied exactly once, with everything acked.
    expect(run.acked.has(killed.last)).toBe(true);
    await recoverAndVerify(tag, lease, journalDir, run.acked);
  }, 120_000);

  it('settles a generation that died mid-stream from its last progress, capped, on its budget rows and lease, and interrupts a keyed one without progress', async () => {
    const tag = uniqueTag();
    const tenant = `t_${tag}`;
    const lease = `lease_${tag}`;
    const journalDir = path.join(root, `journal_${tag}`);
    mkdirSync(journalDir, { recursive: true });
    const reservation = buildReservationRef(`gen_${tag}_1`, [lease], { worstCaseNano: 6_000 });
    const mark = (out: number) => buildProgressMark(1, { tenantId: tenant, appId: 'web', outputTokens: out, costNanoUsd: out * 1_000, reservation }, tag);
    writeFileSync(
      path.join(journalDir, '0000000000000001.journal'),
      [
        encodeJournalLine({ kind: 'claim', claim: buildClaimMark(1, { tenantId: tenant }, tag) }),
        encodeJournalLine({ kind: 'progress', mark: mark(2) }),
        encodeJournalLine({ kind: 'progress', mark: mark(8) }),
        encodeJournalLine({ kind: 'claim', claim: buildClaimMark(2, { tenantId: tenant }, tag) }),
      ].join(''),
    );
    await withDb(async (database) => {
      await createLease(database, lease, `tenant:${tenant}`);
      const journal = await openFileSettlementJournal({ dir: journalDir }, { applier: createPgSettlementApplier(database.db) });
      expect(journal.recovery).toMatchObject({ estimated: 1, interrupted: 1 });
      await journal.close();
      const { rows } = await sql<{ generation_id: string; output_tokens: number; cost: string; usage_source: string; error_code: string; uncertain: boolean }>`
        select generation_id, output_tokens, (cost_usd * 1000000000)::bigint::text as cost, usage_source, error_code, uncertain
        from usage_ledger where tenant_id = ${tenant}`.execute(database.db);
      // 8 tokens at 1,000 each would be 8,000: capped at the reservation's 6,000.
      expect(rows).toEqual([{ generation_id: `gen_${tag}_1`, output_tokens: 8, cost: '6000', usage_source: 'estimated', error_code: 'interrupted', uncertain: true }]);
      const { rows: budget } = await sql<{ settled: string; leased: string }>`select settled_nano::text as settled, leased_nano::text as leased from budget_periods
        where scope = ${`tenant:${tenant}`} and period = 'month'`.execute(database.db);
      expect(budget[0]).toEqual({ settled: '6000', leased: String(GRANTED - 6_000) });
      const keys = createPgIdempotencyStore(database.db, { now: () => Date.UTC(2026, 0, 1) });
      expect(await keys.get(tenant, `key_${tag}_1`)).toMatchObject({ state: 'interrupted', generationId: `gen_${tag}_1`, interruption: expect.stringContaining('after 8 output tokens') });
      expect(await keys.get(tenant, `key_${tag}_2`)).toMatchObject({ state: 'interrupted', generationId: `gen_${tag}_2`, interruption: expect.stringContaining('nothing was billed') });

      // Recovered once: another restart adds nothing.
      const again = await openFileSettlementJournal({ dir: journalDir }, { applier: createPgSettlementApplier(database.db) });
      expect(again.recovery).toMatchObject({ estimated: 0, interrupted: 0, replayed: 0 });
      await again.close();
    });
  }, 60_000);
});

/**
 * `npm run reconcile` on a real all-in-one's data directory (issue 13 item 5), run exactly as an
 * operator runs it (`tools/scripts/run-app.mjs reconcile`, a separate process, no DATABASE_URL,
 * WEIR_DATA_DIR):
 *
 * 1. traffic through the all-in-one (non-streamed and streamed generations, a chat completion,
 *    a client cancel mid-stream); while it runs the command refuses its data directory (exit
 *    2, naming its pid); after a graceful stop, `--fix` finds nothing wrong (exit 0);
 * 2. the all-in-one killed with SIGKILL mid-stream on a keyed request: the command lists what
 *    the kill left (exit 1), `--fix` does what the next start would (exit 0), a report-only run
 *    then agrees (exit 0), nothing is held, and after a restart the same key and the tenant are
 *    served at once.
 *
 * Written against both money paths: ADR 0002's leases and settlement journal (the killed
 * stream's progress mark becomes an `estimated` row; the exclusive holder's leases are
 * reclaimed) and ADR 0001's reservations (a held reservation and a running key).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type { ReconciliationReport } from '@weir/reconcile';
import { dataDirLayout, openDatabase } from '@weir/store-pg';
import { type AllInOneProcess, removeDir, startAllInOne } from './support/all-in-one-process';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';

jest.setTimeout(300_000);

const REPO_ROOT = path.resolve(__dirname, '../../..');
// The demo tenant with a monthly budget, so the budget rows are checked too.
const CONFIG = E2E_CONFIG.replace('limits: { max_concurrent: 64 }', 'limits: { max_concurrent: 64, monthly_budget_usd: 1 }');
const env = { WEIR_DEMO_API_KEY: DEMO_KEY };
const headers = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };

let root: string;
let dataDir: string;
let running: AllInOneProcess | undefined;

beforeAll(() => {
  expect(CONFIG).toContain('monthly_budget_usd: 1');
  root = mkdtempSync(path.join(os.tmpdir(), 'weir-reconcile-aio-'));
  dataDir = path.join(root, 'data');
  mkdirSync(dataDir, { recursive: true });
});

afterAll(async () => {
  await running?.stop();
  if (root) removeDir(root);
});

interface Run {
  code: number | null;
  report?: ReconciliationReport;
  stdout: string;
  stderr: string;
}

/** `npm run reconcile -- --json [args]` on the data directory. */
function reconcile(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [path.join(REPO_ROOT, 'tools/scripts/run-app.mjs'), 'reconcile', '--json', ...args],
      { cwd: REPO_ROOT, env: { ...process.env, NODE_OPTIONS: '', DATABASE_URL: '', WEIR_DATA_DIR: dataDir, WEIR_CONFIG: '', LOG_LEVEL: 'warn' }, maxBuffer: 16 * 1024 * 1024, timeout: 180_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof (error as { code?: unknown }).code === 'number' ? ((error as { code: number }).code as number) : null) : 0;
        let report: ReconciliationReport | undefined;
        try {
          report = JSON.parse(stdout) as ReconciliationReport;
        } catch {
          report = undefined;
        }
        resolve({ code, report, stdout, stderr });
      },
    );
  });
}

/** Starts a streamed generation and reads it until `deltas` deltas arrived (or it ended); returns the open reader. */
async function streamUntil(url: string, body: Record<string, unknown>, deltas: number): Promise<{ generationId?: string; ended: boolean; reader: ReadableStreamDefaultReader<Uint8Array> }> {
  const res = await fetch(`${url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, stream: true }) });
  expect(res.status).toBe(200);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  let seen = '';
  for (;;) {
    const chunk = await reader.read();
    if (chunk.done) break;
    seen += new TextDecoder().decode(chunk.value);
    if (seen.includes('event: end') || (seen.match(/event: delta/g) ?? []).length >= deltas) break;
  }
  return { generationId: /"generation_id":"(gen_[^"]+)"/.exec(seen)?.[1], ended: seen.includes('event: end'), reader };
}

it('a healthy all-in-one: refused while it runs; after a graceful stop, --fix finds nothing to fix', async () => {
  running = await startAllInOne({ dataDir, configYaml: CONFIG, env });
  const url = running.url;
  const generate = (body: Record<string, unknown>) =>
    fetch(`${url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ model_alias: 'tiny-stories', input: 'Once upon a time', temperature: 0, ...body }) });
  expect((await generate({ max_output_tokens: 8 })).status).toBe(200);
  expect((await generate({ max_output_tokens: 12, request_id: 'healthy-1' })).status).toBe(200);
  const chat = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6 }) });
  expect(chat.status).toBe(200);
  const streamed = await streamUntil(url, { model_alias: 'tiny-stories', input: 'Lily', max_output_tokens: 10 }, 1_000);
  expect(streamed.ended).toBe(true);
  // A client that goes away mid-stream: billed what was produced, a normal outcome.
  const cancelled = await streamUntil(url, { model_alias: 'tiny-stories-slow', input: 'Tom', max_output_tokens: 200 }, 3);
  await cancelled.reader.cancel();

  const refused = await reconcile('--fix');
  expect(refused.code).toBe(2);
  expect(refused.stderr).toContain(`the all-in-one (pid ${running.pid}) is running on ${dataDir}`);

  await new Promise((r) => setTimeout(r, 1_000));
  expect(await running.stop()).toBe(0);
  running = undefined;
  const fixed = await reconcile('--fix');
  expect(fixed.stderr).toBe('');
  expect(fixed.report?.differences).toEqual([]);
  expect(fixed.code).toBe(0);
  expect(fixed.report?.config).toMatch(/^the control plane's store/);
  expect(fixed.report?.usage.ledgerTotals.records).toBe(5);
  expect(fixed.report?.usage.cost).toMatchObject({ ok: true });
  expect(fixed.report?.budgets.overruns).toEqual([]);
});

it('killed with SIGKILL mid-stream: listed (exit 1), fixed as the next start would (exit 0), and served at once after a restart', async () => {
  running = await startAllInOne({ dataDir, configYaml: CONFIG, env });
  // About two seconds of streaming (40 ms a token): the journal, where there is one, has a
  // progress mark. The tiny model may end a story early: try seeds until one is still running.
  let body: Record<string, unknown> | undefined;
  let killed: Awaited<ReturnType<typeof streamUntil>> | undefined;
  for (let seed = 1; seed <= 5 && !body; seed++) {
    const candidate = { model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200, temperature: 1, seed, request_id: `killed-${seed}` };
    const attempt = await streamUntil(running.url, candidate, 50);
    if (attempt.ended) continue;
    body = candidate;
    killed = attempt;
  }
  if (!body || !killed) throw new Error('every generation ended before it could be interrupted');
  process.kill(running.pid, 'SIGKILL');
  await running.stop();
  running = undefined;

  const before = await reconcile();
  expect(before.code).toBe(1);
  expect(before.report?.ok).toBe(false);
  // What the kill left: the generation's hold (a reservation, or leases over the budget), its
  // running key, or the journal's abandoned generation.
  expect(before.report?.differences).toEqual(expect.arrayContaining([expect.stringMatching(/reservation\(s\) of the stopped all-in-one|lease\(s\) of the stopped all-in-one|settlement journal holds/)]));
  for (const d of before.report?.differences ?? []) expect(d).toMatch(/(of|from) the stopped all-in-one|the settlement journal holds/);

  const fixed = await reconcile('--fix');
  expect(fixed.report?.differences).toEqual([]);
  expect(fixed.code).toBe(0);
  const after = await reconcile();
  expect(after.report?.differences).toEqual([]);
  expect(after.code).toBe(0);

  const database = await openDatabase({ dataDir: dataDirLayout(dataDir).database, migrate: false });
  try {
    const held = await sql<{ n: string }>`select count(*)::text as n from reservations where state = 'held'`.execute(database.db);
    const leases = await sql<{ n: string }>`select count(*)::text as n from admission_leases`.execute(database.db);
    const running = await sql<{ n: string }>`select count(*)::text as n from idempotency_keys where state = 'running'`.execute(database.db);
    expect([held.rows[0].n, leases.rows[0].n, running.rows[0].n]).toEqual(['0', '0', '0']);
    if (existsSync(dataDirLayout(dataDir).journal)) {
      // The settlement journal's path: the killed stream is billed from its last progress mark.
      const row = await database.db.selectFrom('usage_ledger').select(['usage_source', 'error_code']).where('generation_id', '=', killed.generationId as string).executeTakeFirst();
      expect(row).toEqual({ usage_source: 'estimated', error_code: 'interrupted' });
    }
  } finally {
    await database.close();
  }

  // The tenant and the key are served at once after a restart (nothing held, nothing running).
  running = await startAllInOne({ dataDir, configYaml: CONFIG, env });
  const started = Date.now();
  // The same request again: run anew (its key was freed) or told it was interrupted — never kept waiting.
  const again = await fetch(`${running.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, stream: true }) });
  expect([200, 409]).toContain(again.status);
  await again.body?.cancel();
  expect(Date.now() - started).toBeLessThan(30_000);
  const next = await fetch(`${running.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ model_alias: 'tiny-stories', input: 'Once', max_output_tokens: 4 }) });
  expect(next.status).toBe(200);
  expect(await running.stop()).toBe(0);
  running = undefined;
});

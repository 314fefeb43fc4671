/**
 * The embedded default as a newcomer meets it: no key supplied, PGlite in WEIR_DATA_DIR.
 * The first start creates and prints a demo key once; SIGTERM drains and flushes the usage
 * ledger; a restart keeps the data (the key still works and is not printed again).
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createTemporaryPostgresDatabase, openDatabase } from '@weir/store-pg';
import { type AllInOneProcess, removeDir, startAllInOne } from './support/all-in-one-process';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';

jest.setTimeout(180_000);

let first: AllInOneProcess | undefined;
let second: AllInOneProcess | undefined;
let dataDir: string | undefined;

afterAll(async () => {
  await first?.stop();
  await second?.stop();
  if (dataDir) removeDir(path.dirname(path.dirname(dataDir))); // the temp root above nested/data
});

it('creates a demo key once, flushes usage on SIGTERM, and keeps data across restarts', async () => {
  // A data directory that does not exist yet (nested) is created.
  first = await startAllInOne({ dataDir: path.join(mkdtempSync(path.join(os.tmpdir(), 'weir-restart-')), 'nested', 'data') });
  dataDir = first.dataDir;
  const key = /demo API key \(shown once[^)]*\): (wk_[a-z0-9]{8}_[A-Za-z0-9_-]+)/.exec(first.output())?.[1];
  expect(key).toBeDefined();
  expect(first.output()).toContain(`curl -N ${first.url}/v1/chat/completions`);
  const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
  // A second all-in-one on the same data directory is refused (PGlite is single-process).
  await expect(startAllInOne({ dataDir })).rejects.toThrow(/in use by another Weir process/);
  const gen = await fetch(`${first.url}/v1/generations`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 10 }),
  });
  expect(gen.status).toBe(200);
  const { generation_id: generationId } = (await gen.json()) as { generation_id: string };
  expect(await first.stop()).toBe(0);
  // The key's plaintext is never written to the data directory's logs or output beyond the banner.
  const logLines = first.output().split('\n').filter((l) => l.startsWith('{'));
  expect(logLines.join('\n')).not.toContain((key as string).slice(12));

  // The usage record was flushed before exit: read the PGlite directory directly.
  const db = await openDatabase({ dataDir: `${dataDir}/pg`, migrate: false });
  try {
    const row = await db.db.selectFrom('usage_ledger').selectAll().where('generation_id', '=', generationId).executeTakeFirst();
    expect(row).toMatchObject({ tenant_id: 'demo', output_tokens: 10, status: 'completed' });
    const keys = await db.db.selectFrom('api_keys').select(['sha256', 'prefix']).execute();
    expect(keys).toHaveLength(1);
    expect(JSON.stringify(keys)).not.toContain((key as string).slice(12));
  } finally {
    await db.close();
  }

  second = await startAllInOne({ dataDir });
  expect(second.output()).not.toContain(key as string);
  expect(second.output()).toContain(`demo API key: wk_${(key as string).slice(3, 11)}_… (shown only when it was created`);
  const models = await fetch(`${second.url}/v1/models`, { headers });
  expect(models.status).toBe(200);
  expect(await second.stop()).toBe(0);
});

it.each(['PGlite', 'Postgres'] as const)('after a kill -9 mid-stream (%s), a restart settles what the journal recorded, tells the retry it was interrupted, and frees the budget at once (ADR 0002)', async (store) => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'weir-crash-'));
  const data = path.join(root, 'data');
  mkdirSync(data, { recursive: true });
  // On Postgres the restarted process is a shared lease holder: it must still reclaim its dead
  // predecessor's leases at start (the holder named after the data directory), not wait for them.
  const pg = store === 'Postgres' ? await createTemporaryPostgresDatabase() : undefined;
  // Progress marks every 100 ms, so a stream killed after ~0.6 s has journaled what it produced.
  const env = { WEIR_DEMO_API_KEY: DEMO_KEY, WEIR_JOURNAL_PROGRESS_MS: '100', ...(pg ? { DATABASE_URL: pg.url } : {}) };
  let crashed: AllInOneProcess | undefined = await startAllInOne({ dataDir: data, configYaml: E2E_CONFIG, env });
  let restarted: AllInOneProcess | undefined;
  try {
    const headers = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };
    // The tiny model may end a story early: keep starting keyed generations until one is still
    // running (deltas out, no end yet) 600 ms after its first delta, then kill the process.
    let body: Record<string, unknown> | undefined;
    let deltasSeen = 0;
    for (let attempt = 1; attempt <= 5 && !body; attempt++) {
      const candidate = { request_id: `crash-${attempt}`, model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200, temperature: 1, seed: attempt, stream: true };
      const res = await fetch(`${crashed.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify(candidate) });
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let seen = '';
      let firstDeltaAt: number | undefined;
      while (!seen.includes('event: end') && (firstDeltaAt === undefined || Date.now() - firstDeltaAt < 600)) {
        const chunk = await reader.read();
        if (chunk.done) break;
        seen += new TextDecoder().decode(chunk.value);
        if (firstDeltaAt === undefined && seen.includes('event: delta')) firstDeltaAt = Date.now();
      }
      deltasSeen = seen.split('event: delta').length - 1;
      if (!seen.includes('event: end')) body = candidate;
      else await reader.cancel();
    }
    if (!body) throw new Error('every generation ended before it could be interrupted');
    process.kill(crashed.pid, 'SIGKILL');
    await crashed.stop();
    crashed = undefined;

    restarted = await startAllInOne({ dataDir: data, configYaml: E2E_CONFIG, env });
    expect(restarted.output()).toContain('settlement journal recovered');
    // The retry is told at once that the generation was interrupted and billed (estimated):
    // not run again, not charged twice, no wait for the original's deadline.
    const started = Date.now();
    const again = await fetch(`${restarted.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, stream: false }) });
    expect(again.status).toBe(409);
    const error = ((await again.json()) as { error: { code: string; message: string } }).error;
    expect(error.message).toMatch(/was interrupted: the process running it stopped after \d+ output tokens; they were billed \(estimated\)/);
    expect(Date.now() - started).toBeLessThan(5_000);
    // A new key runs at once: the dead process's leases were reclaimed at start.
    const fresh = await fetch(`${restarted.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, request_id: 'after-crash', max_output_tokens: 5, stream: false }) });
    expect(fresh.status).toBe(200);
    expect(await restarted.stop()).toBe(0);
    restarted = undefined;
    const db = await openDatabase(pg ? { databaseUrl: pg.url, migrate: false } : { dataDir: `${data}/pg`, migrate: false });
    try {
      const rows = await db.db
        .selectFrom('usage_ledger')
        .select(['usage_source', 'finish_reason', 'error_code', 'output_tokens'])
        .where('request_id', '=', String(body.request_id))
        .execute();
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ usage_source: 'estimated', finish_reason: 'error', error_code: 'interrupted' });
      // What the relay had received and journaled: at least one token, never above the limit.
      expect(rows[0].output_tokens).toBeGreaterThanOrEqual(Math.min(1, deltasSeen));
      expect(rows[0].output_tokens).toBeLessThanOrEqual(200);
      // No lease of the killed process survives its successor's start.
      const holders = await db.db.selectFrom('admission_leases').select('holder').distinct().execute();
      expect(holders.length).toBeLessThanOrEqual(1);
    } finally {
      await db.close();
    }
  } finally {
    await crashed?.stop();
    await restarted?.stop();
    await pg?.drop();
    removeDir(root);
  }
});

/**
 * The embedded default as a newcomer meets it: no key supplied, PGlite in WEIR_DATA_DIR.
 * The first start creates and prints a demo key once; SIGTERM drains and flushes the usage
 * ledger; a restart keeps the data (the key still works and is not printed again).
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openDatabase } from '@weir/store-pg';
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

it('after a kill -9 mid-stream, a restart frees the orphaned idempotency key and reservation at once', async () => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'weir-crash-'));
  const data = path.join(root, 'data');
  mkdirSync(data, { recursive: true });
  const env = { WEIR_DEMO_API_KEY: DEMO_KEY };
  let crashed: AllInOneProcess | undefined = await startAllInOne({ dataDir: data, configYaml: E2E_CONFIG, env });
  let restarted: AllInOneProcess | undefined;
  try {
    const headers = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };
    // The tiny model may end a story early: keep starting keyed generations until one is still
    // running (a delta out, no end yet) when the process is killed.
    let body: Record<string, unknown> | undefined;
    for (let attempt = 1; attempt <= 5 && !body; attempt++) {
      const candidate = { request_id: `crash-${attempt}`, model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200, temperature: 1, seed: attempt, stream: true };
      const res = await fetch(`${crashed.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify(candidate) });
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let seen = '';
      while (!seen.includes('event: delta') && !seen.includes('event: end')) {
        const chunk = await reader.read();
        if (chunk.done) break;
        seen += new TextDecoder().decode(chunk.value);
      }
      if (!seen.includes('event: end')) body = candidate;
      else await reader.cancel();
    }
    if (!body) throw new Error('every generation ended before it could be interrupted');
    process.kill(crashed.pid, 'SIGKILL');
    await crashed.stop();
    crashed = undefined;

    restarted = await startAllInOne({ dataDir: data, configYaml: E2E_CONFIG, env });
    expect(restarted.output()).toContain('the previous run stopped with requests in flight');
    // The same key runs again at once (not a 409 after the original's deadline), and nothing stays held.
    const started = Date.now();
    const again = await fetch(`${restarted.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, max_output_tokens: 5, stream: false }) });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(Date.now() - started).toBeLessThan(30_000);
    await new Promise((r) => setTimeout(r, 500));
    expect(await restarted.stop()).toBe(0);
    restarted = undefined;
    const db = await openDatabase({ dataDir: `${data}/pg`, migrate: false });
    try {
      const held = await db.db.selectFrom('reservations').select(['state', 'finished_by']).where('request_id', '=', String(body.request_id)).orderBy('created_at').execute();
      expect(held).toEqual([
        { state: 'expired', finished_by: 'reconciler' },
        { state: 'settled', finished_by: 'gateway' },
      ]);
    } finally {
      await db.close();
    }
  } finally {
    await crashed?.stop();
    await restarted?.stop();
    removeDir(root);
  }
});

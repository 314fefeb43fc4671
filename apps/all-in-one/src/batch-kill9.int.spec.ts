/**
 * Issue 17 §4 on the real process: the all-in-one is killed with SIGKILL in the middle of a batch
 * and started again on the same data directory. The batch resumes and completes, every input line
 * has exactly one line in the output or error file, and the ledger holds exactly one usage record
 * per item — none run to completion twice, none billed twice.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mintApiKey } from '@weir/core';
import { freePort, repoPath, tinyModelPath } from '@weir/testing';
import OpenAI, { toFile } from 'openai';

jest.setTimeout(300_000);

const N = 150;

describe('a batch survives kill -9 of the all-in-one', () => {
  let dataDir: string;
  const children: ChildProcess[] = [];
  const demoKey = mintApiKey().plaintext;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(os.tmpdir(), 'weir-batch-kill9-'));
  });
  afterAll(async () => {
    for (const child of children) {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        try {
          process.kill(-child.pid, 'SIGTERM');
        } catch {
          // gone already
        }
        await Promise.race([gone, new Promise((r) => setTimeout(r, 20_000))]);
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
      child.stdout?.destroy();
      child.stderr?.destroy();
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** Starts the all-in-one on the data directory; resolves its URL once ready. */
  async function start(): Promise<{ url: string; child: ChildProcess; output: () => string }> {
    const port = await freePort();
    const child = spawn(process.execPath, [repoPath('tools/scripts/run-app.mjs'), 'all-in-one'], {
      cwd: repoPath(),
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        NODE_OPTIONS: '',
        PORT: String(port),
        HOST: '127.0.0.1',
        WEIR_OPS_PORT: '0',
        WEIR_DATA_DIR: dataDir,
        WEIR_MODEL_PATH: tinyModelPath(),
        WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
        WEIR_DEMO_API_KEY: demoKey,
        // A dead runner's items are taken again after 3 s (renewed every second while running).
        WEIR_BATCH_LEASE_MS: '3000',
        LOG_LEVEL: 'warn',
      },
    });
    children.push(child);
    let out = '';
    child.stdout?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    child.stderr?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 90_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the all-in-one exited with ${child.exitCode} before it was ready:\n${out}`);
      if (await fetch(`${url}/readyz`).then((r) => r.ok, () => false)) break;
      if (Date.now() > deadline) throw new Error(`not ready within 90 s:\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    return { url, child, output: () => out };
  }

  it('resumes after SIGKILL mid-batch with one result and one usage record per item', async () => {
    const first = await start();
    let client = new OpenAI({ apiKey: demoKey, baseURL: `${first.url}/v1`, maxRetries: 0 });
    const model = (await client.models.list()).data[0].id;
    const lines = Array.from({ length: N }, (_, i) =>
      JSON.stringify({ custom_id: `k-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: `Once upon a time ${i}` }], max_tokens: 24 } }),
    );
    const file = await client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'kill9.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    // Kill it once some items are done and others are not.
    for (;;) {
      const b = await client.batches.retrieve(batch.id);
      const done = (b.request_counts?.completed ?? 0) + (b.request_counts?.failed ?? 0);
      if (done >= 10) {
        expect(done).toBeLessThan(N);
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    process.kill(-(first.child.pid as number), 'SIGKILL');
    await new Promise((r) => first.child.once('exit', r));

    const second = await start();
    client = new OpenAI({ apiKey: demoKey, baseURL: `${second.url}/v1`, maxRetries: 0 });
    let ended = await client.batches.retrieve(batch.id);
    const until = Date.now() + 180_000;
    while (!['completed', 'failed', 'expired', 'cancelled'].includes(ended.status)) {
      if (Date.now() > until) throw new Error(`batch still ${ended.status} after restart: ${JSON.stringify(ended.request_counts)}\n${second.output()}`);
      await new Promise((r) => setTimeout(r, 200));
      ended = await client.batches.retrieve(batch.id);
    }
    expect(ended.status).toBe('completed');
    expect(ended.request_counts?.total).toBe(N);
    const read = async (id: string | null | undefined) =>
      id ? (await (await client.files.content(id)).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number; body: { error?: { code: string } } } | null }) : [];
    const out = await read(ended.output_file_id);
    const err = await read(ended.error_file_id);
    // One line per input line, across both files.
    expect([...out, ...err].map((l) => l.custom_id).sort()).toEqual(lines.map((_, i) => `k-${i}`).sort());
    expect(out.length).toBe(ended.request_counts?.completed);
    // An item whose generation the kill cut off is told so (409: interrupted, billed once), never run again.
    for (const e of err) expect(e.response?.status_code).toBe(409);
    // Exactly one usage record per item (the ledger's count for the tenant today).
    const usage = await eventuallyUsage(second.url, demoKey, N);
    expect(usage).toBe(N);
  });
});

/** The tenant's record count today, once it reaches `n` (or what it is after a generous wait). */
async function eventuallyUsage(url: string, key: string, n: number): Promise<number> {
  const until = Date.now() + 30_000;
  for (;;) {
    const u = (await (await fetch(`${url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${key}` } })).json()) as { requests: number };
    if (u.requests >= n || Date.now() > until) {
      // A little longer, in case a duplicate were still on its way to the ledger.
      await new Promise((r) => setTimeout(r, 1_000));
      return ((await (await fetch(`${url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${key}` } })).json()) as { requests: number }).requests;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

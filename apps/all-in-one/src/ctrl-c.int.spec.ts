import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mintApiKey } from '@weir/core';
import { freePort, repoPath, tinyModelPath } from '@weir/testing';

// `npm start` runs tools/scripts/run-app.mjs, which runs the all-in-one. Ctrl-C is modelled as
// the terminal sends it: SIGINT to the whole foreground process group (run-app also passes it
// on, as does npm). One Ctrl-C must drain (exit 0), not count as two ("second signal: exiting
// now", exit 130). run-app exits with the app's code. (npm itself is left out: it re-raises the
// SIGINT on itself, hiding the app's exit code.)
describe('Ctrl-C on npm start', () => {
  let dataDir: string;
  let launcher: ChildProcess | undefined;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(os.tmpdir(), 'weir-ctrl-c-'));
  });
  afterAll(() => {
    // Never leave the group running if an assertion failed half-way.
    if (launcher?.pid !== undefined && launcher.exitCode === null && launcher.signalCode === null) {
      try {
        process.kill(-launcher.pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('drains once (the running stream completes) and exits 0, without the second-signal fast exit', async () => {
    const port = await freePort();
    const demoKey = mintApiKey().plaintext;
    // detached: run-app leads a process group of its own, standing for the terminal's foreground group.
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
        LOG_LEVEL: 'info',
      },
    });
    launcher = child;
    let out = '';
    child.stdout?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    child.stderr?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));

    const deadline = Date.now() + 90_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`run-app exited with ${child.exitCode} before it was ready:\n${out}`);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ready) break;
      if (Date.now() > deadline) throw new Error(`not ready within 90 s:\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }

    // A request in flight keeps the drain busy long enough for a duplicated signal to land in it.
    const url = `http://127.0.0.1:${port}`;
    const models = (await (await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${demoKey}` } })).json()) as { data: { id: string }[] };
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${demoKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: models.data[0].id, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 64, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let stream = decoder.decode((await reader.read()).value);

    process.kill(-(child.pid as number), 'SIGINT');
    for (let r = await reader.read(); !r.done; r = await reader.read()) stream += decoder.decode(r.value, { stream: true });
    expect(stream).toContain('data: [DONE]');
    expect(await exited).toBe(0);

    expect(out).toContain('shutting down: draining streams and flushing usage');
    expect(out).not.toContain('second signal');
    // Drained and gone: nothing listens any more.
    await expect(fetch(`http://127.0.0.1:${port}/readyz`)).rejects.toThrow();
  }, 150_000);
});

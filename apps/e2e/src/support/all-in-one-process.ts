/**
 * Starts the all-in-one exactly as `npm start` runs it (a separate process: plain node on the
 * compiled bundle dist/apps/all-in-one/main.cjs, built first when stale) on a free port, with the tiny model and a private data
 * directory, and stops it by pid. Captures its stdout/stderr so tests can read the banner
 * and assert that no prompt text reaches the logs.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { appRuntimeEnv, ensureAppBundles } from '@weir/launcher';
import { freePort, repoPath, tinyModelPath } from '@weir/testing';

/** A running all-in-one process. */
export interface AllInOneProcess {
  url: string;
  /** Its ops listener (`/metrics`, `/readyz`): the public port does not serve `/metrics`. */
  opsUrl: string;
  pid: number;
  /** Everything it printed so far (stdout + stderr). */
  output(): string;
  /** SIGTERM, then wait for exit (SIGKILL after `timeoutMs`). Resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
  dataDir: string;
}

/** Options of {@link startAllInOne}. */
export interface StartAllInOneOptions {
  /** YAML config text; omitted means the built-in default config. */
  configYaml?: string;
  env?: Record<string, string | undefined>;
  /** Reuse a data directory (restart tests); default a fresh temp dir. */
  dataDir?: string;
  /** How long to wait for `/readyz` (ms). Default 90,000 (PGlite and the model load on 2 busy cores). */
  readyTimeoutMs?: number;
}

/** Starts the all-in-one and waits until it is ready. */
export async function startAllInOne(options: StartAllInOneOptions = {}): Promise<AllInOneProcess> {
  const port = await freePort();
  const opsPort = await freePort();
  const dataDir = options.dataDir ?? mkdtempSync(path.join(os.tmpdir(), 'weir-e2e-'));
  let configPath: string | undefined;
  if (options.configYaml) {
    configPath = path.join(dataDir, 'weir.test.yaml');
    writeFileSync(configPath, options.configYaml);
  }
  const bundle = ensureAppBundles(['all-in-one'])['all-in-one'];
  const child: ChildProcess = spawn(process.execPath, [bundle], {
    cwd: repoPath(),
    env: {
      ...appRuntimeEnv(),
      ...process.env,
      NODE_OPTIONS: '',
      PORT: String(port),
      WEIR_OPS_PORT: String(opsPort),
      HOST: '127.0.0.1',
      WEIR_DATA_DIR: dataDir,
      WEIR_MODEL_PATH: tinyModelPath(),
      WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
      NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true',
      NODE_LLAMA_CPP_GPU: 'false',
      ...(configPath ? { WEIR_CONFIG: configPath } : {}),
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString('utf8')));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;

  const deadline = Date.now() + (options.readyTimeoutMs ?? 90_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`all-in-one exited with ${child.exitCode} before it was ready:\n${out}`);
    try {
      const res = await fetch(`${url}/readyz`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`all-in-one was not ready within the timeout:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }

  return {
    url,
    opsUrl: `http://127.0.0.1:${opsPort}`,
    pid: child.pid as number,
    dataDir,
    output: () => out,
    async stop(timeoutMs = 20_000) {
      if (child.exitCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** Removes a temp data directory. */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

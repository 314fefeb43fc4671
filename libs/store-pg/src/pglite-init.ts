/**
 * Creates a new PGlite data directory in a short-lived child process, so the process that then
 * serves from it never runs initdb itself.
 *
 * Why: PGlite's initdb runs a second Postgres instance in the process's memory. The JS heap it
 * leaves is collected (`collectStartupGarbage` in the all-in-one), but the native heap it grew
 * stays fragmented: an all-in-one's first start on a new directory held 172–177 MiB of RSS
 * against 137–138 MiB when reopening one (`tools/bench/idle-memory.ts --start both`, glibc's
 * main heap 39–44 MiB against 7–8; issue 13 item 7). Done by a child, that memory goes with it.
 * The cost is a second start of the WASM module (~1–3 s, on the first start only).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/** What {@link initPgliteDataDir} did. */
export interface PgliteInitResult {
  /** `created`: a child ran initdb; `exists`: the directory already held a database (nothing done). */
  outcome: 'created' | 'exists';
  /** The child's pid (when created). */
  pid?: number;
  /** Wall time of the child (ms, when created). */
  ms?: number;
}

// Runs in the child (CommonJS `-e`): opens the directory (PGlite runs initdb on an empty one),
// then closes it cleanly so every file is flushed. Exit 0 only when both succeeded.
const CHILD_SCRIPT = `
const { PGlite } = require(process.env.WEIR_PGLITE_MODULE);
const db = new PGlite(process.env.WEIR_PGLITE_INIT_DIR);
db.waitReady.then(() => db.close()).then(() => process.exit(0), (err) => { process.stderr.write(String(err && err.stack || err)); process.exit(1); });
`;

/** Whether `dataDir` already holds a Postgres cluster (its `PG_VERSION` file). */
export function pgliteDataDirExists(dataDir: string): boolean {
  return existsSync(path.join(dataDir, 'PG_VERSION'));
}

/**
 * Initializes `dataDir` (created if missing) with PGlite's initdb in a child `node` process, unless
 * it already holds a cluster. Resolves once the child exited 0.
 *
 * @throws Error with the child's stderr when it fails (the caller may fall back to opening the
 *   directory in-process, which runs initdb there and reports its own error)
 */
export async function initPgliteDataDir(dataDir: string): Promise<PgliteInitResult> {
  if (pgliteDataDirExists(dataDir)) return { outcome: 'exists' };
  const started = Date.now();
  const child = spawn(process.execPath, ['--liftoff-only', '-e', CHILD_SCRIPT], {
    env: { ...process.env, WEIR_PGLITE_MODULE: require.resolve('@electric-sql/pglite'), WEIR_PGLITE_INIT_DIR: dataDir, NODE_OPTIONS: '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    if (stderr.length < 4_000) stderr += chunk;
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c) => resolve(c));
  });
  if (code !== 0 || !pgliteDataDirExists(dataDir)) {
    throw new Error(`initializing the embedded database in ${dataDir} failed (child exit ${code}): ${stderr.trim().slice(0, 2_000) || 'no output'}`);
  }
  return { outcome: 'created', pid: child.pid, ms: Date.now() - started };
}

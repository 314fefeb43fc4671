/**
 * The topologies a chaos run drives, behind one interface: start, kill -9 a process by name,
 * restart it (the all-in-one on the same data directory and port; a split service through the
 * launcher's `restart`), read the database, run the operator's reconciliation, stop.
 *
 * - all-in-one: `apps/all-in-one` as `npm start` runs it (node + tsx), on a data directory kept
 *   across restarts, its embedded PGlite (default) or a temporary Postgres database; the admin
 *   API is its in-process control plane.
 * - split: `startSplitTopology` (2 gateways, 2 admission instances, router, scheduler, relay,
 *   ledger, and the control plane for the admin API) on a private nats-server and a temporary
 *   Postgres database.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { createTemporaryPostgresDatabase, openDatabase, type TemporaryPostgresDatabase, type WeirDatabase } from '@weir/store-pg';
import { freePort, type PrivateNats, repoPath, startPrivateNats } from '@weir/testing';
import type { ChaosTopologyKind } from './plan';

/** The demo tenant's API key of chaos runs (a well-formed Weir key; test-only). */
export const CHAOS_API_KEY = 'wk_chaosdem_' + 'K'.repeat(43);
/** The bootstrap admin token of chaos runs (test-only). */
export const CHAOS_ADMIN_TOKEN = 'wa_chaosadm_' + 'C'.repeat(43);

/** What `npm run reconcile -- --fix --json …` did. */
export interface ReconcileResult {
  exitCode: number | null;
  /** The parsed JSON report, when it printed one. */
  report?: { ok?: boolean; differences?: unknown[]; notes?: unknown[] } & Record<string, unknown>;
  stderr: string;
  args: string[];
}

/** A running topology under chaos. */
export interface ChaosTopology {
  kind: ChaosTopologyKind;
  /** Gateway base URLs. */
  gateways(): string[];
  /** Base URL of the admin API (`…/admin/v1`). */
  adminUrl(): string;
  /** Processes whose kill -9 loses the counts of what they were relaying (the all-in-one; the split's relay). */
  countingProcesses: readonly string[];
  /** kill -9 of a process by name (`all-in-one`, or a split process name). */
  kill(name: string): void;
  /** Starts a killed process again and waits until it is ready. */
  restart(name: string): Promise<void>;
  /** True while the process runs. */
  alive(name: string): boolean;
  /**
   * The database while the topology runs, or undefined where it cannot be read then (the
   * all-in-one's embedded PGlite serves one process).
   */
  liveDatabase(): WeirDatabase | undefined;
  /** Opens the database for reading while `name` is down (PGlite after a kill); undefined where {@link liveDatabase} serves. */
  openWhileDown(): Promise<WeirDatabase | undefined>;
  /** `npm run reconcile -- --fix --json` against this topology's store (for PGlite: call after {@link stop}). */
  reconcile(): Promise<ReconcileResult>;
  /** Graceful stop of every process (SIGTERM). */
  stop(): Promise<void>;
  /** The database after {@link stop} (the caller closes it). */
  openStopped(): Promise<WeirDatabase>;
  /** Removes temporary directories, databases and the private NATS. */
  dispose(): Promise<void>;
  /** The processes' output (last lines). */
  output(): string;
}

/** Options of {@link startChaosTopology}. */
export interface StartChaosTopologyOptions {
  kind: ChaosTopologyKind;
  configYaml: string;
  /** The all-in-one's database (default pglite). */
  database?: 'pglite' | 'postgres';
  log?: (line: string) => void;
}

/** Starts a topology on the configuration. */
export async function startChaosTopology(options: StartChaosTopologyOptions): Promise<ChaosTopology> {
  return options.kind === 'all-in-one' ? startAllInOneTopology(options) : startSplit(options);
}

/** Keeps the last `max` lines of a process's output. */
function boundedLog(max = 4_000) {
  const lines: string[] = [];
  return {
    push(text: string) {
      for (const line of text.split('\n')) {
        if (!line) continue;
        lines.push(line);
        if (lines.length > max) lines.splice(0, lines.length - max);
      }
    },
    text: () => lines.join('\n'),
  };
}

const REPO_ROOT = repoPath();

function runReconcile(env: Record<string, string>, extraArgs: string[]): Promise<ReconcileResult> {
  const args = ['--fix', '--json', '--no-engine-counters', ...extraArgs];
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [path.join(REPO_ROOT, 'tools/scripts/run-app.mjs'), 'reconcile', ...args],
      { cwd: REPO_ROOT, env: { ...process.env, NODE_OPTIONS: '', LOG_LEVEL: 'warn', ...env }, maxBuffer: 64 * 1024 * 1024, timeout: 180_000 },
      (error, stdout, stderr) => {
        let report: ReconcileResult['report'];
        try {
          report = JSON.parse(stdout) as ReconcileResult['report'];
        } catch {
          report = undefined;
        }
        const exitCode = error ? (typeof (error as { code?: unknown }).code === 'number' ? ((error as { code: number }).code as number) : null) : 0;
        resolve({ exitCode, ...(report ? { report } : {}), stderr: stderr.slice(-4_000), args });
      },
    );
  });
}

async function startAllInOneTopology(options: StartChaosTopologyOptions): Promise<ChaosTopology> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'weir-chaos-aio-'));
  const dataDir = path.join(root, 'data');
  mkdirSync(dataDir, { recursive: true });
  const configPath = path.join(root, 'weir.chaos.yaml');
  writeFileSync(configPath, options.configYaml);
  const pg: TemporaryPostgresDatabase | undefined = options.database === 'postgres' ? await createTemporaryPostgresDatabase() : undefined;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const out = boundedLog();
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const spawnOnce = async (): Promise<void> => {
    const c = spawn(process.execPath, ['--import', 'tsx', repoPath('apps/all-in-one/src/main.ts')], {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        NODE_OPTIONS: '',
        PORT: String(port),
        HOST: '127.0.0.1',
        WEIR_OPS_PORT: '0',
        WEIR_DATA_DIR: dataDir,
        WEIR_CONFIG: configPath,
        WEIR_DEMO_API_KEY: CHAOS_API_KEY,
        WEIR_ADMIN_TOKEN: CHAOS_ADMIN_TOKEN,
        WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
        NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true',
        NODE_LLAMA_CPP_GPU: 'false',
        LOG_LEVEL: 'warn',
        TSX_TSCONFIG_PATH: repoPath('tsconfig.json'),
        ...(pg ? { DATABASE_URL: pg.url } : { DATABASE_URL: '' }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = c;
    c.stdout?.on('data', (d: Buffer) => out.push(d.toString('utf8')));
    c.stderr?.on('data', (d: Buffer) => out.push(d.toString('utf8')));
    exited = new Promise((resolve) => c.on('exit', () => resolve()));
    const until = Date.now() + 120_000;
    for (;;) {
      if (c.exitCode !== null || c.signalCode !== null) throw new Error(`the all-in-one exited before it was ready:\n${out.text().split('\n').slice(-30).join('\n')}`);
      try {
        if ((await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) })).ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > until) {
        c.kill('SIGKILL');
        throw new Error(`the all-in-one was not ready within 120 s:\n${out.text().split('\n').slice(-30).join('\n')}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const isAlive = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const stopChild = async () => {
    if (!isAlive()) return;
    child?.kill('SIGTERM');
    const timer = setTimeout(() => child?.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(timer);
  };
  const openPglite = () => openDatabase({ dataDir: path.join(dataDir, 'pg'), migrate: false });

  await spawnOnce();
  let live: WeirDatabase | undefined = pg ? await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 2 }) : undefined;
  return {
    kind: 'all-in-one',
    gateways: () => [url],
    adminUrl: () => `${url}/admin/v1`,
    countingProcesses: ['all-in-one'],
    kill(name) {
      if (name !== 'all-in-one') throw new Error(`no process ${name} in the all-in-one topology`);
      child?.kill('SIGKILL');
    },
    async restart() {
      if (isAlive()) return;
      await exited;
      await spawnOnce();
    },
    alive: () => isAlive(),
    liveDatabase: () => live,
    async openWhileDown() {
      if (pg) return undefined;
      await exited;
      return openPglite();
    },
    reconcile: () =>
      runReconcile(
        pg ? { DATABASE_URL: pg.url, WEIR_CONFIG: configPath } : { DATABASE_URL: '', WEIR_DATA_DIR: dataDir, WEIR_CONFIG: configPath },
        ['--no-stream'],
      ),
    async stop() {
      await stopChild();
    },
    openStopped: () => (pg ? openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 2 }) : openPglite()),
    async dispose() {
      child?.kill('SIGKILL');
      await live?.close();
      live = undefined;
      await pg?.drop();
      rmSync(root, { recursive: true, force: true });
    },
    output: () => out.text(),
  };
}

async function startSplit(options: StartChaosTopologyOptions): Promise<ChaosTopology> {
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-chaos-split-'));
  let nats: PrivateNats | undefined;
  let pg: TemporaryPostgresDatabase | undefined;
  let topology: SplitTopology | undefined;
  let live: WeirDatabase | undefined;
  const namespace = `chaos${Date.now().toString(36)}`;
  try {
    nats = await startPrivateNats();
    pg = await createTemporaryPostgresDatabase();
    topology = await startSplitTopology({
      configText: options.configYaml,
      workDir,
      databaseUrl: pg.url,
      natsUrl: nats.url,
      natsNamespace: namespace,
      gateways: 2,
      admissionInstances: 2,
      env: { WEIR_DEMO_API_KEY: CHAOS_API_KEY, LOG_LEVEL: 'warn' },
      controlPlane: { adminToken: CHAOS_ADMIN_TOKEN, heartbeatMs: 1_000 },
    });
    live = await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 3 });
  } catch (err) {
    await topology?.stop().catch(() => undefined);
    await pg?.drop().catch(() => undefined);
    await nats?.dispose().catch(() => undefined);
    rmSync(workDir, { recursive: true, force: true });
    throw err;
  }
  const t = topology;
  const db = pg;
  const n = nats;
  return {
    kind: 'split',
    gateways: () => t.gateways.map((g) => g.url),
    adminUrl: () => `${t.controlPlaneUrl as string}/admin/v1`,
    countingProcesses: ['relay'],
    kill(name) {
      const p = t.processes.get(name);
      if (!p) throw new Error(`no process ${name} in the split topology`);
      p.signal('SIGKILL');
    },
    async restart(name) {
      await t.processes.get(name)?.exited;
      await t.restart(name);
    },
    alive: (name) => t.processes.get(name)?.alive() ?? false,
    liveDatabase: () => live,
    openWhileDown: async () => undefined,
    reconcile: () => runReconcile({ DATABASE_URL: db.url, NATS_URL: n.url, WEIR_NATS_NAMESPACE: namespace, WEIR_CONFIG: t.configPath }, []),
    async stop() {
      await t.stop();
    },
    openStopped: () => openDatabase({ databaseUrl: db.url, migrate: false, maxConnections: 2 }),
    async dispose() {
      for (const p of t.processes.values()) p.signal('SIGKILL');
      await live?.close();
      live = undefined;
      await db.drop();
      await n.dispose();
      rmSync(workDir, { recursive: true, force: true });
    },
    output: () => t.output().split('\n').slice(-4_000).join('\n'),
  };
}

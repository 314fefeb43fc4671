/**
 * Child processes of a local topology: spawned with plain node on an app's compiled bundle
 * (`dist/apps/<app>/main.cjs`, built by esbuild from `apps/<app>/src/main.ts` when stale: see
 * tools/scripts/app-bundle.cjs), output captured line by line with a `[name]` prefix (and
 * echoed when asked), stopped by pid with SIGTERM (SIGKILL after a timeout).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import path from 'node:path';
import { type Dispatcher, request } from 'undici';

/** The repository root (this file is libs/launcher/src/processes.ts; its bundles keep that meaning). */
export const REPO_ROOT = path.resolve(__dirname, '../../..');

/** What tools/scripts/app-bundle.cjs exports (plain JavaScript, shared with `npm start`). */
interface AppBundles {
  RUNTIME_ENV: Record<string, string>;
  ensureAppBundles(apps: string[], options?: { log?: (line: string) => void }): { files: Record<string, string>; built: string[]; ms: number };
}

let appBundles: AppBundles | undefined;

function loadAppBundles(): AppBundles {
  // Loaded at run time from the repository (also from inside a bundle: REPO_ROOT is the source's).
  appBundles ??= createRequire(__filename)(path.join(REPO_ROOT, 'tools/scripts/app-bundle.cjs')) as AppBundles;
  return appBundles;
}

/**
 * Environment every app process starts with, as `npm start` gives it (tools/scripts/app-bundle.cjs:
 * `MALLOC_MMAP_THRESHOLD_`); spread it before the caller's own environment.
 */
export function appRuntimeEnv(): Record<string, string> {
  return { ...loadAppBundles().RUNTIME_ENV };
}

/**
 * The compiled bundle of each app (`dist/apps/<app>/main.cjs`), building the stale ones first in
 * one esbuild run (~1–2 s; nothing when every bundle is newer than its sources).
 *
 * @returns the bundle path of each app.
 * @throws Error with the compiler's messages when an app does not compile.
 */
export function ensureAppBundles(apps: string[]): Record<string, string> {
  return loadAppBundles().ensureAppBundles([...new Set(apps)]).files;
}

/** A free TCP port on 127.0.0.1 (bound and released; a tiny race is acceptable locally). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** One managed child process. */
export interface ManagedProcess {
  name: string;
  readonly pid: number;
  /** True until it exits. */
  alive(): boolean;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  /** Sends a signal (SIGKILL, SIGSTOP, SIGCONT …). */
  signal(sig: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL after `timeoutMs` (default 20 s); resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
}

/** Output sink shared by a topology's processes. */
export interface OutputLog {
  lines: string[];
  echo: boolean;
}

/**
 * Spawns the compiled `apps/<app>` (its bundle, built first if stale: {@link ensureAppBundles})
 * with plain node, `env` added to this process's environment (NODE_OPTIONS cleared unless
 * `env` sets it).
 */
export function spawnApp(name: string, app: string, env: Record<string, string | undefined>, log: OutputLog): ManagedProcess {
  const bundle = ensureAppBundles([app])[app];
  const child: ChildProcess = spawn(process.execPath, [bundle], {
    cwd: REPO_ROOT,
    env: {
      ...appRuntimeEnv(),
      ...process.env,
      NODE_OPTIONS: '',
      NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true',
      NODE_LLAMA_CPP_GPU: 'false',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group: a terminal's Ctrl-C reaches only the launcher, which then stops
    // the processes in order (gateways first) instead of every process being hit at once.
    detached: true,
  });
  const take = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (!line) continue;
      const prefixed = `[${name}] ${line}`;
      log.lines.push(prefixed);
      if (log.echo) process.stdout.write(`${prefixed}\n`);
    }
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exitCode = code;
      resolve(code);
    }),
  );
  return {
    name,
    get pid() {
      return child.pid as number;
    },
    alive: () => exitCode === undefined,
    exited,
    signal(sig) {
      if (exitCode === undefined) child.kill(sig);
    },
    async stop(timeoutMs = 20_000) {
      if (exitCode !== undefined) return exitCode;
      child.kill('SIGCONT'); // a stopped (SIGSTOP) process cannot act on SIGTERM
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/**
 * Polls `url` until it answers 200, the process exits, or `timeoutMs` passes. An `https` URL of
 * a service with a development certificate needs a `dispatcher` that trusts its CA.
 */
export async function waitReady(proc: ManagedProcess, url: string, timeoutMs: number, log: OutputLog, dispatcher?: Dispatcher): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (!proc.alive()) throw new Error(`${proc.name} exited before it was ready:\n${tail(log, proc.name)}`);
    try {
      const res = await request(url, { signal: AbortSignal.timeout(1_000), dispatcher });
      await res.body.dump();
      if (res.statusCode === 200) return;
    } catch {
      // not up yet
    }
    if (Date.now() > until) throw new Error(`${proc.name} was not ready at ${url} within ${timeoutMs} ms:\n${tail(log, proc.name)}`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

function tail(log: OutputLog, name: string): string {
  return log.lines
    .filter((l) => l.startsWith(`[${name}]`))
    .slice(-15)
    .join('\n');
}

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, openSync, closeSync, rmSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from './paths';

/** Path of the nats-server binary: `NATS_SERVER_BIN` when set, else Debian's `/usr/sbin/nats-server`. */
export function natsServerBin(): string {
  return process.env.NATS_SERVER_BIN || '/usr/sbin/nats-server';
}

/** A private nats-server (JetStream on) started by {@link startPrivateNats}. */
export interface PrivateNats {
  /** `nats://127.0.0.1:<port>`; stays the same across {@link restart}. */
  readonly url: string;
  readonly port: number;
  /** JetStream store directory; kept across stop/restart, removed by {@link dispose}. */
  readonly storeDir: string;
  /** Pid of the running server process (undefined while stopped). Changes on restart. */
  readonly pid: number | undefined;
  /** Stops the server by pid (SIGTERM, SIGKILL after 5 s) and waits for it to exit. Idempotent. */
  stop(): Promise<void>;
  /** Starts the server again on the same port and store dir (stops it first if running); resolves once it accepts connections. */
  restart(): Promise<void>;
  /** Stops the server and removes its store dir. Idempotent. */
  dispose(): Promise<void>;
}

/** Options for {@link startPrivateNats}. */
export interface PrivateNatsOptions {
  /** Port on 127.0.0.1. Default: a free one. */
  port?: number;
  /** How long to wait for the server to accept connections (ms). Default 10,000. */
  readyTimeoutMs?: number;
  /** Extra server arguments after the defaults, e.g. `['-c', confFile]` for an authorization config. Default none. */
  args?: readonly string[];
  /** Extra environment of the server (a config file's `$VARIABLE`s, e.g. users' passwords). Default none. */
  env?: Readonly<Record<string, string>>;
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * Starts a private `nats-server -a 127.0.0.1 -p <port> -js -sd <tmpdir>` for tests that need an
 * outage (never touch the shared server on 4222). The server's log goes to `<storeDir>/../server.log`.
 * A process exit hook kills servers a test forgot to stop. Stop it with `stop()` / `dispose()`
 * (by pid) in `afterAll`.
 * @throws Error when the binary cannot start or the port does not accept connections in time.
 */
export async function startPrivateNats(options: PrivateNatsOptions = {}): Promise<PrivateNats> {
  const port = options.port ?? (await freePort());
  const readyTimeoutMs = options.readyTimeoutMs ?? 10_000;
  const root = mkdtempSync(path.join(tmpdir(), 'weir-nats-'));
  const storeDir = path.join(root, 'jetstream');
  const logFile = path.join(root, 'server.log');
  let child: ChildProcess | undefined;

  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }

  async function launch(): Promise<void> {
    const fd = openSync(logFile, 'a');
    try {
      child = spawn(natsServerBin(), ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir, ...(options.args ?? [])], {
        stdio: ['ignore', fd, fd],
        ...(options.env ? { env: { ...process.env, ...options.env } } : {}),
      });
    } finally {
      closeSync(fd);
    }
    const c = child;
    live.add(c);
    c.once('exit', () => live.delete(c));
    const spawnError = new Promise<never>((_, reject) => c.once('error', reject));
    await Promise.race([waitForPort(port, readyTimeoutMs, c), spawnError]);
  }

  async function stop(): Promise<void> {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    if (c.pid !== undefined) process.kill(c.pid, 'SIGTERM');
    const killTimer = setTimeout(() => {
      if (c.pid !== undefined && c.exitCode === null) process.kill(c.pid, 'SIGKILL');
    }, 5_000);
    await exited;
    clearTimeout(killTimer);
  }

  await launch();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    get pid() {
      return child?.pid;
    },
    stop,
    async restart() {
      await stop();
      await launch();
    },
    async dispose() {
      await stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

async function waitForPort(port: number, timeoutMs: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with code ${child.exitCode} before accepting connections`);
    if (await canConnect(port)) return;
    if (Date.now() > deadline) throw new Error(`nats-server did not accept connections on ${port} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Weir's overhead and peer benchmark (issue 3 item 8, issue 13 "Speed and memory"): the latency
 * and CPU Weir adds over a direct call to the same OpenAI-compatible upstream, for the
 * all-in-one and the split topology, side by side with peers — a bare node:http pass-through
 * (tools/bench/passthrough.mjs) and Portkey's open-source gateway (tools/bench/peers).
 *
 *   node --import tsx tools/bench/run.ts [--quick] [--profile] [--only all-in-one,all-in-one-pg,split]
 *        [--peers passthrough,portkey|none] [--warmup-ms N] [--measure-ms N] [--jit-warmup-ms N]
 *        [--tokens N] [--token-delay-ms N] [--quiet-cores X] [--quiet-budget-ms N] [--no-pin]
 *        [--shared-nats] [--split-tls on|off] [--out FILE]
 *
 * What it does (see docs/performance.md and tools/bench/README.md):
 * - pins itself (the load generator) and the mock upstream (tools/bench/mock-upstream.ts) to
 *   CPU 0 and every gateway — each peer and Weir — to CPU 1, one loaded at a time (taskset;
 *   without taskset nothing is pinned and the JSON says so);
 * - installs the peers on demand (`npm ci --prefix tools/bench/peers --ignore-scripts` when
 *   their node_modules is missing or older than their lockfile) and starts them once;
 * - per composition — the all-in-one on PGlite (npm start's default: its compiled bundle, as
 *   `npm start` runs it), the all-in-one on the machine's Postgres, the split topology (six
 *   co-located processes on a private NATS) — starts Weir with one `openai-compatible`
 *   revision pointing at the mock, with authentication by API key, a monthly budget, a
 *   tokens-per-minute limit, admission, metering and the ledger on;
 * - per cell (non-streaming and streaming × concurrency 1, 16, 64): warm-up, then a fixed
 *   measurement window, for each target in turn — direct to the mock, each peer (in the first
 *   composition only) and Weir, the order rotated from cell to cell so drift favours no one;
 *   latency p50/p90/p99, TTFB, TTFT (streams), requests/s, and each process's CPU seconds
 *   (/proc/<pid>/stat) and RSS;
 * - checks the ledger: one usage row per successful request through Weir;
 * - prints markdown tables and writes the raw results to tools/bench/results/<date>.json
 *   (and the tables to <date>.md).
 *
 * `--profile`: instead of the matrix, starts Weir's processes with `--inspect=127.0.0.1:0`,
 * records a V8 CPU profile of each over a non-streaming and a streaming window at concurrency
 * 16 (through Weir only), measures the JS heap each retains per request (after a full GC), and
 * writes it all to tools/bench/results/<date>-profile.md.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, fstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { appRuntimeEnv, ensureAppBundles, freePort, REPO_ROOT, startSplitTopology } from '@weir/launcher';
import { createTemporaryPostgresDatabase, openDatabase } from '@weir/store-pg';
import { Pool as PgPool } from 'pg';
import { formatProfileSummary, summarizeProfile } from './cpuprofile-summary';
import { connectProfiler, type CpuProfiler, findInspectorUrl } from './inspector';
import { type LoadResult, runLoad, type LoadTarget } from './load';
import { DEFAULT_TOKENS } from './mock-upstream';
import { clockTicks, cpuTimes, cpusAllowed, peakRssMiB, pidsMatching, pin, rssMiB, tasksetPath } from './proc';

// ---- options --------------------------------------------------------------------------

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(name);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const QUICK = flag('--quick');
/** --no-pin: nothing is pinned (for machines without taskset or to compare). */
const PIN = !flag('--no-pin');
/** --shared-nats: the split uses the machine's NATS instead of a private nats-server. */
const SHARED_NATS = flag('--shared-nats');
const PROFILE = flag('--profile');
/** --split-tls off: the split's services talk plaintext (default on: mutual TLS, as `npm run split`), to measure what TLS costs. */
const SPLIT_TLS = value('--split-tls') ?? 'on';
if (SPLIT_TLS !== 'on' && SPLIT_TLS !== 'off') throw new Error('--split-tls takes on or off');
type CompositionName = 'all-in-one' | 'all-in-one-pg' | 'split';
const COMPOSITIONS: CompositionName[] = ['all-in-one', 'all-in-one-pg', 'split'];
const ONLY = value('--only');
/** --quick measures the all-in-one (and the peers) only, unless --only says otherwise. */
const SELECTED = ONLY ? (ONLY.split(',') as CompositionName[]) : QUICK ? (['all-in-one'] as CompositionName[]) : COMPOSITIONS;
for (const c of SELECTED) if (!COMPOSITIONS.includes(c)) throw new Error(`--only takes a comma-separated list of ${COMPOSITIONS.join(', ')}`);
const WARMUP_MS = Number(value('--warmup-ms') ?? (QUICK ? 300 : 1000));
const MEASURE_MS = Number(value('--measure-ms') ?? (QUICK ? 1200 : PROFILE ? 5000 : 3500));
/** Per composition, before the first cell: load through Weir and direct, not recorded (JIT warm-up). */
const JIT_WARMUP_MS = Number(value('--jit-warmup-ms') ?? (QUICK ? 1000 : 2000));
/** Output tokens per answer: 50 by default, as in issue 13's peer comparison (the mock's own default is {@link DEFAULT_TOKENS}). */
const TOKENS = Number(value('--tokens') ?? 50);
const TOKEN_DELAY_MS = Number(value('--token-delay-ms') ?? 0);
const CONCURRENCIES = PROFILE ? [16] : [1, 16, 64];
type PeerName = 'passthrough' | 'portkey';
const PEER_NAMES: PeerName[] = ['passthrough', 'portkey'];
/** --peers: the peers measured beside Weir (in the first composition); `none` for none. Never with --profile. */
const PEERS_OPTION = value('--peers');
const SELECTED_PEERS: PeerName[] = PROFILE || PEERS_OPTION === 'none' ? [] : PEERS_OPTION ? (PEERS_OPTION.split(',') as PeerName[]) : PEER_NAMES;
for (const p of SELECTED_PEERS) if (!PEER_NAMES.includes(p)) throw new Error(`--peers takes a comma-separated list of ${PEER_NAMES.join(', ')} (or none)`);
const MAX_REQUESTS_PER_CELL = 500_000;
/**
 * The quiet gate: before each (mode, concurrency) pair of cells, wait until the rest of the
 * machine (other users' builds and tests) uses less than QUIET_CORES, at most 15 s per gate
 * and QUIET_BUDGET_MS in all. A shared machine is never silent; the gate only avoids bursts.
 */
const QUIET_CORES = Number(value('--quiet-cores') ?? 0.3);
let quietBudgetMs = Number(value('--quiet-budget-ms') ?? (QUICK ? 15_000 : 45_000));
const QUIET_MAX_PER_GATE_MS = 15_000;
let quietWaitedMs = 0;
/** After the load stops, before the final CPU snapshot: lets batched work (ledger flushes) land. */
const SETTLE_MS = 250;
const MAX_TOKENS_SENT = 64;

const DEMO_KEY = 'wk_benchkey_' + 'B'.repeat(43);
const ALIAS = 'bench';
const REVISION = 'bench-upstream@1';
const LOAD_CPU = 0;
/** How a split's ledger process shows in /proc/<pid>/cmdline (its compiled bundle). */
const LEDGER_CMD = 'dist/apps/ledger/main.cjs';
const WEIR_CPU = 1;

const tsxEnv = { NODE_OPTIONS: '', TSX_TSCONFIG_PATH: path.join(REPO_ROOT, 'tsconfig.json') };
/** The dummy API key the peers forward to the mock (which checks none). */
const PEER_AUTH = { authorization: 'Bearer sk-bench-dummy' };

function configYaml(mockUrl: string): string {
  return `# tools/bench: one OpenAI-compatible revision on the mock upstream
revisions:
  - id: ${REVISION}
    model: bench-upstream
    engine:
      kind: openai-compatible
      base_url: ${mockUrl}/v1
      upstream_model: bench-upstream
      api: chat
      max_concurrency: 256
      first_token_timeout_ms: 10000
      idle_timeout_ms: 10000
    context_window: 8192
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.5, output_per_mtok: 1.5 }
aliases:
  - name: ${ALIAS}
    revision: ${REVISION}
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    allowed_aliases: ["*"]
    # Budget and tokens-per-minute on (never reached), as in issue 13's comparison.
    limits: { max_concurrent: 256, tokens_per_minute: 100000000000, monthly_budget_usd: 1000000000 }
defaults:
  max_queue_per_replica: 1024
`;
}

// ---- child processes ---------------------------------------------------------------------

interface Child {
  proc: ChildProcess;
  pid: number;
  lines: string[];
  exited: Promise<number | null>;
}

function spawnNode(name: string, args: string[], env: Record<string, string>, cpu: number | undefined): Child {
  const taskset = PIN ? tasksetPath() : undefined;
  const [cmd, cmdArgs] = taskset && cpu !== undefined ? [taskset, ['-c', String(cpu), process.execPath, ...args]] : [process.execPath, args];
  // taskset execs node: the pid is node's.
  const proc = spawn(cmd, cmdArgs, { cwd: REPO_ROOT, env: { ...process.env, ...tsxEnv, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const take = (b: Buffer) => {
    for (const l of b.toString('utf8').split('\n')) if (l) lines.push(`[${name}] ${l}`);
    if (lines.length > 2000) lines.splice(0, lines.length - 1000);
  };
  proc.stdout?.on('data', take);
  proc.stderr?.on('data', take);
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return { proc, pid: proc.pid as number, lines, exited };
}

async function stopChild(c: Child, timeoutMs = 30_000): Promise<number | null> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return c.proc.exitCode;
  c.proc.kill('SIGTERM');
  const timer = setTimeout(() => c.proc.kill('SIGKILL'), timeoutMs);
  const code = await c.exited;
  clearTimeout(timer);
  return code;
}

async function waitFor(what: string, check: () => Promise<boolean>, alive: () => boolean, timeoutMs: number, tail: () => string): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (!alive()) throw new Error(`${what} exited before it was ready:\n${tail()}`);
    if (await check().catch(() => false)) return;
    if (Date.now() > until) throw new Error(`${what} not ready within ${timeoutMs} ms:\n${tail()}`);
    await sleep(150);
  }
}

async function httpOk(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(1_000) });
  await res.arrayBuffer();
  return res.ok;
}

async function startMock(): Promise<{ url: string; child: Child }> {
  const port = await freePort();
  const child = spawnNode(
    'mock',
    ['--import', 'tsx', path.join(REPO_ROOT, 'tools/bench/mock-upstream.ts'), '--port', String(port), '--tokens', String(TOKENS), '--token-delay-ms', String(TOKEN_DELAY_MS)],
    {},
    LOAD_CPU,
  );
  const url = `http://127.0.0.1:${port}`;
  await waitFor('mock upstream', () => httpOk(`${url}/healthz`), () => child.proc.exitCode === null, 30_000, () => child.lines.join('\n'));
  return { url, child };
}

// ---- peers ---------------------------------------------------------------------------------

/** A peer gateway: started once, pinned to the Weir CPU, idle while another target is measured. */
interface Peer {
  name: PeerName;
  child: Child;
  url: string;
  headers: Record<string, string>;
  startupSeconds: number;
  /** RSS right after it answered its first request (MiB). */
  rssAtStartMiB: number;
  version: string;
}

const PEERS_DIR = path.join(REPO_ROOT, 'tools/bench/peers');

/**
 * Installs tools/bench/peers (its own manifest and lockfile, never the root's) when its
 * node_modules is missing or older than its lockfile: `npm ci --ignore-scripts` (Portkey's only
 * install script runs patch-package, which has nothing to patch in the published package).
 */
function installPeers(): void {
  const installed = path.join(PEERS_DIR, 'node_modules/.package-lock.json');
  const lock = path.join(PEERS_DIR, 'package-lock.json');
  if (existsSync(installed) && statSync(installed).mtimeMs >= statSync(lock).mtimeMs) return;
  process.stdout.write('installing the peers (npm ci --prefix tools/bench/peers --ignore-scripts)…\n');
  const r = spawnSync('npm', ['ci', '--prefix', PEERS_DIR, '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: REPO_ROOT, stdio: 'inherit', env: { ...process.env, NODE_OPTIONS: '' } });
  if (r.status !== 0) throw new Error(`npm ci --prefix tools/bench/peers failed (exit ${r.status}); run it by hand or pass --peers none`);
}

function packageVersion(file: string): string {
  try {
    return (JSON.parse(readFileSync(file, 'utf8')) as { version?: string }).version ?? '?';
  } catch {
    return '?';
  }
}

async function startPeer(name: PeerName, mockUrl: string): Promise<Peer> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  let child: Child;
  let headers: Record<string, string>;
  let version: string;
  if (name === 'passthrough') {
    child = spawnNode(name, [path.join(REPO_ROOT, 'tools/bench/passthrough.mjs'), '--port', String(port), '--upstream', mockUrl], {}, WEIR_CPU);
    headers = { ...PEER_AUTH };
    version = `node ${process.version}`;
  } else {
    installPeers();
    // The package's bin (what `npx @portkey-ai/gateway` runs) without its web console.
    const bin = path.join(PEERS_DIR, 'node_modules/@portkey-ai/gateway/build/start-server.js');
    child = spawnNode(name, [bin, `--port=${port}`, '--headless'], {}, WEIR_CPU);
    // Routed to the mock: provider openai, custom host = the mock's /v1.
    headers = { ...PEER_AUTH, 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${mockUrl}/v1` };
    version = `@portkey-ai/gateway ${packageVersion(path.join(PEERS_DIR, 'node_modules/@portkey-ai/gateway/package.json'))} (@hono/node-server ${packageVersion(path.join(PEERS_DIR, 'node_modules/@hono/node-server/package.json'))})`;
  }
  const tail = () => child.lines.slice(-20).join('\n');
  const answers = async () => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'bench-upstream', messages: [{ role: 'user', content: 'hi' }], max_tokens: MAX_TOKENS_SENT }),
      signal: AbortSignal.timeout(2_000),
    });
    await res.arrayBuffer();
    return res.ok;
  };
  try {
    await waitFor(name, answers, () => child.proc.exitCode === null, 60_000, tail);
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { name, child, url, headers, startupSeconds: (Date.now() - t0) / 1000, rssAtStartMiB: rssMiB(child.pid), version };
}

/** One request each way through a peer, checked like every measured one (usage, [DONE]). */
async function smokePeer(peer: Peer): Promise<void> {
  for (const stream of [false, true]) {
    const r = await runLoad(
      { origin: peer.url, path: '/v1/chat/completions', headers: peer.headers, model: 'bench-upstream' },
      { stream, concurrency: 1, warmupMs: 0, measureMs: 200, maxRequests: 2, maxTokens: MAX_TOKENS_SENT, expectCompletionTokens: Math.min(TOKENS, MAX_TOKENS_SENT) },
    );
    if (r.okTotal === 0) throw new Error(`smoke request (stream=${stream}) through ${peer.name} failed: ${r.firstError ?? 'no answer'}\n${peer.child.lines.slice(-20).join('\n')}`);
  }
}

// ---- compositions ------------------------------------------------------------------------

interface Running {
  name: CompositionName;
  url: string;
  gatewayPid: number;
  /** Every Weir process (the gateway included). */
  pids: Map<string, number>;
  /** Infrastructure the bench started (a private NATS): CPU reported, not counted as Weir's. */
  infra: Map<string, number>;
  startupSeconds: number;
  notes: string[];
  /** Usage rows the ledger holds for the bench alias. */
  ledgerRows(): Promise<number | undefined>;
  tail(): string;
  /** Output lines of one process. */
  output(name: string): string[];
  stop(): Promise<{ clean: boolean; ledgerRowsAfterStop?: number }>;
}

/**
 * The all-in-one (`npm start`'s process) pinned to the Weir CPU: on embedded PGlite (the
 * default), or with `postgres` on a throwaway database of the machine's Postgres (DATABASE_URL).
 */
async function startAllInOne(mockUrl: string, workRoot: string, postgres: boolean, inspect: boolean): Promise<Running> {
  const dataDir = path.join(workRoot, postgres ? 'aio-pg-data' : 'aio-data');
  const temp = postgres ? await createTemporaryPostgresDatabase() : undefined;
  mkdirSync(dataDir, { recursive: true });
  const configPath = path.join(workRoot, 'weir.bench.yaml');
  writeFileSync(configPath, configYaml(mockUrl));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  // As `npm start` runs it: plain node on the compiled bundle (built first when stale).
  const nodeArgs = [...(inspect ? ['--inspect=127.0.0.1:0'] : []), ensureAppBundles(['all-in-one'])['all-in-one']];
  const child = spawnNode(
    'all-in-one',
    nodeArgs,
    {
      ...appRuntimeEnv(),
      PORT: String(port),
      HOST: '127.0.0.1',
      WEIR_OPS_PORT: '0',
      WEIR_CONFIG: configPath,
      WEIR_DEMO_API_KEY: DEMO_KEY,
      WEIR_DATA_DIR: dataDir,
      WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
      NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true',
      NODE_LLAMA_CPP_GPU: 'false',
      LOG_LEVEL: 'info',
      ...(temp ? { DATABASE_URL: temp.url } : {}),
    },
    WEIR_CPU,
  );
  const tail = () => child.lines.slice(-30).join('\n');
  try {
    await waitFor('all-in-one', () => httpOk(`${url}/readyz`), () => child.proc.exitCode === null, 120_000, tail);
  } catch (err) {
    await stopChild(child);
    await temp?.drop();
    throw err;
  }
  return {
    name: postgres ? 'all-in-one-pg' : 'all-in-one',
    url,
    gatewayPid: child.pid,
    pids: new Map([['all-in-one', child.pid]]),
    infra: new Map(),
    startupSeconds: (Date.now() - t0) / 1000,
    notes: [
      postgres
        ? 'one process (gateway, admission, scheduler, router, relay, ledger writer); DATABASE_URL = a throwaway database on the machine\'s Postgres (not pinned, not counted in Weir CPU)'
        : 'one process (gateway, admission, scheduler, router, relay, ledger writer) on embedded PGlite in WEIR_DATA_DIR (npm start\'s default)',
    ],
    ledgerRows: async () => undefined, // counted after stop (PGlite is in-process and single-connection)
    tail,
    output: () => child.lines,
    async stop() {
      const code = await stopChild(child);
      // The ledger check: open the database the all-in-one wrote.
      let rows: number | undefined;
      try {
        const db = await openDatabase(temp ? { databaseUrl: temp.url, maxConnections: 1 } : { dataDir: path.join(dataDir, 'pg') });
        try {
          const r = await db.db.selectFrom('usage_ledger').select((eb) => eb.fn.countAll<string>().as('n')).where('model_alias', '=', ALIAS).executeTakeFirst();
          rows = Number(r?.n ?? 0);
        } finally {
          await db.close();
        }
      } catch (err) {
        process.stderr.write(`could not read the all-in-one's ledger: ${String(err)}\n`);
      }
      await temp?.drop().catch(() => undefined);
      return { clean: code === 0, ledgerRowsAfterStop: rows };
    },
  };
}

/** A private NATS server with JetStream (so no other split topology shares the ledger's durable consumer). */
async function startPrivateNats(workRoot: string): Promise<{ url: string; child: Child } | undefined> {
  let bin: string;
  try {
    bin = execFileSync('sh', ['-c', 'command -v nats-server'], { encoding: 'utf8' }).trim();
  } catch {
    return undefined;
  }
  if (!bin) return undefined;
  const port = await freePort();
  const storeDir = path.join(workRoot, 'nats');
  mkdirSync(storeDir, { recursive: true });
  const proc = spawn(bin, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const take = (b: Buffer) => {
    for (const l of b.toString('utf8').split('\n')) if (l) lines.push(`[nats] ${l}`);
  };
  proc.stdout?.on('data', take);
  proc.stderr?.on('data', take);
  const child: Child = { proc, pid: proc.pid as number, lines, exited: new Promise((resolve) => proc.on('exit', (code) => resolve(code))) };
  const connects = () =>
    new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('data', (d) => {
        socket.destroy();
        resolve(d.toString().startsWith('INFO'));
      });
      socket.once('error', () => resolve(false));
    });
  try {
    await waitFor('nats-server', connects, () => proc.exitCode === null, 15_000, () => lines.join('\n'));
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { url: `nats://127.0.0.1:${port}`, child };
}

async function startSplit(mockUrl: string, workRoot: string, inspect: boolean): Promise<Running> {
  const notes: string[] = [];
  // The ledger's durable JetStream consumer ('weir-ledger', not configurable) is shared by every
  // split topology on one NATS: two topologies would take each other's usage records. So the
  // bench runs its own NATS unless told to use the machine's (--shared-nats).
  const nats = SHARED_NATS ? undefined : await startPrivateNats(workRoot);
  notes.push(SPLIT_TLS === 'on' ? 'mutual TLS between the split services (the launcher\'s development certificates, ECDSA P-256)' : 'the split services in plaintext (--split-tls off)');
  if (nats) notes.push(`a private nats-server (JetStream, ${nats.url}, not pinned) so no other split topology shares the ledger's durable consumer`);
  else {
    notes.push('the machine\'s NATS (nats://127.0.0.1:4222), shared with any other split topology running on this machine');
    const foreign = pidsMatching(LEDGER_CMD);
    if (foreign.length > 0) {
      process.stdout.write(`another split topology is running (ledger pid ${foreign.join(', ')}); waiting up to 180 s for it to stop…\n`);
      const until = Date.now() + 180_000;
      while (pidsMatching(LEDGER_CMD).length > 0 && Date.now() < until) await sleep(2_000);
    }
  }
  const temp = await createTemporaryPostgresDatabase();
  const workDir = path.join(workRoot, 'split');
  const t0 = Date.now();
  let topology;
  // The launcher picks ports by binding and releasing them, so a port can be taken before a
  // service binds it (EADDRINUSE): one more attempt.
  const start = () =>
    startSplitTopology({
      configText: configYaml(mockUrl),
      workDir,
      databaseUrl: temp.url,
      natsUrl: nats?.url,
      gateways: 1,
      enginesPerRevision: 1,
      tls: SPLIT_TLS === 'on',
      env: {
        WEIR_DEMO_API_KEY: DEMO_KEY,
        LOG_LEVEL: 'info',
        ...(inspect ? { NODE_OPTIONS: '--inspect=127.0.0.1:0' } : {}),
      },
    });
  try {
    try {
      topology = await start();
    } catch (err) {
      process.stdout.write(`   split did not start (${String(err).split('\n')[0].slice(0, 160)}…); trying once more\n`);
      topology = await start();
    }
  } catch (err) {
    await temp.drop();
    if (nats) await stopChild(nats.child);
    throw err;
  }
  const startupSeconds = (Date.now() - t0) / 1000;
  const pids = new Map<string, number>();
  const pinned: string[] = [];
  for (const [name, p] of topology.processes) {
    pids.set(name, p.pid);
    if (PIN && tasksetPath()) {
      if (pin(p.pid, WEIR_CPU)) pinned.push(name);
      else notes.push(`could not pin ${name} (pid ${p.pid})`);
    }
  }
  if (pinned.length > 0) notes.push(`co-located: ${pinned.join(', ')} all pinned to CPU ${WEIR_CPU} (taskset -a -cp after start); Postgres (a machine service) and NATS not pinned`);
  const pg = new PgPool({ connectionString: temp.url, max: 1 });
  const count = async () => {
    const r = await pg.query<{ n: string }>('SELECT count(*) AS n FROM usage_ledger WHERE model_alias = $1', [ALIAS]);
    return Number(r.rows[0]?.n ?? 0);
  };
  return {
    name: 'split',
    url: topology.gateways[0].url,
    gatewayPid: topology.gateways[0].process.pid,
    pids,
    infra: new Map(nats ? [['nats', nats.child.pid]] : []),
    startupSeconds,
    notes,
    ledgerRows: count,
    tail: () => topology.output().split('\n').slice(-40).join('\n'),
    output: (name) => topology.output().split('\n').filter((l) => l.startsWith(`[${name}] `)),
    async stop() {
      const clean = await topology.stop().catch(() => false);
      if (nats) await stopChild(nats.child);
      const rows = await count().catch(() => undefined);
      await pg.end().catch(() => undefined);
      await temp.drop().catch(() => undefined);
      return { clean, ledgerRowsAfterStop: rows };
    },
  };
}

// ---- cells ---------------------------------------------------------------------------------

/** What a cell measures: the mock directly, a peer, or Weir. */
type TargetName = 'direct' | 'weir' | PeerName;

interface Cell {
  composition: string;
  target: TargetName;
  stream: boolean;
  concurrency: number;
  load: LoadResult;
  /** CPU seconds per process during the window (drain and settle included). */
  cpuSeconds: Record<string, number>;
  /** The system (kernel) part of cpuSeconds. */
  systemCpuSeconds: Record<string, number>;
  /** µs of CPU per completed request. */
  cpuPerRequestUs: Record<string, number>;
  /** CPU share (of one core) each process used during the window. */
  cpuUtilization: Record<string, number>;
  rssMiB: Record<string, number>;
  peakRssMiB: Record<string, number>;
  /** Busy share of each CPU over the window (everything on the machine, ours and others'). */
  machineCpuBusy: number[];
  /** CPU (in cores) used on the machine by processes other than Weir, the mock and the load generator. */
  otherLoadCores: number;
  /** The quiet gate before this pair of cells (on the direct cell). */
  gate?: QuietGate;
  loadavg1: number;
}

/** --profile: the profilers of the running composition's processes, and what they recorded. */
const profilers = new Map<string, CpuProfiler>();
const profiles: { composition: string; process: string; cell: string; profile: unknown }[] = [];
/** --profile: JS heap after a full GC, per process, before the first and after the last cell. */
const heaps: { composition: string; process: string; beforeBytes: number; afterBytes: number; requestsThroughWeir: number }[] = [];

function readCpuTimes(): number[][] {
  // /proc/stat per-CPU lines: user nice system idle iowait irq softirq steal …
  return readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .filter((l) => /^cpu\d+ /.test(l))
    .map((l) => l.trim().split(/\s+/).slice(1).map(Number));
}

function busyShare(before: number[][], after: number[][]): number[] {
  return after.map((a, i) => {
    const b = before[i] ?? a;
    const d = a.map((v, j) => v - (b[j] ?? 0));
    const idle = (d[3] ?? 0) + (d[4] ?? 0);
    const total = d.slice(0, 8).reduce((s, v) => s + v, 0);
    return total > 0 ? (total - idle) / total : 0;
  });
}

interface QuietGate {
  waitedMs: number;
  /** Busy cores on the machine (bench idle) when the gate opened. */
  otherCores: number;
  quiet: boolean;
}

async function waitQuiet(): Promise<QuietGate> {
  const t0 = Date.now();
  for (;;) {
    const a = readCpuTimes();
    await sleep(500);
    const busy = busyShare(a, readCpuTimes()).reduce((x, y) => x + y, 0);
    const waitedMs = Date.now() - t0;
    if (busy < QUIET_CORES || waitedMs >= Math.min(QUIET_MAX_PER_GATE_MS, Math.max(0, quietBudgetMs))) {
      quietBudgetMs -= waitedMs;
      quietWaitedMs += waitedMs;
      return { waitedMs, otherCores: busy, quiet: busy < QUIET_CORES };
    }
  }
}

/** The load generator's target for `target`. */
function loadTarget(target: TargetName, running: Running, mockUrl: string, peers: Peer[]): LoadTarget {
  if (target === 'direct') return { origin: mockUrl, path: '/v1/chat/completions', headers: {}, model: 'bench-upstream' };
  if (target === 'weir') return { origin: running.url, path: '/v1/chat/completions', headers: { authorization: `Bearer ${DEMO_KEY}` }, model: ALIAS };
  const peer = peers.find((p) => p.name === target);
  if (!peer) throw new Error(`no peer ${target}`);
  return { origin: peer.url, path: '/v1/chat/completions', headers: peer.headers, model: 'bench-upstream' };
}

async function runCell(running: Running, mock: { url: string; pid: number }, peers: Peer[], target: TargetName, stream: boolean, concurrency: number): Promise<Cell> {
  const t = loadTarget(target, running, mock.url, peers);
  // Every process's CPU is read in every cell: an idle peer or Weir must use next to nothing.
  const watched = new Map<string, number>([...running.pids, ...running.infra, ['mock', mock.pid], ...peers.map((p) => [p.name, p.child.pid] as [string, number])]);
  const before = new Map<string, { user: number; system: number }>();
  let machineBefore: number[][] = [];
  let wallStart = 0;
  let wall = 0;
  const after = new Map<string, { user: number; system: number }>();
  let machineAfter: number[][] = [];
  const load = await runLoad(t, {
    stream,
    concurrency,
    warmupMs: WARMUP_MS,
    measureMs: MEASURE_MS,
    maxRequests: MAX_REQUESTS_PER_CELL,
    maxTokens: MAX_TOKENS_SENT,
    expectCompletionTokens: Math.min(TOKENS, MAX_TOKENS_SENT),
    async onMeasureStart() {
      await Promise.all([...profilers.values()].map((p) => p.start()));
      for (const [n, pid] of watched) before.set(n, cpuTimes(pid));
      machineBefore = readCpuTimes();
      wallStart = Date.now();
    },
    async onMeasureEnd() {
      await sleep(SETTLE_MS);
      for (const [n, pid] of watched) after.set(n, cpuTimes(pid));
      machineAfter = readCpuTimes();
      wall = (Date.now() - wallStart) / 1000;
      for (const [n, p] of profilers) {
        profiles.push({ composition: running.name, process: n, cell: `${stream ? 'stream' : 'non-stream'} c=${concurrency}`, profile: await p.stop() });
      }
    },
  });
  const cpu: Record<string, number> = {};
  const sys: Record<string, number> = {};
  const perReq: Record<string, number> = {};
  const util: Record<string, number> = {};
  const rss: Record<string, number> = {};
  const peak: Record<string, number> = {};
  let weirTotal = 0;
  for (const [n, pid] of watched) {
    const a = after.get(n) ?? { user: Number.NaN, system: Number.NaN };
    const b = before.get(n) ?? { user: Number.NaN, system: Number.NaN };
    const d = a.user + a.system - (b.user + b.system);
    cpu[n] = d;
    sys[n] = a.system - b.system;
    perReq[n] = (d / Math.max(1, load.completedInWindow)) * 1e6;
    util[n] = d / wall;
    rss[n] = rssMiB(pid);
    peak[n] = peakRssMiB(pid);
    if (running.pids.has(n)) weirTotal += d;
  }
  cpu['weir-total'] = weirTotal;
  perReq['weir-total'] = (weirTotal / Math.max(1, load.completedInWindow)) * 1e6;
  util['weir-total'] = weirTotal / wall;
  cpu['load-generator'] = load.driverCpuSeconds;
  perReq['load-generator'] = (load.driverCpuSeconds / Math.max(1, load.completedInWindow)) * 1e6;
  util['load-generator'] = load.driverCpuSeconds / wall;
  rss['weir-total'] = [...running.pids.keys()].reduce((s, n) => s + rss[n], 0);
  peak['weir-total'] = [...running.pids.keys()].reduce((s, n) => s + peak[n], 0);
  const busy = busyShare(machineBefore, machineAfter);
  const ours = util['weir-total'] + util.mock + util['load-generator'] + [...running.infra.keys(), ...peers.map((p) => p.name)].reduce((a, n) => a + util[n], 0);
  return {
    composition: running.name,
    target,
    stream,
    concurrency,
    load,
    cpuSeconds: cpu,
    systemCpuSeconds: sys,
    cpuPerRequestUs: perReq,
    cpuUtilization: util,
    rssMiB: rss,
    peakRssMiB: peak,
    machineCpuBusy: busy,
    otherLoadCores: Math.max(0, busy.reduce((a, b) => a + b, 0) - ours),
    loadavg1: os.loadavg()[0],
  };
}

/** One request each way, to fail fast with Weir's log when the path is broken. */
async function smoke(running: Running): Promise<number> {
  let ok = 0;
  for (const stream of [false, true]) {
    const res = await fetch(`${running.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: ALIAS, messages: [{ role: 'user', content: 'hi' }], max_tokens: MAX_TOKENS_SENT, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`smoke request (stream=${stream}) through ${running.name} failed: HTTP ${res.status} ${text.slice(0, 400)}\n${running.tail()}`);
    ok++;
  }
  return ok;
}

// ---- reporting ---------------------------------------------------------------------------

interface CompositionResult {
  name: string;
  url: string;
  gatewayProcess: string;
  pids: Record<string, number>;
  infraPids?: Record<string, number>;
  cpusAllowed: Record<string, string>;
  startupSeconds: number;
  /** RSS of each Weir process right after it answered its first requests (MiB). */
  rssAtStartMiB: Record<string, number>;
  /** RSS after the JIT warm-up, before the first cell (MiB): each Weir process and each peer measured here. */
  idleRssMiB: Record<string, number>;
  /** The peers measured beside this composition. */
  peers: PeerName[];
  notes: string[];
  cells: Cell[];
  ledger: { okRequestsThroughWeir: number; rows?: number; matches?: boolean };
  stoppedCleanly: boolean;
}

const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : '—');
const us = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '—');
const signedMs = (x: number) => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${x.toFixed(3)}` : '—');

function pair(c: CompositionResult, stream: boolean, conc: number) {
  const d = c.cells.find((x) => x.target === 'direct' && x.stream === stream && x.concurrency === conc);
  const w = c.cells.find((x) => x.target === 'weir' && x.stream === stream && x.concurrency === conc);
  return d && w ? { d, w } : undefined;
}

function added(c: CompositionResult, stream: boolean, conc: number, metric: 'latency' | 'ttft' | 'ttfb', p: 'p50' | 'p99'): number {
  const x = pair(c, stream, conc);
  if (!x) return Number.NaN;
  const dw = x.w.load[metric]?.[p] ?? Number.NaN;
  // The direct call's first content byte is its first byte: the mock sends content at once.
  const dd = metric === 'ttft' ? (x.d.load.ttft?.[p] ?? Number.NaN) : (x.d.load[metric]?.[p] ?? Number.NaN);
  return dw - dd;
}

function compositionTable(c: CompositionResult): string {
  const gw = c.gatewayProcess;
  const lines = [
    `### ${c.name}`,
    '',
    `Latencies in ms (send → last byte); "added" = through Weir − direct at the same percentile. CPU µs/request from /proc (user+system, all threads) over the window; "all Weir" sums ${[...Object.keys(c.pids)].join(', ')}.`,
    '',
    '| mode | conc. | direct p50 | Weir p50 | **added p50** | direct p99 | Weir p99 | **added p99** | added TTFT p50 / p99 | direct req/s | Weir req/s | **gateway CPU µs/req** | all Weir CPU µs/req | gateway CPU use | gateway RSS MiB | errors | other load (cores) direct / Weir |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const stream of [false, true]) {
    for (const conc of CONCURRENCIES) {
      const x = pair(c, stream, conc);
      if (!x) continue;
      const { d, w } = x;
      lines.push(
        `| ${stream ? 'stream' : 'non-stream'} | ${conc} | ${ms(d.load.latency.p50)} | ${ms(w.load.latency.p50)} | **${signedMs(added(c, stream, conc, 'latency', 'p50'))}** | ${ms(d.load.latency.p99)} | ${ms(w.load.latency.p99)} | **${signedMs(added(c, stream, conc, 'latency', 'p99'))}** | ${stream ? `${signedMs(added(c, stream, conc, 'ttft', 'p50'))} / ${signedMs(added(c, stream, conc, 'ttft', 'p99'))}` : '—'} | ${d.load.rps.toFixed(0)} | ${w.load.rps.toFixed(0)} | **${us(w.cpuPerRequestUs[gw])}** | ${us(w.cpuPerRequestUs['weir-total'])} | ${(w.cpuUtilization[gw] * 100).toFixed(0)}% | ${w.rssMiB['weir-total'].toFixed(0)}${Object.keys(c.pids).length > 1 ? ` (gw ${w.rssMiB[gw].toFixed(0)})` : ''} | ${d.load.errors + w.load.errors} | ${d.otherLoadCores.toFixed(2)} / ${w.otherLoadCores.toFixed(2)} |`,
      );
    }
  }
  const infra = Object.keys(c.infraPids ?? {});
  for (const n of infra) {
    const vals = c.cells.filter((x) => x.target === 'weir').map((x) => `${x.stream ? 'stream' : 'non-stream'} c=${x.concurrency}: ${us(x.cpuPerRequestUs[n])}`);
    lines.push('', `Infrastructure started by the bench, not counted as Weir: ${n} used (µs CPU per request through Weir) ${vals.join(', ')}.`);
  }
  lines.push('');
  return lines.join('\n');
}

function cellOf(c: CompositionResult, target: TargetName, stream: boolean, conc: number): Cell | undefined {
  return c.cells.find((x) => x.target === target && x.stream === stream && x.concurrency === conc);
}

/** `target` − direct at the same percentile, same mode and concurrency (ms). TTFT: the direct call's own TTFT. */
function deltaVsDirect(c: CompositionResult, target: TargetName, stream: boolean, conc: number, metric: 'latency' | 'ttft', p: 'p50' | 'p99'): number {
  const d = cellOf(c, 'direct', stream, conc);
  const t = cellOf(c, target, stream, conc);
  if (!d || !t) return Number.NaN;
  return (t.load[metric]?.[p] ?? Number.NaN) - (d.load[metric]?.[p] ?? Number.NaN);
}

/** The process whose CPU and RSS stand for `target` in a cell. */
function processOf(c: CompositionResult, target: TargetName): string {
  return target === 'weir' ? c.gatewayProcess : target === 'direct' ? 'mock' : target;
}

const LABELS: Record<TargetName, string> = { direct: 'direct (baseline)', passthrough: 'node:http pass-through', portkey: 'Portkey', weir: 'Weir' };

/** Highest req/s of `target` over the concurrencies, in one mode. */
function maxRps(c: CompositionResult, target: TargetName, stream: boolean): number {
  return Math.max(...CONCURRENCIES.map((conc) => cellOf(c, target, stream, conc)?.load.rps ?? Number.NaN).filter(Number.isFinite));
}

/**
 * The peer comparison of one composition: every target in every cell (req/s, the gateway's CPU
 * per request and as a multiple of the pass-through's, Δ latency and TTFT vs direct, RSS), and a
 * summary in the shape of issue 13's table.
 */
function peerTables(c: CompositionResult): string {
  const targets: TargetName[] = ['direct', ...c.peers, 'weir'];
  const lines = [
    `### Peers, beside ${c.name}`,
    '',
    'Every gateway alone on CPU 1 (the others idle), load generator and mock on CPU 0; "other load": CPU the rest of the machine used during the cell (trust cells near 0); Δ = target − direct at the same percentile in the same group of cells (measured minutes apart at most). CPU µs/request: the gateway process\'s user+system CPU over the window ÷ completed requests; "× pass-through": that CPU as a multiple of the bare node:http pass-through\'s in the same cell. RSS: at the end of the cell. "bound": `gw` when the gateway used ≥ 90 % of its core (the req/s is then its capacity), `cpu0` when load generator + mock used ≥ 90 % of theirs.',
    '',
    '| mode | conc. | target | req/s | × direct | CPU µs/req | × pass-through | CPU use | p50 ms | Δp50 | Δp99 | ΔTTFT p50 / p99 | RSS MiB | errors | bound | other load (cores) |',
    '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|',
  ];
  for (const stream of [false, true]) {
    for (const conc of CONCURRENCIES) {
      const d = cellOf(c, 'direct', stream, conc);
      const pt = cellOf(c, 'passthrough', stream, conc);
      for (const target of targets) {
        const x = cellOf(c, target, stream, conc);
        if (!x) continue;
        const proc = processOf(c, target);
        const cpu = x.cpuPerRequestUs[proc];
        const ptCpu = pt?.cpuPerRequestUs.passthrough ?? Number.NaN;
        const gwBusy = target === 'direct' ? Number.NaN : x.cpuUtilization[proc];
        const cpu0 = (x.cpuUtilization.mock ?? 0) + (x.cpuUtilization['load-generator'] ?? 0);
        const bound = gwBusy >= 0.9 ? 'gw' : cpu0 >= 0.9 ? 'cpu0' : '-';
        const isDirect = target === 'direct';
        lines.push(
          `| ${stream ? 'stream' : 'non-stream'} | ${conc} | ${LABELS[target]} | ${x.load.rps.toFixed(0)} | ${isDirect ? '1' : d ? (x.load.rps / d.load.rps).toFixed(2) : '—'} | ${isDirect ? '—' : us(cpu)} | ${isDirect ? '—' : (cpu / ptCpu).toFixed(1)} | ${isDirect ? '—' : `${(gwBusy * 100).toFixed(0)}%`} | ${ms(x.load.latency.p50)} | ${isDirect ? '—' : signedMs(deltaVsDirect(c, target, stream, conc, 'latency', 'p50'))} | ${isDirect ? '—' : signedMs(deltaVsDirect(c, target, stream, conc, 'latency', 'p99'))} | ${!stream || isDirect ? '—' : `${signedMs(deltaVsDirect(c, target, stream, conc, 'ttft', 'p50'))} / ${signedMs(deltaVsDirect(c, target, stream, conc, 'ttft', 'p99'))}`} | ${isDirect ? '—' : (x.rssMiB[proc] ?? Number.NaN).toFixed(0)} | ${x.load.errors} | ${bound} | ${x.otherLoadCores.toFixed(2)} |`,
        );
      }
    }
  }
  lines.push('', '**Summary** (issue 13\'s table): max req/s over c = 1, 16, 64; CPU per request over those cells; Δp50 at c=1; idle RSS after the warm-up.', '');
  lines.push('| | max req/s non-stream / stream | CPU µs/request non-stream / stream | × pass-through CPU (c=16) non-stream / stream | Δp50 at c=1 non-stream / stream | ΔTTFT p50 at c=1 | idle RSS MiB |', '|---|---|---|---|---|---|---:|');
  const range = (v: number[]) => {
    const f = v.filter(Number.isFinite);
    return f.length ? `${us(Math.min(...f))}–${us(Math.max(...f))}` : '—';
  };
  for (const target of targets.filter((t) => t !== 'direct')) {
    const proc = processOf(c, target);
    const cpus = (stream: boolean) => range(CONCURRENCIES.map((conc) => cellOf(c, target, stream, conc)?.cpuPerRequestUs[proc] ?? Number.NaN));
    const mult = (stream: boolean) => ((cellOf(c, target, stream, 16)?.cpuPerRequestUs[proc] ?? Number.NaN) / (cellOf(c, 'passthrough', stream, 16)?.cpuPerRequestUs.passthrough ?? Number.NaN)).toFixed(1);
    lines.push(
      `| ${LABELS[target]} | ${maxRps(c, target, false).toFixed(0)} / ${maxRps(c, target, true).toFixed(0)} | ${cpus(false)} / ${cpus(true)} | ${mult(false)} / ${mult(true)} | ${signedMs(deltaVsDirect(c, target, false, 1, 'latency', 'p50'))} / ${signedMs(deltaVsDirect(c, target, true, 1, 'latency', 'p50'))} ms | ${signedMs(deltaVsDirect(c, target, true, 1, 'ttft', 'p50'))} ms | ${(c.idleRssMiB[proc] ?? Number.NaN).toFixed(0)} |`,
    );
  }
  lines.push('');
  return lines.join('\n');
}

function targetsTable(results: CompositionResult[]): string {
  const rows: string[] = ['| target | measured | verdict |', '|---|---|---|'];
  const verdict = (ok: boolean) => (ok ? 'met' : '**not met**');
  // Issue 13's targets against the peers of the same run (the embedded default: the PGlite all-in-one).
  const withPortkey = results.find((r) => r.name === 'all-in-one' && r.peers.includes('portkey'));
  if (withPortkey && !PROFILE) {
    for (const [stream, factor] of [
      [false, 3],
      [true, 5],
    ] as const) {
      const w = maxRps(withPortkey, 'weir', stream);
      const p = maxRps(withPortkey, 'portkey', stream);
      rows.push(`| all-in-one (PGlite): ≥ ${factor}× Portkey's req/s (${stream ? 'stream' : 'non-stream'}, max over c, one core each) | ${w.toFixed(0)} vs ${p.toFixed(0)} req/s = ${(w / p).toFixed(2)}× | ${verdict(w >= factor * p)} |`);
    }
  }
  const aioRss = results.find((r) => r.name === 'all-in-one');
  if (aioRss && !PROFILE) {
    const v = aioRss.rssAtStartMiB['all-in-one'];
    rows.push(`| all-in-one (PGlite): idle RSS ≤ 150 MB without a local engine | ${v.toFixed(0)} MiB after start (${(aioRss.idleRssMiB['all-in-one'] ?? Number.NaN).toFixed(0)} MiB after the JIT warm-up) | ${verdict(v * 1.048576 <= 150)} |`);
  }
  for (const aio of results.filter((r) => r.name !== 'split')) {
    if (PROFILE) break;
    const label = aio.name === 'all-in-one' ? 'all-in-one (PGlite)' : 'all-in-one (Postgres)';
    for (const stream of [false, true]) {
      const vals = CONCURRENCIES.map((conc) => pair(aio, stream, conc)?.w.cpuPerRequestUs[aio.gatewayProcess] ?? Number.NaN);
      const bad = CONCURRENCIES.filter((_, i) => !(vals[i] < 300));
      rows.push(
        `| ${label}: gateway CPU < 300 µs/request (${stream ? 'stream' : 'non-stream'}) | ${vals.map((v, i) => `c=${CONCURRENCIES[i]}: ${us(v)} µs`).join(', ')} | ${bad.length === 0 ? 'met' : bad.length === CONCURRENCIES.length ? '**not met**' : `**not met** at ${bad.map((x) => `c=${x}`).join(', ')}`} |`,
      );
    }
    for (const stream of [false, true]) {
      const v = added(aio, stream, 1, 'latency', 'p50');
      rows.push(`| ${label}: added p50 latency < 0.5 ms at c=1 (${stream ? 'stream' : 'non-stream'}) | ${signedMs(v)} ms | ${verdict(v < 0.5)} |`);
    }
    const t50 = added(aio, true, 1, 'ttft', 'p50');
    const t99 = added(aio, true, 1, 'ttft', 'p99');
    rows.push(`| ${label}: added time to first token < 1 ms (stream, c=1, p50) | p50 ${signedMs(t50)} ms (p99 ${signedMs(t99)} ms) | ${verdict(t50 < 1)} |`);
  }
  const split = results.find((r) => r.name === 'split');
  if (split && !PROFILE) {
    for (const stream of [false, true]) {
      const v = added(split, stream, 1, 'latency', 'p99');
      rows.push(`| split: added p99 latency < 3 ms at c=1 (${stream ? 'stream' : 'non-stream'}) | ${signedMs(v)} ms | ${verdict(v < 3)} |`);
    }
  }
  return rows.join('\n') + '\n';
}

/** The mock's CPU per request in the direct cells at concurrency 16 (median): the floor of a Node HTTP exchange here. */
function mockFloor(results: CompositionResult[]): string {
  const v = results.flatMap((r) => r.cells.filter((c) => c.target === 'direct' && c.concurrency === 16).map((c) => c.cpuPerRequestUs.mock)).sort((a, b) => a - b);
  return v.length ? us(v[Math.floor(v.length / 2)]) : '?';
}

function markdown(meta: Record<string, unknown>, results: CompositionResult[]): string {
  const parts = [
    `## Weir overhead benchmark — ${String(meta.date)}${QUICK ? ' (quick)' : ''}`,
    '',
    `${String(meta.cpuModel)}, ${String(meta.cpus)} CPUs (calibration: ${(meta.calibration as { syscallUs: number }).syscallUs.toFixed(2)} µs per fstat syscall, ${(meta.calibration as { jsLoopNsPerIteration: number }).jsLoopNsPerIteration.toFixed(2)} ns per JS loop iteration; the mock, a minimal node:http server, used ${mockFloor(results)} µs CPU per request in the direct cells at c=16), node ${String(meta.node)}, commit ${String(meta.commit).slice(0, 10)}${meta.dirty ? ' (+ uncommitted changes in the working tree)' : ''}; pinning: ${String(meta.pinning)}; mock: ${TOKENS} tokens/response, ${TOKEN_DELAY_MS} ms/token; windows: ${WARMUP_MS} ms warm-up + ${MEASURE_MS} ms measured per cell; load average at start ${(meta.loadavgStart as number[]).map((x) => x.toFixed(2)).join(' ')}, at the end ${(meta.loadavgEnd as number[]).map((x) => x.toFixed(2)).join(' ')}; quiet gate (other load < ${QUIET_CORES} cores before each pair of cells) waited ${(quietWaitedMs / 1000).toFixed(0)} s in all. "Other load" in the tables is the CPU the rest of the machine used during each cell.`,
    '',
  ];
  const peerMeta = (meta.peers as { name: string; version: string; cpus: string; rssAtStartMiB: number }[] | undefined) ?? [];
  if (peerMeta.length > 0) parts.push(`Peers: ${peerMeta.map((p) => `${p.name} = ${p.version} (CPU ${p.cpus}, RSS after start ${p.rssAtStartMiB.toFixed(0)} MiB)`).join('; ')}.`, '');
  if (!PROFILE) parts.push('### Targets', '', targetsTable(results));
  for (const r of results) {
    if (r.peers.length > 0) parts.push(peerTables(r));
    parts.push(compositionTable(r));
    parts.push(
      `Ledger: ${r.ledger.rows ?? '?'} usage rows for ${r.ledger.okRequestsThroughWeir} successful requests through Weir${r.ledger.matches === undefined ? '' : r.ledger.matches ? ' (one each)' : ' (**mismatch**)'}; startup ${r.startupSeconds.toFixed(1)} s; RSS after start ${Object.entries(r.rssAtStartMiB)
        .map(([k, v]) => `${k} ${v.toFixed(0)} MiB`)
        .join(', ')}; idle RSS after the warm-up ${Object.entries(r.idleRssMiB)
        .map(([k, v]) => `${k} ${v.toFixed(0)} MiB`)
        .join(', ')}.${r.notes.length ? ` Notes: ${r.notes.join('; ')}.` : ''}`,
      '',
    );
  }
  return parts.join('\n');
}

// ---- main ----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const taskset = PIN ? tasksetPath() : undefined;
  const selfPinned = taskset ? pin(process.pid, LOAD_CPU) : false;
  const pinning = !PIN
    ? 'none (--no-pin): every process floats over all CPUs'
    : taskset
    ? `load generator + mock upstream on CPU ${LOAD_CPU}, Weir on CPU ${WEIR_CPU} (taskset)${selfPinned ? '' : ' — self-pinning FAILED'}`
    : 'none (taskset not found): every process floats over all CPUs';
  const date = new Date().toISOString().slice(0, 10);
  const git = (args: string[]) => {
    try {
      return execFileSync('git', args, { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    } catch {
      return '';
    }
  };
  const dirtyFiles = git(['status', '--porcelain', '--untracked-files=no'])
    .split('\n')
    .filter((l) => l && !l.includes('tools/bench/') && !l.includes('docs/performance.md'));
  const meta: Record<string, unknown> = {
    date,
    startedAt: new Date().toISOString(),
    quick: QUICK,
    profile: PROFILE,
    commit: git(['rev-parse', 'HEAD']),
    dirty: dirtyFiles.length > 0,
    node: process.version,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? '?',
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    clkTck: clockTicks(),
    pinning,
    loadGeneratorCpus: cpusAllowed(process.pid),
    loadavgStart: os.loadavg(),
    calibration: calibrate(),
    options: { jitWarmupMs: JIT_WARMUP_MS, warmupMs: WARMUP_MS, measureMs: MEASURE_MS, concurrencies: CONCURRENCIES, tokens: TOKENS, tokenDelayMs: TOKEN_DELAY_MS, maxTokensSent: MAX_TOKENS_SENT, settleMs: SETTLE_MS },
  };
  const workRoot = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-'));
  process.stdout.write(`weir bench: ${pinning}; work dir ${workRoot}\n`);

  const mock = await startMock();
  meta.mockCpus = cpusAllowed(mock.child.pid);
  const results: CompositionResult[] = [];
  const peers: Peer[] = [];
  let current: Running | undefined;
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stdout.write('\ninterrupted: stopping what was started…\n');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    for (const peerName of SELECTED_PEERS) {
      const peer = await startPeer(peerName, mock.url);
      peers.push(peer);
      await smokePeer(peer);
      process.stdout.write(`peer ${peerName}: ${peer.version}, up in ${peer.startupSeconds.toFixed(1)} s at ${peer.url}, pid ${peer.child.pid} (cpus ${cpusAllowed(peer.child.pid)}), RSS ${peer.rssAtStartMiB.toFixed(0)} MiB\n`);
    }
    meta.peers = peers.map((p) => ({ name: p.name, version: p.version, cpus: cpusAllowed(p.child.pid), startupSeconds: p.startupSeconds, rssAtStartMiB: p.rssAtStartMiB }));
    for (const name of SELECTED) {
      if (interrupted) break;
      // The peers are measured beside the first composition only (they do not change with Weir's).
      const peersHere = results.length === 0 ? peers : [];
      process.stdout.write(`\n== ${name}: starting…\n`);
      current = name === 'split' ? await startSplit(mock.url, workRoot, PROFILE) : await startAllInOne(mock.url, workRoot, name === 'all-in-one-pg', PROFILE);
      const running = current;
      process.stdout.write(`   up in ${running.startupSeconds.toFixed(1)} s at ${running.url}; pids ${[...running.pids].map(([n, p]) => `${n}=${p} (cpus ${cpusAllowed(p)})`).join(', ')}\n`);
      let okThroughWeir = await smoke(running);
      const rssAtStart: Record<string, number> = {};
      for (const [n, pid] of running.pids) rssAtStart[n] = rssMiB(pid);
      if (PROFILE) {
        for (const [n] of running.pids) {
          const ws = findInspectorUrl(running.output(n));
          if (ws) profilers.set(n, await connectProfiler(ws, 1000));
          else process.stdout.write(`   no inspector URL for ${n}\n`);
        }
      }
      const heapBefore = new Map<string, number>();
      for (const [n, p] of profilers) heapBefore.set(n, await p.heapUsedAfterGc());
      const okBeforeCells = okThroughWeir;
      // JIT warm-up: both modes, through every target, at concurrency 16; nothing recorded.
      const targets: TargetName[] = ['direct', ...peersHere.map((p) => p.name), 'weir'];
      for (const stream of [false, true]) {
        for (const target of targets) {
          const r = await runLoad(loadTarget(target, running, mock.url, peers), {
            stream,
            concurrency: 16,
            warmupMs: JIT_WARMUP_MS / 2,
            measureMs: 1,
            maxRequests: MAX_REQUESTS_PER_CELL,
            maxTokens: MAX_TOKENS_SENT,
            expectCompletionTokens: Math.min(TOKENS, MAX_TOKENS_SENT),
          });
          if (target === 'weir') okThroughWeir += r.okTotal;
          if (r.firstError) throw new Error(`warm-up through ${target} failed: ${r.firstError}\n${running.tail()}`);
        }
      }
      const idleRss: Record<string, number> = {};
      for (const [n, pid] of running.pids) idleRss[n] = rssMiB(pid);
      for (const p of peersHere) idleRss[p.name] = rssMiB(p.child.pid);
      const cells: Cell[] = [];
      const foreignLedgers = new Set<number>();
      let group = 0;
      for (const stream of [false, true]) {
        for (const conc of CONCURRENCIES) {
          if (name === 'split') {
            const own = running.pids.get('ledger');
            for (const pid of pidsMatching(LEDGER_CMD)) if (pid !== own) foreignLedgers.add(pid);
          }
          const gate = await waitQuiet();
          // Rotated from one group of cells to the next, so drift favours no target.
          const order: TargetName[] = PROFILE ? ['weir'] : targets.map((_, i) => targets[(i + group) % targets.length]);
          group++;
          for (const [i, target] of order.entries()) {
            if (interrupted) break;
            const cell = await runCell(running, { url: mock.url, pid: mock.child.pid }, peersHere, target, stream, conc);
            if (i === 0) cell.gate = gate;
            cells.push(cell);
            if (target === 'weir') okThroughWeir += cell.load.okTotal;
            const gw = name === 'split' ? 'gateway-0' : 'all-in-one';
            const peerGw = target !== 'direct' && target !== 'weir' ? ` gw=${us(cell.cpuPerRequestUs[target])} µs/req` : '';
            process.stdout.write(
              `   ${target.padEnd(11)} ${stream ? 'stream    ' : 'non-stream'} c=${String(conc).padEnd(2)} n=${String(cell.load.sampled).padStart(6)} p50=${ms(cell.load.latency.p50)} p99=${ms(cell.load.latency.p99)} ms${cell.load.ttft ? ` ttft50=${ms(cell.load.ttft.p50)}` : ''} ${cell.load.rps.toFixed(0)} req/s err=${cell.load.errors}${target === 'weir' ? ` gw=${us(cell.cpuPerRequestUs[gw])} µs/req all=${us(cell.cpuPerRequestUs['weir-total'])} µs/req (sys ${((cell.systemCpuSeconds[gw] / cell.cpuSeconds[gw]) * 100).toFixed(0)}%)` : peerGw} cpu busy=${cell.machineCpuBusy.map((b) => `${(b * 100).toFixed(0)}%`).join('/')} others=${cell.otherLoadCores.toFixed(2)} cores${cell.gate ? ` (gate: ${cell.gate.quiet ? 'quiet' : 'not quiet'} after ${(cell.gate.waitedMs / 1000).toFixed(1)} s)` : ''}\n`,
            );
            if (cell.load.firstError) process.stdout.write(`     first error: ${cell.load.firstError}\n`);
          }
        }
      }
      // Ledger: every successful request through Weir leaves exactly one usage row.
      if (name === 'split') {
        const until = Date.now() + 30_000;
        while (Date.now() < until && ((await running.ledgerRows()) ?? 0) < okThroughWeir) await sleep(250);
        const own = running.pids.get('ledger');
        for (const pid of pidsMatching(LEDGER_CMD)) if (pid !== own) foreignLedgers.add(pid);
        if (foreignLedgers.size > 0 && !running.infra.has('nats')) {
          running.notes.push(
            `another split topology's ledger (pid ${[...foreignLedgers].join(', ')}) ran during this run on the same NATS and shares the JetStream durable consumer 'weir-ledger': usage records of either topology may have been written to the other's database`,
          );
        }
      }
      for (const [n, p] of profilers) {
        heaps.push({ composition: name, process: n, beforeBytes: heapBefore.get(n) ?? Number.NaN, afterBytes: await p.heapUsedAfterGc(), requestsThroughWeir: okThroughWeir - okBeforeCells });
      }
      for (const p of profilers.values()) p.close();
      profilers.clear();
      const cpus: Record<string, string> = {};
      for (const [n, pid] of running.pids) cpus[n] = cpusAllowed(pid);
      const stopped = await running.stop();
      current = undefined;
      const rows = stopped.ledgerRowsAfterStop;
      results.push({
        name,
        url: running.url,
        gatewayProcess: name === 'split' ? 'gateway-0' : 'all-in-one',
        pids: Object.fromEntries(running.pids),
        infraPids: Object.fromEntries(running.infra),
        cpusAllowed: cpus,
        startupSeconds: running.startupSeconds,
        rssAtStartMiB: rssAtStart,
        idleRssMiB: idleRss,
        peers: peersHere.map((p) => p.name),
        notes: running.notes,
        cells,
        ledger: { okRequestsThroughWeir: okThroughWeir, rows, matches: rows === undefined ? undefined : rows === okThroughWeir },
        stoppedCleanly: stopped.clean,
      });
      process.stdout.write(`   ledger: ${rows ?? '?'} rows for ${okThroughWeir} OK requests; stopped ${stopped.clean ? 'cleanly' : 'with a non-zero exit'}\n`);
    }
  } finally {
    if (current) await current.stop().catch(() => undefined);
    for (const p of peers) await stopChild(p.child, 10_000);
    await stopChild(mock.child);
  }
  meta.loadavgEnd = os.loadavg();
  meta.quietGate = { thresholdCores: QUIET_CORES, waitedSeconds: quietWaitedMs / 1000 };
  meta.finishedAt = new Date().toISOString();

  const md = markdown(meta, results);
  process.stdout.write(`\n${md}\n`);
  const resultsDir = path.join(REPO_ROOT, 'tools/bench/results');
  mkdirSync(resultsDir, { recursive: true });
  if (PROFILE) {
    const out: string[] = [
      md,
      '# JS heap retained by the requests of the profiled windows',
      '',
      'Heap in use after a full GC (inspector `HeapProfiler.collectGarbage`), before the first and after the last window.',
      '',
      '| composition | process | before MiB | after MiB | requests | retained bytes/request |',
      '|---|---|---:|---:|---:|---:|',
      ...heaps.map(
        (h) =>
          `| ${h.composition} | ${h.process} | ${(h.beforeBytes / 2 ** 20).toFixed(1)} | ${(h.afterBytes / 2 ** 20).toFixed(1)} | ${h.requestsThroughWeir} | ${((h.afterBytes - h.beforeBytes) / Math.max(1, h.requestsThroughWeir)).toFixed(0)} |`,
      ),
      '',
      '# CPU profiles of the measurement windows',
      '',
    ];
    const rawDir = path.join(workRoot, 'profiles');
    mkdirSync(rawDir, { recursive: true });
    for (const p of profiles) {
      writeFileSync(path.join(rawDir, `${p.composition}.${p.process}.${p.cell.replace(/[ =]/g, '-')}.cpuprofile`), JSON.stringify(p.profile));
      const summary = summarizeProfile(p.profile as Parameters<typeof summarizeProfile>[0], 30);
      if (summary.totalMs < 100) continue; // a service that did next to nothing
      out.push(formatProfileSummary(`${p.composition}: ${p.process}, ${p.cell}`, summary));
    }
    const file = value('--out') ?? path.join(resultsDir, `${date}-profile.md`);
    writeFileSync(file, out.join('\n'));
    for (const d of ['aio-data', 'aio-pg-data', 'split', 'nats']) rmSync(path.join(workRoot, d), { recursive: true, force: true });
    process.stdout.write(`profile summary written to ${path.relative(REPO_ROOT, file)}; raw profiles (open in Chrome DevTools) in ${rawDir}\n`);
    return;
  }
  const file = value('--out') ?? path.join(resultsDir, `${date}${QUICK ? '-quick' : ''}.json`);
  writeFileSync(file, JSON.stringify({ meta, results }, null, 2) + '\n');
  writeFileSync(file.replace(/\.json$/, '.md'), md);
  process.stdout.write(`raw results written to ${path.relative(REPO_ROOT, file)}\n`);
  rmSync(workRoot, { recursive: true, force: true });
}

/**
 * How fast this machine is at what a proxy does most: a syscall (fstat, µs per call) and a
 * minimal JS loop (ns per iteration), on the load generator's CPU. For comparing machines.
 */
function calibrate(): { syscallUs: number; jsLoopNsPerIteration: number } {
  // CPU time, not wall time: the machine is shared, so waiting for the CPU must not count.
  const cpu = (from: NodeJS.CpuUsage) => {
    const d = process.cpuUsage(from);
    return (d.user + d.system) * 1000; // ns
  };
  const fd = openSync(__filename, 'r');
  let c = process.cpuUsage();
  for (let i = 0; i < 50_000; i++) fstatSync(fd);
  const syscallUs = cpu(c) / 50_000 / 1000;
  closeSync(fd);
  c = process.cpuUsage();
  let x = 0;
  for (let i = 0; i < 100_000_000; i++) x = (x + i * 31) | 0;
  const jsLoopNsPerIteration = cpu(c) / 100_000_000 + (x === 0.5 ? 1 : 0);
  return { syscallUs, jsLoopNsPerIteration };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`weir bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);

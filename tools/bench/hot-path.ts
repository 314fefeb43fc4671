/**
 * The hot-path harness (issue 13, "Speed and memory"): the CPU Weir's request path costs per
 * request without its database, beside a bare `node:http` pass-through and a direct call, in
 * one run. A profiling tool for the request path, not the peer benchmark (`run.ts`,
 * `../shared/bench`).
 *
 *   node --import tsx tools/bench/hot-path.ts [--seconds 3] [--warmup-seconds 1]
 *        [--concurrency 1,16,64] [--modes non-stream,stream] [--targets direct,bare,weir]
 *        [--tokens 50] [--body-bytes N] [--admission leased|memory|stub] [--cache off|hit|store] [--repeat N] [--node-args "FLAGS"] [--profile] [--alloc] [--tsx]
 *        [--out FILE.md]
 *
 * - The mock upstream (`mock-upstream.ts`, `--tokens` tokens of `"tok "`, default 50 as in
 *   the speed probe, zero delay) and the load generator (`load.ts`: a closed loop of `c`
 *   keep-alive workers, every response read and checked) run in this process, pinned to CPU 0.
 * - Each server (`hot-path-server.ts`, bundled with esbuild and run as JavaScript; `--tsx` runs
 *   it through tsx instead: `weir` = gateway + pipeline + router + scheduler +
 *   relay + OpenAI-compatible adapter + metrics + access log, with in-memory admission and a
 *   discarding usage repository; `bare` = a pass-through) is a child process pinned to CPU 1.
 * - Per cell (mode × concurrency × target): a warm-up, then a measured window. CPU per request
 *   = the child's `process.cpuUsage()` over the window (read at its start and after its
 *   in-flight tail drained) ÷ the requests completed after the window opened. Requests/s =
 *   completions inside the window ÷ its length. Latency: p50/p99 of the requests that both
 *   started and ended inside the window; Δ = through the server − direct.
 * - `--profile`: a V8 CPU profile of the `weir` child over each measured window (inspector,
 *   500 µs sampling), summarised by function and by package into the markdown output; the
 *   raw `.cpuprofile` files go to a temporary directory named there. The profiler costs CPU
 *   itself (≈ 5 %): read CPU per request from a run without `--profile`.
 *
 * Prints a markdown table (and writes it, with the profiles' summaries, to `--out`, default
 * `tools/bench/results/<date>-hot-path.md`).
 */
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { formatProfileSummary, inclusiveShares, summarizeProfile } from './cpuprofile-summary';
import { HOT_PATH_ALIAS, HOT_PATH_KEY } from './hot-path-server';
import { type LoadResult, type LoadTarget, runLoad } from './load';
import { startMockUpstream } from './mock-upstream';
import { pin, tasksetPath } from './proc';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const SECONDS = Number(value('--seconds') ?? 3);
const WARMUP_SECONDS = Number(value('--warmup-seconds') ?? 1);
const CONCURRENCIES = (value('--concurrency') ?? '1,16,64').split(',').map(Number);
const MODES = (value('--modes') ?? 'non-stream,stream').split(',') as ('non-stream' | 'stream')[];
const TARGETS = (value('--targets') ?? 'direct,bare,weir').split(',') as Target[];
const TOKENS = Number(value('--tokens') ?? 50);
/** `--body-bytes N`: pad each request body to about N bytes with a system prompt (default: the ~130-byte body). */
const BODY_BYTES = value('--body-bytes') !== undefined ? Number(value('--body-bytes')) : undefined;
const PROFILE = argv.includes('--profile');
const TSX = argv.includes('--tsx');
/** `--alloc`: a sampling heap profile of the weir server over each measured window (allocation sites by bytes). */
const ALLOC = argv.includes('--alloc');
/** Windows per cell; the table keeps the one with the least CPU per request (direct: the lowest p50). */
const REPEAT = Math.max(1, Number(value('--repeat') ?? 1));
/** Extra Node flags for the weir server (e.g. `--max-semi-space-size=32`), space-separated. */
const NODE_ARGS = (value('--node-args') ?? '').split(' ').filter(Boolean);
/** `leased` (default): budget leases on the in-memory lease store; `memory`: ADR 0001's per-request transactions on the in-memory store; `stub`: admits at once (the path without admission's cost). */
const ADMISSION = value('--admission') ?? 'leased';
/**
 * The response cache (docs/caching.md): `off` (default: the tenant has no policy); `hit`: the
 * tenant's exact cache is on and every request repeats one body, so all but the first are exact
 * hits; `store`: on, but every request sends `Cache-Control: no-cache` (a miss that runs live
 * and stores its answer).
 */
const CACHE = value('--cache') ?? 'off';
const STAMP = new Date().toISOString().slice(0, 16).replace(/[:T]/g, '-');
const OUT = value('--out') ?? path.join(__dirname, 'results', `${STAMP}-hot-path.md`);
const LOAD_CPU = 0;
const SERVER_CPU = 1;
const MAX_TOKENS = 64;

type Target = 'direct' | 'bare' | 'weir';

interface Server {
  child: ChildProcess;
  url: string;
  request<T>(msg: object, reply: string): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Bundles the server with esbuild (Weir's libraries inlined, npm packages left to `require`), so
 * it runs as compiled JavaScript — as the services will (issue 13, item 6) — with real line
 * numbers in profiles. `--tsx` runs the TypeScript through tsx instead.
 */
async function buildServer(): Promise<string> {
  // (The bundle keeps a `// libs/<lib>/src/<file>.ts` comment at the start of each module:
  // `attributeBundle` maps profile frames back to them.)
  const outfile = path.join(mkdtempSync(path.join(os.tmpdir(), 'weir-hot-path-')), 'hot-path-server.js');
  const esbuild = await import('esbuild');
  await esbuild.build({
    entryPoints: [path.join(__dirname, 'hot-path-server.ts')],
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    outfile,
    logLevel: 'warning',
    plugins: [
      {
        name: 'npm-external',
        setup(build) {
          // Bare specifiers other than Weir's own libraries stay `require`s of node_modules.
          build.onResolve({ filter: /^[^./]/ }, (args) => (args.path.startsWith('@weir/') ? undefined : { path: require.resolve(args.path, { paths: [args.resolveDir] }), external: true }));
        },
      },
    ],
  });
  return outfile;
}

async function startServer(kind: 'weir' | 'bare', upstream: string, script: string | undefined): Promise<Server> {
  const taskset = tasksetPath();
  const child = fork(script ?? path.join(__dirname, 'hot-path-server.ts'), [kind, upstream, ADMISSION, CACHE], {
    execArgv: [...(script ? ['--expose-gc'] : ['--import', 'tsx', '--expose-gc']), ...(kind === 'weir' ? NODE_ARGS : [])],
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    env: { ...process.env, NODE_OPTIONS: '', TSX_TSCONFIG_PATH: path.join(__dirname, '..', '..', 'tsconfig.json') },
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`${kind} server exited with ${code}`)));
    child.on('message', (m: { type: string; url?: string }) => {
      if (m.type === 'ready') resolve(m.url as string);
    });
  });
  if (taskset && child.pid) pin(child.pid, SERVER_CPU);
  const request = <T>(msg: object, reply: string) =>
    new Promise<T>((resolve) => {
      const on = (m: { type: string }) => {
        if (m.type !== reply) return;
        child.off('message', on);
        resolve(m as T);
      };
      child.on('message', on);
      child.send(msg);
    });
  return {
    child,
    url,
    request,
    stop: () =>
      new Promise<void>((resolve) => {
        child.removeAllListeners('exit');
        child.once('exit', () => resolve());
        child.send({ cmd: 'stop' });
        setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
      }),
  };
}

/**
 * Rewrites a profile of the bundled server so frames name their source module again
 * (`<repo>/libs/gateway/src/app.ts`, line within the module, approximately), from the
 * `// <path>` comment esbuild puts at the start of each module in a bundle.
 */
function attributeBundle(profileFile: string, bundle: string): void {
  const starts: { line: number; file: string }[] = [];
  readFileSync(bundle, 'utf8')
    .split('\n')
    .forEach((text, i) => {
      const m = /^\/\/ ((?:libs|apps|tools)\/\S+\.ts)$/.exec(text);
      if (m) starts.push({ line: i, file: m[1] });
    });
  const repo = path.resolve(__dirname, '..', '..');
  const profile = JSON.parse(readFileSync(profileFile, 'utf8')) as { nodes: { callFrame: { url: string; lineNumber: number } }[] };
  const bundleUrl = `file://${bundle}`;
  for (const node of profile.nodes) {
    const frame = node.callFrame;
    if (frame.url !== bundleUrl && frame.url !== bundle) continue;
    let lo = 0;
    let hi = starts.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid].line <= frame.lineNumber) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (found < 0) continue;
    frame.url = `file://${repo}/${starts[found].file}`;
    frame.lineNumber -= starts[found].line;
  }
  writeFileSync(profileFile, JSON.stringify(profile));
}

interface HeapProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapProfileNode[];
}
interface HeapProfile {
  head: HeapProfileNode;
}

/** The allocation sites of a sampling heap profile by bytes (self), with bytes per request. */
function formatAllocations(title: string, profile: HeapProfile, bundle: string | undefined, requests: number): string {
  const starts: { line: number; file: string }[] = [];
  if (bundle) {
    readFileSync(bundle, 'utf8')
      .split('\n')
      .forEach((text, i) => {
        const m = /^\/\/ ((?:libs|apps|tools)\/\S+\.ts)$/.exec(text);
        if (m) starts.push({ line: i, file: m[1] });
      });
  }
  const where = (frame: HeapProfileNode['callFrame']) => {
    let url = frame.url.replace(/^file:\/\//, '');
    let line = frame.lineNumber;
    if (bundle && url === bundle) {
      const s = [...starts].reverse().find((x) => x.line <= line);
      if (s) {
        url = s.file;
        line -= s.line;
      }
    }
    const nm = url.lastIndexOf('node_modules/');
    if (nm >= 0) url = url.slice(nm + 'node_modules/'.length);
    return `${frame.functionName || '(anonymous)'} ${url}:${line + 1}`;
  };
  const bySite = new Map<string, number>();
  let total = 0;
  const walk = (n: HeapProfileNode) => {
    if (n.selfSize > 0) {
      const k = where(n.callFrame);
      bySite.set(k, (bySite.get(k) ?? 0) + n.selfSize);
      total += n.selfSize;
    }
    for (const c of n.children) walk(c);
  };
  walk(profile.head);
  const rows = [...bySite.entries()].sort((a, b) => b[1] - a[1]).slice(0, 40);
  const lines = [`## ${title}`, '', `sampled allocations: ${(total / 1048576).toFixed(1)} MiB${requests > 0 ? `, ≈ ${Math.round(total / requests)} bytes per request` : ''}`, '', '| share | bytes/request | site |', '|---:|---:|---|'];
  for (const [site, bytes] of rows) lines.push(`| ${((bytes / total) * 100).toFixed(1)}% | ${requests > 0 ? Math.round(bytes / requests) : '—'} | \`${site}\` |`);
  lines.push('');
  return lines.join('\n');
}

interface Cell {
  target: Target;
  mode: 'non-stream' | 'stream';
  c: number;
  load: LoadResult;
  cpuUsPerRequest?: number;
  profile?: string;
}

const cpuOf = async (s: Server) => {
  const r = await s.request<{ user: number; system: number }>({ cmd: 'cpu' }, 'cpu');
  return r.user + r.system;
};

async function main(): Promise<void> {
  const pinned = tasksetPath() !== undefined && os.cpus().length > 1 && pin(process.pid, LOAD_CPU);
  const mock = await startMockUpstream({ tokens: TOKENS });
  const servers = new Map<Target, Server>();
  const script = TSX ? undefined : await buildServer();
  for (const t of TARGETS) if (t !== 'direct') servers.set(t, await startServer(t, mock.url, script));
  // Raw profiles are large: they go to a temporary directory (named in the output), not the repository.
  const profileDir = path.join(os.tmpdir(), `weir-hot-path-profiles-${STAMP}`);
  if (PROFILE || ALLOC) mkdirSync(profileDir, { recursive: true });
  const allocs: { cell: string; file: string; requests: number }[] = [];
  const cells: Cell[] = [];
  const originOf = (t: Target) => (t === 'direct' ? mock.url : (servers.get(t) as Server).url);
  const targetOf = (t: Target): LoadTarget => ({
    origin: originOf(t),
    path: '/v1/chat/completions',
    headers: t === 'weir' ? { authorization: `Bearer ${HOT_PATH_KEY}`, ...(CACHE === 'store' ? { 'cache-control': 'no-cache' } : {}) } : {},
    model: HOT_PATH_ALIAS,
  });
  // JIT warm-up of every server in both modes, not recorded.
  for (const t of TARGETS) {
    for (const mode of MODES) {
      await runLoad(targetOf(t), { stream: mode === 'stream', concurrency: 16, warmupMs: 0, measureMs: 1_500, maxRequests: 1e6, maxTokens: MAX_TOKENS, expectCompletionTokens: TOKENS, ...(BODY_BYTES !== undefined ? { bodyBytes: BODY_BYTES } : {}) });
    }
  }
  for (const mode of MODES) {
    for (const c of CONCURRENCIES) {
      for (const t of TARGETS) {
        let best: Cell | undefined;
        for (let round = 0; round < REPEAT; round++) {
          const server = servers.get(t);
          let cpuStart = 0;
          let cpuEnd = 0;
          const profileFile = PROFILE && t === 'weir' && round === 0 ? path.join(profileDir, `${mode}-c${c}.cpuprofile`) : undefined;
          const allocFile = ALLOC && t === 'weir' && round === 0 ? path.join(profileDir, `${mode}-c${c}.heapprofile`) : undefined;
          const load = await runLoad(targetOf(t), {
            stream: mode === 'stream',
            concurrency: c,
            warmupMs: round === 0 ? WARMUP_SECONDS * 1000 : 300,
            measureMs: SECONDS * 1000,
            maxRequests: 2e6,
            maxTokens: MAX_TOKENS,
            expectCompletionTokens: TOKENS,
            ...(BODY_BYTES !== undefined ? { bodyBytes: BODY_BYTES } : {}),
            onMeasureStart: async () => {
              if (!server) return;
              if (profileFile) await server.request({ cmd: 'profile-start' }, 'profiling');
              if (allocFile) await server.request({ cmd: 'alloc-start' }, 'allocating');
              cpuStart = await cpuOf(server);
            },
            onMeasureEnd: async () => {
              if (!server) return;
              // Let batched work (the usage sink's flush timer) land inside the window.
              await new Promise((r) => setTimeout(r, 100));
              cpuEnd = await cpuOf(server);
              if (allocFile) {
                await server.request({ cmd: 'alloc-stop', file: allocFile }, 'allocated');
                allocs.push({ cell: `${mode}, c=${c}`, file: allocFile, requests: 0 });
              }
              if (profileFile) {
                await server.request({ cmd: 'profile-stop', file: profileFile }, 'profiled');
                if (script) attributeBundle(profileFile, script);
              }
            },
          });
          const cell: Cell = { target: t, mode, c, load, ...(server ? { cpuUsPerRequest: (cpuEnd - cpuStart) / Math.max(1, load.completedInWindow) } : {}), ...(profileFile ? { profile: profileFile } : {}) };
          // Other users of a shared machine only ever add CPU time (cache and hypervisor
          // contention): the least of the rounds is the best estimate of the path's own cost.
          const better = (a: Cell, b: Cell) => (a.cpuUsPerRequest !== undefined && b.cpuUsPerRequest !== undefined ? a.cpuUsPerRequest < b.cpuUsPerRequest : a.load.latency.p50 < b.load.latency.p50);
          if (!best || better(cell, best)) best = { ...cell, ...(best?.profile ? { profile: best.profile } : {}) };
          process.stderr.write(
            `${mode.padEnd(10)} c=${String(c).padEnd(3)} ${t.padEnd(6)} ${load.rps.toFixed(0).padStart(6)} req/s  ${cell.cpuUsPerRequest !== undefined ? `${cell.cpuUsPerRequest.toFixed(0).padStart(6)} µs CPU/req` : '                 '}  p50 ${load.latency.p50.toFixed(3)} ms  errors ${load.errors}${load.firstError ? ` (${load.firstError.slice(0, 120)})` : ''}\n`,
          );
        }
        cells.push(best as Cell);
      }
    }
  }
  const heap = servers.has('weir') ? await (servers.get('weir') as Server).request<{ used: number; rss: number }>({ cmd: 'heap' }, 'heap') : undefined;
  for (const s of servers.values()) await s.stop();
  await mock.close();

  const rev = (() => {
    try {
      return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    } catch {
      return 'unknown';
    }
  })();
  const lines: string[] = [
    `# Hot path: ${new Date().toISOString()} (commit ${rev})`,
    '',
    `${NODE_ARGS.length > 0 ? `Weir's Node flags: \`${NODE_ARGS.join(' ')}\`. ` : ''}${REPEAT > 1 ? `Each cell: the least CPU per request of ${REPEAT} windows (direct: the lowest p50). ` : ''}Response cache: ${CACHE}. Admission: ${ADMISSION === 'stub' ? 'a stub that admits at once (the path without admission)' : ADMISSION === 'memory' ? "ADR 0001's transactions on the in-memory store" : 'budget leases on the in-memory lease store (ADR 0002)'}. ${TOKENS}-token answers${BODY_BYTES !== undefined ? ` to ~${BODY_BYTES}-byte request bodies` : ''}, ${SECONDS} s windows after ${WARMUP_SECONDS} s of warm-up; load generator and mock on CPU 0, each server on CPU 1${pinned ? '' : ' (NOT pinned: no taskset)'}. ` +
      'CPU per request = the server process\'s `process.cpuUsage()` over the window ÷ requests completed. Δp50 = p50 through the server − p50 direct.',
    '',
    '| mode | c | target | req/s | CPU µs/req | × bare | p50 ms | Δp50 ms | p99 ms | TTFT p50 ms | ΔTTFT p50 ms | errors |',
    '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const cell of cells) {
    const direct = cells.find((x) => x.mode === cell.mode && x.c === cell.c && x.target === 'direct');
    const bare = cells.find((x) => x.mode === cell.mode && x.c === cell.c && x.target === 'bare');
    const ratio = cell.cpuUsPerRequest !== undefined && bare?.cpuUsPerRequest ? (cell.cpuUsPerRequest / bare.cpuUsPerRequest).toFixed(1) : '—';
    const dp50 = direct && cell.target !== 'direct' ? (cell.load.latency.p50 - direct.load.latency.p50).toFixed(3) : '—';
    const ttft = cell.load.ttft ? cell.load.ttft.p50.toFixed(3) : '—';
    const dttft = cell.load.ttft && direct?.load.ttft && cell.target !== 'direct' ? (cell.load.ttft.p50 - direct.load.ttft.p50).toFixed(3) : '—';
    lines.push(
      `| ${cell.mode} | ${cell.c} | ${cell.target} | ${cell.load.rps.toFixed(0)} | ${cell.cpuUsPerRequest !== undefined ? cell.cpuUsPerRequest.toFixed(0) : '—'} | ${ratio} | ${cell.load.latency.p50.toFixed(3)} | ${dp50} | ${cell.load.latency.p99.toFixed(3)} | ${ttft} | ${dttft} | ${cell.load.errors} |`,
    );
  }
  if (heap) lines.push('', `weir server after the run: heap used after a full GC ${(heap.used / 1048576).toFixed(1)} MiB, RSS ${(heap.rss / 1048576).toFixed(0)} MiB.`);
  const table = lines.join('\n');
  process.stdout.write(`${table}\n`);
  const out = [table, ''];
  for (const cell of cells) {
    if (!cell.profile) continue;
    const profile = JSON.parse(readFileSync(cell.profile, 'utf8'));
    out.push(formatProfileSummary(`weir, ${cell.mode}, c=${cell.c} (${cell.profile})`, summarizeProfile(profile, 40)));
    const shares = inclusiveShares(profile, [
      /\s(express|router|body-parser|raw-body|type-is|content-type)\//,
      /libs\/gateway/,
      /libs\/admission/,
      /libs\/core/,
      /libs\/streaming/,
      /libs\/engines/,
      /libs\/scheduling/,
      /libs\/routing/,
      /libs\/telemetry|@opentelemetry/,
      /pino|sonic-boom/,
      /undici/,
      /zod/,
      /\(garbage collector\)/,
    ]);
    out.push('### inclusive shares by concern', '', '| share | ms | frames matching |', '|---:|---:|---|', ...shares.map((s) => `| ${(s.share * 100).toFixed(1)}% | ${s.ms.toFixed(0)} | \`${s.pattern}\` |`), '');
  }
  for (const a of allocs) {
    const cell = cells.find((x) => x.target === 'weir' && `${x.mode}, c=${x.c}` === a.cell);
    out.push(formatAllocations(`weir allocations, ${a.cell} (${a.file})`, JSON.parse(readFileSync(a.file, 'utf8')) as HeapProfile, script, cell?.load.completedInWindow ?? 0));
  }
  mkdirSync(path.dirname(OUT), { recursive: true });
  writeFileSync(OUT, out.join('\n'));
  process.stderr.write(`written ${OUT}\n`);
}

void main().catch((err: unknown) => {
  process.stderr.write(`hot-path failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});

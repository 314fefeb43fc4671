/**
 * What issue 15's request-path stages cost (a benchmark, not a timed test): the all-in-one as
 * `npm start` runs it (compiled bundle, PGlite, auth, budget, tokens per minute, scheduling,
 * metering, ledger) on the peer benchmark's mock upstream, one tenant, restarted per stage
 * with that stage's tenant policy in its configuration file:
 *
 * | stage | tenant policy | prompts |
 * |---|---|---|
 * | `off` | none (issue 13's figures) | one fixed prompt |
 * | `cache-miss` | exact cache on | a new prompt every request (key made, lookup, store) |
 * | `exact-hit` | exact cache on | one fixed prompt (every request after the first a hit) |
 * | `semantic-hit` | exact + semantic cache on (an embedding revision on the mock's `/v1/embeddings`) | a new spacing of one prompt every request (doubled gaps, an end mark): an exact miss, then a semantic hit |
 * | `moderation` | input and output moderation, built-in rules (a phrase list and a pattern) | one fixed prompt |
 *
 * Cells per stage: non-stream and stream at c = 1 and c = 16, closed loop over one undici Pool;
 * per cell req/s, the all-in-one's CPU µs per request (/proc, all threads), p50 / p99 latency
 * and, streaming, p50 TTFT (first non-empty content chunk). The all-in-one is pinned to CPU 1,
 * the mock and this driver to CPU 0, as in `run.ts`. The mock answers 50 tokens.
 *
 *   node --import tsx tools/bench/stages.ts [--stages off,cache-miss,exact-hit,semantic-hit,moderation] [--measure-ms 3000] [--omit-temperature] [--out FILE.md]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { freePort, REPO_ROOT } from '@weir/launcher';
import { PROBE_KEY, startAllInOneProcess } from './all-in-one-process';
import { cpuSeconds, rssMiB, tasksetPath } from './proc';

type Stage = 'off' | 'cache-miss' | 'exact-hit' | 'semantic-hit' | 'moderation';
const ALL_STAGES: Stage[] = ['off', 'cache-miss', 'exact-hit', 'semantic-hit', 'moderation'];

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const STAGES = (value('--stages')?.split(',') ?? ALL_STAGES) as Stage[];
for (const s of STAGES) if (!ALL_STAGES.includes(s)) throw new Error(`--stages takes ${ALL_STAGES.join(', ')}`);
const WARMUP_MS = Number(value('--warmup-ms') ?? 1500);
const MEASURE_MS = Number(value('--measure-ms') ?? 3000);
const TOKENS = 50;
/** `--omit-temperature`: send no `temperature` (the engine's default applies), as most clients do. */
const OMIT_TEMPERATURE = argv.includes('--omit-temperature');
const CELLS: { stream: boolean; concurrency: number }[] = [
  { stream: false, concurrency: 1 },
  { stream: false, concurrency: 16 },
  { stream: true, concurrency: 1 },
  { stream: true, concurrency: 16 },
];

/** The tenant policy each stage adds to the probe tenant (YAML, indented under the tenant). */
function policyOf(stage: Stage): string {
  switch (stage) {
    case 'off':
      return '';
    case 'cache-miss':
    case 'exact-hit':
      return `
    cache:
      exact: { enabled: true, ttl_ms: 600000 }
      deterministic_only: false`;
    case 'semantic-hit':
      return `
    cache:
      exact: { enabled: true, ttl_ms: 600000 }
      semantic: { enabled: true, ttl_ms: 600000, threshold: 0.97, embedding_revision: embed@1 }
      deterministic_only: false`;
    case 'moderation':
      return `
    moderation:
      input: { engine: rules }
      output: { engine: rules, window_chars: 400, overlap_chars: 64 }
      rules:
        lists: [{ category: violence, phrases: [red dragon, blood feud] }]
        patterns: [{ category: custom, pattern: '(?i)project\\s+nightjar' }]`;
  }
}

function configOf(mockUrl: string, stage: Stage): string {
  return `revisions:
  - id: mock@1
    model: mock
    engine: { kind: openai-compatible, base_url: "${mockUrl}/v1", upstream_model: mock }
    context_window: 8192
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: 1.0, output_per_mtok: 4.0 }
  - id: embed@1
    model: mock-embed
    kind: embedding
    embedding: { dimensions: 64 }
    engine: { kind: openai-compatible, base_url: "${mockUrl}/v1", upstream_model: mock-embed }
    context_window: 8192
    max_output_tokens: 1
    default_output_tokens: 1
    pricing: { input_per_mtok: 0.02, output_per_mtok: 0 }
aliases:
  - { name: mock, revision: mock@1 }
  - { name: embed, revision: embed@1 }
tenants:
  - id: probe
    name: Probe
    apps: [{ id: probe-app, name: Probe app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 1024, tokens_per_minute: 100000000000, monthly_budget_usd: 1000000000 }${policyOf(stage)}
`;
}

const BASE_PROMPT = 'benchmark prompt please reply with a few words about the weather';

/** The prompt of request `i` of a stage. */
function promptOf(stage: Stage, i: number): string {
  if (stage === 'cache-miss') return `${BASE_PROMPT} (request ${i})`;
  if (stage === 'semantic-hit') {
    // A new spelling every request that changes no word: the gap after word k doubled when bit
    // k of i is set (the exact key sees a new prompt; the semantic tier's normalised text, its
    // embedding and its guard's signature are the same), then one of five end marks.
    const words = BASE_PROMPT.split(' ');
    const spaced = words.map((w, k) => (k < words.length - 1 && (i >> k) & 1 ? `${w} ` : w)).join(' ');
    return spaced + ['.', '!', '?', ' .', ' !'][Math.floor(i / (1 << (words.length - 1))) % 5];
  }
  return BASE_PROMPT;
}

interface CellResult {
  stage: Stage;
  stream: boolean;
  concurrency: number;
  requests: number;
  rps: number;
  cpuUsPerRequest: number;
  p50: number;
  p99: number;
  ttftP50: number;
  errors: number;
  cacheHeaders: Record<string, number>;
  rssMiB: number;
}

const CONTENT = /"content":"[^"]/;

async function runCell(url: string, pid: number, stage: Stage, stream: boolean, concurrency: number, counter: { i: number }): Promise<CellResult> {
  const pool = new Pool(url, { connections: concurrency, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${PROBE_KEY}` };
  let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
  const latencies: number[] = [];
  const ttfts: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const cacheHeaders: Record<string, number> = {};
  const once = async () => {
    const body = JSON.stringify({ model: 'mock', messages: [{ role: 'user', content: promptOf(stage, counter.i++) }], max_tokens: 64, ...(OMIT_TEMPERATURE ? {} : { temperature: 0 }), ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });
    const start = performance.now();
    let ttft = -1;
    try {
      const res = await pool.request({ path: '/v1/chat/completions', method: 'POST', headers, body });
      let text = '';
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        const s = chunk.toString('latin1');
        if (stream && ttft < 0 && CONTENT.test(s)) ttft = performance.now() - start;
        text = (text + s).slice(-400);
      }
      const end = performance.now();
      const ok = res.statusCode === 200 && text.includes(`"completion_tokens":${TOKENS}`);
      if (phase === 'measure') {
        if (!ok) {
          errors++;
          firstError ??= `HTTP ${res.statusCode}: ${text.slice(0, 200)}`;
        } else {
          latencies.push(end - start);
          if (ttft >= 0) ttfts.push(ttft);
        }
        const tier = `${res.headers['x-weir-cache'] ?? '-'}${res.headers['x-weir-cache-tier'] ? `/${res.headers['x-weir-cache-tier']}` : ''}`;
        cacheHeaders[tier] = (cacheHeaders[tier] ?? 0) + 1;
      }
    } catch (err) {
      if (phase === 'measure') {
        errors++;
        firstError ??= String(err);
      }
    }
  };
  const workers = Array.from({ length: concurrency }, async () => {
    while (phase !== 'stop') await once();
  });
  await sleep(WARMUP_MS);
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  phase = 'measure';
  await sleep(MEASURE_MS);
  phase = 'stop';
  await Promise.all(workers);
  const wall = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(pid) - cpu0;
  await pool.close();
  if (firstError) process.stderr.write(`${stage} ${stream ? 'stream' : 'non-stream'} c=${concurrency}: first error ${firstError}\n`);
  const n = latencies.length + errors;
  return {
    stage,
    stream,
    concurrency,
    requests: n,
    rps: n / wall,
    cpuUsPerRequest: (cpu / Math.max(1, n)) * 1e6,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    ttftP50: percentile(ttfts, 0.5),
    errors,
    cacheHeaders,
    rssMiB: rssMiB(pid),
  };
}

function percentile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function startMock(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const taskset = tasksetPath();
  const args = ['--import', 'tsx', path.join(REPO_ROOT, 'tools/bench/mock-upstream.ts'), '--port', String(port), '--tokens', String(TOKENS)];
  const child = taskset ? spawn(taskset, ['-c', '0', process.execPath, ...args], { stdio: 'ignore' }) : spawn(process.execPath, args, { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { url, child };
    } catch {
      // not yet
    }
    await sleep(100);
  }
  throw new Error('mock upstream did not start');
}

async function main(): Promise<void> {
  const taskset = tasksetPath();
  if (taskset) spawn(taskset, ['-p', '-c', '0', String(process.pid)], { stdio: 'ignore' });
  const mock = await startMock();
  const results: CellResult[] = [];
  try {
    for (const stage of STAGES) {
      const dataDir = mkdtempSync(path.join(os.tmpdir(), `weir-stages-${stage}-`));
      const weir = await startAllInOneProcess({ runner: 'bundle', dataDir, mockUrl: mock.url, cpu: 1, configText: configOf(mock.url, stage), ...(value('--node-args') ? { nodeArgs: (value('--node-args') as string).split(' ') } : {}) });
      try {
        const counter = { i: 0 };
        for (const c of CELLS) {
          const r = await runCell(weir.url, weir.pid, stage, c.stream, c.concurrency, counter);
          results.push(r);
          process.stdout.write(
            `${stage.padEnd(13)} ${c.stream ? 'stream    ' : 'non-stream'} c=${String(c.concurrency).padEnd(3)} ${r.rps.toFixed(0).padStart(6)} req/s  ${r.cpuUsPerRequest.toFixed(0).padStart(6)} µs CPU/req  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  TTFT p50 ${r.ttftP50.toFixed(2)} ms  errors ${r.errors}  ${JSON.stringify(r.cacheHeaders)}\n`,
          );
        }
      } finally {
        await weir.stop();
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    mock.child.kill('SIGTERM');
  }
  const out = value('--out');
  if (out) writeFileSync(out, markdown(results));
}

function markdown(results: CellResult[]): string {
  const lines = [
    `## Issue 15 stage costs — ${new Date().toISOString().slice(0, 10)}`,
    '',
    `node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'} × ${os.cpus().length}, load average at the end ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}; windows ${WARMUP_MS} ms warm-up + ${MEASURE_MS} ms; the all-in-one on CPU 1, mock and driver on CPU 0; 50-token answers.`,
    '',
    '| stage | mode | c | req/s | CPU µs/req | p50 ms | p99 ms | TTFT p50 ms | errors | x-weir-cache | RSS MiB |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|',
  ];
  for (const r of results) {
    lines.push(
      `| ${r.stage} | ${r.stream ? 'stream' : 'non-stream'} | ${r.concurrency} | ${r.rps.toFixed(0)} | ${r.cpuUsPerRequest.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.stream ? r.ttftP50.toFixed(2) : '—'} | ${r.errors} | ${Object.entries(r.cacheHeaders)
        .map(([k, v]) => `${k}: ${v}`)
        .join(', ')} | ${r.rssMiB.toFixed(0)} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

void main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});

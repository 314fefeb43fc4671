/**
 * Weir's load benchmark (issue 5, deliverable 7): two tenants with equal weights on simulated
 * GPU replicas (`apps/engine-sim` processes, real HTTP to every replica), through Weir in the
 * split topology (default) or as the single all-in-one process (`--topology all-in-one`; see
 * load-topology.ts); the quiet tenant sends half its fair share, the noisy one ten times its
 * fair share (≈ 5× the fleet's capacity in all), plus a small batch-class stream. Two runs:
 *
 * 1. **steady**: the fleet whole;
 * 2. **brownout**: the same load, and one replica SIGKILLed mid-run (figures before and after).
 *
 *   npm run bench:load                      # both runs, ≈ 4 min; results/<date>-load.json and .md
 *   node --import tsx tools/bench/load-run.ts [--topology split|all-in-one] [--only steady|brownout]
 *        [--quiet-share X] [--noisy-share X] [--replicas N] [--smoke] [--out FILE]
 *
 * The profile is fixed in tools/bench/load-profile.ts (and docs/performance.md) before any
 * result was taken. Capacity comes from libs/capacity's simulator; see `fleetCapacity`.
 * Everything runs on this machine and shares its cores: the client, the gateway, the services,
 * Postgres, NATS and the replicas (see docs/performance.md for what that means).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseConfig } from '@weir/config';
import { hashApiKey, mintApiKey, newId } from '@weir/core';
import { freePort, type ManagedProcess, type OutputLog, REPO_ROOT, spawnApp, waitReady } from '@weir/launcher';
import { bootstrapTenants, createApiKeyRepository, createTemporaryPostgresDatabase, openDatabase } from '@weir/store-pg';
import { Pool as PgPool } from 'pg';
import { BENCH_ALIAS, BENCH_PROFILE, BENCH_REPLICA, benchConfigYaml, fleetCapacity, type LoadProfile, offeredRates, replicaEnv, SMOKE_PROFILE, TENANTS } from './load-profile';
import { startWeir, TOPOLOGIES, type TopologyName, type WeirUnderTest } from './load-topology';
import { type RequestRecord, runOpenLoop, stat, type StreamSpec, type StreamSummary, summarizeStreams } from './open-loop';
import { cpuSeconds } from './proc';

// ---- options --------------------------------------------------------------------------

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
function numberFlag(name: string, fallback: number, min: number, max = Number.POSITIVE_INFINITY): number {
  const raw = value(name);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max) usage(`${name} must be a number between ${min} and ${max}, got ${JSON.stringify(raw)}`);
  return n;
}
function usage(message: string): never {
  process.stderr.write(`bench:load: ${message}\nusage: node --import tsx tools/bench/load-run.ts [--topology split|all-in-one] [--only steady|brownout] [--quiet-share X] [--noisy-share X] [--replicas N] [--tpot-target-ms MS] [--smoke] [--out FILE]\n`);
  process.exit(2);
}
const known = new Set(['--topology', '--only', '--quiet-share', '--noisy-share', '--replicas', '--tpot-target-ms', '--smoke', '--out']);
for (let i = 0; i < argv.length; i++) {
  if (!known.has(argv[i])) usage(`unknown option ${argv[i]}`);
  if (argv[i] !== '--smoke') i++;
}
const SMOKE = argv.includes('--smoke');
const base = SMOKE ? SMOKE_PROFILE : BENCH_PROFILE;
const PROFILE: LoadProfile = {
  ...base,
  quietShare: numberFlag('--quiet-share', base.quietShare, 0, 1),
  noisyShare: numberFlag('--noisy-share', base.noisyShare, 0),
  replicas: numberFlag('--replicas', base.replicas, 2, 16),
};
if (!Number.isInteger(PROFILE.replicas)) usage('--replicas must be an integer');
/** Diagnostic: the scheduler's TPOT target (`defaults.scheduling.tpot_target_ms`); the profile sets none. */
const TPOT_TARGET_MS = value('--tpot-target-ms') === undefined ? undefined : numberFlag('--tpot-target-ms', 0, 1, 10_000);
const ONLY = value('--only');
if (ONLY !== undefined && ONLY !== 'steady' && ONLY !== 'brownout') usage('--only takes steady or brownout');
const RUNS = ONLY ? [ONLY] : ['steady', 'brownout'];
const TOPOLOGY = (value('--topology') ?? 'split') as TopologyName;
if (!(TOPOLOGIES as readonly string[]).includes(TOPOLOGY)) usage(`--topology takes ${TOPOLOGIES.join(' or ')}`);

const STREAMS = ['quiet', 'noisy', 'quiet-batch'] as const;

// ---- replicas ------------------------------------------------------------------------------

interface Replica {
  name: string;
  url: string;
  process: ManagedProcess;
}

async function startReplicas(count: number, log: OutputLog): Promise<Replica[]> {
  const replicas: Replica[] = [];
  for (let i = 0; i < count; i++) {
    const port = await freePort();
    const name = `engine-sim:${i}`;
    const url = `http://127.0.0.1:${port}`;
    const proc = spawnApp(name, 'engine-sim', { PORT: String(port), HOST: '127.0.0.1', WEIR_MODEL_NAME: 'sim@1', WEIR_REPLICA_ID: `sim@1/${i}`, WEIR_REVISION_ID: 'sim@1', LOG_LEVEL: 'warn', ...replicaEnv(BENCH_REPLICA) }, log);
    replicas.push({ name, url, process: proc });
  }
  await Promise.all(replicas.map((r) => waitReady(r.process, `${r.url}/readyz`, 120_000, log)));
  return replicas;
}

/** A chat message the replicas count as exactly `tokens` prompt tokens (their tokenizer: 1 + words, plus the chat rendering). */
async function sizedPrompt(replicaUrl: string, tokens: number): Promise<string> {
  const count = async (text: string) => {
    const res = await fetch(`${replicaUrl}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: [{ role: 'user', content: text }] }) });
    return ((await res.json()) as { input_tokens: number }).input_tokens;
  };
  const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i % 10}`).join(' ');
  const overhead = (await count(words(1))) - 1;
  const prompt = words(Math.max(1, tokens - overhead));
  const got = await count(prompt);
  if (got !== tokens) throw new Error(`could not size the prompt: ${got} tokens instead of ${tokens}`);
  return prompt;
}

// ---- scheduler metrics -----------------------------------------------------------------------

interface QueueSample {
  atMs: number;
  /** Queued requests by tenant/priority (`quiet/interactive`). */
  queued: Record<string, number>;
  brownout: number;
  capacityRatio: number;
}

/** `name{labels} value` lines of a Prometheus scrape whose name is `metric`. */
function samples(text: string, metric: string): Array<{ labels: Record<string, string>; value: number }> {
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`) && !line.startsWith(`${metric} `)) continue;
    const labels: Record<string, string> = {};
    const m = /\{(.*)\}/.exec(line);
    if (m) for (const kv of m[1].matchAll(/(\w+)="([^"]*)"/g)) labels[kv[1]] = kv[2];
    out.push({ labels, value: Number(line.split(' ').at(-1)) });
  }
  return out;
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  return res.text();
}

/** Output tokens a replica has generated so far (engine-sim's `weir_engine_output_tokens_total`); undefined if it does not answer. */
async function replicaOutputTokens(replica: Replica): Promise<number | undefined> {
  if (!replica.process.alive()) return undefined;
  try {
    return samples(await scrape(`${replica.url}/metrics`), 'weir_engine_output_tokens_total').reduce((a, s) => a + s.value, 0);
  } catch {
    return undefined;
  }
}

// ---- machine CPU ---------------------------------------------------------------------------

/** Busy and total jiffies of the whole machine (/proc/stat). */
function machineJiffies(): { busy: number; total: number } {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = cpu[3] + (cpu[4] ?? 0);
  const total = cpu.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

// ---- one run -------------------------------------------------------------------------------

interface RunResult {
  name: string;
  windows: Array<{ name: string; fromMs: number; toMs: number; streams: StreamSummary[] }>;
  /** Per 5 s of sending: per stream ok, rejected, p95 TTFT (ms) and queued requests at the end. */
  timeline: Array<{ fromMs: number; streams: Record<string, { sent: number; ok: number; rejected: number; deadline: number; errors: number; ttftP95Ms: number | null; tpotP95Ms: number | null }> }>;
  queueSamples: QueueSample[];
  killedAtMs?: number;
  killed?: string;
  /** CPU seconds per process over the run, and the machine's busy share (0–1 of all cores). */
  cpuSeconds: Record<string, number>;
  /**
   * Output tokens each engine-sim replica generated over the run (its `/metrics`, sampled each
   * second: a killed replica's count is its last sample before the kill), and the completion
   * tokens the client received: the check that the replicas, not something else, served the run.
   */
  replicaOutputTokens: Record<string, number>;
  clientCompletionTokens: number;
  machineBusy: number;
  durationMs: number;
  records: RequestRecord[];
}

async function runOnce(name: 'steady' | 'brownout', weir: WeirUnderTest, replicas: Replica[], streams: StreamSpec[], prompt: string): Promise<RunResult> {
  const warm = PROFILE.warmupMs;
  const durationMs = name === 'steady' ? warm + PROFILE.steadyMs : warm + PROFILE.beforeKillMs + PROFILE.afterKillMs;
  const killAt = name === 'brownout' ? warm + PROFILE.beforeKillMs : undefined;
  const victim = replicas[0];
  const pids = new Map<string, number>([...[...weir.processes].map(([n, p]) => [n, p.pid] as const), ...replicas.map((r) => [r.name, r.process.pid] as const), ['client', process.pid]]);
  const tokens0 = new Map(await Promise.all(replicas.map(async (r) => [r.name, await replicaOutputTokens(r)] as const)));
  const tokensLast = new Map(tokens0);
  const cpu0 = new Map([...pids].map(([n, pid]) => [n, cpuSeconds(pid)]));
  const m0 = machineJiffies();
  const queueSamples: QueueSample[] = [];
  const t0 = Date.now();
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      // The replicas' token counters, alongside the scheduler's scrape (not delaying it).
      const replicaScrapes = Promise.all(
        replicas.map(async (r) => {
          const n = await replicaOutputTokens(r);
          if (n !== undefined) tokensLast.set(r.name, n);
        }),
      );
      try {
        const text = await scrape(weir.schedulerMetricsUrl);
        const queued: Record<string, number> = {};
        for (const s of samples(text, 'weir_scheduler_queue_requests')) {
          const k = `${s.labels.tenant}/${s.labels.priority}`;
          queued[k] = (queued[k] ?? 0) + s.value;
        }
        const brownout = samples(text, 'weir_pool_brownout').reduce((a, s) => Math.max(a, s.value), 0);
        const ratio = samples(text, 'weir_pool_capacity_ratio').reduce((a, s) => Math.min(a, s.value), 1);
        queueSamples.push({ atMs: Date.now() - t0, queued, brownout, capacityRatio: ratio });
      } catch {
        // a missed sample is not a result
      }
      await replicaScrapes;
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  process.stdout.write(`\n== ${name}: ${(durationMs / 1000).toFixed(0)} s of arrivals (first ${(warm / 1000).toFixed(0)} s warm-up)${killAt ? `; SIGKILL ${victim.name} at ${(killAt / 1000).toFixed(0)} s` : ''}\n`);
  let killedAtMs: number | undefined;
  let victimCpu = Number.NaN;
  let lastTick = 0;
  const records = await runOpenLoop({
    gateways: weir.gatewayUrls,
    streams,
    shape: { prompt, model: BENCH_ALIAS, maxTokens: PROFILE.outputTokens },
    durationMs,
    events: killAt
      ? [
          {
            at: killAt,
            run: () => {
              victimCpu = cpuSeconds(victim.process.pid);
              victim.process.signal('SIGKILL');
              killedAtMs = killAt;
              process.stdout.write(`   ${(killAt / 1000).toFixed(1)} s: SIGKILL ${victim.name} (pid ${victim.process.pid})\n`);
            },
          },
        ]
      : [],
    onTick(elapsed, recs) {
      const tick = Math.floor(elapsed / 5000);
      if (tick === lastTick) return;
      lastTick = tick;
      const last = recs.filter((r) => r.endMs > elapsed - 5000);
      const line = STREAMS.map((s) => {
        const rs = last.filter((r) => r.stream === s);
        const ok = rs.filter((r) => r.outcome === 'ok');
        const p95 = stat(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs]))).p95;
        return `${s} ok=${ok.length} rej=${rs.filter((r) => r.outcome === 'rejected').length} err=${rs.filter((r) => r.outcome === 'error').length} ttft95=${p95 === null ? '-' : p95.toFixed(0)}`;
      }).join(' | ');
      process.stdout.write(`   t=${(elapsed / 1000).toFixed(0).padStart(3)} s ${line}\n`);
    },
  });
  sampling = false;
  await sampler;
  const m1 = machineJiffies();
  const cpu: Record<string, number> = {};
  for (const [n, pid] of pids) {
    const now = killAt !== undefined && n === victim.name ? victimCpu : cpuSeconds(pid);
    cpu[n] = Math.round(Math.max(0, now - (cpu0.get(n) ?? 0)) * 100) / 100;
  }
  // A last scrape of the replicas' counters: runOpenLoop returned once every request had ended.
  for (const r of replicas) {
    const n = await replicaOutputTokens(r);
    if (n !== undefined) tokensLast.set(r.name, n);
  }
  const replicaTokens: Record<string, number> = {};
  for (const r of replicas) {
    const first = tokens0.get(r.name);
    const last = tokensLast.get(r.name);
    if (first !== undefined && last !== undefined) replicaTokens[r.name] = last - first;
  }
  const windows =
    name === 'steady'
      ? [{ name: 'steady', fromMs: warm, toMs: durationMs }]
      : [
          { name: 'before the kill', fromMs: warm, toMs: killAt as number },
          { name: 'after the kill', fromMs: killAt as number, toMs: durationMs },
          { name: 'after the kill, from +5 s', fromMs: (killAt as number) + 5_000, toMs: durationMs },
        ].filter((w) => w.toMs > w.fromMs);
  const timeline: RunResult['timeline'] = [];
  for (let from = 0; from < durationMs; from += 5_000) {
    const entry: RunResult['timeline'][number] = { fromMs: from, streams: {} };
    for (const s of summarizeStreams(records, [...STREAMS], from, Math.min(durationMs, from + 5_000))) {
      const sum = (m: Record<string, number>) => Object.values(m).reduce((a, b) => a + b, 0);
      entry.streams[s.stream] = { sent: s.sent, ok: s.ok, rejected: sum(s.rejected), deadline: sum(s.deadline), errors: sum(s.errors), ttftP95Ms: s.ttftMs.p95, tpotP95Ms: s.tpotMs.p95 };
    }
    timeline.push(entry);
  }
  return {
    name,
    windows: windows.map((w) => ({ ...w, streams: [] })),
    timeline,
    queueSamples,
    killedAtMs,
    killed: killAt ? victim.name : undefined,
    cpuSeconds: cpu,
    replicaOutputTokens: replicaTokens,
    clientCompletionTokens: records.reduce((a, r) => a + (r.completionTokens ?? 0), 0),
    machineBusy: (m1.busy - m0.busy) / Math.max(1, m1.total - m0.total),
    durationMs,
    records,
  };
}

/** Queue time and Weir's TTFT per generation from the usage ledger (waits until the rows stop arriving, ≤ 30 s). */
async function ledgerTimings(databaseUrl: string, ids: string[]): Promise<Map<string, { queueMs: number; ttftMs: number | null; status: string; finishReason: string }>> {
  const pg = new PgPool({ connectionString: databaseUrl, max: 1 });
  try {
    const want = new Set(ids);
    const out = new Map<string, { queueMs: number; ttftMs: number | null; status: string; finishReason: string }>();
    const until = Date.now() + 30_000;
    let lastCount = -1;
    for (;;) {
      const r = await pg.query<{ generation_id: string; queue_ms: number; ttft_ms: number | null; status: string; finish_reason: string }>(
        'SELECT generation_id, queue_ms, ttft_ms, status, finish_reason FROM usage_ledger WHERE model_alias = $1',
        [BENCH_ALIAS],
      );
      out.clear();
      for (const row of r.rows) if (want.has(row.generation_id)) out.set(row.generation_id, { queueMs: row.queue_ms, ttftMs: row.ttft_ms, status: row.status, finishReason: row.finish_reason });
      if (out.size >= want.size || (out.size === lastCount && Date.now() > until - 25_000) || Date.now() > until) return out;
      lastCount = out.size;
      await new Promise((res) => setTimeout(res, 1_000));
    }
  } finally {
    await pg.end();
  }
}

// ---- output --------------------------------------------------------------------------------

const f0 = (x: number | null) => (x === null ? '–' : x.toFixed(0));
const f1 = (x: number | null) => (x === null ? '–' : x.toFixed(1));
const counts = (m: Record<string, number>) =>
  Object.keys(m).length === 0
    ? '0'
    : Object.entries(m)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => `${v} ${k}`)
        .join(', ');

function windowTable(streams: StreamSummary[]): string {
  const rows = [
    '| stream | offered req/s | completed (req/s) | TTFT p50 / p95 ms | TPOT p50 / p95 ms | end-to-end p50 / p95 ms | queue p50 / p95 ms (ledger) | Weir TTFT p50 / p95 ms (ledger) | before Weir p50 / p95 ms | rejected (429/503, by code) | deadline | errors |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|',
  ];
  for (const s of streams) {
    rows.push(
      `| ${s.stream} | ${s.offeredRps.toFixed(2)} | ${s.ok} (${s.goodputRps.toFixed(2)}) | ${f0(s.ttftMs.p50)} / ${f0(s.ttftMs.p95)} | ${f1(s.tpotMs.p50)} / ${f1(s.tpotMs.p95)} | ${f0(s.e2eMs.p50)} / ${f0(s.e2eMs.p95)} | ${f0(s.queueMs.p50)} / ${f0(s.queueMs.p95)} | ${f0(s.weirTtftMs.p50)} / ${f0(s.weirTtftMs.p95)} | ${f0(s.outsideTtftMs.p50)} / ${f0(s.outsideTtftMs.p95)} | ${counts(s.rejected)} | ${counts(s.deadline)} | ${counts(s.errors)} |`,
    );
  }
  const messages = streams.flatMap((s) => Object.entries(s.messages).map(([code, m]) => `${s.stream} ${code}: "${m}"`));
  if (messages.length > 0) rows.push('', `Messages (first of each code): ${messages.join('; ')}.`);
  return rows.join('\n');
}

function verdict(s: StreamSummary | undefined): string {
  if (!s || s.ok === 0) return 'no completed requests: **not met**';
  const ttft = s.ttftMs.p95 as number;
  const tpot = s.tpotMs.p95 as number;
  return `p95 TTFT ${ttft.toFixed(0)} ms ${ttft < 1000 ? '< 1 s: met' : '≥ 1 s: **not met**'}; p95 TPOT ${tpot.toFixed(1)} ms ${tpot < 50 ? '< 50 ms: met' : '≥ 50 ms: **not met**'}`;
}

function markdown(meta: Record<string, unknown>, runs: RunResult[]): string {
  const parts: string[] = [`## Load benchmark — ${String(meta.date)}, ${TOPOLOGY} topology${SMOKE ? ' (smoke)' : ''}`, '', String(meta.summary), ''];
  const logged = Object.entries((meta.logged ?? {}) as Record<string, number>);
  if (logged.length > 0) parts.push(`Logged warnings and errors (process: message × count): ${logged.map(([k, v]) => `${k} × ${v}`).join('; ')}.`, '');
  for (const run of runs) {
    parts.push(`### ${run.name} (${TOPOLOGY})`, '');
    for (const w of run.windows) {
      parts.push(`**${w.name}** (requests sent from ${(w.fromMs / 1000).toFixed(0)} s to ${(w.toMs / 1000).toFixed(0)} s). Quiet tenant: ${verdict(w.streams.find((s) => s.stream === 'quiet'))}.`, '', windowTable(w.streams), '');
    }
    const peak = (key: string) => run.queueSamples.reduce((a, q) => Math.max(a, q.queued[key] ?? 0), 0);
    parts.push(
      `Scheduler queue (sampled each second): peak ${peak('noisy/interactive')} noisy, ${peak('quiet/interactive')} quiet interactive, ${peak('quiet/batch')} quiet batch requests; brownout ${run.queueSamples.some((q) => q.brownout > 0) ? `on from ${((run.queueSamples.find((q) => q.brownout > 0)?.atMs ?? 0) / 1000).toFixed(0)} s (capacity ratio down to ${Math.min(...run.queueSamples.map((q) => q.capacityRatio)).toFixed(2)})` : 'never on'}. Machine busy ${(run.machineBusy * 100).toFixed(0)} % of ${os.cpus().length} cores over the run; CPU seconds: ${Object.entries(run.cpuSeconds)
        .sort((a, b) => b[1] - a[1])
        .map(([n, s]) => `${n} ${s.toFixed(1)}`)
        .join(', ')}.`,
      '',
    );
    const served = Object.values(run.replicaOutputTokens).reduce((a, b) => a + b, 0);
    parts.push(
      `Output tokens generated by the engine-sim replicas: ${served} (${Object.entries(run.replicaOutputTokens)
        .map(([n, t]) => `${n} ${t}`)
        .join(', ')}); completion tokens the client received: ${run.clientCompletionTokens}.${
        run.clientCompletionTokens > 0 && served < run.clientCompletionTokens / 2 ? ' **The replicas did not serve this run: its figures are not those of the engine-sim fleet.**' : ''
      }`,
      '',
    );
    parts.push(
      'Per 5 s of sending (quiet: ok / rejected / p95 TTFT ms / p95 TPOT ms; noisy: ok / rejected / deadline / errors):',
      '',
      '| from s | quiet | noisy | quiet-batch ok / rejected / deadline |',
      '|---:|---|---|---|',
      ...run.timeline.map((t) => {
        const q = t.streams.quiet;
        const n = t.streams.noisy;
        const b = t.streams['quiet-batch'];
        return `| ${(t.fromMs / 1000).toFixed(0)}${run.killedAtMs !== undefined && t.fromMs === run.killedAtMs ? ' (kill)' : ''} | ${q.ok} / ${q.rejected} / ${f0(q.ttftP95Ms)} / ${f1(q.tpotP95Ms)}${q.errors ? ` (${q.errors} errors)` : ''} | ${n.ok} / ${n.rejected} / ${n.deadline} / ${n.errors} | ${b.ok} / ${b.rejected} / ${b.deadline} |`;
      }),
      '',
    );
  }
  return parts.join('\n');
}

// ---- main ----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const date = new Date().toISOString().slice(0, 10);
  const git = (args: string[]) => {
    try {
      return execFileSync('git', args, { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    } catch {
      return '';
    }
  };
  const capacity = fleetCapacity(BENCH_REPLICA, PROFILE.replicas, PROFILE.inputTokens, PROFILE.outputTokens);
  const survivors = fleetCapacity(BENCH_REPLICA, PROFILE.replicas - 1, PROFILE.inputTokens, PROFILE.outputTokens);
  const rates = offeredRates(capacity.rps, PROFILE);
  process.stdout.write(
    `weir bench:load — capacity of ${PROFILE.replicas} replicas at the targets: ${capacity.rps} req/s (p95 TTFT ${capacity.ttftP95Ms.toFixed(0)} ms, TPOT ${capacity.tpotP95Ms.toFixed(1)} ms in simulation); ${PROFILE.replicas - 1} survivors: ${survivors.rps} req/s\n` +
      `offered: quiet ${rates.quiet.toFixed(2)} req/s (${PROFILE.quietShare} × fair share ${rates.fairShare.toFixed(2)}), noisy ${rates.noisy.toFixed(2)} req/s (${PROFILE.noisyShare} ×), batch ${rates.batch} req/s; total ${rates.total.toFixed(1)} req/s = ${rates.overload.toFixed(2)} × capacity\n`,
  );
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-load-'));
  const log: OutputLog = { lines: [], echo: false };
  const temp = await createTemporaryPostgresDatabase();
  let replicas: Replica[] = [];
  let weir: WeirUnderTest | undefined;
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stdout.write('\ninterrupted: stopping what was started…\n');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const runs: RunResult[] = [];
  const loadavgStart = os.loadavg();
  let meta: Record<string, unknown> = {};
  try {
    replicas = await startReplicas(PROFILE.replicas, log);
    const prompt = await sizedPrompt(replicas[0].url, PROFILE.inputTokens);
    const configText = benchConfigYaml(
      replicas.map((r) => r.url),
      BENCH_REPLICA,
      TPOT_TARGET_MS === undefined ? {} : { tpotTargetMs: TPOT_TARGET_MS },
    );
    // Tenants, apps and one key per app, before the services start (they read keys from Postgres).
    const keys = { quiet: mintApiKey(), noisy: mintApiKey(), batch: mintApiKey() };
    {
      const db = await openDatabase({ databaseUrl: temp.url, maxConnections: 1 });
      try {
        await bootstrapTenants(db.db, parseConfig(configText, 'bench config'), undefined);
        const repo = createApiKeyRepository(db.db);
        for (const [k, tenantId, appId] of [
          [keys.quiet, TENANTS.quiet.id, TENANTS.quiet.app],
          [keys.batch, TENANTS.quiet.id, TENANTS.quiet.batchApp],
          [keys.noisy, TENANTS.noisy.id, TENANTS.noisy.app],
        ] as const) {
          await repo.insertKey({ id: newId('key'), prefix: k.prefix, sha256: hashApiKey(k.plaintext), tenantId, appId, label: 'bench:load' });
        }
      } finally {
        await db.close();
      }
    }
    process.stdout.write(`replicas up: ${replicas.map((r) => `${r.name}=${r.url} (pid ${r.process.pid})`).join(', ')}; starting the ${TOPOLOGY} topology…\n`);
    const t0 = Date.now();
    weir = await startWeir(TOPOLOGY, { configText, workDir, databaseUrl: temp.url, natsNamespace: `bench-load-${process.pid}`, env: { LOG_LEVEL: 'warn' } });
    process.stdout.write(
      `${TOPOLOGY} up in ${((Date.now() - t0) / 1000).toFixed(1)} s: gateway ${weir.gatewayUrls.join(', ')}; processes ${[...weir.processes].map(([n, p]) => `${n} (pid ${p.pid})`).join(', ')}\n`,
    );
    const streams: StreamSpec[] = [
      { name: 'quiet', tenant: TENANTS.quiet.id, apiKey: keys.quiet.plaintext, rps: rates.quiet, priority: 'interactive', deadlineMs: PROFILE.interactiveDeadlineMs, seed: PROFILE.seed },
      { name: 'noisy', tenant: TENANTS.noisy.id, apiKey: keys.noisy.plaintext, rps: rates.noisy, priority: 'interactive', deadlineMs: PROFILE.interactiveDeadlineMs, seed: PROFILE.seed + 1 },
      { name: 'quiet-batch', tenant: TENANTS.quiet.id, apiKey: keys.batch.plaintext, rps: rates.batch, priority: 'batch', deadlineMs: PROFILE.batchDeadlineMs, seed: PROFILE.seed + 2 },
    ];
    for (const name of RUNS as Array<'steady' | 'brownout'>) {
      if (interrupted) break;
      const run = await runOnce(name, weir, replicas, streams, prompt);
      runs.push(run);
      const served = Object.values(run.replicaOutputTokens).reduce((a, b) => a + b, 0);
      if (run.clientCompletionTokens > 0 && served < run.clientCompletionTokens / 2) {
        process.stderr.write(
          `bench:load: WARNING: the engine-sim replicas generated ${served} output tokens in the ${name} run, the client received ${run.clientCompletionTokens}: the ${TOPOLOGY} topology did not serve this run from the replicas\n`,
        );
      }
      // Let the survivors drain before the next run; a killed replica is not restarted here.
      await new Promise((r) => setTimeout(r, 2_000));
    }
    // Queue time from the usage ledger.
    const ids = runs.flatMap((r) => r.records.flatMap((x) => (x.generationId && x.outcome === 'ok' ? [x.generationId] : [])));
    const ledger = await ledgerTimings(temp.url, ids);
    for (const run of runs) {
      for (const r of run.records) {
        const row = r.generationId ? ledger.get(r.generationId) : undefined;
        r.queueMs = row?.queueMs;
        r.weirTtftMs = row?.ttftMs ?? undefined;
      }
      for (const w of run.windows) w.streams = summarizeStreams(run.records, [...STREAMS], w.fromMs, w.toMs);
    }
    // Warnings and errors the services logged (pino JSON, level ≥ 40), counted by process and message.
    const logged: Record<string, number> = {};
    for (const line of [...weir.output().split('\n'), ...log.lines]) {
      const m = /^\[([^\]]+)\] (\{.*\})$/.exec(line);
      if (!m) continue;
      try {
        const j = JSON.parse(m[2]) as { level?: number; msg?: string };
        if ((j.level ?? 0) >= 40) logged[`${m[1]}: ${j.msg ?? '?'}`] = (logged[`${m[1]}: ${j.msg ?? '?'}`] ?? 0) + 1;
      } catch {
        // not a log line
      }
    }
    const rejections = samples(await scrape(weir.schedulerMetricsUrl), 'weir_scheduler_rejections_total').map((s) => ({ ...s.labels, count: s.value }));
    meta = {
      date,
      startedAt: new Date(Date.now() - runs.reduce((a, r) => a + r.durationMs, 0)).toISOString(),
      finishedAt: new Date().toISOString(),
      smoke: SMOKE,
      command: `node --import tsx tools/bench/load-run.ts ${argv.join(' ')}`.trim(),
      commit: git(['rev-parse', 'HEAD']),
      dirty: git(['status', '--porcelain', '--untracked-files=no']).length > 0,
      node: process.version,
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? '?',
      loadavgStart,
      loadavgEnd: os.loadavg(),
      profile: PROFILE,
      replica: BENCH_REPLICA,
      capacity,
      survivorCapacity: survivors,
      offered: rates,
      topology: weir.topology,
      topologyDescription: weir.description,
      tpotTargetMs: TPOT_TARGET_MS ?? null,
      ledgerRowsFound: ledger.size,
      ledgerRowsWanted: ids.length,
      schedulerRejectionsTotal: rejections,
      logged: Object.fromEntries(Object.entries(logged).sort((a, b) => b[1] - a[1]).slice(0, 25)),
    };
    meta.summary =
      `${String(meta.cpuModel)}, ${String(meta.cpus)} CPUs, node ${String(meta.node)}, commit ${String(meta.commit).slice(0, 10)}${meta.dirty ? ' (+ uncommitted changes)' : ''}; load average at start ${loadavgStart.map((x) => x.toFixed(2)).join(' ')}. ` +
      `Weir: ${weir.description}. ` +
      `${PROFILE.replicas} engine-sim replicas (${BENCH_REPLICA.prefillTokensPerSecond} prefill tokens/s, decode ${BENCH_REPLICA.decodeStepMs.map(([b, ms]) => `${ms} ms at batch ${b}`).join(' → ')}, ${BENCH_REPLICA.kvTokens} KV tokens, ${BENCH_REPLICA.maxSequences} sequences); requests of ${PROFILE.inputTokens} prompt + ${PROFILE.outputTokens} output tokens. ` +
      `Capacity at the targets ${capacity.rps} req/s (${PROFILE.replicas - 1} survivors: ${survivors.rps}) by ${capacity.method}. ` +
      `Offered (Poisson): quiet ${rates.quiet.toFixed(2)} req/s (${PROFILE.quietShare} × its fair share of ${rates.fairShare.toFixed(2)}), noisy ${rates.noisy.toFixed(2)} req/s (${PROFILE.noisyShare} ×), quiet-batch ${rates.batch} req/s (x-weir-priority: batch); total ${rates.total.toFixed(1)} req/s = ${rates.overload.toFixed(2)} × capacity. ` +
      `Deadlines ${PROFILE.interactiveDeadlineMs} ms interactive, ${PROFILE.batchDeadlineMs} ms batch. Queue times from the usage ledger (${ledger.size} of ${ids.length} completed requests found).`;
  } catch (err) {
    process.stderr.write(`last output:\n${[...log.lines.slice(-20), ...(weir?.output().split('\n').slice(-40) ?? [])].join('\n')}\n`);
    throw err;
  } finally {
    if (weir) await weir.stop().catch(() => false);
    await Promise.all(replicas.map((r) => r.process.stop(10_000)));
    await temp.drop().catch(() => undefined);
    rmSync(workDir, { recursive: true, force: true });
  }
  if (runs.length === 0) throw new Error('no run completed');
  const md = markdown(meta, runs);
  process.stdout.write(`\n${md}\n`);
  const resultsDir = path.join(REPO_ROOT, 'tools/bench/results');
  mkdirSync(resultsDir, { recursive: true });
  const file = value('--out') ?? path.join(resultsDir, `${date}-load${TOPOLOGY === 'split' ? '' : `-${TOPOLOGY}`}${SMOKE ? '-smoke' : ''}.json`);
  // Raw records, compact: one array per request (times in ms, 0.1 ms).
  const r1 = (x: number | undefined) => (x === undefined ? null : Math.round(x * 10) / 10);
  const raw = {
    meta,
    runs: runs.map(({ records, ...rest }) => ({
      ...rest,
      recordFields: ['stream', 'sentMs', 'scheduledMs', 'status', 'outcome', 'code', 'ttftMs', 'tpotMs', 'e2eMs', 'queueMs', 'weirTtftMs', 'completionTokens'],
      records: records.map((r) => [r.stream, r1(r.sentMs), r1(r.scheduledMs), r.status, r.outcome, r.code ?? null, r1(r.ttftMs), r1(r.tpotMs), r1(r.e2eMs), r.queueMs ?? null, r.weirTtftMs ?? null, r.completionTokens ?? null]),
    })),
  };
  writeFileSync(file, JSON.stringify(raw) + '\n');
  writeFileSync(file.replace(/\.json$/, '.md'), md);
  process.stdout.write(`raw results written to ${path.relative(REPO_ROOT, file)}\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench:load failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);

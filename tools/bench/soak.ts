/**
 * Memory soak (issue 13, item 7): N streaming chat completions (default 50,000) through the
 * all-in-one — as `npm start` runs it, on PGlite, with the speed probe's configuration (one
 * OpenAI-compatible revision on the mock upstream, auth, budget and tokens/min on) — sampling
 * its RSS and its JS heap after a full GC as the streams go by, and saying whether memory
 * trends upward.
 *
 *   node --import tsx tools/bench/soak.ts [--streams 50000] [--concurrency 16] [--samples 25]
 *        [--tokens 50] [--runner bundle|tsx] [--no-pin] [--out FILE.json]
 *
 * - The all-in-one runs with `--inspect=127.0.0.1:0`; each sample is a full GC through the
 *   inspector (HeapProfiler.collectGarbage, which also runs what weak references release), then
 *   the heap in use (Runtime.getHeapUsage), `process.memoryUsage()` and RSS (/proc). Samples
 *   are taken every N ÷ samples completed streams, while the load goes on (the in-flight streams
 *   are in the heap: bounded by the concurrency), and once more after the last stream and a
 *   short quiet spell.
 * - Verdict: a least-squares line through the heap-after-GC samples after the first 20 % of
 *   streams (warm-up: caches and JIT fill up); an **upward trend** when that line rises by more
 *   than max(4 MiB, 5 %) over the measured span and the last sample is above the first measured
 *   one by more than half that. The same for RSS, reported beside it (RSS also moves with the
 *   allocator's and the WASM memory's high-water marks, so the heap is the verdict).
 * - Every stream must end with HTTP 200 and `data: [DONE]`; errors are counted and the first is
 *   shown.
 * - The all-in-one is pinned to CPU 1 and this process with the mock to CPU 0 (taskset) unless
 *   `--no-pin`. Results: a markdown summary on stdout and, with `--out`, the samples as JSON
 *   (and FILE.md).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { PROBE_KEY, PROBE_MODEL, type Runner, startAllInOneProcess } from './all-in-one-process';
import { connectInspector } from './inspector';
import { startMockUpstream } from './mock-upstream';
import { cpuSeconds, pin, rssMiB, tasksetPath } from './proc';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const STREAMS = Number(value('--streams') ?? 50_000);
const CONCURRENCY = Number(value('--concurrency') ?? 16);
const SAMPLES = Math.max(4, Number(value('--samples') ?? 25));
const TOKENS = Number(value('--tokens') ?? 50);
const RUNNER = (value('--runner') ?? 'bundle') as Runner;
const PIN = !argv.includes('--no-pin') && tasksetPath() !== undefined;
const OUT = value('--out');
/** The share of streams treated as warm-up (not in the trend). */
const WARMUP_SHARE = 0.2;

/** One sample of the all-in-one's memory. */
export interface SoakSample {
  /** Streams completed (OK or not) when the sample was taken. */
  streams: number;
  /** Seconds since the load started. */
  atSeconds: number;
  /** JS heap in use after a full GC (MiB). */
  heapAfterGcMiB: number;
  rssMiB: number;
  externalMiB: number;
  arrayBuffersMiB: number;
}

/** A least-squares line y = a + b·x. */
export function fitLine(xs: number[], ys: number[]): { intercept: number; slope: number } {
  const n = xs.length;
  if (n < 2) return { intercept: ys[0] ?? Number.NaN, slope: 0 };
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my);
    sxx += (xs[i] - mx) ** 2;
  }
  const slope = sxx === 0 ? 0 : sxy / sxx;
  return { intercept: my - slope * mx, slope };
}

/** The trend of one series over the measured samples (see the module comment). */
export interface Trend {
  /** MiB per 10,000 streams (the fitted line's slope). */
  slopeMiBPer10k: number;
  /** Rise of the fitted line over the measured span (MiB). */
  fittedRiseMiB: number;
  /** Last − first measured sample (MiB). */
  observedRiseMiB: number;
  /** max(4 MiB, 5 % of the first measured sample). */
  thresholdMiB: number;
  upward: boolean;
}

/** Decides whether `pick` of the samples past the warm-up trends upward. */
export function trendOf(samples: SoakSample[], pick: (s: SoakSample) => number, warmupStreams: number): Trend {
  const measured = samples.filter((s) => s.streams >= warmupStreams);
  const xs = measured.map((s) => s.streams);
  const ys = measured.map(pick);
  const { slope } = fitLine(xs, ys);
  const span = xs.length ? xs[xs.length - 1] - xs[0] : 0;
  const fittedRiseMiB = slope * span;
  const observedRiseMiB = ys.length ? ys[ys.length - 1] - ys[0] : 0;
  const thresholdMiB = Math.max(4, 0.05 * (ys[0] ?? 0));
  return { slopeMiBPer10k: slope * 10_000, fittedRiseMiB, observedRiseMiB, thresholdMiB, upward: fittedRiseMiB > thresholdMiB && observedRiseMiB > thresholdMiB / 2 };
}

async function main(): Promise<void> {
  if (PIN) pin(process.pid, 0);
  const mock = await startMockUpstream({ tokens: TOKENS });
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'weir-soak-'));
  const weir = await startAllInOneProcess({ runner: RUNNER, dataDir, mockUrl: mock.url, inspect: true, cpu: PIN ? 1 : undefined });
  const samples: SoakSample[] = [];
  let ok = 0;
  let errors = 0;
  let firstError: string | undefined;
  let cpuStart = Number.NaN;
  let stopping = false;
  const onSignal = () => {
    stopping = true;
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    if (!weir.inspectorUrl) throw new Error('the all-in-one printed no inspector URL');
    const inspector = await connectInspector(weir.inspectorUrl);
    const t0 = performance.now();
    const sample = async (streams: number) => {
      await inspector.collectGarbage();
      const heap = (await inspector.call('Runtime.getHeapUsage')) as { usedSize: number };
      const mu = await inspector.evaluate<{ external: number; arrayBuffers: number }>('process.memoryUsage()');
      const s: SoakSample = {
        streams,
        atSeconds: (performance.now() - t0) / 1000,
        heapAfterGcMiB: heap.usedSize / 2 ** 20,
        rssMiB: rssMiB(weir.pid),
        externalMiB: mu.external / 2 ** 20,
        arrayBuffersMiB: mu.arrayBuffers / 2 ** 20,
      };
      samples.push(s);
      process.stdout.write(
        `${String(streams).padStart(7)} streams  ${s.atSeconds.toFixed(0).padStart(5)} s  heap after GC ${s.heapAfterGcMiB.toFixed(1)} MiB  RSS ${s.rssMiB.toFixed(0)} MiB  external ${s.externalMiB.toFixed(0)} MiB  ok ${ok} errors ${errors}\n`,
      );
    };
    await sample(0);
    cpuStart = cpuSeconds(weir.pid);

    const pool = new Pool(weir.url, { connections: CONCURRENCY, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
    const body = JSON.stringify({ model: PROBE_MODEL, messages: [{ role: 'user', content: 'Soak prompt.' }], max_tokens: 64, stream: true, stream_options: { include_usage: true } });
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${PROBE_KEY}` };
    let sent = 0;
    let done = 0;
    const every = Math.max(1, Math.floor(STREAMS / SAMPLES));
    let nextSample = every;
    let sampling: Promise<void> = Promise.resolve();
    const one = async () => {
      try {
        const res = await pool.request({ path: '/v1/chat/completions', method: 'POST', headers, body });
        let tail = '';
        for await (const chunk of res.body as AsyncIterable<Buffer>) tail = (tail + chunk.toString('latin1')).slice(-64);
        if (res.statusCode === 200 && tail.includes('data: [DONE]')) ok++;
        else {
          errors++;
          firstError ??= `HTTP ${res.statusCode}: ${tail}`;
        }
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
      }
      done++;
      if (done >= nextSample && done < STREAMS) {
        nextSample += every;
        const at = done;
        sampling = sampling.then(() => sample(at));
      }
    };
    const worker = async () => {
      while (!stopping && sent < STREAMS) {
        sent++;
        await one();
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    await sampling;
    await pool.close();
    const loadSeconds = (performance.now() - t0) / 1000;
    const cpu = cpuSeconds(weir.pid) - cpuStart;
    // Quiet for a moment (batched ledger writes land), then the last sample.
    await new Promise((r) => setTimeout(r, 3_000));
    await sample(done);
    inspector.close();

    const warmup = Math.floor(STREAMS * WARMUP_SHARE);
    const heapTrend = trendOf(samples, (s) => s.heapAfterGcMiB, warmup);
    const rssTrend = trendOf(samples, (s) => s.rssMiB, warmup);
    const md = summary({ ok, errors, firstError, loadSeconds, cpu, heapTrend, rssTrend, samples, warmup });
    process.stdout.write(`\n${md}`);
    if (OUT) {
      writeFileSync(
        OUT,
        JSON.stringify({ meta: { date: new Date().toISOString(), node: process.version, streams: STREAMS, concurrency: CONCURRENCY, tokens: TOKENS, runner: RUNNER, pinned: PIN, warmupStreams: warmup }, ok, errors, firstError, loadSeconds, cpuSeconds: cpu, heapTrend, rssTrend, samples }, null, 2) + '\n',
      );
      writeFileSync(OUT.replace(/\.json$/, '.md'), md);
    }
    if (heapTrend.upward) process.exitCode = 3;
  } finally {
    await weir.stop();
    await mock.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function summary(r: { ok: number; errors: number; firstError?: string; loadSeconds: number; cpu: number; heapTrend: Trend; rssTrend: Trend; samples: SoakSample[]; warmup: number }): string {
  const f1 = (x: number) => x.toFixed(1);
  const line = (name: string, t: Trend) =>
    `| ${name} | ${f1(t.slopeMiBPer10k)} | ${f1(t.fittedRiseMiB)} | ${f1(t.observedRiseMiB)} | ${f1(t.thresholdMiB)} | ${t.upward ? '**upward trend**' : 'no upward trend'} |`;
  return [
    `## Soak: ${r.ok + r.errors} streams through the all-in-one (${RUNNER}${PIN ? ', pinned to CPU 1' : ''}), ${CONCURRENCY} at a time, ${TOKENS}-token answers`,
    '',
    `${r.ok} OK, ${r.errors} errors${r.firstError ? ` (first: ${r.firstError.slice(0, 200)})` : ''}; ${r.loadSeconds.toFixed(0)} s, ${((r.ok + r.errors) / r.loadSeconds).toFixed(0)} streams/s, ${((r.cpu / Math.max(1, r.ok + r.errors)) * 1e6).toFixed(0)} µs CPU per stream (GC samples included). Trend over the samples after the first ${r.warmup} streams (warm-up).`,
    '',
    '| series | slope MiB / 10k streams | fitted rise MiB | observed rise MiB | threshold MiB | verdict |',
    '|---|---:|---:|---:|---:|---|',
    line('JS heap after GC', r.heapTrend),
    line('RSS', r.rssTrend),
    '',
    '| streams | s | heap after GC MiB | RSS MiB | external MiB | array buffers MiB |',
    '|---:|---:|---:|---:|---:|---:|',
    ...r.samples.map((s) => `| ${s.streams} | ${s.atSeconds.toFixed(0)} | ${f1(s.heapAfterGcMiB)} | ${s.rssMiB.toFixed(0)} | ${s.externalMiB.toFixed(0)} | ${s.arrayBuffersMiB.toFixed(0)} |`),
    '',
  ].join('\n');
}

if (process.argv[1] && /soak\.[cm]?[jt]s$/.test(process.argv[1])) {
  main().then(
    () => process.exit(process.exitCode ?? 0),
    (err: unknown) => {
      process.stderr.write(`soak failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}

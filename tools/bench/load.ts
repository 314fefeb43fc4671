/**
 * The load generator: `concurrency` closed-loop workers over one undici Pool (keep-alive, one
 * connection per worker), each sending `POST /v1/chat/completions` and reading the whole
 * response. A warm-up phase (not recorded) precedes a fixed measurement window; everything is
 * bounded by time, by a request cap and by per-request timeouts.
 *
 * Per request: latency (send → last body byte), TTFB (send → first body byte) and, for
 * streams, TTFT (send → first chunk carrying non-empty `content`; Weir's first chunk is the
 * role chunk with `content: ""`, which does not count).
 */
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

export interface LoadTarget {
  /** Origin, e.g. `http://127.0.0.1:8080`. */
  origin: string;
  /** Path of the chat completions route. */
  path: string;
  /** Extra headers (authorization). */
  headers: Record<string, string>;
  /** `model` in the body. */
  model: string;
}

export interface LoadOptions {
  stream: boolean;
  concurrency: number;
  warmupMs: number;
  measureMs: number;
  /** Hard cap on requests in one cell (warm-up included). */
  maxRequests: number;
  /** `max_tokens` sent. */
  maxTokens: number;
  /** Expected `completion_tokens` in the usage the client receives (a correctness check). */
  expectCompletionTokens: number;
  /**
   * Pads the request to about this many bytes with a system prompt of plain prose before the
   * user message (a typical chat body is 1–2 KB). Default: no system message (~130 bytes).
   */
  bodyBytes?: number;
  /** Called at the boundaries, to snapshot process CPU and memory. */
  onMeasureStart?: () => void | Promise<void>;
  onMeasureEnd?: () => void | Promise<void>;
}

export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export interface LoadResult {
  /** Requests completed (OK or not) after the measurement started, in-flight tail included. */
  completedInWindow: number;
  /** Requests that both started and ended inside the measurement window. */
  sampled: number;
  ok: number;
  errors: number;
  firstError?: string;
  /** Requests sent overall, warm-up included. */
  sentTotal: number;
  okTotal: number;
  measureSeconds: number;
  /** Completions per second inside the window. */
  rps: number;
  /** Milliseconds. */
  latency: Summary;
  ttfb: Summary;
  /** Streams only. */
  ttft?: Summary;
  /** CPU seconds the load generator itself used during the window (user + system). */
  driverCpuSeconds: number;
}

interface Sample {
  start: number;
  end: number;
  ttfb: number;
  ttft: number;
  ok: boolean;
}

const CONTENT = /"content":"[^"]/;

export function summarize(values: number[]): Summary {
  if (values.length === 0) return { n: 0, mean: Number.NaN, p50: Number.NaN, p90: Number.NaN, p99: Number.NaN, max: Number.NaN };
  const sorted = Float64Array.from(values).sort();
  // Nearest-rank percentile.
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
  let sum = 0;
  for (const v of sorted) sum += v;
  return { n: sorted.length, mean: sum / sorted.length, p50: at(0.5), p90: at(0.9), p99: at(0.99), max: sorted[sorted.length - 1] };
}

export async function runLoad(target: LoadTarget, options: LoadOptions): Promise<LoadResult> {
  const pool = new Pool(target.origin, {
    connections: options.concurrency,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 60_000,
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
  const bodyOf = (system: string) =>
    JSON.stringify({
      model: target.model,
      messages: [...(system ? [{ role: 'system', content: system }] : []), { role: 'user', content: 'Benchmark prompt: reply with a few words.' }],
      max_tokens: options.maxTokens,
      ...(options.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    });
  let body = bodyOf('');
  if (options.bodyBytes !== undefined && options.bodyBytes > body.length) {
    const prose = 'You are a careful assistant for the support team; answer briefly, cite the policy you rely on, and ask when unsure. ';
    const room = options.bodyBytes - bodyOf('x').length + 1;
    body = bodyOf(prose.repeat(Math.ceil(room / prose.length)).slice(0, room));
  }
  const headers = { 'content-type': 'application/json', ...target.headers };
  const usageMark = `"completion_tokens":${options.expectCompletionTokens}`;

  let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
  let sent = 0;
  let okTotal = 0;
  let firstError: string | undefined;
  let measureStart = Number.POSITIVE_INFINITY;
  let measureEnd = Number.POSITIVE_INFINITY;
  const samples: Sample[] = [];

  const once = async (): Promise<Sample> => {
    const start = performance.now();
    let ttfb = -1;
    let ttft = -1;
    let ok = false;
    try {
      const res = await pool.request({ path: target.path, method: 'POST', headers, body });
      let carry = '';
      let text = '';
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        const now = performance.now();
        if (ttfb < 0) ttfb = now - start;
        const s = chunk.toString('latin1');
        if (options.stream && ttft < 0) {
          if (CONTENT.test(carry + s)) ttft = now - start;
          else carry = s.slice(-16);
        }
        // Keep only what the checks below need: the status body on errors, the tail otherwise.
        text = res.statusCode === 200 ? (text + s).slice(-600) : text + s;
      }
      ok = res.statusCode === 200 && text.includes(usageMark) && (!options.stream || text.includes('data: [DONE]'));
      if (!ok && !firstError) firstError = `HTTP ${res.statusCode}: ${text.slice(0, 300)}`;
    } catch (err) {
      if (!firstError) firstError = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    }
    return { start, end: performance.now(), ttfb, ttft, ok };
  };

  const worker = async () => {
    while (phase !== 'stop' && sent < options.maxRequests) {
      sent++;
      const s = await once();
      if (s.ok) okTotal++;
      if (s.end >= measureStart) samples.push(s);
    }
  };

  const workers = Array.from({ length: options.concurrency }, () => worker());
  let cpuAtStart = process.cpuUsage();
  try {
    await sleep(options.warmupMs);
    await options.onMeasureStart?.();
    cpuAtStart = process.cpuUsage();
    measureStart = performance.now();
    phase = 'measure';
    await sleep(options.measureMs);
    measureEnd = performance.now();
    phase = 'stop';
    await Promise.all(workers);
    await options.onMeasureEnd?.();
  } finally {
    phase = 'stop';
    await Promise.allSettled(workers);
    await pool.close().catch(() => undefined);
  }
  const cpu = process.cpuUsage(cpuAtStart);

  const inWindow = samples.filter((s) => s.start >= measureStart && s.end <= measureEnd);
  const okInWindow = inWindow.filter((s) => s.ok);
  const measureSeconds = (measureEnd - measureStart) / 1000;
  return {
    completedInWindow: samples.length,
    sampled: inWindow.length,
    ok: okInWindow.length,
    errors: samples.filter((s) => !s.ok).length,
    firstError,
    sentTotal: sent,
    okTotal,
    measureSeconds,
    rps: samples.filter((s) => s.end <= measureEnd).length / measureSeconds,
    latency: summarize(okInWindow.map((s) => s.end - s.start)),
    ttfb: summarize(okInWindow.map((s) => s.ttfb)),
    ttft: options.stream ? summarize(okInWindow.filter((s) => s.ttft >= 0).map((s) => s.ttft)) : undefined,
    driverCpuSeconds: (cpu.user + cpu.system) / 1e6,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

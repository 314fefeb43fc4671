/**
 * The load benchmark's client: open-loop streams of `POST /v1/chat/completions` (streaming,
 * `include_usage`), each a Poisson arrival process at a fixed rate, with every request timed
 * and classified on the client. Open loop: a request is sent at its arrival time whether or not
 * earlier ones finished, as real tenants do; a closed loop would slow down with the server and
 * hide overload.
 *
 * Per request (times in ms from the run's start, `performance.now()` based):
 * - TTFT: send → the first chunk with non-empty `delta.content` (Weir's role chunk has `""`);
 * - TPOT: (last content chunk − first content chunk) ÷ (completion_tokens − 1), the seed's
 *   request-level time per output token (semconv's `time_per_output_token`);
 * - end-to-end: send → `data: [DONE]` (or the end of the body);
 * - outcome: `ok` (finish_reason from the engine, usage received), `rejected` (HTTP 429, or 503
 *   `queue_full`/`deadline_unmeetable`: the error body's `code` is the reason), `deadline` (a stream cut by Weir's deadline:
 *   `weir.finish_reason: "deadline"`, or a deadline that passed in the queue), `error` (anything
 *   else: another status, an in-band error chunk, a broken connection, a timeout).
 * Only token timings are kept: the prompt and the output text are never stored.
 */
import { performance } from 'node:perf_hooks';
import { createRandom, exponential, nearestRank } from '@weir/capacity';
import { Agent } from 'undici';

/** One stream of requests. */
export interface StreamSpec {
  /** Label in the results, e.g. `quiet`, `noisy`, `quiet-batch`. */
  name: string;
  tenant: string;
  /** Bearer key of the tenant's app. */
  apiKey: string;
  /** Mean arrival rate (requests/s); 0 sends nothing. */
  rps: number;
  /** `x-weir-priority`. */
  priority: 'interactive' | 'batch';
  /** `x-weir-deadline-ms`. */
  deadlineMs: number;
  /** PRNG seed of its arrivals. */
  seed: number;
}

/** What every request sends. */
export interface RequestShape {
  /** The chat message (sized so the replicas count the profile's prompt tokens). */
  prompt: string;
  model: string;
  maxTokens: number;
}

export type Outcome = 'ok' | 'rejected' | 'deadline' | 'error';

/** One request's record. */
export interface RequestRecord {
  stream: string;
  /** Which gateway it was sent to (index). */
  gateway: number;
  /** Scheduled arrival and actual send (ms from the run start); their gap is client lateness. */
  scheduledMs: number;
  sentMs: number;
  endMs: number;
  status: number;
  outcome: Outcome;
  /** Rejection or error code (`queue_full`, `deadline_unmeetable`, `rate_limit_exceeded`, `http_500`, `ECONNRESET`, …). */
  code?: string;
  ttftMs?: number;
  tpotMs?: number;
  e2eMs: number;
  completionTokens?: number;
  promptTokens?: number;
  /** `x-weir-generation-id`, to join the usage ledger (queue time). */
  generationId?: string;
  /** The error body's message (server-written, never prompt text), for rejections and errors. */
  message?: string;
  /** From the usage ledger (filled in after the run): scheduler queue time, and Weir's own TTFT (from the gateway's arrival, after auth and body parsing). */
  queueMs?: number;
  weirTtftMs?: number;
}

/** Options of {@link runOpenLoop}. */
export interface OpenLoopOptions {
  /** Gateway origins; requests alternate between them. */
  gateways: readonly string[];
  streams: readonly StreamSpec[];
  shape: RequestShape;
  /** Arrivals are generated over [0, durationMs); the run then waits for what is in flight. */
  durationMs: number;
  /** Per-request cap (ms): headers and body inactivity. Default 120,000. */
  requestTimeoutMs?: number;
  /** Called at `at` ms from the start (e.g. to kill a replica). */
  events?: ReadonlyArray<{ at: number; run: () => void | Promise<void> }>;
  /** Called once per second with the records so far (progress lines). */
  onTick?: (elapsedMs: number, records: readonly RequestRecord[]) => void;
}

/** Runs the streams and returns every request's record, in order of sending. */
export async function runOpenLoop(options: OpenLoopOptions): Promise<RequestRecord[]> {
  const timeout = options.requestTimeoutMs ?? 120_000;
  const agent = new Agent({ connections: 4096, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: timeout, bodyTimeout: timeout });
  const records: RequestRecord[] = [];
  const inFlight = new Set<Promise<void>>();
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  let next = 0;
  const body = JSON.stringify({
    model: options.shape.model,
    messages: [{ role: 'user', content: options.shape.prompt }],
    max_tokens: options.shape.maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  });

  const send = (stream: StreamSpec, scheduledMs: number) => {
    const gateway = next++ % options.gateways.length;
    const p = oneRequest(agent, options.gateways[gateway], stream, body, scheduledMs, gateway, now).then((r) => {
      records.push(r);
    });
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };

  // Arrival times of every stream, merged, sent from one timer loop.
  const arrivals: Array<{ at: number; stream: StreamSpec }> = [];
  for (const stream of options.streams) {
    if (stream.rps <= 0) continue;
    const random = createRandom(stream.seed);
    for (let t = exponential(random, stream.rps) * 1000; t < options.durationMs; t += exponential(random, stream.rps) * 1000) arrivals.push({ at: t, stream });
  }
  arrivals.sort((a, b) => a.at - b.at);
  const events = [...(options.events ?? [])].sort((a, b) => a.at - b.at);
  let ei = 0;
  let lastTick = 0;
  for (let i = 0; i < arrivals.length; ) {
    const t = now();
    while (ei < events.length && events[ei].at <= t) await events[ei++].run();
    while (i < arrivals.length && arrivals[i].at <= t) {
      send(arrivals[i].stream, arrivals[i].at);
      i++;
    }
    if (options.onTick && t - lastTick >= 1000) {
      lastTick = t;
      options.onTick(t, records);
    }
    const wait = Math.min(i < arrivals.length ? arrivals[i].at - now() : 50, ei < events.length ? events[ei].at - now() : 50, 50);
    if (wait > 0) await sleep(wait);
  }
  while (ei < events.length) {
    const wait = events[ei].at - now();
    if (wait > 0) await sleep(wait);
    await events[ei++].run();
  }
  while (inFlight.size > 0) {
    await Promise.race([...inFlight, sleep(1000)]);
    options.onTick?.(now(), records);
  }
  await agent.close();
  return records.sort((a, b) => a.sentMs - b.sentMs);
}

const CONTENT = /"content":"[^"]/;

/** 503 codes that are load shedding (ARCHITECTURE.md §8); any other 503 is an error. */
const SHEDDING_503 = new Set(['queue_full', 'deadline_unmeetable']);

/**
 * A rejection (reported apart from errors): every 429 (rate, token, concurrency limits, budget)
 * and the scheduler's 503 `queue_full` / `deadline_unmeetable`. A 503 such as
 * `upstream_unavailable` (a replica died before the first token) is an error, not shedding.
 */
export function isRejection(status: number, code: string): boolean {
  return status === 429 || (status === 503 && SHEDDING_503.has(code));
}

async function oneRequest(agent: Agent, origin: string, stream: StreamSpec, body: string, scheduledMs: number, gateway: number, now: () => number): Promise<RequestRecord> {
  const sentMs = now();
  const base = { stream: stream.name, gateway, scheduledMs, sentMs };
  let status = 0;
  try {
    const res = await agent.request({
      origin,
      path: '/v1/chat/completions',
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${stream.apiKey}`,
        'x-weir-priority': stream.priority,
        'x-weir-deadline-ms': String(stream.deadlineMs),
      },
      body,
    });
    status = res.statusCode;
    const generationId = header(res.headers['x-weir-generation-id']);
    if (status !== 200) {
      const text = await res.body.text();
      const endMs = now();
      let code = `http_${status}`;
      let message: string | undefined;
      try {
        const e = (JSON.parse(text) as { error?: { code?: string | null; type?: string; message?: string } }).error;
        code = e?.code ?? e?.type ?? code;
        message = e?.message;
      } catch {
        // not JSON: keep the status
      }
      // A request that waited in the queue until its deadline (the gateway answers before any
      // stream starts) is a deadline outcome, like one Weir ended in-stream, not an error.
      if (code === 'deadline_exceeded') return { ...base, endMs, status, outcome: 'deadline', code: 'deadline_in_queue', message, e2eMs: endMs - sentMs, generationId };
      return { ...base, endMs, status, outcome: isRejection(status, code) ? 'rejected' : 'error', code, message, e2eMs: endMs - sentMs, generationId };
    }
    const parsed = await readStream(res.body as AsyncIterable<Buffer>, now);
    const endMs = now();
    const ttftMs = parsed.firstContentMs === undefined ? undefined : parsed.firstContentMs - sentMs;
    const n = parsed.completionTokens;
    const tpotMs = parsed.firstContentMs !== undefined && parsed.lastContentMs !== undefined && n !== undefined && n > 1 ? (parsed.lastContentMs - parsed.firstContentMs) / (n - 1) : undefined;
    let outcome: Outcome = 'ok';
    let code: string | undefined;
    let message: string | undefined;
    if (parsed.error) {
      outcome = 'error';
      code = parsed.error;
      message = parsed.errorMessage;
    } else if (parsed.weirFinish === 'deadline') {
      outcome = 'deadline';
      code = ttftMs === undefined ? 'deadline_in_queue' : 'deadline_mid_stream';
    } else if (!parsed.done || n === undefined) {
      outcome = 'error';
      code = parsed.done ? 'no_usage' : 'stream_truncated';
    }
    return { ...base, endMs, status, outcome, code, message, ttftMs, tpotMs, e2eMs: endMs - sentMs, completionTokens: n, promptTokens: parsed.promptTokens, generationId };
  } catch (err) {
    const endMs = now();
    const code = (err as { code?: string }).code ?? (err instanceof Error ? err.name : 'error');
    return { ...base, endMs, status, outcome: 'error', code, message: err instanceof Error ? err.message : undefined, e2eMs: endMs - sentMs };
  }
}

interface ParsedStream {
  firstContentMs?: number;
  lastContentMs?: number;
  completionTokens?: number;
  promptTokens?: number;
  weirFinish?: string;
  error?: string;
  errorMessage?: string;
  done: boolean;
}

/** Reads an OpenAI chat stream, keeping only timings, usage, Weir's finish reason and errors. */
async function readStream(body: AsyncIterable<Buffer>, now: () => number): Promise<ParsedStream> {
  const out: ParsedStream = { done: false };
  let carry = '';
  for await (const chunk of body) {
    const t = now();
    carry += chunk.toString('utf8');
    let cut: number;
    while ((cut = carry.indexOf('\n\n')) >= 0) {
      const event = carry.slice(0, cut);
      carry = carry.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') {
          out.done = true;
          continue;
        }
        if (CONTENT.test(data)) {
          out.firstContentMs ??= t;
          out.lastContentMs = t;
        }
        if (data.includes('"usage":{') || data.includes('"error"') || data.includes('"weir"')) {
          const json = JSON.parse(data) as {
            usage?: { completion_tokens?: number; prompt_tokens?: number } | null;
            error?: { code?: string | null; type?: string; message?: string };
            weir?: { finish_reason?: string };
          };
          if (json.usage) {
            out.completionTokens = json.usage.completion_tokens;
            out.promptTokens = json.usage.prompt_tokens;
          }
          if (json.error) {
            out.error = json.error.code ?? json.error.type ?? 'error';
            out.errorMessage = json.error.message;
          }
          if (json.weir?.finish_reason) out.weirFinish = json.weir.finish_reason;
        }
      }
    }
  }
  return out;
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Count, mean, nearest-rank p50/p95/p99 and max (ms); null fields when empty (JSON-safe). */
export interface Stat {
  n: number;
  mean: number | null;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  max: number | null;
}

/** {@link Stat} of a sample (nearest rank, as libs/capacity's `summarize`). */
export function stat(values: readonly number[]): Stat {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return { n: 0, mean: null, p50: null, p95: null, p99: null, max: null };
  const sum = sorted.reduce((a, b) => a + b, 0);
  return { n: sorted.length, mean: sum / sorted.length, p50: nearestRank(sorted, 50), p95: nearestRank(sorted, 95), p99: nearestRank(sorted, 99), max: sorted[sorted.length - 1] };
}

/** One stream's figures over a window. */
export interface StreamSummary {
  stream: string;
  /** Requests sent in the window. */
  sent: number;
  /** Offered rate in the window (requests/s). */
  offeredRps: number;
  ok: number;
  /** Completed requests per second (ok only). */
  goodputRps: number;
  /** Rejections by code (429/503 with an error body). */
  rejected: Record<string, number>;
  /** Deadlines (cut mid-stream or passed in the queue), by code. */
  deadline: Record<string, number>;
  /** Errors by code, apart from rejections. */
  errors: Record<string, number>;
  /** Over `ok` requests (ms). */
  ttftMs: Stat;
  tpotMs: Stat;
  e2eMs: Stat;
  /** From the usage ledger, over `ok` requests with a ledger row (ms). */
  queueMs: Stat;
  /** Weir's TTFT from the ledger (gateway arrival → first token), over `ok` requests (ms). */
  weirTtftMs: Stat;
  /** Client TTFT − Weir's TTFT: time before the gateway's clock starts (connect, accept backlog, auth, body parsing) and delivery lag (ms). */
  outsideTtftMs: Stat;
  /** One message per rejection/error code (the first seen). */
  messages: Record<string, string>;
  /** Client lateness: send − scheduled arrival (ms), over all requests. */
  sendLagMs: Stat;
}

/**
 * Per-stream figures for requests **sent** in [fromMs, toMs) (ms from the run start): a request
 * belongs to the window it was sent in, wherever it ended.
 */
export function summarizeStreams(records: readonly RequestRecord[], streams: readonly string[], fromMs: number, toMs: number): StreamSummary[] {
  const seconds = (toMs - fromMs) / 1000;
  return streams.map((name) => {
    const rs = records.filter((r) => r.stream === name && r.sentMs >= fromMs && r.sentMs < toMs);
    const ok = rs.filter((r) => r.outcome === 'ok');
    const count = (outcome: Outcome) => {
      const m: Record<string, number> = {};
      for (const r of rs) if (r.outcome === outcome) m[r.code ?? outcome] = (m[r.code ?? outcome] ?? 0) + 1;
      return m;
    };
    return {
      stream: name,
      sent: rs.length,
      offeredRps: rs.length / seconds,
      ok: ok.length,
      goodputRps: ok.length / seconds,
      rejected: count('rejected'),
      deadline: count('deadline'),
      errors: count('error'),
      ttftMs: stat(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs]))),
      tpotMs: stat(ok.flatMap((r) => (r.tpotMs === undefined ? [] : [r.tpotMs]))),
      e2eMs: stat(ok.map((r) => r.e2eMs)),
      queueMs: stat(ok.flatMap((r) => (r.queueMs === undefined ? [] : [r.queueMs]))),
      weirTtftMs: stat(ok.flatMap((r) => (r.weirTtftMs === undefined ? [] : [r.weirTtftMs]))),
      outsideTtftMs: stat(ok.flatMap((r) => (r.weirTtftMs === undefined || r.ttftMs === undefined ? [] : [r.ttftMs - r.weirTtftMs]))),
      messages: Object.fromEntries(rs.filter((r) => r.code && r.message).reverse().map((r) => [r.code as string, (r.message as string).slice(0, 200)])),
      sendLagMs: stat(rs.map((r) => r.sentMs - r.scheduledMs)),
    };
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

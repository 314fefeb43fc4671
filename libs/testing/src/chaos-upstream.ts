/**
 * The chaos proof's upstream (issue 13, item 8): OpenAI-compatible streaming servers that play a
 * seeded schedule per request and count, per generation, exactly what they sent.
 *
 * Two flavours:
 * - `weir-engine`: emulates one of Weir's own engine replicas (`libs/engine-server`): cumulative
 *   usage on every content chunk when asked (`stream_options.continuous_usage_stats`), the usage
 *   chunk when asked (`include_usage`), `POST /v1/stop/{generation id}` (stop and end the stream
 *   normally with the final usage), `GET /v1/generations/{id}/usage` (its own count, for
 *   reconciliation), `POST /tokenize`, `/readyz`, `/healthz`, `/v1/models`.
 * - `no-usage`: a hosted OpenAI-compatible upstream that reports no usage at all (no usage chunk
 *   even when asked, no continuous usage) and has none of the extensions, so Weir must count
 *   (with the revision's tokenizer) or estimate.
 *
 * A generation is keyed by the `x-request-id` the caller sends (Weir's generation id). Its
 * schedule comes from a plan id written in the prompt (`chaos-plan:<id>`), looked up with
 * `options.plan`; the same plan id on a retry gives the same schedule. Every attempt (a call
 * for the generation on any server sharing one {@link ChaosRecorder}) is recorded: the output
 * tokens actually written to the socket (`produced`), whether usage reached the caller, and how
 * it ended. The servers run inside the test process (they are never the process killed).
 *
 * Output text: one word per token from {@link CHAOS_WORDS}, each a single token of the
 * `cl100k_base` and `o200k_base` encodings, also when concatenated, so a tokenizer count of the
 * text equals the tokens sent. Prompt tokens: {@link chaosPromptTokens} (deterministic, served by
 * `/tokenize` and reported in usage alike).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What one request's upstream calls do (ms, tokens). */
export interface ChaosSchedule {
  /** Output tokens the upstream produces when nothing stops it (the request's max tokens caps it: finish `length`). */
  tokens: number;
  /** Pause before each output token (ms). Default 0. */
  tokenDelayMs?: number;
  /** Pause after the 200 headers and role chunk, before the first token (ms). Default 0. */
  firstTokenDelayMs?: number;
  /**
   * Destroy the socket (no finish chunk, no `[DONE]`) once this many output tokens are written
   * and flushed; 0 dies right after the headers and role chunk. Default: never.
   */
  dieAfterTokens?: number;
  /** The first this many attempts of a generation (on any server) get a 503 before any output. Default 0. */
  failAttempts?: number;
}

/** How one attempt ended on the upstream. */
export type ChaosAttemptEnding =
  | 'running'
  /** Produced everything (or hit max tokens) and ended the stream normally. */
  | 'finished'
  /** `POST /v1/stop/{id}` stopped it; the stream ended normally with the final usage. */
  | 'stopped'
  /** The caller closed the connection before the stream ended. */
  | 'client_closed'
  /** The schedule destroyed the socket mid-stream. */
  | 'died'
  /** Answered 503 before any output (the schedule's `failAttempts`). */
  | 'refused';

/** One call for a generation, as the upstream saw and answered it. */
export interface ChaosAttempt {
  generationId: string;
  /** 1, 2, … across every server sharing the recorder. */
  attempt: number;
  /** The server's replica id. */
  replicaId: string;
  flavour: ChaosFlavour;
  /** From the prompt's `chaos-plan:<id>`; undefined when the prompt had none. */
  planId?: string;
  startedAtMs: number;
  /** Set when it ended (any ending but `running`). */
  endedAtMs?: number;
  ending: ChaosAttemptEnding;
  /** Prompt tokens by {@link chaosPromptTokens} (what a `weir-engine` reports and `/tokenize` says). */
  promptTokens: number;
  /** The request's output limit (`max_completion_tokens` ?? `max_tokens`), if any. */
  maxTokens?: number;
  /** Output tokens written to the caller (each counted once its chunk was handed to the socket). */
  produced: number;
  /**
   * How the caller learnt the usage: `continuous` (every content chunk carried the running
   * count), `final` (only the usage chunk at a normal end), `none`.
   */
  usageReported: 'continuous' | 'final' | 'none';
  /** The caller asked for the stream (Weir always does). */
  stream: boolean;
}

/** A generation: every attempt, in order. */
export interface ChaosGeneration {
  generationId: string;
  planId?: string;
  attempts: ChaosAttempt[];
}

/** Shared by the servers of one run: every generation they saw. */
export interface ChaosRecorder {
  /** Generations by id, in the order first seen. */
  readonly generations: Map<string, ChaosGeneration>;
  /** Output tokens produced for a generation across its attempts (0 when unknown). */
  produced(generationId: string): number;
  /** Attempts still running. */
  running(): ChaosAttempt[];
  /** Resolves once no attempt runs (or after `timeoutMs`, with false). */
  idle(timeoutMs: number): Promise<boolean>;
}

/** A {@link ChaosRecorder} the servers write to. */
export interface ChaosRecorderWriter extends ChaosRecorder {
  /** Records a new attempt (its number is assigned here). */
  begin(a: Omit<ChaosAttempt, 'attempt'>): ChaosAttempt;
  /** Attempts already made for a generation. */
  previousAttempts(generationId: string): number;
}

/** Creates an empty recorder. */
export function createChaosRecorder(): ChaosRecorderWriter {
  const generations = new Map<string, ChaosGeneration>();
  const all = (): ChaosAttempt[] => [...generations.values()].flatMap((g) => g.attempts);
  return {
    generations,
    produced: (id) => (generations.get(id)?.attempts ?? []).reduce((n, a) => n + a.produced, 0),
    running: () => all().filter((a) => a.ending === 'running'),
    previousAttempts: (id) => generations.get(id)?.attempts.length ?? 0,
    begin(a) {
      let g = generations.get(a.generationId);
      if (!g) {
        g = { generationId: a.generationId, ...(a.planId !== undefined ? { planId: a.planId } : {}), attempts: [] };
        generations.set(a.generationId, g);
      }
      const attempt: ChaosAttempt = { ...a, attempt: g.attempts.length + 1 };
      g.attempts.push(attempt);
      return attempt;
    },
    async idle(timeoutMs) {
      const until = Date.now() + timeoutMs;
      while (all().some((a) => a.ending === 'running')) {
        if (Date.now() > until) return false;
        await new Promise((r) => setTimeout(r, 50));
      }
      return true;
    },
  };
}

/** The two upstream behaviours (see the module comment). */
export type ChaosFlavour = 'weir-engine' | 'no-usage';

/** Options of {@link startChaosUpstream}. */
export interface ChaosUpstreamOptions {
  flavour: ChaosFlavour;
  /** This server's replica id (recorded on each attempt). */
  replicaId: string;
  /** Shared by every server of the run. */
  recorder: ChaosRecorderWriter;
  /** The schedule of a plan id; undefined (or no plan id in the prompt) plays {@link DEFAULT_CHAOS_SCHEDULE}. */
  plan(planId: string): ChaosSchedule | undefined;
  /** The `model` echoed in chunks. Default `chaos`. */
  modelName?: string;
  /** Port to listen on (127.0.0.1). Default 0 (any free port). */
  port?: number;
}

/** A running chaos upstream server. */
export interface ChaosUpstream {
  replicaId: string;
  flavour: ChaosFlavour;
  /** `http://127.0.0.1:<port>` */
  origin: string;
  /** `<origin>/v1`, the base URL a revision names. */
  url: string;
  /** Stops listening and cuts every connection. */
  close(): Promise<void>;
}

/** What a request without a plan gets: 3 tokens, no pause. */
export const DEFAULT_CHAOS_SCHEDULE: ChaosSchedule = { tokens: 3 };

/**
 * The output words, one per token. Each is one token of `cl100k_base` and `o200k_base` with its
 * leading space, and a space-led word is a pre-token boundary in both, so the encodings never
 * merge two of them: `n` words encode to exactly `n` tokens.
 */
export const CHAOS_WORDS: readonly string[] = [' the', ' cat', ' sat', ' on', ' a', ' mat', ' and', ' ran', ' to', ' big', ' red', ' dog'];

/** The plan id in a prompt: `chaos-plan:<letters, digits, - or _>`. */
const PLAN_PATTERN = /chaos-plan:([A-Za-z0-9_-]+)/;

/** A chat message as the servers read it (content already flattened to text). */
export interface ChaosMessage {
  role: string;
  content: string;
}

/**
 * The prompt tokens a `weir-engine` server counts (and reports): per message its
 * whitespace-separated words + 3, plus 1. Deterministic and cheap; what matters is that
 * `/tokenize` and the usage agree, as a real engine's do.
 */
export function chaosPromptTokens(messages: readonly ChaosMessage[]): number {
  return messages.reduce((n, m) => n + m.content.split(/\s+/).filter((w) => w.length > 0).length + 3, 1);
}

/** The plan id written in a prompt, if any. */
export function chaosPlanId(messages: readonly ChaosMessage[]): string | undefined {
  for (const m of messages) {
    const found = PLAN_PATTERN.exec(m.content);
    if (found) return found[1];
  }
  return undefined;
}

/** The prompt text for a plan: the marker and `fillerWords` words (to vary prompt sizes). */
export function chaosPrompt(planId: string, fillerWords: number): string {
  const words = Array.from({ length: fillerWords }, (_, i) => CHAOS_WORDS[i % CHAOS_WORDS.length].trim());
  return `chaos-plan:${planId} ${words.join(' ')}`.trim();
}

/** Starts one chaos upstream server on 127.0.0.1. */
export async function startChaosUpstream(options: ChaosUpstreamOptions): Promise<ChaosUpstream> {
  const { flavour, replicaId, recorder } = options;
  const model = options.modelName ?? 'chaos';
  const engine = flavour === 'weir-engine';
  /** Running attempts on this server by generation id, for `/v1/stop`. */
  const running = new Map<string, { stop(): void }>();

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: Record<string, unknown> = {};
      try {
        body = raw.length > 0 ? (JSON.parse(raw) as Record<string, unknown>) : {};
      } catch {
        sendJson(res, 400, openAiError('invalid JSON', 'invalid_request_error', 'invalid_json'));
        return;
      }
      route(req, res, body).catch(() => {
        if (!res.headersSent) sendJson(res, 500, openAiError('chaos upstream failed', 'server_error', 'internal'));
        else res.destroy();
      });
    });
  });

  async function route(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://chaos');
    const path = url.pathname;
    if (req.method === 'GET' && (path === '/readyz' || path === '/healthz')) return sendJson(res, 200, { status: 'ready' });
    if (req.method === 'GET' && path === '/v1/models') return sendJson(res, 200, { object: 'list', data: [{ id: model, object: 'model', created: 0, owned_by: 'chaos' }] });
    if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions')) return generate(req, res, body, path === '/v1/chat/completions');
    if (engine && req.method === 'POST' && path === '/tokenize') {
      const input = body.input;
      const messages = typeof input === 'string' ? [{ role: 'user', content: input }] : Array.isArray(input) ? input.map(toMessage) : undefined;
      if (!messages) return sendJson(res, 400, openAiError('send {"input": text | messages}', 'invalid_request_error', 'invalid_request'));
      return sendJson(res, 200, { input_tokens: chaosPromptTokens(messages) });
    }
    const stop = /^\/v1\/stop\/([^/]+)$/.exec(path);
    if (engine && req.method === 'POST' && stop) {
      const id = decodeURIComponent(stop[1]);
      const r = running.get(id);
      if (!r) return sendJson(res, 404, openAiError('no running generation with that id on this replica', 'not_found_error', 'not_found'));
      r.stop();
      return sendJson(res, 200, { generation_id: id, status: 'stopping' });
    }
    const usage = /^\/v1\/generations\/([^/]+)\/usage$/.exec(path);
    if (engine && req.method === 'GET' && usage) {
      const id = decodeURIComponent(usage[1]);
      const mine = (recorder.generations.get(id)?.attempts ?? []).filter((a) => a.replicaId === replicaId && a.ending !== 'refused');
      const last = mine.at(-1);
      if (!last) return sendJson(res, 404, openAiError('no generation with that id on this replica', 'not_found_error', 'not_found'));
      const finished = last.ending !== 'running';
      return sendJson(res, 200, {
        generation_id: id,
        prompt_tokens: finished ? last.promptTokens : null,
        completion_tokens: last.produced,
        finished,
        finish_reason: !finished ? null : last.ending === 'died' ? 'error' : last.ending === 'client_closed' ? 'aborted' : last.ending === 'stopped' ? 'aborted' : 'stop',
      });
    }
    return sendJson(res, 404, openAiError(`no route ${req.method} ${path}`, 'not_found_error', 'not_found'));
  }

  async function generate(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>, chat: boolean): Promise<void> {
    const messages: ChaosMessage[] = chat
      ? (Array.isArray(body.messages) ? body.messages : []).map(toMessage)
      : [{ role: 'user', content: typeof body.prompt === 'string' ? body.prompt : Array.isArray(body.prompt) ? String(body.prompt[0] ?? '') : '' }];
    const header = req.headers['x-request-id'];
    const generationId = typeof header === 'string' && header.length > 0 ? header : `chaos-${Math.random().toString(36).slice(2)}`;
    const planId = chaosPlanId(messages);
    const schedule = (planId !== undefined ? options.plan(planId) : undefined) ?? DEFAULT_CHAOS_SCHEDULE;
    const maxRaw = chat ? (body.max_completion_tokens ?? body.max_tokens) : body.max_tokens;
    const maxTokens = typeof maxRaw === 'number' && maxRaw > 0 ? maxRaw : undefined;
    const stream = body.stream === true;
    const options_ = (body.stream_options ?? {}) as { include_usage?: boolean; continuous_usage_stats?: boolean };
    const continuous = engine && stream && options_.continuous_usage_stats === true;
    const includeUsage = engine && (!stream || options_.include_usage === true);
    const previous = recorder.previousAttempts(generationId);
    const attempt = recorder.begin({
      generationId,
      replicaId,
      flavour,
      ...(planId !== undefined ? { planId } : {}),
      startedAtMs: Date.now(),
      ending: 'running',
      promptTokens: chaosPromptTokens(messages),
      ...(maxTokens !== undefined ? { maxTokens } : {}),
      produced: 0,
      usageReported: 'none',
      stream,
    });
    let stopped = false;
    let wake: (() => void) | undefined;
    const handle = {
      stop() {
        stopped = true;
        wake?.();
      },
    };
    const end = (ending: ChaosAttemptEnding) => {
      if (attempt.ending !== 'running') return;
      attempt.ending = ending;
      attempt.endedAtMs = Date.now();
      if (running.get(generationId) === handle) running.delete(generationId);
    };
    if (previous < (schedule.failAttempts ?? 0)) {
      end('refused');
      sendJson(res, 503, openAiError('chaos: overloaded before the first token', 'server_error', 'overloaded'), { 'retry-after': '1' });
      return;
    }
    running.set(generationId, handle);
    res.on('close', () => {
      if (!res.writableFinished) end('client_closed');
    });
    const gone = () => attempt.ending !== 'running' || res.destroyed;
    /** Sleeps `ms`, cut short by a stop. */
    const pause = (ms: number) =>
      ms <= 0 || stopped
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            const t = setTimeout(done, ms);
            function done() {
              clearTimeout(t);
              wake = undefined;
              resolve();
            }
            wake = done;
          });
    const target = maxTokens !== undefined ? Math.min(schedule.tokens, maxTokens) : schedule.tokens;
    const finishReason = maxTokens !== undefined && schedule.tokens >= maxTokens ? 'length' : 'stop';
    const id = `chatcmpl-${generationId}`;
    const created = Math.floor(Date.now() / 1000);
    const usageOf = () => ({ prompt_tokens: attempt.promptTokens, completion_tokens: attempt.produced, total_tokens: attempt.promptTokens + attempt.produced });
    const chunk = (choice: Record<string, unknown> | null, extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id, object: chat ? 'chat.completion.chunk' : 'text_completion', created, model, choices: choice ? [{ index: 0, ...choice, logprobs: null }] : [], ...extra })}\n\n`;
    /** Writes, resolving once the bytes were handed to the kernel (or the socket is gone). */
    const write = (text: string) => new Promise<void>((resolve) => (gone() ? resolve() : res.write(text, () => resolve())));

    if (!stream) {
      // Weir always streams; a plain JSON answer for completeness (no die, no stop).
      let text = '';
      for (let i = 0; i < target && !gone() && !stopped; i++) {
        await pause(schedule.tokenDelayMs ?? 0);
        text += CHAOS_WORDS[i % CHAOS_WORDS.length];
        attempt.produced += 1;
      }
      if (gone()) return;
      if (includeUsage) attempt.usageReported = 'final';
      const message = chat ? { message: { role: 'assistant', content: text } } : { text };
      sendJson(res, 200, { id, object: chat ? 'chat.completion' : 'text_completion', created, model, choices: [{ index: 0, ...message, finish_reason: finishReason, logprobs: null }], ...(includeUsage ? { usage: usageOf() } : {}) });
      end(stopped ? 'stopped' : 'finished');
      return;
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    if (chat) await write(chunk({ delta: { role: 'assistant', content: '' }, finish_reason: null }));
    await pause(schedule.firstTokenDelayMs ?? 0);
    if (continuous) attempt.usageReported = 'continuous';
    let dying = false;
    for (let i = 0; i < target; i++) {
      if (schedule.dieAfterTokens !== undefined && attempt.produced >= schedule.dieAfterTokens) {
        dying = true;
        break;
      }
      if (i > 0 || !schedule.firstTokenDelayMs) await pause(schedule.tokenDelayMs ?? 0);
      if (gone() || stopped) break;
      const word = CHAOS_WORDS[i % CHAOS_WORDS.length];
      // Counted when handed to the socket: a chunk written is a token produced, whether or not
      // the caller reads it before it closes the connection.
      attempt.produced += 1;
      const usage = continuous ? { usage: usageOf() } : {};
      await write(chunk(chat ? { delta: { content: word }, finish_reason: null } : { text: word, finish_reason: null }, usage));
    }
    if (gone()) return;
    if (dying) {
      // Every chunk was flushed to the kernel (each write awaited its callback): the caller
      // receives them all, then the connection drops without a finish chunk or [DONE].
      end('died');
      res.socket?.destroy();
      return;
    }
    await write(chunk(chat ? { delta: {}, finish_reason: stopped ? 'stop' : finishReason } : { text: '', finish_reason: stopped ? 'stop' : finishReason }));
    if (includeUsage) {
      await write(chunk(null, { usage: usageOf() }));
      if (attempt.usageReported === 'none') attempt.usageReported = 'final';
    }
    if (gone()) return;
    end(stopped ? 'stopped' : 'finished');
    res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return {
    replicaId,
    flavour,
    origin,
    url: `${origin}/v1`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function toMessage(m: unknown): ChaosMessage {
  const o = (m ?? {}) as { role?: unknown; content?: unknown };
  const content = typeof o.content === 'string' ? o.content : Array.isArray(o.content) ? o.content.map((p: { text?: unknown }) => (typeof p?.text === 'string' ? p.text : '')).join('') : '';
  return { role: typeof o.role === 'string' ? o.role : 'user', content };
}

function openAiError(message: string, type: string, code: string) {
  return { error: { message, type, param: null, code } };
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

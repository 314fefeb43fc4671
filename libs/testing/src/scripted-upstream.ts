import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the scripted upstream received. */
export interface RecordedRequest {
  method: string;
  /** Path including the query, e.g. `/v1/chat/completions`. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The body parsed as JSON, or undefined when it is empty or not JSON. */
  body: unknown;
  rawBody: string;
  /** Set to true when the client went away before the reply was fully sent. */
  clientAborted: boolean;
  /**
   * Output tokens written to the client so far: the sum of the `tokens` of the SSE steps sent
   * (a step is counted once its bytes are written). What the upstream produced, for billing
   * checks. 0 for replies whose steps declare none.
   */
  tokensSent: number;
}

/**
 * One step of an SSE body: raw bytes (a string is sent as UTF-8) after `delayMs` (default 0),
 * or `destroy` to cut the socket mid-stream (no proper HTTP end).
 */
export type SseStep = { data: string | Uint8Array; delayMs?: number; /** Output tokens this step carries (counted into `tokensSent`). Default 0. */ tokens?: number } | { destroy: true; delayMs?: number };

/** What the scripted upstream answers to one request. */
export type UpstreamReply =
  /** A status code with an OpenAI-shaped (or any) JSON error body. */
  | { kind: 'error'; status: number; body?: unknown; headers?: Record<string, string> }
  /** A non-stream JSON response (default status 200). */
  | { kind: 'json'; status?: number; body: unknown; headers?: Record<string, string> }
  /**
   * A `text/event-stream` body played step by step. After the last step the response ends,
   * unless `hang` is true: then it stays open (a stalled upstream) until the client leaves
   * or the upstream is closed.
   */
  | { kind: 'sse'; steps: SseStep[]; status?: number; headers?: Record<string, string>; hang?: boolean };

/** Chooses the reply for a request; `index` counts requests from 0. */
export type UpstreamScript = (request: RecordedRequest, index: number) => UpstreamReply | Promise<UpstreamReply>;

/** A running scripted upstream. */
export interface ScriptedUpstream {
  /** Base URL including `/v1`, e.g. `http://127.0.0.1:40123/v1`. */
  url: string;
  /** Every request received, in order. */
  requests: RecordedRequest[];
  /** Replaces the script for the following requests. */
  setScript(script: UpstreamScript): void;
  /** Number of responses whose client went away before the reply was fully sent. */
  clientAborts(): number;
  /** Stops the server and cuts every open connection. */
  close(): Promise<void>;
}

/** Options of {@link startScriptedUpstream}. */
export interface ScriptedUpstreamOptions {
  /** The initial script; default: a chat stream of `['Hello', ' world']` with a usage chunk. */
  script?: UpstreamScript;
}

/**
 * Starts an HTTP server on 127.0.0.1 (port 0) that plays a script per request: a status code
 * with a JSON error body, a JSON response, or an SSE body given as raw byte chunks with delays,
 * so tests can split events across reads, split a multi-byte UTF-8 character, use CRLF, insert
 * `: ping` comments, stall, omit usage, send in-band error frames or destroy the socket.
 * Every request (any method and path) is recorded and answered by the script.
 */
export async function startScriptedUpstream(options: ScriptedUpstreamOptions = {}): Promise<ScriptedUpstream> {
  let script: UpstreamScript = options.script ?? (() => sseReply(chatStreamEvents(['Hello', ' world'])));
  const requests: RecordedRequest[] = [];
  let aborted = 0;

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = rawBody.length > 0 ? JSON.parse(rawBody) : undefined;
      } catch {
        body = undefined;
      }
      const recorded: RecordedRequest = {
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        headers: req.headers,
        body,
        rawBody,
        clientAborted: false,
        tokensSent: 0,
      };
      const index = requests.push(recorded) - 1;
      Promise.resolve()
        .then(() => script(recorded, index))
        .then((reply) => play(reply, res, recorded))
        .catch((error: unknown) => {
          if (!res.headersSent) {
            res.writeHead(500, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ error: { message: `script failed: ${String(error)}`, type: 'server_error' } }));
          } else {
            res.destroy();
          }
        });
    });
  });

  async function play(reply: UpstreamReply, res: ServerResponse, recorded: RecordedRequest): Promise<void> {
    let gone = false;
    res.on('close', () => {
      if (!res.writableFinished) {
        gone = true;
        recorded.clientAborted = true;
        aborted += 1;
      }
    });
    if (reply.kind === 'error' || reply.kind === 'json') {
      const status = reply.kind === 'error' ? reply.status : (reply.status ?? 200);
      const body =
        reply.kind === 'json'
          ? reply.body
          : (reply.body ?? { error: { message: `scripted ${reply.status}`, type: 'server_error', param: null, code: null } });
      res.writeHead(status, { 'content-type': 'application/json', ...reply.headers });
      res.end(JSON.stringify(body));
      return;
    }
    res.writeHead(reply.status ?? 200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      ...reply.headers,
    });
    res.flushHeaders();
    for (const step of reply.steps) {
      if (step.delayMs && step.delayMs > 0) await sleep(step.delayMs);
      if (gone) return;
      if ('destroy' in step) {
        res.socket?.destroy();
        return;
      }
      res.write(step.data);
      recorded.tokensSent += step.tokens ?? 0;
    }
    if (!reply.hang) res.end();
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    setScript(next) {
      script = next;
    },
    clientAborts: () => aborted,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * An OpenAI usage object as an upstream sends it: the totals, and optionally the token-class
 * details (`cached_tokens` inside `prompt_tokens`, `reasoning_tokens` inside `completion_tokens`).
 */
export interface ScriptedUsage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number };
  completion_tokens_details?: { reasoning_tokens?: number };
}

/** Options of the stream builders. */
export interface StreamEventsOptions {
  /** `finish_reason` of the finish chunk; default `stop`. `null` omits the finish chunk. */
  finishReason?: string | null;
  /** The usage chunk's counts; `false` omits the chunk. Default: 5 prompt tokens, one completion token per piece. */
  usage?: ScriptedUsage | false;
  /** End with `data: [DONE]`; default true. */
  done?: boolean;
  /** Line ending inside events; default `\n`. */
  eol?: '\n' | '\r\n';
  /** The `model` field; default `scripted-model`. */
  model?: string;
}

/** Frames one SSE `data:` event (`data: <json or string>` + blank line). */
export function sseEvent(data: unknown, eol: '\n' | '\r\n' = '\n'): string {
  return `data: ${typeof data === 'string' ? data : JSON.stringify(data)}${eol}${eol}`;
}

/**
 * The events (one string each) of a normal OpenAI chat stream: a role chunk, one content chunk
 * per piece, the finish chunk, the usage chunk (`choices: []`) and `[DONE]`.
 */
export function chatStreamEvents(pieces: string[], options: StreamEventsOptions = {}): string[] {
  const eol = options.eol ?? '\n';
  const meta = { id: 'chatcmpl-scripted', object: 'chat.completion.chunk', created: 1_700_000_000, model: options.model ?? 'scripted-model' };
  const chunk = (delta: object, finish: string | null): string =>
    sseEvent({ ...meta, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null }, eol);
  const events = [chunk({ role: 'assistant', content: '' }, null), ...pieces.map((p) => chunk({ content: p }, null))];
  if (options.finishReason !== null) events.push(chunk({}, options.finishReason ?? 'stop'));
  return withTail(events, meta, pieces.length, options, eol);
}

/** One tool call a scripted chat stream makes: its arguments are sent in the given fragments. */
export interface ScriptedToolCall {
  id: string;
  name: string;
  /** The arguments JSON, in the pieces the stream sends (joined, the whole arguments). */
  argumentFragments: string[];
}

/**
 * The events of an OpenAI chat stream that calls tools, as OpenAI sends them: a role chunk,
 * optional content chunks (`text`), then per call one chunk `delta.tool_calls[{index, id,
 * type: "function", function: {name, arguments: ""}}]` followed by one chunk per arguments
 * fragment (`{index, function: {arguments}}`), then the finish chunk (`tool_calls` unless
 * `options.finishReason` says otherwise), the usage chunk and `[DONE]`.
 */
export function chatToolCallStreamEvents(calls: ScriptedToolCall[], text: string[] = [], options: StreamEventsOptions = {}): string[] {
  const eol = options.eol ?? '\n';
  const meta = { id: 'chatcmpl-scripted', object: 'chat.completion.chunk', created: 1_700_000_000, model: options.model ?? 'scripted-model' };
  const chunk = (delta: object, finish: string | null): string =>
    sseEvent({ ...meta, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null }, eol);
  const events = [chunk({ role: 'assistant', content: text.length > 0 ? '' : null }, null), ...text.map((p) => chunk({ content: p }, null))];
  let pieces = text.length;
  for (const [index, call] of calls.entries()) {
    events.push(chunk({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] }, null));
    for (const fragment of call.argumentFragments) events.push(chunk({ tool_calls: [{ index, function: { arguments: fragment } }] }, null));
    pieces += 1 + call.argumentFragments.length;
  }
  if (options.finishReason !== null) events.push(chunk({}, options.finishReason ?? 'tool_calls'));
  return withTail(events, meta, pieces, options, eol);
}

/** The events of a legacy `/v1/completions` stream (`text_completion` chunks), same options. */
export function completionStreamEvents(pieces: string[], options: StreamEventsOptions = {}): string[] {
  const eol = options.eol ?? '\n';
  const meta = { id: 'cmpl-scripted', object: 'text_completion', created: 1_700_000_000, model: options.model ?? 'scripted-model' };
  const chunk = (text: string, finish: string | null): string =>
    sseEvent({ ...meta, choices: [{ index: 0, text, logprobs: null, finish_reason: finish }], usage: null }, eol);
  const events = pieces.map((p) => chunk(p, null));
  if (options.finishReason !== null) events.push(chunk('', options.finishReason ?? 'stop'));
  return withTail(events, meta, pieces.length, options, eol);
}

function withTail(events: string[], meta: object, pieces: number, options: StreamEventsOptions, eol: '\n' | '\r\n'): string[] {
  if (options.usage !== false) {
    const usage = options.usage ?? { prompt_tokens: 5, completion_tokens: pieces };
    events.push(
      sseEvent({ ...meta, choices: [], usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } }, eol),
    );
  }
  if (options.done ?? true) events.push(sseEvent('[DONE]', eol));
  return events;
}

/** A non-stream `chat.completion` body. */
export function chatCompletionBody(
  text: string,
  options: { finishReason?: string; usage?: ScriptedUsage } = {},
): Record<string, unknown> {
  const usage = options.usage ?? { prompt_tokens: 5, completion_tokens: 1 };
  return {
    id: 'chatcmpl-scripted',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'scripted-model',
    choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: options.finishReason ?? 'stop' }],
    usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
  };
}

/** An SSE reply sending each event as one step, `delayMs` apart (default 0). */
export function sseReply(events: Array<string | Uint8Array>, options: { delayMs?: number; hang?: boolean } = {}): UpstreamReply {
  return { kind: 'sse', steps: events.map((data) => ({ data, delayMs: options.delayMs })), hang: options.hang };
}

/**
 * Concatenates `events` and cuts the bytes at the given byte offsets (ascending), e.g. to
 * split an event across reads or a multi-byte UTF-8 character across chunks.
 */
export function splitBytes(events: Array<string | Uint8Array>, offsets: number[]): Uint8Array[] {
  const all = Buffer.concat(events.map((e) => (typeof e === 'string' ? Buffer.from(e, 'utf8') : Buffer.from(e))));
  const parts: Uint8Array[] = [];
  let start = 0;
  for (const offset of [...offsets, all.length]) {
    if (offset > start) parts.push(all.subarray(start, offset));
    start = Math.max(start, offset);
  }
  return parts;
}

/** Options of {@link fakeModelScript}. */
export interface FakeModelOptions {
  /** Delay before each piece (ms); default 0. */
  pieceDelayMs?: number;
  /** Pieces produced when the request's limit allows; default 8 (then `finish_reason: stop`). */
  naturalPieces?: number;
  /** Prompts longer than this (UTF-8 bytes) get a 400 `context_length_exceeded`. Default 2,000. */
  contextBytes?: number;
}

/**
 * A script that behaves like a small model behind an OpenAI-compatible API: it reads the
 * request's `max_completion_tokens`/`max_tokens`, streams up to that many pieces (`w0 `,
 * `w1 `, …; `finish_reason: length` when the limit cut it, else `stop` after
 * `naturalPieces`), sends a usage chunk only when `stream_options.include_usage` is set
 * (prompt tokens = whitespace-separated words, at least 1), answers non-stream requests with
 * JSON, and rejects over-long prompts with 400 `context_length_exceeded`.
 */
export function fakeModelScript(options: FakeModelOptions = {}): UpstreamScript {
  return (request) => {
    const body = (request.body ?? {}) as Record<string, unknown>;
    const prompt =
      typeof body.prompt === 'string'
        ? body.prompt
        : Array.isArray(body.messages)
          ? (body.messages as Array<{ content?: unknown }>).map((m) => String(m.content ?? '')).join('\n')
          : '';
    if (Buffer.byteLength(prompt) > (options.contextBytes ?? 2000)) {
      return {
        kind: 'error',
        status: 400,
        body: { error: { message: 'prompt too long', type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } },
      };
    }
    const limit = Number(body.max_completion_tokens ?? body.max_tokens ?? 16);
    const natural = options.naturalPieces ?? 8;
    const count = Math.min(limit, natural);
    const pieces = Array.from({ length: count }, (_, i) => `w${i} `);
    const finishReason = limit < natural ? 'length' : 'stop';
    const usage = { prompt_tokens: Math.max(1, prompt.split(/\s+/).filter(Boolean).length), completion_tokens: count };
    const isCompletions = request.path.endsWith('/completions') && !request.path.endsWith('/chat/completions');
    if (body.stream !== true) {
      if (isCompletions) {
        return {
          kind: 'json',
          body: {
            id: 'cmpl-scripted',
            object: 'text_completion',
            created: 1_700_000_000,
            model: 'scripted-model',
            choices: [{ index: 0, text: pieces.join(''), logprobs: null, finish_reason: finishReason }],
            usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
          },
        };
      }
      return { kind: 'json', body: chatCompletionBody(pieces.join(''), { finishReason, usage }) };
    }
    const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
    const build = isCompletions ? completionStreamEvents : chatStreamEvents;
    const events = build(pieces, { finishReason, usage: includeUsage ? usage : false });
    return { kind: 'sse', steps: events.map((data) => ({ data, delayMs: options.pieceDelayMs })) };
  };
}

/** Words that are one token each, alone and after one another, in `cl100k_base` and `o200k_base`. */
export const ONE_TOKEN_WORDS: readonly string[] = [' the', ' cat', ' sat', ' on', ' a', ' mat', ' and', ' then', ' it', ' ran'];

/** Options of {@link countingModelScript}. */
export interface CountingModelOptions {
  /** Output tokens to produce, one per content chunk ({@link ONE_TOKEN_WORDS} in turn). */
  tokens: number;
  /**
   * What follows the last token: `finish` (finish chunk, usage chunk when asked for, `[DONE]`),
   * `hang` (stay open without a word: a stalled upstream, cut by the client), or `destroy` (cut
   * the socket: the upstream died mid-stream). Default `finish`.
   */
  then?: 'finish' | 'hang' | 'destroy';
  /** Prompt tokens the upstream reports. Default 7. */
  promptTokens?: number;
  /** Delay before each token (ms). Default 0. */
  pieceDelayMs?: number;
}

/**
 * An OpenAI-compatible chat upstream that counts what it sends (`RecordedRequest.tokensSent`):
 * `tokens` content chunks of one token each, then `then`. It reports usage as a real one does:
 * a final usage chunk when `stream_options.include_usage` is set (and the stream finishes), and
 * cumulative usage on every chunk when `stream_options.continuous_usage_stats` is set too (as
 * vLLM and Weir's engine servers do). Its text is {@link countingModelText}.
 */
export function countingModelScript(options: CountingModelOptions): UpstreamScript {
  return (request) => {
    const body = (request.body ?? {}) as Record<string, unknown>;
    const streamOptions = (body.stream_options ?? {}) as { include_usage?: boolean; continuous_usage_stats?: boolean };
    const prompt = options.promptTokens ?? 7;
    const usage = (completion: number) => ({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
    const meta = { id: 'chatcmpl-counting', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'counting-model' };
    const chunk = (delta: object, finish: string | null, completion: number): string =>
      sseEvent({ ...meta, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: streamOptions.continuous_usage_stats ? usage(completion) : null });
    const steps: SseStep[] = [{ data: chunk({ role: 'assistant', content: '' }, null, 0) }];
    for (let i = 0; i < options.tokens; i++) {
      steps.push({ data: chunk({ content: ONE_TOKEN_WORDS[i % ONE_TOKEN_WORDS.length] }, null, i + 1), tokens: 1, delayMs: options.pieceDelayMs });
    }
    const then = options.then ?? 'finish';
    // A moment first, so the bytes already written reach the client before the reset.
    if (then === 'destroy') steps.push({ destroy: true, delayMs: 50 });
    if (then === 'finish') {
      steps.push({ data: chunk({}, 'stop', options.tokens) });
      if (streamOptions.include_usage) steps.push({ data: sseEvent({ ...meta, choices: [], usage: usage(options.tokens) }) });
      steps.push({ data: sseEvent('[DONE]') });
    }
    return { kind: 'sse', steps, hang: then === 'hang' };
  };
}

/** The text {@link countingModelScript} (and {@link countingAnthropicScript}) sends for `tokens` tokens. */
export function countingModelText(tokens: number): string {
  return Array.from({ length: tokens }, (_, i) => ONE_TOKEN_WORDS[i % ONE_TOKEN_WORDS.length]).join('');
}

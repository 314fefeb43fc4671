/**
 * Builders and scripts that make {@link startScriptedUpstream} speak Anthropic's Messages API
 * (`POST /v1/messages` with `stream: true`). The wire format follows docs.anthropic.com
 * "Streaming Messages" and anthropic-sdk-typescript `src/resources/messages/messages.ts`
 * (see the design notes' CONVENTIONS.md, §3): every event has an `event:` name equal to its
 * `data.type`; `message_start` → per block `content_block_start`, `content_block_delta`…,
 * `content_block_stop` → `message_delta` (stop reason, cumulative usage) → `message_stop`;
 * `ping` anywhere; `error` may arrive mid-stream.
 */
import type { UpstreamWire } from './engine-contract';
import { type CountingModelOptions, ONE_TOKEN_WORDS, type FakeModelOptions, type SseStep, type UpstreamReply, type UpstreamScript } from './scripted-upstream';

/** Anthropic usage counts as the API reports them (input excludes cache reads and writes). */
export interface AnthropicWireUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens?: number;
  cache_creation_input_tokens?: number;
}

/** Options of {@link anthropicStreamEvents}. */
export interface AnthropicStreamOptions {
  /**
   * `message_delta.delta.stop_reason`; default `end_turn`. `null` stops after the text deltas
   * (no `content_block_stop`, `message_delta` or `message_stop`): a cut or still-running stream.
   */
  stopReason?: string | null;
  /** `message_delta.delta.stop_sequence` (set it with `stopReason: 'stop_sequence'`). Default null. */
  stopSequence?: string | null;
  /**
   * Usage: the input and cache counts go on `message_start` (with a provisional
   * `output_tokens: 1`, as the API sends), `output_tokens` on `message_delta`. Default: 5
   * input tokens, one output token per piece, no cache fields.
   */
  usage?: AnthropicWireUsage;
  /**
   * Also repeat the input and cache counts on `message_delta.usage` (the API may re-send
   * them there as cumulative totals). Default false: `message_delta.usage` has `output_tokens` only.
   */
  fullDeltaUsage?: boolean;
  /** Send a `ping` after `content_block_start`; default true. */
  ping?: boolean;
  /** The `model` field of `message_start`; default `claude-scripted`. */
  model?: string;
}

/** Frames one Anthropic SSE event: `event: <type>`, `data: {"type": <type>, …}`, blank line. */
export function anthropicSseEvent(type: string, fields: Record<string, unknown> = {}): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
}

/**
 * The events (one string each) of an Anthropic Messages stream answering with one text block
 * made of `pieces` (one `text_delta` each).
 */
export function anthropicStreamEvents(pieces: string[], options: AnthropicStreamOptions = {}): string[] {
  const usage = options.usage ?? { input_tokens: 5, output_tokens: pieces.length };
  const cache = {
    ...(usage.cache_creation_input_tokens !== undefined ? { cache_creation_input_tokens: usage.cache_creation_input_tokens } : {}),
    ...(usage.cache_read_input_tokens !== undefined ? { cache_read_input_tokens: usage.cache_read_input_tokens } : {}),
  };
  const events = [
    anthropicSseEvent('message_start', {
      message: {
        id: 'msg_scripted',
        type: 'message',
        role: 'assistant',
        content: [],
        model: options.model ?? 'claude-scripted',
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: usage.input_tokens, ...cache, output_tokens: 1 },
      },
    }),
    anthropicSseEvent('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
  ];
  if (options.ping ?? true) events.push(anthropicSseEvent('ping'));
  for (const text of pieces) {
    events.push(anthropicSseEvent('content_block_delta', { index: 0, delta: { type: 'text_delta', text } }));
  }
  if (options.stopReason === null) return events;
  events.push(
    anthropicSseEvent('content_block_stop', { index: 0 }),
    anthropicSseEvent('message_delta', {
      delta: { stop_reason: options.stopReason ?? 'end_turn', stop_sequence: options.stopSequence ?? null },
      usage: options.fullDeltaUsage ? { input_tokens: usage.input_tokens, ...cache, output_tokens: usage.output_tokens } : { output_tokens: usage.output_tokens },
    }),
    anthropicSseEvent('message_stop'),
  );
  return events;
}

/** An `error` event as the API sends it mid-stream (default `overloaded_error`, `Overloaded`). */
export function anthropicErrorEvent(type = 'overloaded_error', message = 'Overloaded'): string {
  return anthropicSseEvent('error', { error: { type, message } });
}

/** An Anthropic error body: `{"type":"error","error":{"type":…,"message":…}}`. */
export function anthropicErrorBody(type: string, message: string): Record<string, unknown> {
  return { type: 'error', error: { type, message } };
}

/**
 * Anthropic's error type for an HTTP status (docs.anthropic.com "Errors"): 400
 * `invalid_request_error`, 401 `authentication_error`, 402 `billing_error`, 403
 * `permission_error`, 404 `not_found_error`, 413 `request_too_large`, 429 `rate_limit_error`,
 * 500 `api_error`, 504 `timeout_error`, 529 `overloaded_error`; other statuses `api_error`.
 */
export function anthropicErrorType(status: number): string {
  const types: Record<number, string> = {
    400: 'invalid_request_error',
    401: 'authentication_error',
    402: 'billing_error',
    403: 'permission_error',
    404: 'not_found_error',
    413: 'request_too_large',
    429: 'rate_limit_error',
    500: 'api_error',
    504: 'timeout_error',
    529: 'overloaded_error',
  };
  return types[status] ?? 'api_error';
}

/** An HTTP error reply with Anthropic's body for `status` (and its `request-id` header). */
export function anthropicErrorReply(status: number, options: { message?: string; headers?: Record<string, string> } = {}): UpstreamReply {
  return {
    kind: 'error',
    status,
    body: anthropicErrorBody(anthropicErrorType(status), options.message ?? `scripted ${status}`),
    headers: { 'request-id': 'req_scripted', ...options.headers },
  };
}

/**
 * A script that behaves like a small model behind Anthropic's Messages API: it reads
 * `max_tokens`, streams up to that many pieces (`w0 `, `w1 `, …; `stop_reason: max_tokens`
 * when the limit cut it, else `end_turn` after `naturalPieces`), reports `input_tokens` =
 * whitespace-separated words of `system` and the messages (at least 1), answers a request
 * without `stream: true` with one JSON message, and rejects prompts longer than `contextBytes`
 * with 400 `invalid_request_error` "prompt is too long: … tokens > … maximum" (the API's text).
 */
export function anthropicModelScript(options: FakeModelOptions = {}): UpstreamScript {
  return (request) => {
    const body = (request.body ?? {}) as Record<string, unknown>;
    const messages = Array.isArray(body.messages) ? (body.messages as Array<{ content?: unknown }>) : [];
    const prompt = [typeof body.system === 'string' ? body.system : '', ...messages.map((m) => (typeof m.content === 'string' ? m.content : ''))].join('\n');
    const contextBytes = options.contextBytes ?? 2000;
    const promptBytes = Buffer.byteLength(prompt);
    if (promptBytes > contextBytes) {
      return {
        kind: 'error',
        status: 400,
        body: anthropicErrorBody('invalid_request_error', `prompt is too long: ${promptBytes} tokens > ${contextBytes} maximum`),
      };
    }
    const limit = Number(body.max_tokens ?? 16);
    const natural = options.naturalPieces ?? 8;
    const count = Math.min(limit, natural);
    const pieces = Array.from({ length: count }, (_, i) => `w${i} `);
    const stopReason = limit < natural ? 'max_tokens' : 'end_turn';
    const usage = { input_tokens: Math.max(1, prompt.split(/\s+/).filter(Boolean).length), output_tokens: count };
    if (body.stream !== true) {
      return {
        kind: 'json',
        body: {
          id: 'msg_scripted',
          type: 'message',
          role: 'assistant',
          model: 'claude-scripted',
          content: [{ type: 'text', text: pieces.join('') }],
          stop_reason: stopReason,
          stop_sequence: null,
          usage,
        },
      };
    }
    const events = anthropicStreamEvents(pieces, { stopReason, usage });
    return { kind: 'sse', steps: events.map((data) => ({ data, delayMs: options.pieceDelayMs })) };
  };
}

const WIRE_STOP_REASONS = { stop: 'end_turn', length: 'max_tokens', content_filter: 'refusal' } as const;

/**
 * Anthropic Messages for {@link describeUpstreamEngineContract}: Weir's input count is
 * `input_tokens + cache_read_input_tokens` on the wire (cache reads are reported apart), Weir's
 * end reasons are sent as `end_turn` / `max_tokens` / `refusal`, and faults as `error` events
 * and Anthropic error bodies.
 */
export const anthropicWire: UpstreamWire = {
  name: 'anthropic',
  path: '/v1/messages',
  streamEvents(pieces, end) {
    if (!end) return anthropicStreamEvents(pieces, { stopReason: null });
    const cached = end.usage.cachedInputTokens;
    return anthropicStreamEvents(pieces, {
      stopReason: WIRE_STOP_REASONS[end.reason],
      usage: {
        input_tokens: end.usage.inputTokens - (cached ?? 0),
        output_tokens: end.usage.outputTokens,
        ...(cached !== undefined ? { cache_read_input_tokens: cached } : {}),
      },
    });
  },
  errorEvent: (message) => anthropicErrorEvent('overloaded_error', message),
  errorReply: (status, message) => anthropicErrorReply(status, { message }),
};

/**
 * An Anthropic Messages upstream that counts what it sends (`RecordedRequest.tokensSent`):
 * `message_start` (input tokens), then `tokens` `text_delta`s of one token each
 * (`countingModelText`), then `then`: `finish` ends with `message_delta` (the output count: the
 * only place the API reports it) and `message_stop`; `hang` stalls; `destroy` cuts the socket.
 */
export function countingAnthropicScript(options: CountingModelOptions): UpstreamScript {
  return () => {
    const pieces = Array.from({ length: options.tokens }, (_, i) => ONE_TOKEN_WORDS[i % ONE_TOKEN_WORDS.length]);
    const usage = { input_tokens: options.promptTokens ?? 7, output_tokens: options.tokens };
    const then = options.then ?? 'finish';
    const events = anthropicStreamEvents(pieces, { stopReason: then === 'finish' ? 'end_turn' : null, usage });
    // message_start, content_block_start, ping, then one event per piece.
    const head = 3;
    const steps: SseStep[] = events.map((data, i) => ({ data, ...(i >= head && i < head + pieces.length ? { tokens: 1, delayMs: options.pieceDelayMs } : {}) }));
    // A moment first, so the bytes already written reach the client before the reset.
    if (then === 'destroy') steps.push({ destroy: true, delayMs: 50 });
    return { kind: 'sse', steps, hang: then === 'hang' };
  };
}

import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput, TokenUsage } from '@weir/core';
import { WeirError } from '@weir/core';
import { createParser } from 'eventsource-parser';
import { type Dispatcher, request as undiciRequest } from 'undici';
import { type EngineLogger, silentLogger } from '../logger';
import { countInputWith, utf8TokenUpperBound } from '../openai-compatible/token-bound';
import { classifyUpstreamFailure, createStreamWatchdog } from '../openai-compatible/upstream-watchdog';
import { anthropicStatusError } from './anthropic-errors';
import { buildAnthropicBody, buildAnthropicHeaders } from './anthropic-request';
import { createAnthropicStreamDecoder, mapAnthropicStopReason, type AnthropicPiece, type SseMessage } from './anthropic-stream';

/**
 * Context tokens declared in `capacity` when the options give none: 200,000, the context
 * window of Claude models (docs.anthropic.com, "Models overview").
 */
export const ANTHROPIC_DEFAULT_CONTEXT_TOKENS = 200_000;

/** Largest error body read from a failed upstream response (bytes); the rest is dropped. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;

/**
 * Options of {@link createAnthropicEngine}, shaped as an engine spec would be (camelCase of
 * the config file's snake_case, like `OpenAICompatibleEngineSpec`).
 */
export interface AnthropicEngineOptions {
  kind: 'anthropic';
  /**
   * The API's origin, e.g. `https://api.anthropic.com`; the adapter calls
   * `{baseUrl}/v1/messages`. A trailing `/v1` is accepted too (not doubled).
   */
  baseUrl: string;
  /** The model name the API expects, e.g. `claude-sonnet-4-5`. */
  upstreamModel: string;
  /**
   * Name of the environment variable holding the API key (never the key itself), looked up in
   * `deps.env` on every call and sent as `x-api-key`; no header when unset.
   */
  apiKeyEnv?: string;
  /** Cut the call when no first text arrives within this (ms; ≤ 0 disables). */
  firstTokenTimeoutMs: number;
  /** Cut the call when the stream is silent this long after the first text (ms; ≤ 0 disables). */
  idleTimeoutMs: number;
  /** Parallel requests this upstream accepts from one Weir replica (`capacity.slots`). */
  maxConcurrency: number;
  /** Context tokens per request declared in `capacity`. Default {@link ANTHROPIC_DEFAULT_CONTEXT_TOKENS}. */
  contextTokens?: number;
}

/** Dependencies of {@link createAnthropicEngine}. */
export interface AnthropicEngineDeps {
  /**
   * Token counter for `countInputTokens` and for usage the upstream did not report (an aborted
   * stream). Default: the UTF-8 byte upper bound ({@link utf8TokenUpperBound}); no network
   * call per request (the API's `count_tokens` endpoint is not used for admission).
   */
  countTokens?: (text: string) => number | Promise<number>;
  /** The undici dispatcher (connection pool) to use. Default: undici's global dispatcher. */
  dispatcher?: Dispatcher;
  /** Where `options.apiKeyEnv` is looked up. Default `process.env`. */
  env?: Record<string, string | undefined>;
  /** Logger for metadata (status codes, error codes); never text or keys. Default: silent. */
  logger?: EngineLogger;
}

/** The text a piece stands for in Weir's output count: its text, and its tool calls' names and arguments. */
const produced = (p: AnthropicPiece): string => p.text + (p.toolCalls ?? []).map((c) => (c.name ?? '') + (c.argumentsDelta ?? '')).join('');

/** A piece as an engine `delta` (1 token: the API sends no per-delta count). */
const toDelta = (p: AnthropicPiece): EngineEvent => ({ type: 'delta', text: p.text, tokens: 1, ...(p.toolCalls ? { toolCalls: p.toolCalls } : {}) });

/**
 * An adapter for Anthropic's Messages API.
 *
 * Request: `POST {baseUrl}/v1/messages` over undici with `stream: true`; body and headers
 * from `anthropic-request.ts` (`system` + alternating `messages`, `max_tokens`, `temperature`
 * capped at 1, `top_p`, `stop_sequences`; `anthropic-version: 2023-06-01`, `x-api-key` from
 * `env[options.apiKeyEnv]`; the key is never logged).
 *
 * Response: SSE parsed with eventsource-parser over a streaming `TextDecoder` (events and
 * UTF-8 characters split across reads, CRLF), decoded by `anthropic-stream.ts`: each non-empty
 * `text_delta` becomes a `delta` with `tokens: 1` (the API sends no per-delta count; a delta
 * usually holds a few tokens, so Σ delta tokens ≤ output tokens); a `tool_use` block's start
 * and each `input_json_delta` become a `delta` with `toolCalls` fragments (OpenAI's
 * `delta.tool_calls` shape; `stop_reason: tool_use` ends with `tool_calls`); `ping` and
 * thinking blocks yield nothing. Tools: `tools`, `tool_choice` and tool-call history are
 * mapped by `anthropic-request.ts`. After `message_stop` (or the end of a stream that sent
 * a `stop_reason`) one `end` with the mapped stop reason and the upstream's usage
 * (`usageReported: true`: `message_start`'s input and cache counts, `message_delta`'s final
 * output). A 200 JSON `Message` (an upstream that ignored `stream`) is accepted as one delta.
 *
 * Abort: the request's signal aborts the HTTP call (the connection is closed); no further
 * deltas are yielded and the stream ends with `aborted`, usage `usageReported: false`: input
 * from `message_start` when it arrived (else `countInputTokens`), output = max(deltas,
 * `countTokens` of all the text received, delivered or not).
 *
 * Timeouts (ms; ≤ 0 disables): `firstTokenTimeoutMs` runs from the call until the first text
 * (or stop reason); `idleTimeoutMs` runs whenever the adapter waits for the upstream after
 * that and is reset by every event, `ping` included. Either one cuts the call with
 * `upstream_timeout` (retryable only before the first text). undici's own header/body
 * timeouts are disabled in favour of these.
 *
 * Errors: thrown as `WeirError` per the table in `anthropic-errors.ts` (HTTP statuses as the
 * OpenAI-compatible adapter, `error` events, `context_length_exceeded` for "prompt is too
 * long"); connection failures are `upstream_unavailable` (retryable) before any text and
 * `upstream_error` after; a stream that ends without a `stop_reason` is `upstream_error`.
 *
 * `countInputTokens`: the documented upper bound of `token-bound.ts` on the input as a chat
 * (text input = one user message); never a network call.
 *
 * `capacity` = `{slots: maxConcurrency, contextTokens: contextTokens ?? 200,000}`.
 */
export function createAnthropicEngine(options: AnthropicEngineOptions, deps: AnthropicEngineDeps = {}): EngineAdapter {
  const logger = deps.logger ?? silentLogger;
  const env = deps.env ?? process.env;
  const countText = deps.countTokens ?? utf8TokenUpperBound;
  const origin = options.baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
  const url = `${origin}/v1/messages`;
  const inFlight = new Set<AbortController>();
  if (options.apiKeyEnv && !env[options.apiKeyEnv]) {
    logger.warn({ apiKeyEnv: options.apiKeyEnv }, 'anthropic engine: the API key variable is not set; calls go without x-api-key');
  }

  const asChat = (input: GenerationInput): GenerationInput =>
    input.kind === 'chat' ? input : { kind: 'chat', messages: [{ role: 'user', content: input.text }] };
  const countInputTokens = (input: GenerationInput): Promise<number> => countInputWith(asChat(input), countText);

  async function* generate(request: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    const controller = new AbortController();
    inFlight.add(controller);
    const onAbort = (): void => controller.abort(request.signal.reason);
    request.signal.addEventListener('abort', onAbort, { once: true });

    const watchdog = createStreamWatchdog(controller);

    const decoder = createAnthropicStreamDecoder();
    let outputText = '';
    let deltas = 0;
    let firstSeen = false;
    let done = false;
    let body: Dispatcher.ResponseData['body'] | undefined;

    // Weir's count, for a stream the upstream did not finish: its own input counts when
    // `message_start` arrived, and every piece of text received, delivered or not.
    const countedUsage = async (): Promise<TokenUsage> => ({
      ...(decoder.reportedInput() ?? { inputTokens: await countInputTokens(request.input) }),
      outputTokens: Math.max(deltas, outputText.length === 0 ? 0 : await countText(outputText)),
    });
    const abortedEnd = async (): Promise<EngineEvent> => ({ type: 'end', reason: 'aborted', usage: await countedUsage(), usageReported: false });
    const classify = (error: unknown): WeirError =>
      classifyUpstreamFailure(error, { timedOut: watchdog.timedOut, outputStarted: firstSeen, firstTokenTimeoutMs: options.firstTokenTimeoutMs, idleTimeoutMs: options.idleTimeoutMs });
    const fail = (error: unknown): WeirError => {
      const weirError = classify(error);
      logger.warn(
        { generationId: request.generationId, code: weirError.code, retryable: weirError.retryable },
        'upstream generation failed',
      );
      return weirError;
    };
    const abortedByCaller = (): boolean => request.signal.aborted && !watchdog.timedOut;

    try {
      if (request.signal.aborted) {
        yield await abortedEnd();
        return;
      }
      watchdog.arm('first', options.firstTokenTimeoutMs);
      let response: Dispatcher.ResponseData;
      try {
        response = await undiciRequest(url, {
          method: 'POST',
          headers: buildAnthropicHeaders(options.apiKeyEnv ? env[options.apiKeyEnv] : undefined),
          body: JSON.stringify(buildAnthropicBody(options.upstreamModel, request)),
          signal: controller.signal,
          dispatcher: deps.dispatcher,
          headersTimeout: 0,
          bodyTimeout: 0,
        });
      } catch (error) {
        if (abortedByCaller()) {
          yield await abortedEnd();
          return;
        }
        throw fail(error);
      }
      body = response.body;
      if (response.statusCode !== 200) {
        const text = await readLimited(response.body, MAX_ERROR_BODY_BYTES).catch(() => '');
        throw fail(anthropicStatusError(response.statusCode, text, response.headers));
      }

      if (String(response.headers['content-type'] ?? '').includes('application/json')) {
        // The upstream ignored `stream: true`: one JSON message.
        let text: string;
        try {
          text = await readLimited(response.body, Number.POSITIVE_INFINITY);
        } catch (error) {
          if (abortedByCaller()) {
            yield await abortedEnd();
            return;
          }
          throw fail(error);
        }
        watchdog.clear();
        let piece: AnthropicPiece;
        try {
          piece = decoder.decodeMessage(JSON.parse(text));
        } catch (error) {
          throw fail(error instanceof WeirError ? error : new WeirError('upstream_error', 'upstream sent invalid JSON', { cause: error }));
        }
        if (piece.text.length > 0 || piece.toolCalls) {
          outputText += produced(piece);
          deltas += 1;
          yield toDelta(piece);
        }
        done = true;
      } else {
        const events: SseMessage[] = [];
        const parser = createParser({ onEvent: (event) => events.push(event) });
        const textDecoder = new TextDecoder('utf-8');
        const iterator = response.body[Symbol.asyncIterator]();
        let ended = false;
        while (!done && !ended) {
          if (firstSeen && !watchdog.armed) watchdog.arm('idle', options.idleTimeoutMs);
          let next: IteratorResult<Buffer>;
          try {
            next = (await iterator.next()) as IteratorResult<Buffer>;
          } catch (error) {
            if (abortedByCaller()) {
              watchdog.clear();
              yield await abortedEnd();
              return;
            }
            throw fail(error);
          }
          if (next.done) {
            ended = true;
            parser.feed(textDecoder.decode());
            parser.feed('\n\n');
          } else {
            parser.feed(textDecoder.decode(next.value, { stream: true }));
          }
          if (events.length === 0) continue;
          const pieces: AnthropicPiece[] = [];
          let eventError: unknown;
          for (const event of events.splice(0)) {
            try {
              const piece = decoder.decode(event);
              if (piece.text.length > 0 || piece.toolCalls) pieces.push(piece);
            } catch (error) {
              eventError = error;
              break;
            }
            if (decoder.finished) {
              done = true;
              break;
            }
          }
          if (!firstSeen && (pieces.length > 0 || decoder.stopReason !== undefined)) firstSeen = true;
          // The first-token clock runs until the first text; after it, every event (pings
          // too) restarts the idle clock once these pieces are handed on.
          if (firstSeen) watchdog.clear();
          // Everything received counts as produced (billed), even if an abort stops its delivery.
          outputText += pieces.map(produced).join('');
          for (const piece of pieces) {
            if (request.signal.aborted) break;
            deltas += 1;
            yield toDelta(piece);
          }
          if (request.signal.aborted) {
            yield await abortedEnd();
            return;
          }
          // Pieces before an `error` event are delivered first.
          if (eventError !== undefined) throw fail(eventError);
        }
      }
      watchdog.clear();

      if (request.signal.aborted) {
        yield await abortedEnd();
        return;
      }
      const stopReason = decoder.stopReason;
      if (stopReason === undefined) {
        throw fail(
          new WeirError(
            'upstream_error',
            decoder.finished ? 'upstream stream stopped without a stop_reason' : 'upstream stream ended before message_delta and message_stop',
          ),
        );
      }
      done = true;
      const reason = mapAnthropicStopReason(stopReason);
      const reported = decoder.reportedUsage();
      if (reported) {
        yield { type: 'end', reason, usage: reported, usageReported: true };
      } else {
        yield { type: 'end', reason, usage: await countedUsage(), usageReported: false };
      }
    } finally {
      watchdog.clear();
      request.signal.removeEventListener('abort', onAbort);
      inFlight.delete(controller);
      // Cut the HTTP call only if the stream did not end normally.
      if (!controller.signal.aborted && !done) controller.abort();
      body?.destroy();
    }
  }

  return {
    kind: 'anthropic',
    capacity: { slots: options.maxConcurrency, contextTokens: options.contextTokens ?? ANTHROPIC_DEFAULT_CONTEXT_TOKENS },
    countInputTokens,
    generate,
    async close() {
      for (const controller of inFlight) controller.abort(new Error('engine closed'));
    },
  };
}

async function readLimited(body: AsyncIterable<Buffer | Uint8Array>, maxBytes: number): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = Buffer.from(chunk);
    if (size + buf.length > maxBytes) {
      parts.push(buf.subarray(0, maxBytes - size));
      break;
    }
    parts.push(buf);
    size += buf.length;
  }
  return Buffer.concat(parts).toString('utf8');
}

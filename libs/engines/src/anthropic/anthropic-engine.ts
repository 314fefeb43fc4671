import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput, ProducedUsage, TokenizerName } from '@weir/core';
import { WeirError, withProduced } from '@weir/core';
import { createParser } from 'eventsource-parser';
import { type EgressPolicy, processEgressPolicy, upstreamEgressProblem } from '@weir/config';
import { type Dispatcher, request as undiciRequest } from 'undici';
import { egressDispatcher } from '../egress-dispatcher';
import { type EngineLogger, silentLogger } from '../logger';
import { countInputWith, utf8TokenUpperBound } from '../openai-compatible/token-bound';
import { declaredTokenizer, functionTokenizer, type TextTokenizer } from '../tokenizers/tiktoken';
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
  /** A tokenizer to count with where the API reports nothing (`AnthropicEngineSpec.tokenizer`). Default `none`. */
  tokenizer?: TokenizerName;
}

/** Dependencies of {@link createAnthropicEngine}. */
export interface AnthropicEngineDeps {
  /**
   * A token counter to use instead of the declared tokenizer (`options.tokenizer`), for
   * `countInputTokens` and for usage the upstream did not report (a cut stream). Default: the
   * declared one, else none (the UTF-8 byte upper bound for the prompt, content deltas for the
   * output); never a network call per request (the API's `count_tokens` endpoint is not used).
   */
  countTokens?: (text: string) => number | Promise<number>;
  /**
   * The undici dispatcher (connection pool) to use. Default: `egressDispatcher(egress)`, a
   * keep-alive Agent that refuses connections to link-local / metadata addresses.
   */
  dispatcher?: Dispatcher;
  /** Where `options.apiKeyEnv` is looked up. Default `process.env`. */
  env?: Record<string, string | undefined>;
  /**
   * The egress policy (`@weir/config`): the API's host must be an allowed upstream host and
   * `options.apiKeyEnv` an allowed credential variable bound to it, else every call fails with
   * `engine_unavailable` and nothing is sent. Default: the process environment's.
   */
  egress?: EgressPolicy;
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
 * (`usageSource: reported`: `message_start`'s input and cache counts, `message_delta`'s final
 * output). A 200 JSON `Message` (an upstream that ignored `stream`) is accepted as one delta.
 *
 * Abort: the request's signal aborts the HTTP call (the connection is closed); no further
 * deltas are yielded and the stream ends with `aborted`. The output count only comes with
 * `message_delta`, so a cut stream is counted by Weir: input from `message_start` when it
 * arrived (else the prompt counted as `countInputTokens` does), output = max(deltas, the
 * tokenizer's count of all the text received, delivered or not) with a tokenizer
 * (`usageSource: counted`), else the content deltas (`estimated`). A failure after any output
 * throws its error with `produced` counted the same way.
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
 * (text input = one user message), with the declared tokenizer once loaded, else the UTF-8 byte
 * bound; never a network call.
 *
 * Egress (issue 14): as the OpenAI-compatible adapter — the host and the key variable pass
 * `deps.egress` or no call is made (`engine_unavailable`); names resolving to link-local or
 * metadata addresses are refused at connect; redirects are not followed.
 *
 * `capacity` = `{slots: maxConcurrency, contextTokens: contextTokens ?? 200,000}`.
 */
export function createAnthropicEngine(options: AnthropicEngineOptions, deps: AnthropicEngineDeps = {}): EngineAdapter {
  const logger = deps.logger ?? silentLogger;
  const env = deps.env ?? process.env;
  const tokenizer: TextTokenizer | undefined = deps.countTokens ? functionTokenizer(deps.countTokens) : declaredTokenizer(options);
  const origin = options.baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
  const url = `${origin}/v1/messages`;
  const inFlight = new Set<AbortController>();
  const egress = deps.egress ?? processEgressPolicy();
  const dispatcher = deps.dispatcher ?? egressDispatcher(egress);
  // Checked once: the URL never changes. A refused upstream gets no call (and no key) at all.
  const egressProblem = upstreamEgressProblem(egress, url, options.apiKeyEnv);
  if (egressProblem) logger.error({ upstreamHost: new URL(url).host, problem: egressProblem }, 'upstream refused by the egress policy; its calls fail');
  if (options.apiKeyEnv && !env[options.apiKeyEnv]) {
    logger.warn({ apiKeyEnv: options.apiKeyEnv }, 'anthropic engine: the API key variable is not set; calls go without x-api-key');
  }

  const asChat = (input: GenerationInput): GenerationInput =>
    input.kind === 'text' ? { kind: 'chat', messages: [{ role: 'user', content: input.text }] } : input;
  const countInputTokens = (input: GenerationInput, limit?: number): Promise<number> => {
    if (tokenizer?.ready()) return countInputWith(asChat(input), tokenizer.count, limit);
    if (tokenizer) tokenizer.load().catch((err: unknown) => logger.warn({ tokenizer: tokenizer.name, err }, 'tokenizer failed to load'));
    return countInputWith(asChat(input), utf8TokenUpperBound, limit);
  };

  async function* generate(request: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    if (egressProblem) throw new WeirError('engine_unavailable', 'this upstream is not allowed by the egress policy (the service log says why)', { cause: new Error(egressProblem) });
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
    // `message_start` arrived, and every piece of text received, delivered or not — with the
    // tokenizer (`counted`), else one token per content delta (`estimated`).
    const countedUsage = async (): Promise<ProducedUsage> => {
      const count = tokenizer ? tokenizer.count : utf8TokenUpperBound;
      const input = decoder.reportedInput() ?? { inputTokens: await countInputWith(asChat(request.input), count) };
      const output = tokenizer && outputText.length > 0 ? await tokenizer.count(outputText) : 0;
      return { usage: { ...input, outputTokens: Math.max(deltas, output) }, source: tokenizer ? 'counted' : 'estimated' };
    };
    const countedEnd = async (reason: Extract<EngineEvent, { type: 'end' }>['reason']): Promise<EngineEvent> => {
      const counted = await countedUsage();
      return { type: 'end', reason, usage: counted.usage, usageSource: counted.source };
    };
    const abortedEnd = (): Promise<EngineEvent> => countedEnd('aborted');
    const classify = (error: unknown): WeirError =>
      classifyUpstreamFailure(error, { timedOut: watchdog.timedOut, outputStarted: firstSeen, firstTokenTimeoutMs: options.firstTokenTimeoutMs, idleTimeoutMs: options.idleTimeoutMs });
    const fail = async (error: unknown): Promise<WeirError> => {
      const weirError = classify(error);
      logger.warn(
        { generationId: request.generationId, code: weirError.code, retryable: weirError.retryable },
        'upstream generation failed',
      );
      // What had been produced: Weir's count once output arrived; before it, the API's own
      // input count when `message_start` came (kept on the attempt record, never billed).
      const reportedInput = decoder.reportedInput();
      const produced: ProducedUsage | undefined =
        deltas > 0 || outputText.length > 0
          ? await countedUsage().catch(() => undefined)
          : reportedInput
            ? { usage: { ...reportedInput, outputTokens: 0 }, source: 'reported' }
            : undefined;
      return produced ? withProduced(weirError, produced) : weirError;
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
          headers: buildAnthropicHeaders(options.apiKeyEnv ? env[options.apiKeyEnv] : undefined, request.anthropicBeta),
          body: JSON.stringify(buildAnthropicBody(options.upstreamModel, request)),
          signal: controller.signal,
          dispatcher,
          headersTimeout: 0,
          bodyTimeout: 0,
        });
      } catch (error) {
        if (abortedByCaller()) {
          yield await abortedEnd();
          return;
        }
        throw await fail(error);
      }
      body = response.body;
      if (response.statusCode !== 200) {
        const text = await readLimited(response.body, MAX_ERROR_BODY_BYTES).catch(() => '');
        throw await fail(anthropicStatusError(response.statusCode, text, response.headers));
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
          throw await fail(error);
        }
        watchdog.clear();
        let piece: AnthropicPiece;
        try {
          piece = decoder.decodeMessage(JSON.parse(text));
        } catch (error) {
          throw await fail(error instanceof WeirError ? error : new WeirError('upstream_error', 'upstream sent invalid JSON', { cause: error }));
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
            throw await fail(error);
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
          if (eventError !== undefined) throw await fail(eventError);
        }
      }
      watchdog.clear();

      if (request.signal.aborted) {
        yield await abortedEnd();
        return;
      }
      const stopReason = decoder.stopReason;
      if (stopReason === undefined) {
        throw await fail(
          new WeirError(
            'upstream_error',
            decoder.finished ? 'upstream stream stopped without a stop_reason' : 'upstream stream ended before message_delta and message_stop',
          ),
        );
      }
      done = true;
      const reason = mapAnthropicStopReason(stopReason);
      const reported = decoder.reportedUsage();
      const end: EngineEvent = reported ? { type: 'end', reason, usage: reported, usageSource: 'reported' } : await countedEnd(reason);
      // Which stop sequence matched, for clients that ask (Anthropic's own `stop_sequence`).
      yield stopReason === 'stop_sequence' && decoder.stopSequence !== undefined && end.type === 'end' ? { ...end, stopSequence: decoder.stopSequence } : end;
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

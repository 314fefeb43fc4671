import type {
  ChatMessage,
  EngineAdapter,
  EmbeddingInput,
  EngineEvent,
  EngineRequest,
  GenerationInput,
  OpenAICompatibleEngineSpec,
  ProducedUsage,
  TokenUsage,
  ToolCallDelta,
} from '@weir/core';
import { batchedIterable, WeirError, withProduced } from '@weir/core';
import { type EgressPolicy, processEgressPolicy, upstreamEgressProblem } from '@weir/config';
import { type Dispatcher, request as undiciRequest } from 'undici';
import { egressDispatcher } from '../egress-dispatcher';
import { type EngineLogger, silentLogger } from '../logger';
import { declaredTokenizer, functionTokenizer, type TextTokenizer } from '../tokenizers/tiktoken';
import { countInputWith, utf8TokenUpperBound } from './token-bound';
import { createContentChunkReader } from './content-chunk';
import { createSseDataReader } from './sse-data-reader';
import { readUpstreamText, startUpstreamCall, type UpstreamCall, type UpstreamHead } from './upstream-call';
import { inBandError, upstreamStatusError } from './upstream-errors';
import { embedUpstream } from './upstream-embeddings';
import { classifyUpstreamFailure, createStreamWatchdog } from './upstream-watchdog';

/** Context tokens declared in `capacity` when the options give none: 8,192. */
export const OPENAI_COMPATIBLE_DEFAULT_CONTEXT_TOKENS = 8192;

/** How long a graceful stop waits for the upstream to end its stream before cutting it (ms). */
export const GRACEFUL_STOP_TIMEOUT_MS = 1_000;

/** `json_schema.name` of the `response_format` sent for an `outputSchema` (OpenAI requires one). */
const OUTPUT_SCHEMA_NAME = 'output';

/** Largest error body read from a failed upstream response (bytes); the rest is dropped. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;

/** Options of {@link createOpenAICompatibleEngine}: the spec plus an optional context size. */
export type OpenAICompatibleEngineOptions = OpenAICompatibleEngineSpec & {
  /** Context tokens per request declared in `capacity`. Default {@link OPENAI_COMPATIBLE_DEFAULT_CONTEXT_TOKENS}. */
  contextTokens?: number;
  /** An embedding revision whose upstream takes OpenAI's `dimensions` (`EmbeddingSpec.variableDimensions`): it is passed through. Default false. */
  variableDimensions?: boolean;
};

/** Dependencies of {@link createOpenAICompatibleEngine}. */
export interface OpenAICompatibleEngineDeps {
  /**
   * A tokenizer to use instead of the one `spec.tokenizer` declares (tests, compositions that
   * count another way), for usage the upstream does not report and for `countInputTokens`.
   * Default: the declared one (`spec.tokenizer`), else none.
   */
  countTokens?: (text: string) => number | Promise<number>;
  /**
   * The undici dispatcher (connection pool) to use. Default: `egressDispatcher(egress)`, a
   * keep-alive Agent that refuses connections to link-local / metadata addresses.
   */
  dispatcher?: Dispatcher;
  /** Where `spec.apiKeyEnv` is looked up. Default `process.env`. */
  env?: Record<string, string | undefined>;
  /**
   * The egress policy (`@weir/config`): the base URL's host must be an allowed upstream host and
   * `spec.apiKeyEnv` an allowed credential variable bound to it, else every call fails with
   * `engine_unavailable` and nothing is sent. Default: the process environment's.
   */
  egress?: EgressPolicy;
  /** Logger for metadata (status codes, error codes); never text or keys. Default: silent. */
  logger?: EngineLogger;
}

/**
 * An adapter for an OpenAI-compatible HTTP upstream (vLLM, TGI, llama.cpp server, Ollama,
 * OpenAI, Weir's own `engine-llamacpp`).
 *
 * Request: `POST ${baseUrl}/chat/completions` (`spec.api === 'chat'`, with `messages` and
 * `max_completion_tokens`; a text input is sent as one `user` message) or
 * `${baseUrl}/completions` (`'completions'`, with `prompt` and `max_tokens`; chat messages are
 * joined with `\n`), always `stream: true, stream_options: {include_usage: true}`, plus
 * `temperature`, `top_p`, `seed`, `stop` when set, and `response_format: {type: "json_schema",
 * json_schema: {name: "output", schema, strict: true}}` when the request has an `outputSchema`
 * (on either API: vLLM and llama.cpp's server read it on `/completions` too); headers `authorization: Bearer
 * <process.env[spec.apiKeyEnv]>` when that variable is set (the key is never logged) and
 * `x-request-id: <generationId>`.
 *
 * Egress (issue 14): the base URL's host must pass `deps.egress` (an allowed upstream host; the
 * key variable allowed and bound to that host), checked once at creation; otherwise every call
 * fails with `engine_unavailable` before anything is sent. Connections resolve names through
 * the guarded lookup (`egress-dispatcher.ts`): a name resolving to a link-local or metadata
 * address is refused (`engine_unavailable`). Redirects are never followed (a 3xx is an
 * upstream error), so the key never reaches another host.
 *
 * Response: SSE (`data:` events; comments, CRLF line ends and events or UTF-8 characters split
 * across reads are handled) or, if the upstream ignores `stream`, one JSON body. Each
 * non-empty text piece of choice 0 becomes a `delta` with `tokens: 1`; after `[DONE]` (or the
 * end of a stream that sent a `finish_reason`) one `end`: `finish_reason` `length` → `length`,
 * `content_filter` → `content_filter`, anything else → `stop`. Usage, and its `usageSource`
 * (issue 13), comes from the upstream's usage chunk (`reported`; with
 * `spec.continuousUsageStats` the running count on every chunk, so a cut stream too), else from
 * the revision's tokenizer (`spec.tokenizer` or `deps.countTokens`) over the prompt and all the
 * text received (`counted`; output never fewer than the content deltas, each of which carries at
 * least one token), else content deltas counted and the prompt's UTF-8 byte bound (`estimated`).
 * Token classes of a reported usage: `prompt_tokens_details.cached_tokens` → `cachedInputTokens`
 * and `completion_tokens_details.reasoning_tokens` → `reasoningTokens`, each already inside its
 * total (capped at it, never added to it).
 *
 * Abort: the request's signal aborts the HTTP call; no further deltas are yielded and the
 * stream ends with `aborted` and usage as above, over all the text received, delivered or not.
 * A failure after any output (or after the upstream reported usage) throws its error with
 * `produced` set the same way (`withProduced`), so the relay bills what was produced.
 *
 * Timeouts (ms; ≤ 0 disables): `spec.firstTokenTimeoutMs` runs from the call until the first
 * text (or finish); `spec.idleTimeoutMs` runs whenever the adapter waits for the upstream after
 * that and is reset by each `data:` event (comment heartbeats do not reset it). Either one
 * cuts the call with `upstream_timeout`. undici's own header/body timeouts are disabled in
 * favour of these.
 *
 * Errors: thrown as `WeirError` per the table in `upstream-errors.ts` (`upstream_bad_request`,
 * `upstream_error`, `upstream_unavailable`, `upstream_timeout`, `context_length_exceeded`).
 *
 * `countInputTokens`: the declared tokenizer's count of the prompt as the upstream receives it
 * plus the documented per-message overhead of `token-bound.ts` (an upper bound), once the
 * encoding is loaded; before that (the first request after start) and without a tokenizer, the
 * UTF-8 byte upper bound. The encoding is loaded on first use, never per request.
 *
 * `capacity` = `{slots: spec.maxConcurrency, contextTokens: options.contextTokens ?? 8192}`.
 */
export function createOpenAICompatibleEngine(
  spec: OpenAICompatibleEngineOptions,
  deps: OpenAICompatibleEngineDeps = {},
): EngineAdapter {
  const logger = deps.logger ?? silentLogger;
  const env = deps.env ?? process.env;
  const tokenizer: TextTokenizer | undefined = deps.countTokens ? functionTokenizer(deps.countTokens) : declaredTokenizer(spec);
  const base = spec.baseUrl.replace(/\/+$/, '');
  const target = new URL(`${base}/${spec.api === 'completions' ? 'completions' : 'chat/completions'}`);
  const inFlight = new Set<Cutter>();
  const egress = deps.egress ?? processEgressPolicy();
  const dispatcher = deps.dispatcher ?? egressDispatcher(egress);
  // Checked once: the target never changes. A refused upstream gets no call (and no key) at all.
  const egressProblem = upstreamEgressProblem(egress, target.href, spec.apiKeyEnv);
  if (egressProblem) logger.error({ upstreamHost: target.host, problem: egressProblem }, 'upstream refused by the egress policy; its calls fail');

  // The input as the upstream receives it: text becomes one user message on the chat API;
  // chat messages are joined with newlines on the completions API.
  const toUpstreamInput = (input: GenerationInput): GenerationInput => {
    if (input.kind === 'embedding') return input;
    if (spec.api === 'completions') {
      return input.kind === 'text' ? input : { kind: 'text', text: input.messages.map((m) => m.content).join('\n') };
    }
    return input.kind === 'chat' ? input : { kind: 'chat', messages: [{ role: 'user', content: input.text }] };
  };
  // Admission never waits for an encoding to load: until it is, the byte bound (also an upper
  // bound) reserves, and the load starts in the background.
  const countInputTokens = (input: GenerationInput, limit?: number): Promise<number> => {
    if (tokenizer?.ready()) return countInputWith(toUpstreamInput(input), tokenizer.count, limit);
    if (tokenizer) tokenizer.load().catch((err: unknown) => logger.warn({ tokenizer: tokenizer.name, err }, 'tokenizer failed to load'));
    return countInputWith(toUpstreamInput(input), utf8TokenUpperBound, limit);
  };

  function buildBody(request: EngineRequest): Record<string, unknown> {
    const { sampling } = request;
    const body: Record<string, unknown> = { model: spec.upstreamModel };
    const input = toUpstreamInput(request.input);
    if (input.kind === 'embedding') throw new WeirError('internal', 'an embedding input reached the generation body');
    if (input.kind === 'text') {
      body.prompt = input.text;
      body.max_tokens = request.maxOutputTokens;
    } else {
      body.messages = input.messages.map(toUpstreamMessage);
      body.max_completion_tokens = request.maxOutputTokens;
    }
    if (request.tools && request.tools.length > 0) {
      body.tools = request.tools;
      if (request.toolChoice !== undefined) body.tool_choice = request.toolChoice;
      if (request.parallelToolCalls !== undefined) body.parallel_tool_calls = request.parallelToolCalls;
    }
    if (sampling.temperature !== undefined) body.temperature = sampling.temperature;
    if (sampling.topP !== undefined) body.top_p = sampling.topP;
    if (sampling.seed !== undefined) body.seed = sampling.seed;
    if (sampling.stop && sampling.stop.length > 0) body.stop = sampling.stop;
    if (request.outputSchema) body.response_format = { type: 'json_schema', json_schema: { name: OUTPUT_SCHEMA_NAME, schema: request.outputSchema, strict: true } };
    body.stream = true;
    body.stream_options = spec.continuousUsageStats ? { include_usage: true, continuous_usage_stats: true } : { include_usage: true };
    return body;
  }

  function buildHeaders(request: EngineRequest): Record<string, string> {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      'x-request-id': request.generationId,
    };
    const key = spec.apiKeyEnv ? env[spec.apiKeyEnv] : undefined;
    if (key) headers.authorization = `Bearer ${key}`;
    return headers;
  }

  /** An embedding revision's request: `POST {baseUrl}/embeddings` (`upstream-embeddings.ts`), egress-checked like every call. */
  const embeddingsUrl = new URL(`${base}/embeddings`);
  async function* embeddings(input: EmbeddingInput, request: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    if (egressProblem) throw new WeirError('engine_unavailable', 'this upstream is not allowed by the egress policy (the service log says why)', { cause: new Error(egressProblem) });
    yield* embedUpstream(input, {
      url: embeddingsUrl,
      upstreamModel: spec.upstreamModel,
      headers: buildHeaders(request),
      dispatcher,
      timeoutMs: spec.firstTokenTimeoutMs,
      signal: request.signal,
      passDimensions: spec.variableDimensions === true,
      countInput: async () => (tokenizer?.ready() ? { tokens: await countInputWith(input, tokenizer.count), source: 'counted' } : { tokens: await countInputWith(input, utf8TokenUpperBound), source: 'estimated' }),
    });
  }

  /** Weir's engine extension: `POST {origin}/v1/stop/{generation id}` (fire and forget). */
  function requestStop(generationId: string): void {
    const url = `${spec.baseUrl.replace(/\/+$/, '')}/stop/${encodeURIComponent(generationId)}`;
    undiciRequest(url, { method: 'POST', dispatcher, headersTimeout: GRACEFUL_STOP_TIMEOUT_MS, bodyTimeout: GRACEFUL_STOP_TIMEOUT_MS })
      .then((r) => r.body.dump())
      .catch(() => undefined); // the stop timer cuts the connection if this never lands
  }

  /**
   * The generation as batches of events: the deltas of one upstream read together (one
   * promise per read for a batch consumer such as the relay, rather than one per delta).
   */
  async function* generateBatches(request: EngineRequest): AsyncGenerator<EngineEvent[], void, undefined> {
    if (egressProblem) throw new WeirError('engine_unavailable', 'this upstream is not allowed by the egress policy (the service log says why)', { cause: new Error(egressProblem) });
    if (spec.api === 'completions' && request.tools && request.tools.length > 0) {
      throw new WeirError('invalid_request', 'tools need the chat API: this revision calls its upstream on /completions, which has no tool calls', { param: 'tools' });
    }
    // What cuts the call (the request's signal, a timeout, close()): the first reason wins. A
    // plain object rather than an AbortController — nothing listens to it but the call.
    let call: UpstreamCall | undefined;
    let cutReason: Error | undefined;
    const cutter: Cutter = {
      abort(reason) {
        if (cutReason) return;
        cutReason = reason instanceof Error ? reason : new Error('upstream call aborted');
        call?.abort(cutReason);
      },
    };
    inFlight.add(cutter);
    // Set once the response is streaming: an abort then asks a Weir engine to stop and end
    // the stream with its own final usage, instead of cutting the connection.
    let streaming = false;
    let stopTimer: NodeJS.Timeout | undefined;
    const graceful = (): boolean => spec.gracefulStop === true && streaming;
    const onAbort = (): void => {
      if (!graceful()) {
        cutter.abort(request.signal.reason);
        return;
      }
      requestStop(request.generationId);
      stopTimer = setTimeout(() => cutter.abort(new Error('upstream did not stop in time')), GRACEFUL_STOP_TIMEOUT_MS);
    };
    request.signal.addEventListener('abort', onAbort, { once: true });

    const watchdog = createStreamWatchdog(cutter);

    let outputText = '';
    let deltas = 0;
    let firstSeen = false;
    let finishReason: string | undefined;
    // vLLM's `stop_reason` on the choice: the stop string that matched (a number is a stop token id).
    let stopSequence: string | undefined;
    let reported: TokenUsage | undefined;
    let doneSeen = false;

    // Weir's count of a stream the upstream did not report: the revision's tokenizer over the
    // prompt and every piece of text received (`counted`), else the content deltas and the
    // prompt's byte bound (`estimated`). Each content chunk carries at least one token, so the
    // deltas are a floor under the tokenizer's count.
    const countedUsage = async (): Promise<ProducedUsage> => {
      if (tokenizer) {
        const output = outputText.length === 0 ? 0 : await tokenizer.count(outputText);
        return { usage: { inputTokens: await countInputWith(toUpstreamInput(request.input), tokenizer.count), outputTokens: Math.max(deltas, output) }, source: 'counted' };
      }
      return { usage: { inputTokens: await countInputWith(toUpstreamInput(request.input), utf8TokenUpperBound), outputTokens: deltas }, source: 'estimated' };
    };
    const countedEnd = async (reason: Extract<EngineEvent, { type: 'end' }>['reason']): Promise<EngineEvent> => {
      const counted = await countedUsage();
      return { type: 'end', reason, usage: counted.usage, usageSource: counted.source };
    };
    // With continuous usage stats the upstream's own running count is the bill, even when the
    // stream is cut: it counts tokens whose text never arrived, too.
    // Stopped before anything arrived (a deadline or cancel before the upstream answered): nothing
    // is known to have been produced, so nothing is billed — the same rule as a failure before any
    // output, in every topology.
    const abortedEnd = async (): Promise<EngineEvent> =>
      spec.continuousUsageStats && reported
        ? { type: 'end', reason: 'aborted', usage: reported, usageSource: 'reported' }
        : !reported && deltas === 0 && outputText.length === 0
          ? { type: 'end', reason: 'aborted', usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 }, usageSource: 'counted' }
          : countedEnd('aborted');
    // What a failing generation had produced: the upstream's own count when it sent one, else
    // Weir's count once any output arrived; nothing before that.
    const producedSoFar = async (): Promise<ProducedUsage | undefined> => {
      if (reported) return { usage: reported, source: 'reported' };
      return deltas > 0 || outputText.length > 0 ? countedUsage() : undefined;
    };
    // Output tokens already handed on as deltas, by the upstream's count (continuous usage).
    let billedTokens = 0;
    const tokensSoFar = (): number => {
      if (!spec.continuousUsageStats || !reported) return 1;
      const n = Math.max(0, reported.outputTokens - billedTokens);
      billedTokens = Math.max(billedTokens, reported.outputTokens);
      return n;
    };
    const classify = (error: unknown): WeirError =>
      classifyUpstreamFailure(error, { timedOut: watchdog.timedOut, outputStarted: firstSeen, firstTokenTimeoutMs: spec.firstTokenTimeoutMs, idleTimeoutMs: spec.idleTimeoutMs });
    const fail = async (error: unknown): Promise<WeirError> => {
      const weirError = classify(error);
      logger.warn(
        { generationId: request.generationId, code: weirError.code, retryable: weirError.retryable },
        'upstream generation failed',
      );
      const produced = await producedSoFar().catch(() => undefined);
      return produced ? withProduced(weirError, produced) : weirError;
    };

    // Applies one parsed upstream object (a chunk, or a whole non-stream response); returns
    // the text and tool-call fragments it carries for choice 0.
    const apply = (payload: unknown): Piece => {
      if (typeof payload !== 'object' || payload === null) return { text: '' };
      const obj = payload as Record<string, unknown>;
      if (obj.error !== undefined && obj.error !== null) throw inBandError(obj.error);
      const usage = parseUsage(obj.usage);
      if (usage) reported = usage;
      const choices = Array.isArray(obj.choices) ? (obj.choices as Array<Record<string, unknown>>) : [];
      const choice = choices.find((c) => (c.index ?? 0) === 0);
      if (!choice) return { text: '' };
      if (typeof choice.finish_reason === 'string') finishReason = choice.finish_reason;
      if (typeof choice.stop_reason === 'string' && choice.stop_reason.length > 0) stopSequence = choice.stop_reason;
      const delta = (choice.delta ?? choice.message) as Record<string, unknown> | undefined;
      const text = spec.api === 'completions' ? choice.text : delta?.content;
      const toolCalls = spec.api === 'chat' ? parseToolCallDeltas(delta?.tool_calls) : undefined;
      const reasoning = spec.api === 'chat' ? reasoningOf(delta) : undefined;
      return { text: typeof text === 'string' ? text : '', ...(toolCalls ? { toolCalls } : {}), ...(reasoning ? { reasoning } : {}) };
    };
    // Tool-call arguments and reasoning count as output text (for the token estimate without upstream usage).
    const producedText = (p: Piece): string => (p.reasoning ?? '') + p.text + (p.toolCalls ?? []).map((c) => (c.name ?? '') + (c.argumentsDelta ?? '')).join('');
    /** The engine delta of a piece that carries something. */
    const deltaOf = (p: Piece, tokens: number): EngineEvent => ({ type: 'delta', text: p.text, tokens, ...(p.toolCalls ? { toolCalls: p.toolCalls } : {}), ...(p.reasoning ? { reasoning: p.reasoning } : {}) });

    try {
      if (request.signal.aborted) {
        yield [await abortedEnd()];
        return;
      }
      watchdog.arm('first', spec.firstTokenTimeoutMs);
      call = startUpstreamCall({ url: target, method: 'POST', headers: buildHeaders(request), body: JSON.stringify(buildBody(request)), dispatcher });
      if (cutReason) call.abort(cutReason);
      let head: UpstreamHead;
      try {
        head = await call.head;
      } catch (error) {
        if (request.signal.aborted && !watchdog.timedOut) {
          yield [await abortedEnd()];
          return;
        }
        throw await fail(error);
      }
      streaming = head.statusCode === 200;
      if (head.statusCode !== 200) {
        const text = await readUpstreamText(call, MAX_ERROR_BODY_BYTES).catch(() => '');
        throw await fail(upstreamStatusError(head.statusCode, text, head.headers));
      }

      const contentType = String(head.headers['content-type'] ?? '');
      if (contentType.includes('application/json')) {
        // The upstream ignored `stream: true`: one JSON body.
        let text: string;
        try {
          text = await readUpstreamText(call, Number.POSITIVE_INFINITY);
        } catch (error) {
          if (request.signal.aborted && !watchdog.timedOut) {
            yield [await abortedEnd()];
            return;
          }
          throw await fail(error);
        }
        watchdog.clear();
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch (error) {
          throw await fail(new WeirError('upstream_error', 'upstream sent invalid JSON', { cause: error }));
        }
        let piece: Piece;
        try {
          piece = apply(parsed);
        } catch (error) {
          throw await fail(error);
        }
        if (piece.text.length > 0 || piece.toolCalls || piece.reasoning) {
          outputText += producedText(piece);
          deltas += 1;
          yield [deltaOf(piece, 1)];
        }
        doneSeen = true;
      } else {
        const reader = createSseDataReader();
        // Content chunks shaped like one already parsed are read without parsing (content-chunk.ts).
        const chunks = createContentChunkReader();
        const plainTextOfJson = (json: string): string | undefined => {
          try {
            return plainContentOf(JSON.parse(json), spec.api);
          } catch {
            return undefined;
          }
        };
        let ended = false;
        while (!doneSeen && !ended) {
          if (firstSeen && !watchdog.armed) watchdog.arm('idle', spec.idleTimeoutMs);
          let batch: Buffer[] | null;
          try {
            batch = await call.read();
          } catch (error) {
            if (request.signal.aborted && !watchdog.timedOut) {
              watchdog.clear();
              yield [await abortedEnd()];
              return;
            }
            throw await fail(error);
          }
          // Everything that arrived since the last read is parsed at once.
          let datas: string[];
          if (batch === null) {
            ended = true;
            datas = reader.end();
          } else if (batch.length === 1) datas = reader.push(batch[0]);
          else datas = reader.push(Buffer.concat(batch));
          if (datas.length === 0) continue;
          // This read's deltas, as they will be handed on.
          const pieces: EngineEvent[] = [];
          let frameError: unknown;
          for (const data of datas) {
            if (data === '[DONE]' || data.trim() === '[DONE]') {
              doneSeen = true;
              break;
            }
            const fast = chunks.read(data);
            if (fast !== undefined) {
              if (fast.length > 0) {
                outputText += fast;
                pieces.push({ type: 'delta', text: fast, tokens: tokensSoFar() });
              }
              continue;
            }
            try {
              const parsed: unknown = JSON.parse(data);
              const piece = apply(parsed);
              if (piece.text.length > 0 && !piece.toolCalls && !piece.reasoning && plainContentOf(parsed, spec.api) === piece.text) chunks.learn(data, piece.text, plainTextOfJson);
              if (piece.text.length > 0 || piece.toolCalls || piece.reasoning) {
                outputText += piece.toolCalls || piece.reasoning ? producedText(piece) : piece.text;
                pieces.push(piece.toolCalls || piece.reasoning ? deltaOf(piece, tokensSoFar()) : { type: 'delta', text: piece.text, tokens: tokensSoFar() });
              }
            } catch (error) {
              frameError =
                error instanceof WeirError
                  ? error
                  : new WeirError('upstream_error', 'upstream sent an event that is not JSON', { cause: error });
              break;
            }
          }
          if (!firstSeen && (pieces.length > 0 || finishReason !== undefined)) firstSeen = true;
          // The first-token clock runs until the first text; after it, a data event restarts
          // the idle clock once these pieces are handed on.
          if (firstSeen) watchdog.clear();
          // Everything received counts as produced (billed), even if an abort stops its delivery.
          // The read's deltas go out together; none once the request was aborted.
          if (pieces.length > 0 && !request.signal.aborted) {
            deltas += pieces.length;
            yield pieces;
          }
          // A graceful stop keeps reading (delivering nothing more) until the upstream's end.
          if (request.signal.aborted && !graceful()) {
            yield [await abortedEnd()];
            return;
          }
          // Pieces before an in-band error frame are delivered first.
          if (frameError !== undefined) throw await fail(frameError);
        }
      }
      watchdog.clear();

      if (request.signal.aborted) {
        // Stopped gracefully: the upstream's final usage (or, without it, our count) is the bill.
        yield [reported ? { type: 'end', reason: 'aborted', usage: reported, usageSource: 'reported' } : await abortedEnd()];
        return;
      }
      if (finishReason === undefined) {
        throw await fail(
          new WeirError(
            'upstream_error',
            doneSeen ? 'upstream stream finished without a finish_reason' : 'upstream stream ended without finish_reason or [DONE]',
          ),
        );
      }
      const reason = finishReason === 'length' || finishReason === 'content_filter' || finishReason === 'tool_calls' ? finishReason : 'stop';
      const end: EngineEvent = reported ? { type: 'end', reason, usage: reported, usageSource: 'reported' } : await countedEnd(reason);
      yield [reason === 'stop' && stopSequence !== undefined && (request.sampling.stop ?? []).includes(stopSequence) && end.type === 'end' ? { ...end, stopSequence } : end];
    } finally {
      watchdog.clear();
      if (stopTimer) clearTimeout(stopTimer);
      request.signal.removeEventListener('abort', onAbort);
      inFlight.delete(cutter);
      // Cut the HTTP call only if the upstream has not finished sending (after `[DONE]` the rest
      // of the body is normally already in, and the connection goes back to its pool).
      if (call && !call.complete) call.abort(cutReason ?? new Error('generation ended before the upstream response'));
    }
  }

  return {
    kind: 'openai-compatible',
    capacity: { slots: spec.maxConcurrency, contextTokens: spec.contextTokens ?? OPENAI_COMPATIBLE_DEFAULT_CONTEXT_TOKENS },
    countInputTokens,
    // Batches for consumers that take them (the relay); one event at a time for any other.
    // (An item-by-item reader that aborts mid-batch gets no further deltas of it, as before.)
    generate: (request: EngineRequest) =>
      request.input.kind === 'embedding'
        ? embeddings(request.input, request)
        : batchedIterable(generateBatches(request), { skipWhenIterating: (ev) => ev.type === 'delta' && request.signal.aborted }),
    async close() {
      for (const cutter of inFlight) cutter.abort(new Error('engine closed'));
    },
  };
}

/**
 * The text of a plain content chunk — one choice, index 0, no finish reason, no usage, no
 * error, no tool calls: a chunk `apply` reads as that text and nothing else — else undefined.
 */
function plainContentOf(payload: unknown, api: OpenAICompatibleEngineSpec['api']): string | undefined {
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return undefined;
  const obj = payload as Record<string, unknown>;
  if ((obj.error !== undefined && obj.error !== null) || (obj.usage !== undefined && obj.usage !== null)) return undefined;
  const choices = obj.choices;
  if (!Array.isArray(choices) || choices.length !== 1) return undefined;
  const c = choices[0] as Record<string, unknown> | null;
  if (typeof c !== 'object' || c === null || (c.index ?? 0) !== 0 || (c.finish_reason !== undefined && c.finish_reason !== null)) return undefined;
  if (api === 'completions') return typeof c.text === 'string' ? c.text : undefined;
  const d = c.delta as Record<string, unknown> | null | undefined;
  if (typeof d !== 'object' || d === null || (d.tool_calls !== undefined && d.tool_calls !== null) || reasoningOf(d) !== undefined) return undefined;
  return typeof d.content === 'string' ? d.content : undefined;
}

/**
 * The reasoning text of a chat delta or message: `reasoning_content` (DeepSeek, vLLM, llama.cpp
 * server, Qwen) or `reasoning` (OpenRouter, newer vLLM); undefined when neither is a non-empty string.
 */
function reasoningOf(delta: Record<string, unknown> | undefined): string | undefined {
  const r = delta?.reasoning_content ?? delta?.reasoning;
  return typeof r === 'string' && r.length > 0 ? r : undefined;
}

/** Cuts one upstream call (what the watchdog and `close()` call). */
interface Cutter {
  abort(reason?: unknown): void;
}

/** What one upstream chunk carries for choice 0. */
interface Piece {
  text: string;
  toolCalls?: ToolCallDelta[];
  /** Reasoning text (`reasoningOf`). */
  reasoning?: string;
}

/** A Weir chat message as OpenAI's chat API takes it (assistant `tool_calls`, a tool message's `tool_call_id`). */
function toUpstreamMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.name) out.name = m.name;
  if (m.toolCalls && m.toolCalls.length > 0) {
    if (m.content === '') out.content = null;
    out.tool_calls = m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
  }
  if (m.toolCallId !== undefined) out.tool_call_id = m.toolCallId;
  return out;
}

/**
 * OpenAI's `delta.tool_calls` (fragments) or `message.tool_calls` (whole calls, a non-stream
 * answer) as Weir's fragments; undefined when there are none. A fragment without `index`
 * takes its position; empty names are dropped (some servers repeat `name: ""`).
 */
function parseToolCallDeltas(value: unknown): ToolCallDelta[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const out: ToolCallDelta[] = [];
  for (const [position, raw] of value.entries()) {
    if (typeof raw !== 'object' || raw === null) continue;
    const call = raw as { index?: unknown; id?: unknown; function?: { name?: unknown; arguments?: unknown } };
    const d: ToolCallDelta = { index: typeof call.index === 'number' ? call.index : position };
    if (typeof call.id === 'string' && call.id !== '') d.id = call.id;
    if (typeof call.function?.name === 'string' && call.function.name !== '') d.name = call.function.name;
    if (typeof call.function?.arguments === 'string') d.argumentsDelta = call.function.arguments;
    out.push(d);
  }
  return out.length > 0 ? out : undefined;
}

function parseUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const u = value as Record<string, unknown>;
  // Counts must be non-negative whole numbers: an upstream's negative, fractional or non-finite
  // "usage" is ignored (Weir counts instead), never billed, priced or allowed to fault the relay.
  if (!isTokenCount(u.prompt_tokens) || !isTokenCount(u.completion_tokens)) return undefined;
  // OpenAI counts both classes inside the totals (openai-node `CompletionUsage`): cached tokens
  // are part of `prompt_tokens`, reasoning tokens part of `completion_tokens` — never added.
  const details = u.prompt_tokens_details as Record<string, unknown> | null | undefined;
  const cached = isTokenCount(details?.cached_tokens) ? Math.min(details.cached_tokens, u.prompt_tokens) : undefined;
  const outDetails = u.completion_tokens_details as Record<string, unknown> | null | undefined;
  const reasoning = isTokenCount(outDetails?.reasoning_tokens) ? Math.min(outDetails.reasoning_tokens, u.completion_tokens) : undefined;
  return {
    inputTokens: u.prompt_tokens,
    outputTokens: u.completion_tokens,
    ...(cached !== undefined ? { cachedInputTokens: cached } : {}),
    ...(reasoning !== undefined && reasoning > 0 ? { reasoningTokens: reasoning } : {}),
  };
}

/** A token count an upstream may report: a non-negative safe integer. */
function isTokenCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

import { type EmbeddingInput, type EngineEvent, encodeEmbeddingDelta, WeirError } from '@weir/core';
import type { Dispatcher } from 'undici';
import { readUpstreamText, startUpstreamCall, type UpstreamCall } from './upstream-call';
import { upstreamStatusError } from './upstream-errors';
import { classifyUpstreamFailure } from './upstream-watchdog';

/** Largest upstream error body read for the error's code (bytes). */
const MAX_ERROR_BODY_BYTES = 16 * 1024;

/** Largest embeddings response read (bytes): 2,048 vectors of 3,072 floats as JSON text is about 80 MiB. */
const MAX_EMBEDDINGS_BODY_BYTES = 128 * 1024 * 1024;

/** What {@link embedUpstream} needs of its engine. */
export interface UpstreamEmbeddingsCall {
  /** `{baseUrl}/embeddings`. */
  url: URL;
  upstreamModel: string;
  headers: Record<string, string>;
  dispatcher: Dispatcher;
  /** The whole call must answer within this (ms; ≤ 0: no limit): the revision's first-token timeout. */
  timeoutMs: number;
  signal: AbortSignal;
  /** Pass `dimensions` through (the revision declares `embedding.variableDimensions`). */
  passDimensions: boolean;
  /** Tokens of the input by Weir's count, billed when the upstream reports no usage (`counted`/`estimated`). */
  countInput: () => Promise<{ tokens: number; source: 'counted' | 'estimated' }>;
}

/**
 * One OpenAI-compatible `POST {baseUrl}/embeddings` call (not streamed): `{model, input,
 * encoding_format: "float", dimensions?}` with the items as given (texts or token arrays).
 * Yields one `delta` per returned vector, in `index` order ({@link encodeEmbeddingDelta}, 0
 * tokens), then `end` `stop` with `usage.prompt_tokens` (`reported`), else Weir's count.
 * Abort: the call is cut and `end` `aborted` with no usage (nothing is known to be produced).
 * Errors as the generation path maps them (`upstream-errors.ts`); a response whose vectors do
 * not match the inputs one for one is `upstream_error`.
 */
export async function* embedUpstream(input: EmbeddingInput, call: UpstreamEmbeddingsCall): AsyncGenerator<EngineEvent, void, undefined> {
  const body: Record<string, unknown> = { model: call.upstreamModel, input: input.items, encoding_format: 'float' };
  if (call.passDimensions && input.dimensions !== undefined) body.dimensions = input.dimensions;
  const aborted = (): EngineEvent => ({ type: 'end', reason: 'aborted', usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 }, usageSource: 'counted' });
  if (call.signal.aborted) {
    yield aborted();
    return;
  }
  let timedOut = false;
  let upstream: UpstreamCall | undefined;
  const onAbort = () => upstream?.abort(new Error('embedding request aborted'));
  const timer = call.timeoutMs > 0 ? setTimeout(() => ((timedOut = true), upstream?.abort(new Error('upstream timeout'))), call.timeoutMs) : undefined;
  call.signal.addEventListener('abort', onAbort, { once: true });
  const fail = (error: unknown) => classifyUpstreamFailure(error, { timedOut: timedOut ? 'first' : undefined, outputStarted: false, firstTokenTimeoutMs: call.timeoutMs, idleTimeoutMs: 0 });
  let text: string;
  try {
    upstream = startUpstreamCall({ url: call.url, method: 'POST', headers: { ...call.headers, accept: 'application/json' }, body: JSON.stringify(body), dispatcher: call.dispatcher });
    const head = await upstream.head;
    if (head.statusCode !== 200) throw upstreamStatusError(head.statusCode, await readUpstreamText(upstream, MAX_ERROR_BODY_BYTES).catch(() => ''), head.headers);
    text = await readUpstreamText(upstream, MAX_EMBEDDINGS_BODY_BYTES);
  } catch (error) {
    if (call.signal.aborted && !timedOut) {
      yield aborted();
      return;
    }
    throw fail(error);
  } finally {
    if (timer) clearTimeout(timer);
    call.signal.removeEventListener('abort', onAbort);
    if (upstream && !upstream.complete) upstream.abort(new Error('embedding call ended'));
  }
  const vectors = parseEmbeddings(text, input.items.length);
  for (const v of vectors) yield { type: 'delta', text: encodeEmbeddingDelta(v), tokens: 0 };
  const usage = (JSON.parse(text) as { usage?: { prompt_tokens?: unknown } }).usage;
  const reported = typeof usage?.prompt_tokens === 'number' && Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens >= 0 ? usage.prompt_tokens : undefined;
  if (reported !== undefined) {
    yield { type: 'end', reason: 'stop', usage: { inputTokens: reported, outputTokens: 0, cachedInputTokens: 0 }, usageSource: 'reported' };
    return;
  }
  const counted = await call.countInput();
  yield { type: 'end', reason: 'stop', usage: { inputTokens: counted.tokens, outputTokens: 0, cachedInputTokens: 0 }, usageSource: counted.source };
}

/** The vectors of an OpenAI embeddings response, by `index`; throws `upstream_error` unless there is exactly one finite float vector per input. */
function parseEmbeddings(text: string, expected: number): number[][] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new WeirError('upstream_error', 'upstream sent invalid JSON for embeddings', { cause: error });
  }
  const data = (parsed as { data?: unknown } | null)?.data;
  if (!Array.isArray(data) || data.length !== expected) throw new WeirError('upstream_error', `upstream returned ${Array.isArray(data) ? data.length : 'no'} embeddings for ${expected} inputs`);
  const out: number[][] = new Array(expected);
  for (const [i, item] of data.entries()) {
    const index = typeof (item as { index?: unknown })?.index === 'number' ? (item as { index: number }).index : i;
    const v = (item as { embedding?: unknown })?.embedding;
    if (!Number.isInteger(index) || index < 0 || index >= expected || out[index] !== undefined || !Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'number' && Number.isFinite(x))) {
      throw new WeirError('upstream_error', 'upstream returned a malformed embedding (expected `data[i].embedding` as an array of floats, one per input)');
    }
    out[index] = v as number[];
  }
  return out;
}

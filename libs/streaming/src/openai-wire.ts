/**
 * The OpenAI wire shapes Weir speaks on `/v1/chat/completions` and `/v1/completions`, and
 * that the llama.cpp engine server speaks upstream (CONVENTIONS.md §1, from openai-node
 * v6.49.0 `completions.ts` and `src/resources/completions.ts`). Pure builders: no I/O.
 */
import type { FinishReason, TokenUsage, ToolCall, ToolCallDelta } from '@weir/core';

/** OpenAI's finish reasons (do not invent others: clients map unknown values to `other`). */
export type OpenAiFinishReason = 'stop' | 'length' | 'content_filter' | 'tool_calls';

/**
 * OpenAI's usage object. `cached_tokens` (cache reads) is part of `prompt_tokens` and
 * `reasoning_tokens` part of `completion_tokens`, not extra. `cache_write_tokens` (input written
 * to a prompt cache, part of `prompt_tokens`; OpenAI has no such field, OpenRouter's name) is
 * sent only when the upstream reported some.
 */
export interface OpenAiUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number; cache_write_tokens?: number };
  completion_tokens_details: { reasoning_tokens: number };
}

/** Fields shared by every chunk of one response (same id/created/model on each chunk). */
export interface OpenAiResponseMeta {
  /** `chatcmpl-…` or `cmpl-…`. */
  id: string;
  /** Unix seconds. */
  created: number;
  /** The model name echoed to the client (Weir echoes the alias the client sent). */
  model: string;
}

/**
 * Weir's extension on the last chunk / response when its own reason is not one OpenAI has
 * (ARCHITECTURE.md §8): a deadline ends with `finish_reason: "length"` plus
 * `weir: {finish_reason: "deadline"}`; a cancel with `stop` plus `weir: {finish_reason: "cancelled"}`.
 */
export interface WeirExtension {
  finish_reason: FinishReason;
  /** The revision that answered (after a fallback, not the first choice). */
  model_revision: string;
  /** Why the first choice did not answer (`upstream_unavailable`, `circuit_open`, …); absent when it did. */
  fallback_reason?: string;
  /** What the request cost (USD; the ledger's figure). Absent on a replay and on a stream's finish chunk. */
  cost_usd?: number;
  /** Weir's own time (ms), upstream attempts excluded (docs/api.md "Cost and overhead"). Absent as `cost_usd`. */
  overhead_ms?: number;
}

/**
 * Maps Weir's finish reason to OpenAI's. `deadline` → `length` (the output was cut short),
 * `cancelled` → `stop`; `error` has no OpenAI value and is reported in-band as an error
 * frame instead, so it maps to `stop` only as a fallback.
 */
export function toOpenAiFinishReason(reason: FinishReason): OpenAiFinishReason {
  switch (reason) {
    case 'stop':
      return 'stop';
    case 'length':
    case 'deadline':
      return 'length';
    case 'content_filter':
      return 'content_filter';
    case 'tool_calls':
      return 'tool_calls';
    case 'cancelled':
    case 'error':
      return 'stop';
  }
}

/** Converts measured usage to OpenAI's usage object. */
export function toOpenAiUsage(usage: TokenUsage): OpenAiUsage {
  return {
    prompt_tokens: usage.inputTokens,
    completion_tokens: usage.outputTokens,
    total_tokens: usage.inputTokens + usage.outputTokens,
    prompt_tokens_details: {
      cached_tokens: usage.cachedInputTokens ?? 0,
      ...(usage.cacheWriteInputTokens ? { cache_write_tokens: usage.cacheWriteInputTokens } : {}),
    },
    completion_tokens_details: { reasoning_tokens: usage.reasoningTokens ?? 0 },
  };
}

/**
 * One streamed tool-call fragment as OpenAI sends it (`choices[0].delta.tool_calls[i]`): the
 * first fragment of a call has `id`, `type` and `function.name`; later ones only
 * `function.arguments` pieces.
 */
export interface OpenAiToolCallChunk {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments?: string };
}

/** A complete tool call of a non-stream `message.tool_calls`. */
export interface OpenAiToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** Weir's tool-call fragments in OpenAI's chunk shape (order kept). */
export function toOpenAiToolCallChunks(deltas: readonly ToolCallDelta[]): OpenAiToolCallChunk[] {
  return deltas.map((d) => ({
    index: d.index,
    ...(d.id !== undefined ? { id: d.id, type: 'function' as const } : {}),
    function: { ...(d.name !== undefined ? { name: d.name } : {}), ...(d.argumentsDelta !== undefined ? { arguments: d.argumentsDelta } : {}) },
  }));
}

/**
 * Joins tool-call fragments into whole calls, by `index` in order of first appearance: the
 * last `id`/`name` seen wins, argument pieces are concatenated.
 */
export function accumulateToolCalls(deltas: Iterable<readonly ToolCallDelta[] | undefined>): ToolCall[] {
  const calls = new Map<number, ToolCall>();
  for (const fragments of deltas) {
    for (const d of fragments ?? []) {
      const call = calls.get(d.index) ?? { id: '', name: '', arguments: '' };
      if (d.id !== undefined) call.id = d.id;
      if (d.name !== undefined) call.name = d.name;
      if (d.argumentsDelta !== undefined) call.arguments += d.argumentsDelta;
      calls.set(d.index, call);
    }
  }
  return [...calls.values()];
}

/** Options shared by every chunk and response builder. */
interface BodyOptions {
  usage?: OpenAiUsage | null;
  weir?: WeirExtension;
}

/**
 * The envelope every OpenAI chunk and response shares: id, object, created, model, the
 * choices (always an array, even empty: the ai SDK's chunk schema requires it), usage, and
 * Weir's extension when given.
 */
function envelope(meta: OpenAiResponseMeta, object: string, choices: unknown[], options: BodyOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { id: meta.id, object, created: meta.created, model: meta.model, choices, usage: options.usage ?? null };
  if (options.weir) body.weir = options.weir;
  return body;
}

/** A `chat.completion.chunk`. `usage` is null on every chunk but the usage chunk. */
export function chatCompletionChunk(
  meta: OpenAiResponseMeta,
  choice: { delta: { role?: 'assistant'; content?: string; tool_calls?: OpenAiToolCallChunk[] }; finishReason: OpenAiFinishReason | null } | null,
  options: BodyOptions = {},
): Record<string, unknown> {
  return envelope(meta, 'chat.completion.chunk', choice ? [{ index: 0, delta: choice.delta, logprobs: null, finish_reason: choice.finishReason }] : [], options);
}

/** A string that never occurs in a chunk: it marks where the text goes in a {@link contentChunkJson} template. */
const TEXT_SLOT = '\u0000weir:text\u0000';

/**
 * The JSON of a content chunk of one response, as a function of its text: for `chat`, byte
 * for byte `JSON.stringify(chatCompletionChunk(meta, {delta: {content: text}, finishReason:
 * null}))`; for `text`, that of `textCompletionChunk(meta, {text, finishReason: null})`. The
 * envelope around the text is serialised once per response, so a streamed delta costs one
 * `JSON.stringify` of its text, not of a chunk object built for it.
 */
export function contentChunkJson(meta: OpenAiResponseMeta, kind: 'chat' | 'text'): (text: string) => string {
  const template = JSON.stringify(
    kind === 'chat' ? chatCompletionChunk(meta, { delta: { content: TEXT_SLOT }, finishReason: null }) : textCompletionChunk(meta, { text: TEXT_SLOT, finishReason: null }),
  );
  const slot = JSON.stringify(TEXT_SLOT);
  const at = template.indexOf(slot);
  const before = template.slice(0, at);
  const after = template.slice(at + slot.length);
  return (text) => before + JSON.stringify(text) + after;
}

/** A legacy completion chunk (`object: "text_completion"`, same shape as the full response). */
export function textCompletionChunk(
  meta: OpenAiResponseMeta,
  choice: { text: string; finishReason: OpenAiFinishReason | null } | null,
  options: BodyOptions = {},
): Record<string, unknown> {
  return envelope(meta, 'text_completion', choice ? [{ index: 0, text: choice.text, logprobs: null, finish_reason: choice.finishReason }] : [], options);
}

/**
 * A non-stream `chat.completion`. With `toolCalls`, the message carries `tool_calls` and its
 * `content` is null when the model wrote no text (as OpenAI answers). A non-empty `reasoning`
 * (the upstream's) is the message's `reasoning_content`.
 */
export function chatCompletion(
  meta: OpenAiResponseMeta,
  text: string,
  finishReason: OpenAiFinishReason,
  usage: OpenAiUsage,
  weir?: WeirExtension,
  toolCalls: readonly ToolCall[] = [],
  reasoning = '',
): Record<string, unknown> {
  const message: Record<string, unknown> =
    toolCalls.length === 0
      ? { role: 'assistant', content: text, refusal: null }
      : {
          role: 'assistant',
          content: text === '' ? null : text,
          refusal: null,
          tool_calls: toolCalls.map((c): OpenAiToolCall => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
        };
  // The upstream's reasoning, under the name DeepSeek, vLLM and llama.cpp server give it (OpenAI's own chat API has none).
  if (reasoning !== '') message.reasoning_content = reasoning;
  const choice = { index: 0, message, logprobs: null, finish_reason: finishReason };
  return envelope(meta, 'chat.completion', [choice], { usage, weir });
}

/** A non-stream legacy `text_completion`. */
export function textCompletion(
  meta: OpenAiResponseMeta,
  text: string,
  finishReason: OpenAiFinishReason,
  usage: OpenAiUsage,
  weir?: WeirExtension,
): Record<string, unknown> {
  return envelope(meta, 'text_completion', [{ index: 0, text, logprobs: null, finish_reason: finishReason }], { usage, weir });
}

/** OpenAI's error body `{error: {message, type, param, code}}`. */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Builds OpenAI's error body. */
export function openAiError(message: string, type: string, code: string | null, param: string | null = null): OpenAiErrorBody {
  return { error: { message, type, param, code } };
}

/**
 * The request and stream vocabulary shared by every service: what a generation asks for,
 * what an engine yields, and how it ends.
 */
import type { UsageSource } from './settlement';

/**
 * Why a generation ended (ARCHITECTURE.md §8). `stop`: natural end or stop sequence;
 * `length`: the output limit; `cancelled`: the client went away or cancelled; `deadline`:
 * cut at `deadline_ms`; `error`: an upstream or internal fault; `content_filter`: moderation;
 * `tool_calls`: the model called one or more tools and waits for their results.
 */
export type FinishReason = 'stop' | 'length' | 'cancelled' | 'deadline' | 'error' | 'content_filter' | 'tool_calls';

/** Chat roles accepted on the OpenAI-compatible surface. */
export type ChatRole = 'system' | 'developer' | 'user' | 'assistant' | 'tool';

/** One chat message; content is plain text (parts are flattened by the gateway). */
export interface ChatMessage {
  role: ChatRole;
  content: string;
  name?: string;
  /** Assistant messages: the tool calls the model made (OpenAI's `tool_calls`). */
  toolCalls?: ToolCall[];
  /** `tool` messages: the id of the call this message answers (OpenAI's `tool_call_id`). */
  toolCallId?: string;
}

/** A complete tool call in a chat history (OpenAI's `{id, type: "function", function: {name, arguments}}`). */
export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as the model wrote them: JSON text, not parsed. */
  arguments: string;
}

/**
 * A function tool the model may call: OpenAI's `{type: "function", function: {name,
 * description?, parameters?, strict?}}`, validated by the gateway and passed to upstreams
 * as given.
 */
export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null };
}

/**
 * Whether and which tool the model must call: OpenAI's `tool_choice` (`none`, `auto`,
 * `required`, or one named function).
 */
export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

/**
 * A fragment of a streamed tool call (OpenAI's `delta.tool_calls[i]`): the first fragment of
 * call `index` carries its `id` and `name`, later ones carry pieces of its arguments (JSON
 * text, to be concatenated in order).
 */
export interface ToolCallDelta {
  /** Which call of this response (0-based, in order of first appearance). */
  index: number;
  id?: string;
  name?: string;
  argumentsDelta?: string;
}

/**
 * One input of an embedding request (`POST /v1/embeddings`): a text, or token ids of the
 * embedding revision's own tokenizer (OpenAI's token-array form).
 */
export type EmbeddingItem = string | number[];

/** An embedding request's input: one vector per item, in order. */
export interface EmbeddingInput {
  kind: 'embedding';
  /** 1 to {@link MAX_EMBEDDING_INPUTS} items, none empty. */
  items: EmbeddingItem[];
  /** Dimensions asked for (OpenAI's `dimensions`; only on revisions that declare `embedding.variableDimensions`). Default: the model's. */
  dimensions?: number;
}

/** Most inputs one embedding request may carry: OpenAI's limit, 2,048. */
export const MAX_EMBEDDING_INPUTS = 2_048;

/**
 * A generation's input: raw text (completion), chat messages, or (an embedding revision's
 * request) the items to embed. An engine answers an `embedding` input with one `delta` per
 * item, in order, whose text is {@link encodeEmbeddingDelta} of its vector, then `end` with
 * `outputTokens` 0.
 */
export type GenerationInput = { kind: 'text'; text: string } | { kind: 'chat'; messages: ChatMessage[] } | EmbeddingInput;

/**
 * An embedding vector as an engine delta's text: the float32 little-endian bytes in base64,
 * then a newline. The newline lets a reader split deltas that a transport coalesced into one
 * text ({@link decodeEmbeddingDeltas}).
 */
export function encodeEmbeddingDelta(vector: ArrayLike<number>): string {
  const bytes = Buffer.allocUnsafe(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i], i * 4);
  return `${bytes.toString('base64')}\n`;
}

/** The vectors of an embedding generation's deltas (their texts concatenated in order): one per newline-terminated line. */
export function decodeEmbeddingDeltas(text: string): Float32Array[] {
  const lines = text.split('\n');
  lines.pop();
  return lines.map((line) => {
    const bytes = Buffer.from(line, 'base64');
    const v = new Float32Array(bytes.length / 4);
    for (let i = 0; i < v.length; i++) v[i] = bytes.readFloatLE(i * 4);
    return v;
  });
}

/** Sampling parameters; undefined means the engine's default. */
export interface SamplingParams {
  /** 0–2; 0 is greedy and deterministic on the llama.cpp engine. */
  temperature?: number;
  /** Nucleus sampling, (0, 1]. */
  topP?: number;
  /** Best-effort determinism seed. */
  seed?: number;
  /** Up to 4 stop sequences; the matched text is not returned. */
  stop?: string[];
}

/** Measured token counts of one generation. */
export interface TokenUsage {
  /** Prompt tokens, counted by the revision's tokenizer (or reported by the upstream). */
  inputTokens: number;
  /** Output tokens produced by the engine, including any produced after a cancel. */
  outputTokens: number;
  /** Of `inputTokens`, those read from a prompt cache (billed at the cache-read price). Default 0. */
  cachedInputTokens?: number;
  /**
   * Of `inputTokens`, those written to a prompt cache (Anthropic's `cache_creation_input_tokens`;
   * billed at the cache-write price). `cachedInputTokens + cacheWriteInputTokens ≤ inputTokens`. Default 0.
   */
  cacheWriteInputTokens?: number;
  /**
   * Of `outputTokens`, reasoning tokens (OpenAI's `completion_tokens_details.reasoning_tokens`,
   * which `completion_tokens` includes; billed at the reasoning price). Default 0.
   */
  reasoningTokens?: number;
}

/** What an engine adapter is asked to do. */
export interface EngineRequest {
  input: GenerationInput;
  /** Hard cap on output tokens (≥ 1). */
  maxOutputTokens: number;
  sampling: SamplingParams;
  /** Aborted by the relay on cancel, disconnect or deadline; the adapter stops and ends with `aborted`. */
  signal: AbortSignal;
  /** Weir's generation id, for upstream correlation headers and logs. */
  generationId: string;
  /**
   * A JSON Schema (draft-07, 2019-09 or 2020-12 as its `$schema` says; already validated by the gateway, at most 64 KiB) the output
   * must be a JSON document of (`output_schema` on `POST /v1/responses`). An engine that can
   * constrain generation does so (llama.cpp: a JSON-schema grammar; OpenAI-compatible upstreams:
   * `response_format: {type: "json_schema"}`); the gateway validates the final output against
   * it either way and ends with `output_invalid` when it does not match. Engines that cannot
   * constrain are refused such requests at admission. Default: free text.
   */
  outputSchema?: object;
  /**
   * Function tools the model may call (OpenAI's `tools`, validated by the gateway, at most
   * 128). Only engines of revisions declaring `capabilities.tools` take them; the others
   * refuse a request carrying them with `invalid_request`. Default: none.
   */
  tools?: ToolDefinition[];
  /** OpenAI's `tool_choice`; only with `tools`. Default: the upstream's (`auto`). */
  toolChoice?: ToolChoice;
  /** OpenAI's `parallel_tool_calls`; only with `tools`. Default: the upstream's. */
  parallelToolCalls?: boolean;
  /**
   * Anthropic's beta flags the client sent in `anthropic-beta` (`POST /v1/messages`), each
   * 1–128 of `[A-Za-z0-9._-]`. Only the Anthropic engine uses them (its upstream call's
   * `anthropic-beta` header); the other engines ignore them. Default none.
   */
  anthropicBeta?: string[];
}

/**
 * One event from an engine. An engine stream is `delta*` then exactly one `end`; a fault is
 * thrown as a `WeirError` instead of `end` (the relay bills the deltas it saw).
 */
export type EngineEvent =
  | {
      type: 'delta';
      /** Decoded text; may be empty when a token completes no UTF-8 character yet. */
      text: string;
      /** Output tokens this delta stands for (exact for llama.cpp; 1 per chunk upstream). */
      tokens: number;
      /** Tool-call fragments of this delta, in the upstream's order; absent when none. */
      toolCalls?: ToolCallDelta[];
      /**
       * Reasoning text of this delta (an upstream's `reasoning_content` / `reasoning`), shown
       * apart from the answer: never part of `text`, never checked by an output schema. Absent
       * when none. Its tokens are output tokens, counted in `tokens` like the text's.
       */
      reasoning?: string;
    }
  | {
      type: 'end';
      /** `aborted` when the request's signal fired; the relay decides cancelled vs deadline. */
      reason: 'stop' | 'length' | 'aborted' | 'content_filter' | 'tool_calls';
      /** Final counts: the engine's own, the upstream's usage, or Weir's count of what it received. */
      usage: TokenUsage;
      /**
       * How `usage` was obtained: `reported` by the engine or upstream itself (its usage chunk,
       * continuous usage stats, an in-process engine's own count); `counted` by Weir with the
       * revision's declared tokenizer over the text received; `estimated` otherwise (content
       * deltas counted, an upper bound for the input).
       */
      usageSource: UsageSource;
      /**
       * The stop sequence (one of `sampling.stop`) that ended the generation, when `reason` is
       * `stop` and the engine knows it matched one (Anthropic's `stop_sequence`, vLLM's
       * `stop_reason`, llama.cpp's stop trigger). Absent: a natural end, or not known.
       */
      stopSequence?: string;
    };

/** Per-generation timing measured by the relay (ms). */
export interface GenerationTimings {
  /** Time spent waiting for a slot in the scheduler's queue. */
  queueMs: number;
  /** From the request's arrival to the first output token; null when none was produced. */
  ttftMs: number | null;
  /** From arrival to the terminal event. */
  totalMs: number;
}

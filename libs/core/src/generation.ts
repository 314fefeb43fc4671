/**
 * The request and stream vocabulary shared by every service: what a generation asks for,
 * what an engine yields, and how it ends.
 */

/**
 * Why a generation ended (ARCHITECTURE.md §8). `stop`: natural end or stop sequence;
 * `length`: the output limit; `cancelled`: the client went away or cancelled; `deadline`:
 * cut at `deadline_ms`; `error`: an upstream or internal fault; `content_filter`: moderation.
 */
export type FinishReason = 'stop' | 'length' | 'cancelled' | 'deadline' | 'error' | 'content_filter';

/** Chat roles accepted on the OpenAI-compatible surface. */
export type ChatRole = 'system' | 'developer' | 'user' | 'assistant' | 'tool';

/** One chat message; content is plain text (parts are flattened by the gateway). */
export interface ChatMessage {
  role: ChatRole;
  content: string;
  name?: string;
}

/** A generation's input: raw text (completion) or chat messages. */
export type GenerationInput = { kind: 'text'; text: string } | { kind: 'chat'; messages: ChatMessage[] };

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
  /** Of `inputTokens`, those served from a prompt cache (billed at the cached price). */
  cachedInputTokens?: number;
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
   * A JSON Schema (draft 2020-12; already validated by the gateway, at most 64 KiB) the output
   * must be a JSON document of (`output_schema` on `POST /v1/responses`). An engine that can
   * constrain generation does so (llama.cpp: a JSON-schema grammar; OpenAI-compatible upstreams:
   * `response_format: {type: "json_schema"}`); the gateway validates the final output against
   * it either way and ends with `output_invalid` when it does not match. Engines that cannot
   * constrain are refused such requests at admission. Default: free text.
   */
  outputSchema?: object;
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
    }
  | {
      type: 'end';
      /** `aborted` when the request's signal fired; the relay decides cancelled vs deadline. */
      reason: 'stop' | 'length' | 'aborted' | 'content_filter';
      /** Final counts: the engine's own, or the upstream's usage chunk when it sent one. */
      usage: TokenUsage;
      /** True when `usage` came from the engine/upstream itself rather than Weir's count. */
      usageReported: boolean;
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

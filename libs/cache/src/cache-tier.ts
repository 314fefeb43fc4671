/**
 * The response cache's port (issue 15 items 1 and 2; docs/caching.md): one contract every tier
 * implements — the in-process exact tier, the Postgres exact tier, and the semantic tier — so the
 * gateway looks them up in order without knowing which is which.
 */
import type { ToolCallDelta } from '@weir/core';

/** A partition of the cache: nothing is ever read across partitions. */
export interface CachePartition {
  /** The tenant's internal id (tenantKeyOf(caller)). */
  tenantKey: string;
  /** The model revision the request was routed to (after pins and the canary split). */
  revisionId: string;
  /** 'name@version' of the prompt template the request names, or '' (the "no template" partition). */
  template: string;
  /** sha256 hex of every output-changing parameter EXCEPT the prompt itself (messages/input): tools, tool_choice, response format/schema, temperature, top_p, seed, stop, output limit, route, ... */
  paramsKey: string;
}

export interface CacheQuery {
  partition: CachePartition;
  /** sha256 hex over partition + the canonical prompt (messages/input, exact). */
  exactKey: string;
  /** The prompt as one normalised text (roles and contents), for semantic tiers; never logged. */
  promptText: string;
}

/**
 * A stored answer: enough to replay it exactly like a live answer on any route. The shapes are
 * those of the idempotency retained result (`RetainedResult` in `@weir/core`): the gateway
 * replays a hit through the same transcript (`createTranscript({deltas, deltaToolCalls, outcome})`).
 */
export interface CachedAnswer {
  modelRevision: string;
  /** The text deltas as relayed. */
  deltas: string[];
  /** The tool-call fragments of delta `i` at index `i` (null for a delta without); absent when there were none. */
  deltaToolCalls?: (ToolCallDelta[] | null)[];
  /** `stop` or `length` (only complete answers are stored; `tool_calls` is stored as the relay reports it: `stop`). */
  finishReason: string;
  usage: { inputTokens: number; outputTokens: number; cachedInputTokens: number; cacheWriteInputTokens?: number; reasoningTokens?: number };
  storedAtMs: number;
  /** How long the original answer took, arrival to end (ms): what a hit saves. Optional. */
  originalTotalMs?: number;
  /** The original answer's time to first token (ms); null when none. Optional. */
  originalTtftMs?: number | null;
}

export interface CacheHit {
  tier: 'exact' | 'semantic';
  answer: CachedAnswer;
  similarity?: number;
}

export interface CacheTier {
  readonly tier: 'exact' | 'semantic';
  /** Resolves a hit or undefined; must never throw for a miss; bounded in time (the caller may abort via signal). */
  lookup(q: CacheQuery, signal?: AbortSignal): Promise<CacheHit | undefined>;
  /** Stores after a successful, complete (finish_reason stop/length) answer; fire-and-forget for the caller. */
  store(q: CacheQuery, answer: CachedAnswer, ttlMs: number): Promise<void>;
  /** Drops everything of a tenant (tenant deleted / policy turned off). */
  dropTenant(tenantKey: string): void;
  /**
   * Drops the one entry `q` hits (a cached answer output moderation now flags); fire-and-forget,
   * never throws. Optional: a tier without it (the semantic tier) keeps the entry, and every hit
   * on it is checked again before it could be served.
   */
  forget?(q: CacheQuery): void;
}

/**
 * The port every cache tier implements (exact, semantic): looked up after admission's cheap
 * checks and before routing to an engine, stored after a completed answer. A tier is scoped by
 * its {@link CachePartition}: nothing is ever found across partitions.
 */

/** Where an entry lives: a tier never answers a query from another partition. */
export interface CachePartition {
  tenantKey: string;
  revisionId: string;
  /** 'name@version' or '' */
  template: string;
  /** sha256 of every output-changing param except the prompt */
  paramsKey: string;
}

/** One lookup or store. */
export interface CacheQuery {
  partition: CachePartition;
  exactKey: string;
  /** normalised prompt text, never logged */
  promptText: string;
}

/** A cached answer, replayed exactly like a live one. */
export interface CachedAnswer {
  modelRevision: string;
  deltas: string[];
  deltaToolCalls?: unknown[];
  finishReason: string;
  usage: { inputTokens: number; outputTokens: number; cachedInputTokens: number };
  storedAtMs: number;
}

/** A hit: which tier answered, and (semantic tier) the cosine similarity of the match. */
export interface CacheHit {
  tier: 'exact' | 'semantic';
  answer: CachedAnswer;
  similarity?: number;
}

/** A cache tier. */
export interface CacheTier {
  readonly tier: 'exact' | 'semantic';
  lookup(q: CacheQuery, signal?: AbortSignal): Promise<CacheHit | undefined>;
  store(q: CacheQuery, answer: CachedAnswer, ttlMs: number): Promise<void>;
  dropTenant(tenantKey: string): void;
}

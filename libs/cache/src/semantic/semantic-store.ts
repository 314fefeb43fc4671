import type { CachedAnswer } from '../cache-tier';
import type { SemanticPartition } from './partition-key';
import type { GuardSignature } from './guard';

/**
 * One semantic entry: what the tier needs to match a later prompt of the same partition and
 * replay the answer. It holds no prompt text — only the prompt's unit embedding and its
 * {@link GuardSignature} (the negations, numbers, entities and quoted strings the guard
 * compares) — and it lives only in its own partition.
 */
export interface SemanticEntry {
  /** Unit-length embedding of the normalised prompt. */
  vector: Float32Array;
  guard: GuardSignature;
  answer: CachedAnswer;
  /** When it was stored (epoch ms, the tier's clock). */
  storedAtMs: number;
  /** When it stops being served (epoch ms, the tier's clock). */
  expiresAtMs: number;
}

/** A candidate match: an entry and its cosine similarity to the query (in [-1, 1]). */
export interface SemanticCandidate {
  entry: SemanticEntry;
  similarity: number;
}

/**
 * Where semantic entries live. Every operation names its partition, and an implementation
 * keeps partitions apart structurally (a separate index per partition key, or rows selected by
 * the partition's key before any similarity is computed): a search never sees another
 * partition's entries. Similarity is exact cosine (no approximate index) unless an adapter
 * documents otherwise.
 */
export interface SemanticStore {
  /**
   * Up to `limit` unexpired entries of `partition` whose cosine similarity to `vector` (unit
   * length) is at least `minSimilarity`, best first. A search touches the entries it returns
   * (LRU). Empty when the partition has none.
   */
  search(partition: SemanticPartition, vector: Float32Array, minSimilarity: number, limit: number, nowMs: number): Promise<SemanticCandidate[]>;
  /** Adds an entry to `partition`, evicting the least recently used past the store's bounds. */
  put(partition: SemanticPartition, entry: SemanticEntry, nowMs: number): Promise<void>;
  /** Forgets every entry of a tenant (all its partitions): a deleted or re-created tenant. */
  dropTenant(tenantKey: string): Promise<void>;
}

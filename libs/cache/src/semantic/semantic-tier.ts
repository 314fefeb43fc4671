import type { CachedAnswer, CacheHit, CacheQuery, CacheTier } from '../cache-tier';
import type { PromptEmbedder } from './embedder';
import { type GuardReason, guardDifference, guardSignatureOf } from './guard';
import { NO_SEMANTIC_METRICS, type SemanticCacheMetrics } from './metrics';
import { partitionKeyOf, type SemanticPartition } from './partition-key';
import { SEMANTIC_THRESHOLD_FLOOR, SEMANTIC_TTL_DEFAULT_MS, type SemanticCachePolicy } from './policy';
import type { SemanticStore } from './semantic-store';
import { normalised } from './vector';

/** A minimal logger (pino fits). The tier never passes prompt or answer text. */
export interface SemanticTierLogger {
  warn(obj: object, msg?: string): void;
}

/** Options of {@link createSemanticTier}. */
export interface SemanticTierOptions {
  /** Where entries live: `createInMemorySemanticStore()` (embedded default) or the Postgres store of `@weir/store-pg`. */
  store: SemanticStore;
  /** The embedder of an embedding revision (by id); undefined when this process has none for it (the lookup is a miss). */
  embedderFor(embeddingRevisionId: string): PromptEmbedder | undefined;
  /**
   * The tenant's semantic policy by tenant key (`tenantKeyOf`), as parsed when the configuration
   * snapshot was applied (`parseSemanticCachePolicy`); undefined or `enabled: false` → the tier
   * answers miss at once and stores nothing, without embedding.
   */
  policyFor(tenantKey: string): SemanticCachePolicy | undefined;
  /** Wall clock (epoch ms) for TTLs. Default `Date.now`. */
  clock?: () => number;
  /**
   * The lowest threshold applied whatever the policy says (a policy below it is refused at
   * parse; this is the second lock). Default {@link SEMANTIC_THRESHOLD_FLOOR} (0.95); may only be raised.
   */
  thresholdFloor?: number;
  /** Candidates above the threshold the guard examines, best first, before the lookup is a miss. Default 4. */
  candidates?: number;
  metrics?: SemanticCacheMetrics;
  logger?: SemanticTierLogger;
  /** Embeddings of recent lookups kept for the store that follows a miss (entries). Default 256. */
  recentEmbeddings?: number;
}

/** The semantic tier: a {@link CacheTier} plus what the last lookups did (tests, debugging). */
export interface SemanticTier extends CacheTier {
  readonly tier: 'semantic';
}

/**
 * Creates the semantic cache tier (issue 15 §2), tried after an exact miss:
 *
 * - **lookup**: the tenant's policy off → miss, nothing embedded. Else the normalised prompt is
 *   embedded with the policy's embedding revision, and the store searched inside the partition
 *   (tenant + revision + template + paramsKey + embedding revision: one index per partition)
 *   for entries at or above the threshold (max(policy threshold, floor)); the best one whose
 *   {@link guardSignatureOf guard signature} equals the prompt's is the hit, with its cosine
 *   similarity. Matches the guard refuses make a `guarded_miss`. An embedder fault is a miss
 *   (`error`, logged without text): the request then runs normally.
 * - **store**: embeds the prompt (or reuses the lookup's embedding of the same query) and keeps
 *   the answer with its vector and guard signature — never the prompt text — for the policy's
 *   TTL (else `ttlMs`, else 1 h).
 *
 * Never throws for a fault of its own on lookup; `store` rejects only when the store does.
 */
export function createSemanticTier(options: SemanticTierOptions): SemanticTier {
  const { store, embedderFor, policyFor } = options;
  const clock = options.clock ?? Date.now;
  const floor = Math.max(SEMANTIC_THRESHOLD_FLOOR, options.thresholdFloor ?? SEMANTIC_THRESHOLD_FLOOR);
  const limit = options.candidates ?? 4;
  const metrics = options.metrics ?? NO_SEMANTIC_METRICS;
  const recentMax = options.recentEmbeddings ?? 256;
  /** Recent lookups' embeddings by partition key + exact key (the store after a miss needs the same vector). */
  const recent = new Map<string, Float32Array>();

  const enabledPolicy = (tenantKey: string): (SemanticCachePolicy & { embeddingRevision: string }) | undefined => {
    const p = policyFor(tenantKey);
    return p?.enabled && p.embeddingRevision !== undefined ? (p as SemanticCachePolicy & { embeddingRevision: string }) : undefined;
  };

  const embedOne = async (embedder: PromptEmbedder, text: string, signal?: AbortSignal): Promise<Float32Array> => {
    const started = performance.now();
    const [v] = await embedder.embed([text], signal);
    metrics.embedding(embedder.revisionId, (performance.now() - started) / 1000);
    if (!v) throw new Error('the embedder returned no vector');
    return normalised(v);
  };

  const remember = (key: string, v: Float32Array) => {
    recent.delete(key);
    recent.set(key, v);
    if (recent.size > recentMax) recent.delete(recent.keys().next().value as string);
  };

  return {
    tier: 'semantic',

    async lookup(q: CacheQuery, signal?: AbortSignal): Promise<CacheHit | undefined> {
      const policy = enabledPolicy(q.partition.tenantKey);
      if (!policy) return undefined;
      const embedder = embedderFor(policy.embeddingRevision);
      const partition: SemanticPartition = { ...q.partition, embeddingRevision: policy.embeddingRevision };
      if (!embedder) {
        metrics.lookup('error');
        return undefined;
      }
      let vector: Float32Array;
      try {
        vector = await embedOne(embedder, q.promptText, signal);
      } catch (err) {
        metrics.lookup('error');
        if (!signal?.aborted) options.logger?.warn({ err: errorName(err), embeddingRevision: policy.embeddingRevision }, 'semantic cache: embedding failed; lookup is a miss');
        return undefined;
      }
      const recentKey = `${partitionKeyOf(partition)}\u0000${q.exactKey}`;
      remember(recentKey, vector);
      const threshold = Math.max(floor, Math.min(1, policy.threshold));
      const candidates = await store.search(partition, vector, threshold, limit, clock());
      if (candidates.length === 0) {
        metrics.lookup('miss');
        return undefined;
      }
      const signature = guardSignatureOf(q.promptText);
      let refused: GuardReason | undefined;
      for (const c of candidates) {
        const reason = guardDifference(signature, c.entry.guard);
        if (reason === undefined) {
          // A hit is not a reason to store the prompt again.
          recent.delete(recentKey);
          metrics.lookup('hit');
          return { tier: 'semantic', answer: c.entry.answer, similarity: c.similarity };
        }
        refused ??= reason;
      }
      metrics.lookup('guarded_miss', refused);
      return undefined;
    },

    async store(q: CacheQuery, answer: CachedAnswer, ttlMs: number): Promise<void> {
      const policy = enabledPolicy(q.partition.tenantKey);
      if (!policy) return;
      const partition: SemanticPartition = { ...q.partition, embeddingRevision: policy.embeddingRevision };
      const recentKey = `${partitionKeyOf(partition)}\u0000${q.exactKey}`;
      let vector = recent.get(recentKey);
      recent.delete(recentKey);
      if (!vector) {
        const embedder = embedderFor(policy.embeddingRevision);
        if (!embedder) return;
        try {
          vector = await embedOne(embedder, q.promptText);
        } catch (err) {
          options.logger?.warn({ err: errorName(err), embeddingRevision: policy.embeddingRevision }, 'semantic cache: embedding failed; answer not stored');
          return;
        }
      }
      const now = clock();
      const ttl = policy.ttlMs ?? (ttlMs > 0 ? ttlMs : SEMANTIC_TTL_DEFAULT_MS);
      await store.put(partition, { vector, guard: guardSignatureOf(q.promptText), answer, storedAtMs: now, expiresAtMs: now + ttl }, now);
    },

    dropTenant(tenantKey: string): void {
      const prefix = JSON.stringify([tenantKey]).slice(0, -1) + ',';
      for (const key of [...recent.keys()]) if (key.startsWith(prefix)) recent.delete(key);
      store.dropTenant(tenantKey).catch((err: unknown) => options.logger?.warn({ err: errorName(err) }, 'semantic cache: dropping a tenant failed'));
    },
  };
}

/** An error's name and code only: an embedder's message could quote the input. */
function errorName(err: unknown): { name: string; code?: string } {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { name: err.name, ...(typeof code === 'string' ? { code } : {}) };
  }
  return { name: typeof err };
}

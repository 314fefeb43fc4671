/**
 * The semantic cache tier of a gateway process (docs/caching.md "Semantic cache"), composed from
 * the process's engines and the live configuration.
 */
import { createTenantSemanticCache, type PromptEmbedder, type SemanticCacheMetrics, type SemanticStore, type TenantSemanticCache } from '@weir/cache';
import { type EngineAdapter, type RevisionSpec, revisionKindOf, type TenantSpec } from '@weir/core';
import { createEngineEmbedder } from '@weir/engines';

/** What {@link createSemanticCache} needs. */
export interface SemanticCacheOptions {
  /** The revisions this process serves (embedding revisions among them are what prompts can be embedded with). */
  revisions: readonly RevisionSpec[];
  /**
   * The engine to embed with for an embedding revision (its in-process llama.cpp embedding
   * context, or an adapter of its OpenAI-compatible upstream or remote replica); undefined when
   * this process has none for it.
   */
  engineFor(revisionId: string): EngineAdapter | undefined;
  /** The tenants as the configuration has them at start. */
  tenants: readonly TenantSpec[];
  store: SemanticStore;
  metrics: SemanticCacheMetrics;
  logger: { warn(obj: object, msg?: string): void };
  /** Wall clock (epoch ms) for TTLs. Default `Date.now`. */
  clock?: () => number;
}

/** The semantic tier plus the hook that recompiles its policies when a snapshot applies (`TenantSemanticCache` of `@weir/cache`). */
export type SemanticCache = TenantSemanticCache;

/**
 * Builds the semantic tier: `embedderFor(revisionId)` is a `createEngineEmbedder` over the
 * embedding revision's engine (built once per revision; embeddings take no scheduler slot and
 * make no usage row: platform overhead), `policyFor(tenantKey)` one `Map` read of the policies
 * compiled from the last snapshot applied. A tenant whose policy names an embedding revision
 * this process does not serve gets misses (metric outcome `error`) and one warning per change.
 */
export function createSemanticCache(options: SemanticCacheOptions): SemanticCache {
  const embedders = new Map<string, PromptEmbedder>();
  for (const r of options.revisions) {
    if (revisionKindOf(r) !== 'embedding') continue;
    const engine = options.engineFor(r.id);
    if (engine) embedders.set(r.id, createEngineEmbedder(engine, r.id));
  }
  return createTenantSemanticCache({
    embedders,
    tenants: options.tenants,
    store: options.store,
    metrics: options.metrics,
    logger: options.logger,
    ...(options.clock ? { clock: options.clock } : {}),
  });
}

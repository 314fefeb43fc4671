/**
 * The semantic tier of a gateway process with its per-tenant policies kept current (docs/caching.md
 * "Semantic cache"): one composition for every gateway — the all-in-one embeds with its engines,
 * a split gateway through the relay; both hand their embedders in here.
 */
import type { TenantSpec } from '@weir/core';
import type { PromptEmbedder } from './embedder';
import type { SemanticCacheMetrics } from './metrics';
import type { SemanticCachePolicy } from './policy';
import type { SemanticStore } from './semantic-store';
import { createSemanticTier, type SemanticTier, type SemanticTierLogger } from './semantic-tier';
import { semanticEmbeddingRevisionsOf, semanticPoliciesOf } from './tenant-policies';

/** What {@link createTenantSemanticCache} needs. */
export interface TenantSemanticCacheOptions {
  /** The embedders this process has, by embedding revision id (built once, at start). */
  embedders: ReadonlyMap<string, PromptEmbedder>;
  /** The tenants as the configuration has them at start. */
  tenants: readonly TenantSpec[];
  /** Where entries live: `createInMemorySemanticStore()`, or `createPgSemanticStore(db)` of `@weir/store-pg` (shared by a fleet). */
  store: SemanticStore;
  /** Default none. */
  metrics?: SemanticCacheMetrics;
  /** Warnings without content (embedding failures, revisions this process cannot embed with). */
  logger: SemanticTierLogger;
  /** Wall clock (epoch ms) for TTLs. Default `Date.now`. */
  clock?: () => number;
}

/** The semantic tier plus the hook that recompiles its policies when a snapshot applies. */
export interface TenantSemanticCache {
  tier: SemanticTier;
  /**
   * Recompiles the per-tenant policies from a new snapshot's tenants (never per request); drops
   * the entries of tenants whose semantic tier was turned off or moved to another embedding
   * revision; warns once about embedding revisions this process cannot embed with.
   */
  update(tenants: readonly TenantSpec[]): void;
}

/**
 * Builds the semantic tier over `options.embedders`: `policyFor(tenantKey)` is one `Map` read of
 * the policies compiled from the last snapshot applied. A tenant whose policy names an embedding
 * revision with no embedder here gets misses (metric outcome `error`) and one warning per change.
 */
export function createTenantSemanticCache(options: TenantSemanticCacheOptions): TenantSemanticCache {
  const { embedders } = options;
  let policies = new Map<string, SemanticCachePolicy>();
  const tier = createSemanticTier({
    store: options.store,
    embedderFor: (id) => embedders.get(id),
    policyFor: (tenantKey) => policies.get(tenantKey),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.metrics ? { metrics: options.metrics } : {}),
    logger: options.logger,
  });
  const update = (tenants: readonly TenantSpec[]) => {
    const before = policies;
    policies = semanticPoliciesOf(tenants);
    // Entries nobody can read any more go at once: the tier turned off (or the tenant gone), or
    // moved to another embedding revision (a new, empty index; the old vectors are not comparable).
    for (const [key, p] of before) if (policies.get(key)?.embeddingRevision !== p.embeddingRevision) tier.dropTenant(key);
    const missing = [...semanticEmbeddingRevisionsOf(tenants)].filter((id) => !embedders.has(id));
    if (missing.length > 0) options.logger.warn({ embeddingRevisions: missing }, 'semantic cache: tenant policies name embedding revisions this process does not serve (they apply after a restart); their lookups are misses');
  };
  update(options.tenants);
  return { tier, update };
}

/**
 * The semantic tier's `policyFor` over a configuration: compiled once when a snapshot is applied,
 * read per request with one `Map` lookup (never parsed on the request path).
 */
import { type TenantSpec, tenantKeyOf } from '@weir/core';
import { SEMANTIC_THRESHOLD_DEFAULT, type SemanticCachePolicy } from './policy';

/**
 * The enabled semantic policies of `tenants` by tenant key (`tenantKeyOf`, `slug~16hex`): a
 * tenant whose `cache.semantic` is absent or disabled is not in the map, so the tier answers it
 * "miss" without embedding. The policies were validated at load (`parseSemanticCachePolicy`); a
 * threshold left out is {@link SEMANTIC_THRESHOLD_DEFAULT} (0.97).
 */
export function semanticPoliciesOf(tenants: readonly TenantSpec[]): Map<string, SemanticCachePolicy> {
  const out = new Map<string, SemanticCachePolicy>();
  for (const t of tenants) {
    const s = t.cache?.semantic;
    if (!s?.enabled || s.embeddingRevision === undefined) continue;
    const key = tenantKeyOf({ tenantId: t.id, ...(t.uid !== undefined ? { tenantUid: t.uid } : {}) });
    out.set(key, { enabled: true, threshold: s.threshold ?? SEMANTIC_THRESHOLD_DEFAULT, ttlMs: s.ttlMs, embeddingRevision: s.embeddingRevision });
  }
  return out;
}

/** The embedding revisions any tenant's enabled semantic policy names (ids), for the composition to check it can embed with each. */
export function semanticEmbeddingRevisionsOf(tenants: readonly TenantSpec[]): Set<string> {
  return new Set([...semanticPoliciesOf(tenants).values()].map((p) => p.embeddingRevision as string));
}

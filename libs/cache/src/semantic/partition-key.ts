import type { CachePartition } from '../cache-tier';

/**
 * A semantic partition: the cache partition plus the embedding revision its vectors come from
 * (vectors of two embedding models are not comparable, so a tenant that moves to another
 * embedding revision starts a new, empty index rather than matching against the old one).
 */
export interface SemanticPartition extends CachePartition {
  embeddingRevision: string;
}

/**
 * The key of a partition's own index: its five parts, JSON-encoded so no two different
 * partitions share a key whatever their characters (a separator could be inside a part).
 */
export function partitionKeyOf(p: SemanticPartition): string {
  return JSON.stringify([p.tenantKey, p.revisionId, p.template, p.paramsKey, p.embeddingRevision]);
}

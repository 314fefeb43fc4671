export type { PromptEmbedder } from './embedder';
export { type GuardReason, type GuardSignature, guardDifference, guardSignatureOf, SENTENCE_OPENERS } from './guard';
export { createInMemorySemanticStore, type InMemorySemanticStore, type InMemorySemanticStoreOptions, type InMemorySemanticStoreStats } from './in-memory-semantic-store';
export { createSemanticCacheMetrics, NO_SEMANTIC_METRICS, SEMANTIC_CACHE_METRIC_NAMES, type SemanticCacheMetrics, type SemanticLookupOutcome } from './metrics';
export { partitionKeyOf, type SemanticPartition } from './partition-key';
export {
  parseSemanticCachePolicy,
  SEMANTIC_CACHE_OFF,
  SEMANTIC_THRESHOLD_DEFAULT,
  SEMANTIC_THRESHOLD_FLOOR,
  SEMANTIC_TTL_DEFAULT_MS,
  type SemanticCachePolicy,
  type SemanticPolicyParse,
  semanticCachePolicyToWire,
} from './policy';
export type { SemanticCandidate, SemanticEntry, SemanticStore } from './semantic-store';
export { createSemanticTier, type SemanticTier, type SemanticTierLogger, type SemanticTierOptions } from './semantic-tier';
export { cosineSimilarity, dot, normalised } from './vector';
export { semanticEmbeddingRevisionsOf, semanticPoliciesOf } from './tenant-policies';
export { createTenantSemanticCache, type TenantSemanticCache, type TenantSemanticCacheOptions } from './tenant-semantic-cache';

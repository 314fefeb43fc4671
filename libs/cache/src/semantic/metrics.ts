/**
 * Semantic-cache metrics: a small interface the tier calls, and an OpenTelemetry
 * implementation over a `Meter` (exported through `@weir/telemetry`'s Prometheus endpoint).
 * Labels never carry prompt text: the outcome, the guard's reason, the embedding revision.
 */
import type { Meter } from '@opentelemetry/api';
import type { GuardReason } from './guard';

/** How a semantic lookup ended. `guarded_miss`: a match above the threshold the guard refused. `error`: the embedder failed (a miss). */
export type SemanticLookupOutcome = 'hit' | 'miss' | 'guarded_miss' | 'error';

/**
 * OpenTelemetry instrument names. The pinned Prometheus exporter replaces `.` with `_` and
 * appends `_total` to counters: `weir_cache_semantic_lookups_total{outcome,reason}`,
 * `weir_cache_semantic_embedding_duration_bucket|_sum|_count{embedding_revision}`.
 */
export const SEMANTIC_CACHE_METRIC_NAMES = {
  /** Counter, {lookup}: semantic lookups by `outcome` (hit, miss, guarded_miss, error) and, for a guarded miss, `reason`. */
  lookups: 'weir.cache.semantic.lookups',
  /** Histogram, s: time to embed one prompt (lookups and stores), by `embedding_revision`. */
  embeddingDuration: 'weir.cache.semantic.embedding.duration',
} as const;

/** What the tier reports. Every method must be cheap and must not throw. */
export interface SemanticCacheMetrics {
  lookup(outcome: SemanticLookupOutcome, reason?: GuardReason): void;
  /** One embedding call took `seconds`. */
  embedding(embeddingRevision: string, seconds: number): void;
}

/** Reports nothing. */
export const NO_SEMANTIC_METRICS: SemanticCacheMetrics = { lookup: () => undefined, embedding: () => undefined };

/** Buckets of the embedding duration (s): 1 ms to ~4 s. */
const EMBEDDING_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 4];

/** {@link SemanticCacheMetrics} as OpenTelemetry instruments on `meter` (one per process). */
export function createSemanticCacheMetrics(meter: Meter): SemanticCacheMetrics {
  const lookups = meter.createCounter(SEMANTIC_CACHE_METRIC_NAMES.lookups, { unit: '{lookup}', description: 'Semantic cache lookups, by outcome (hit, miss, guarded_miss, error) and guard reason' });
  const duration = meter.createHistogram(SEMANTIC_CACHE_METRIC_NAMES.embeddingDuration, {
    unit: 's',
    description: 'Time to embed a prompt for the semantic cache',
    advice: { explicitBucketBoundaries: EMBEDDING_BUCKETS },
  });
  return {
    lookup: (outcome, reason) => lookups.add(1, reason ? { outcome, reason } : { outcome }),
    embedding: (embeddingRevision, seconds) => duration.record(seconds, { embedding_revision: embeddingRevision }),
  };
}

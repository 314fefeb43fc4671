/**
 * A tenant's semantic-cache policy (`cache.semantic` of a tenant in the platform
 * configuration, snake_case on disk):
 *
 * ```yaml
 * cache:
 *   semantic:
 *     enabled: true
 *     embedding_revision: tiny-embed@1   # an embedding revision id (required when enabled)
 *     threshold: 0.97                    # cosine similarity, [SEMANTIC_THRESHOLD_FLOOR, 1]; default 0.97
 *     ttl_ms: 3600000                    # default: the exact tier's TTL, else 1 h
 * ```
 */

/**
 * The lowest similarity threshold any tenant may use: 0.95. Below it, near-duplicate prompts
 * that differ in meaning (not caught by the guard) match too often; a tenant's policy cannot
 * go under it (the configuration is refused).
 */
export const SEMANTIC_THRESHOLD_FLOOR = 0.95;

/** The threshold a tenant gets when its policy names none: 0.97. */
export const SEMANTIC_THRESHOLD_DEFAULT = 0.97;

/** The TTL of semantic entries when neither the semantic nor the exact policy names one (ms): 1 h. */
export const SEMANTIC_TTL_DEFAULT_MS = 3_600_000;

/** The validated policy (camelCase). */
export interface SemanticCachePolicy {
  /** Default false: the tier is not consulted and costs nothing. */
  enabled: boolean;
  /** Cosine similarity a match needs, in [{@link SEMANTIC_THRESHOLD_FLOOR}, 1]. Default {@link SEMANTIC_THRESHOLD_DEFAULT}. */
  threshold: number;
  /** Entry lifetime (ms); undefined: the exact tier's TTL, else {@link SEMANTIC_TTL_DEFAULT_MS}. */
  ttlMs?: number;
  /** The embedding revision (id) prompts are embedded with; required when enabled. */
  embeddingRevision?: string;
}

/** The policy of a tenant that names none: off. */
export const SEMANTIC_CACHE_OFF: SemanticCachePolicy = Object.freeze({ enabled: false, threshold: SEMANTIC_THRESHOLD_DEFAULT });

/** Result of {@link parseSemanticCachePolicy}: the policy, or every problem found (each naming its field path). */
export type SemanticPolicyParse = { ok: true; policy: SemanticCachePolicy } | { ok: false; errors: string[] };

const KNOWN = new Set(['enabled', 'threshold', 'ttl_ms', 'embedding_revision']);

/**
 * Parses and validates `cache.semantic` as written in the configuration (snake_case), once at
 * load. `path` prefixes each error (e.g. `tenants[2].cache.semantic`). `undefined` → off.
 * `revisionKind(id)` (optional) says whether a revision id exists and is an embedding
 * revision, so a policy naming a generation model is refused at load, not per request.
 * Errors: unknown fields; `enabled` not a boolean; `threshold` not a number in
 * [{@link SEMANTIC_THRESHOLD_FLOOR}, 1]; `ttl_ms` not an integer in [1 s, 30 days];
 * `embedding_revision` missing when enabled, not a string, unknown or not an embedding revision.
 */
export function parseSemanticCachePolicy(raw: unknown, path = 'cache.semantic', revisionKind?: (id: string) => 'embedding' | 'generation' | undefined): SemanticPolicyParse {
  if (raw === undefined || raw === null) return { ok: true, policy: SEMANTIC_CACHE_OFF };
  if (typeof raw !== 'object' || Array.isArray(raw)) return { ok: false, errors: [`${path}: expected an object with enabled, threshold, ttl_ms, embedding_revision`] };
  const o = raw as Record<string, unknown>;
  const errors: string[] = [];
  for (const k of Object.keys(o)) if (!KNOWN.has(k)) errors.push(`${path}.${k}: unknown field (known: ${[...KNOWN].join(', ')})`);
  const enabled = o['enabled'] ?? false;
  if (typeof enabled !== 'boolean') errors.push(`${path}.enabled: expected true or false`);
  let threshold = SEMANTIC_THRESHOLD_DEFAULT;
  if (o['threshold'] !== undefined) {
    const t = o['threshold'];
    if (typeof t !== 'number' || !Number.isFinite(t)) errors.push(`${path}.threshold: expected a number in [${SEMANTIC_THRESHOLD_FLOOR}, 1]`);
    else if (t < SEMANTIC_THRESHOLD_FLOOR) errors.push(`${path}.threshold: ${t} is below the floor of ${SEMANTIC_THRESHOLD_FLOOR} (a lower threshold serves answers to prompts that mean something else); use ${SEMANTIC_THRESHOLD_FLOOR} or more`);
    else if (t > 1) errors.push(`${path}.threshold: ${t} is above 1 (cosine similarity is at most 1)`);
    else threshold = t;
  }
  let ttlMs: number | undefined;
  if (o['ttl_ms'] !== undefined) {
    const t = o['ttl_ms'];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 1_000 || t > 30 * 86_400_000) errors.push(`${path}.ttl_ms: expected an integer number of ms in [1000, 2592000000] (1 s to 30 days)`);
    else ttlMs = t;
  }
  let embeddingRevision: string | undefined;
  const er = o['embedding_revision'];
  if (er !== undefined) {
    if (typeof er !== 'string' || er.length === 0) errors.push(`${path}.embedding_revision: expected a revision id`);
    else {
      const kind = revisionKind?.(er);
      if (revisionKind && kind === undefined) errors.push(`${path}.embedding_revision: no revision '${er}'`);
      else if (kind === 'generation') errors.push(`${path}.embedding_revision: revision '${er}' is a generation model, not an embedding model (set kind: embedding on an embedding revision)`);
      else embeddingRevision = er;
    }
  } else if (enabled === true) errors.push(`${path}.embedding_revision: required when the semantic cache is enabled (the embedding revision prompts are embedded with)`);
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, policy: { enabled: enabled as boolean, threshold, ...(ttlMs !== undefined ? { ttlMs } : {}), ...(embeddingRevision !== undefined ? { embeddingRevision } : {}) } };
}

/** The policy as written in the configuration (snake_case), the inverse of {@link parseSemanticCachePolicy}: for the admin API and snapshots. */
export function semanticCachePolicyToWire(p: SemanticCachePolicy): Record<string, unknown> {
  return { enabled: p.enabled, threshold: p.threshold, ...(p.ttlMs !== undefined ? { ttl_ms: p.ttlMs } : {}), ...(p.embeddingRevision !== undefined ? { embedding_revision: p.embeddingRevision } : {}) };
}

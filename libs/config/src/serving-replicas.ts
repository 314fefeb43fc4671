import { INTERACTIVE_POOL, type ReplicaEndpoint, type RevisionSpec } from '@weir/core';

/**
 * The replicas that serve a revision in the split topology: its configured `replicas`, or
 * for a hosted upstream without them (OpenAI-compatible or Anthropic), the upstream itself as
 * one replica (`<revision>/0`, its `base_url`, `max_concurrency` slots). A llama.cpp or
 * simulated revision without replicas has none there (its engine runs only in-process, in
 * the all-in-one).
 */
export function servingReplicas(revision: RevisionSpec): ReplicaEndpoint[] {
  if (revision.replicas && revision.replicas.length > 0) return revision.replicas;
  if (revision.engine.kind === 'openai-compatible' || revision.engine.kind === 'anthropic') {
    return [{ id: `${revision.id}/0`, baseUrl: revision.engine.baseUrl, slots: revision.engine.maxConcurrency }];
  }
  return [];
}

/** A replica's place and size for the scheduler. */
export interface ReplicaPlacement {
  /** `interactive`, `batch` or a dedicated pool. */
  pool: string;
  /** KV-cache tokens across its sequences. */
  kvTokens: number;
}

/**
 * Where a replica of `revision` serves and how many context tokens it holds: the replica's own
 * `pool`/`kvTokens`, else the revision's, else `interactive` and `slots × context window`
 * (every sequence may hold a full window: the behaviour of configs that name no pools).
 *
 * @param slots the replica's concurrent sequences (for an in-process engine: its capacity).
 */
export function replicaPlacement(revision: RevisionSpec, replica: { pool?: string; kvTokens?: number; slots: number }): ReplicaPlacement {
  return {
    pool: replica.pool ?? revision.pool ?? INTERACTIVE_POOL,
    kvTokens: replica.kvTokens ?? revision.kvTokens ?? replica.slots * revision.contextWindow,
  };
}

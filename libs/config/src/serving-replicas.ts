import type { ReplicaEndpoint, RevisionSpec } from '@weir/core';

/**
 * The replicas that serve a revision in the split topology: its configured `replicas`, or
 * for an OpenAI-compatible upstream without them, the upstream itself as one replica
 * (`<revision>/0`, `max_concurrency` slots). A llama.cpp revision without replicas has none
 * there (its engine runs only in-process, in the all-in-one).
 */
export function servingReplicas(revision: RevisionSpec): ReplicaEndpoint[] {
  if (revision.replicas && revision.replicas.length > 0) return revision.replicas;
  if (revision.engine.kind === 'openai-compatible') {
    return [{ id: `${revision.id}/0`, baseUrl: revision.engine.baseUrl, slots: revision.engine.maxConcurrency }];
  }
  return [];
}

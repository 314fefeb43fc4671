/**
 * The pipeline's observer that records Weir's metrics: shedding (limits, full queues)
 * counted apart from client errors (ARCHITECTURE.md §6), and per finished request the GenAI
 * duration, TTFT, TPOT and token series plus queue time. Shared by every composition.
 */
import type { WeirErrorCode } from '@weir/core';
import { usageStatusFor } from '@weir/ledger';
import type { RejectionReason, WeirMetrics } from '@weir/telemetry';
import type { PipelineObserver } from './pipeline';

const SHEDDING = new Set<WeirErrorCode>(['rate_limited', 'concurrency_limited', 'budget_exhausted', 'queue_full', 'deadline_unmeetable', 'shutting_down']);

/** True when a rejection is load shedding rather than a client error. */
export function isShedding(code: WeirErrorCode): code is RejectionReason {
  return SHEDDING.has(code);
}

/**
 * Creates the observer. `providerOf(revisionId)` names the engine kind for
 * `gen_ai.provider.name` (`llamacpp`, `openai-compatible`); `poolOf(replicaId)` the scheduler
 * pool of a replica for the `pool` label (default: `interactive` for every replica).
 */
export function createMetricsObserver(metrics: WeirMetrics, providerOf: (revisionId: string) => string, poolOf: (replicaId: string) => string | undefined = () => 'interactive'): PipelineObserver {
  return {
    onRejected(caller, reason) {
      if (isShedding(reason)) metrics.recordRejection({ tenant: caller.tenantId, reason });
      metrics.recordRequest({ tenant: caller.tenantId, operation: 'generation', requestModel: 'none', status: 'rejected', errorType: reason, durationS: 0, inputTokens: 0, outputTokens: 0 });
    },
    onCache({ caller, revision, result, tier, savedNanoUsd, savedMs }) {
      metrics.recordCacheLookup({
        tenant: caller.tenantId,
        revision: revision.id,
        result,
        ...(tier !== undefined ? { tier } : {}),
        ...(savedNanoUsd !== undefined ? { savedUsd: savedNanoUsd / 1e9 } : {}),
        ...(savedMs !== undefined ? { savedS: savedMs / 1000 } : {}),
      });
    },
    onFinished({ caller, route, alias, revision, outcome, replicaId }) {
      const { timings, usage } = outcome;
      metrics.recordQueueTime({ tenant: caller.tenantId, revision: revision.id, queueS: timings.queueMs / 1000 });
      metrics.recordRequest({
        tenant: caller.tenantId,
        operation: route === 'chat.completions' ? 'chat' : route === 'completions' ? 'text_completion' : route === 'embeddings' ? 'embeddings' : 'generation',
        requestModel: alias,
        responseModel: revision.id,
        provider: providerOf(revision.id),
        ...(replicaId !== undefined ? { pool: poolOf(replicaId) ?? 'interactive' } : {}),
        status: usageStatusFor(outcome.finishReason),
        errorType: outcome.error?.code,
        durationS: timings.totalMs / 1000,
        ttftS: timings.ttftMs === null ? undefined : timings.ttftMs / 1000,
        // semconv: (duration − TTFT) / (output tokens − 1)
        tpotS: timings.ttftMs !== null && usage.outputTokens > 1 ? (timings.totalMs - timings.ttftMs) / 1000 / (usage.outputTokens - 1) : undefined,
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
      });
    },
  };
}

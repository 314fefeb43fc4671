/**
 * Output moderation of cache hits (issue 15; docs/caching.md "Moderation"): a cached answer was
 * checked when it streamed live, but the tenant's output policy may have changed since, and a
 * hit never passes the relay's windows. So a hit of a tenant with an output stage is checked
 * whole before it is served; one it flags is not served.
 */
import { type Caller, tenantKeyOf } from '@weir/core';
import { checkWholeOutput, type ModerationObserver, type ModerationPolicies, type ModerationVerdict } from '@weir/moderation';

/** Options of {@link createCachedAnswerScreen}. */
export interface CachedAnswerScreenOptions {
  /** The compiled policies as of the last applied snapshot (read per hit, never kept). */
  policies(): ModerationPolicies;
  /** Check metrics (stage `output`). Default none. */
  observer?: ModerationObserver;
  /** A cached answer the policy blocked (`weir_moderation_blocks_total{stage="output"}`); never the text. Default none. */
  onBlock?(verdict: ModerationVerdict): void;
}

/**
 * The pipeline's `screenCachedAnswer`: resolves true when `caller`'s tenant has no output stage
 * (one map lookup, no call; none at all while no tenant has moderation), or its output engine
 * passes the cached text in the relay's windows; false when it blocks it (flagged, or failed
 * under `fail: closed` — a hit is never served unchecked). Never rejects.
 */
export function createCachedAnswerScreen(options: CachedAnswerScreenOptions): (caller: Caller, answer: { deltas: readonly string[] }) => Promise<boolean> {
  return async (caller, answer) => {
    const policies = options.policies();
    if (!policies.any) return true;
    const plan = policies.of(tenantKeyOf(caller))?.output;
    if (!plan) return true;
    const verdict = await checkWholeOutput(plan, answer.deltas.join(''), new AbortController().signal, options.observer);
    if (verdict.blocked) options.onBlock?.(verdict);
    return !verdict.blocked;
  };
}

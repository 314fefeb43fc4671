/**
 * The semantic cache's embedder in a split gateway (docs/caching.md "The split topology"): a
 * gateway there runs no engine, so it embeds a prompt the way `/v1/embeddings` reaches an
 * embedding model — a relay job over gRPC to a replica of the embedding revision — marked
 * `internal`: platform overhead, as in the all-in-one (where the cache embeds in-process), so the
 * relay records no usage row and bills nobody.
 */
import { type Caller, type Clock, decodeEmbeddingDeltas, newId, type RelayService, type RevisionSpec, revisionKindOf, SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS, systemClock, WEIR_ERROR_CODES, WeirError, type WeirErrorCode } from '@weir/core';
import type { PromptEmbedder } from '@weir/cache';

/**
 * The caller an internal embedding names (the relay's logs and metrics; it records no usage for
 * it): no tenant's, so no tenant's output moderation or limits apply to it.
 */
export const CACHE_EMBEDDING_CALLER: Caller = { tenantId: 'weir-internal', appId: 'semantic-cache', apiKeyId: 'semantic-cache' };

/** Options of {@link createRelayEmbedder}. */
export interface RelayEmbedderOptions {
  /** The relay (the gateway's gRPC client of the streaming relay). */
  relay: RelayService;
  /** The embedding revision (`kind: embedding`) prompts are embedded with. */
  revision: RevisionSpec;
  /**
   * The ids of the replicas serving `revision` (`remoteReplicas` of `@weir/engines`), used in
   * turn. Internal embeddings take no scheduler slot (as in the all-in-one).
   * @throws TypeError from the factory when empty.
   */
  replicaIds: readonly string[];
  /**
   * The longest one embedding may take (ms): the relay job's deadline, and the local give-up
   * (the embedding rejects and the relay is told to stop). Default
   * {@link SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS} (250): `defaults.cache.semantic_lookup_timeout_ms`
   * bounds the whole lookup anyway; this also bounds the embedding a store makes after a miss.
   */
  timeoutMs?: number;
  /** The clock of the relay job's times (ms). Default `systemClock`. */
  clock?: Clock;
}

/**
 * Creates a {@link PromptEmbedder} that embeds through the relay: one `internal` embedding job per
 * call (`route: embeddings`, no reservation, 0 output tokens), whose deltas are decoded like
 * `/v1/embeddings` decodes them. Rejects with a `WeirError` — `deadline_exceeded` after
 * `timeoutMs` or when `signal` fires (the relay is told to stop), the outcome's error code when
 * the relay or engine fails, `upstream_error` when the vectors do not match the texts — which the
 * semantic tier takes as a miss.
 */
export function createRelayEmbedder(options: RelayEmbedderOptions): PromptEmbedder {
  const { relay, revision } = options;
  if (options.replicaIds.length === 0) throw new TypeError(`createRelayEmbedder: no replica serves the embedding revision ${revision.id}`);
  const replicaIds = [...options.replicaIds];
  const timeoutMs = options.timeoutMs ?? SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS;
  const clock = options.clock ?? systemClock;
  let turn = 0;
  return {
    revisionId: revision.id,
    async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
      if (texts.length === 0) return [];
      signal?.throwIfAborted();
      const now = clock.now();
      const generationId = newId('gen');
      const replicaId = replicaIds[turn++ % replicaIds.length] as string;
      const handle = relay.start({
        generationId,
        requestId: generationId,
        route: 'embeddings',
        caller: CACHE_EMBEDDING_CALLER,
        modelAlias: revision.model,
        revision,
        replicaId,
        engineRequest: { input: { kind: 'embedding', items: texts }, maxOutputTokens: 0, sampling: {} },
        arrivedAt: now,
        deadlineAt: now + timeoutMs,
        queueMs: 0,
        inputTokens: 0,
        internal: true,
      });
      let stopped = false;
      const stop = () => {
        if (stopped) return;
        stopped = true;
        handle.stop('cancel_requested');
      };
      let timer: NodeJS.Timeout | undefined;
      let onAbort: (() => void) | undefined;
      const gaveUp = new Promise<never>((_, reject) => {
        onAbort = () => {
          stop();
          reject(new WeirError('deadline_exceeded', `the cache's embedding took longer than ${timeoutMs} ms or was cancelled`));
        };
        timer = setTimeout(onAbort, timeoutMs);
        if (signal?.aborted) onAbort();
        else signal?.addEventListener('abort', onAbort, { once: true });
      });
      // Read to its end even after a give-up, so the gRPC call closes cleanly.
      const collected = (async () => {
        let text = '';
        let failure: WeirError | undefined;
        for await (const ev of handle.events) {
          if (ev.type === 'delta') text += ev.text;
          else if (ev.outcome.finishReason !== 'stop') failure = new WeirError(codeOf(ev.outcome.error?.code), `the cache's embedding ended ${ev.outcome.finishReason}`);
        }
        if (failure) throw failure;
        const vectors = decodeEmbeddingDeltas(text);
        if (vectors.length !== texts.length) throw new WeirError('upstream_error', `the engine returned ${vectors.length} embeddings for ${texts.length} texts`);
        return vectors;
      })();
      gaveUp.catch(() => undefined);
      collected.catch(() => undefined);
      try {
        return await Promise.race([collected, gaveUp]);
      } finally {
        clearTimeout(timer);
        if (onAbort) signal?.removeEventListener('abort', onAbort);
      }
    },
  };
}

const CODES: ReadonlySet<string> = new Set(WEIR_ERROR_CODES);

/** An outcome's error code as a `WeirError` code (absent: `deadline_exceeded`, the relay's stop; unknown: `upstream_error`). */
function codeOf(code: string | undefined): WeirErrorCode {
  if (code === undefined) return 'deadline_exceeded';
  return CODES.has(code) ? (code as WeirErrorCode) : 'upstream_error';
}

/** Options of {@link relayEmbeddersOf}. */
export interface RelayEmbeddersOptions {
  relay: RelayService;
  /** The configuration's revisions: an embedder is made for each embedding revision (`kind: embedding`) some replica serves. */
  revisions: readonly RevisionSpec[];
  /** The replicas the relays serve (`remoteReplicas(config.revisions)` of `@weir/engines`): id and revision id. */
  replicas: readonly { id: string; revisionId: string }[];
  /** {@link RelayEmbedderOptions.timeoutMs}. */
  timeoutMs?: number;
  clock?: Clock;
}

/**
 * A {@link createRelayEmbedder relay embedder} per embedding revision with at least one replica,
 * by revision id: what a split gateway hands `createTenantSemanticCache` of `@weir/cache`. Built
 * once at start (a revision added later is embedded with after a restart, as in the all-in-one).
 */
export function relayEmbeddersOf(options: RelayEmbeddersOptions): Map<string, PromptEmbedder> {
  const out = new Map<string, PromptEmbedder>();
  for (const revision of options.revisions) {
    if (revisionKindOf(revision) !== 'embedding') continue;
    const replicaIds = options.replicas.filter((r) => r.revisionId === revision.id).map((r) => r.id);
    if (replicaIds.length === 0) continue;
    out.set(
      revision.id,
      createRelayEmbedder({
        relay: options.relay,
        revision,
        replicaIds,
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
        ...(options.clock ? { clock: options.clock } : {}),
      }),
    );
  }
  return out;
}

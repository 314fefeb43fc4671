import { type EngineAdapter, WeirError, decodeEmbeddingDeltas } from '@weir/core';

/**
 * An embedder over an engine of an embedding revision: `embed(texts)` runs one embedding
 * input through `engine.generate` and returns one raw vector per text, in order. It matches
 * `PromptEmbedder` of `@weir/cache` (the semantic cache embeds prompts with it), so the cache
 * uses the very engines `/v1/embeddings` serves. It calls the engine directly — no admission,
 * scheduler slot or usage row: the cache's own embeddings are platform overhead, not a
 * tenant's request (their latency is the cache's `weir.cache.semantic.embedding.duration`).
 *
 * Rejects with the engine's `WeirError`; with `upstream_error` when the engine returns another
 * number of vectors; with `deadline_exceeded` when `signal` fires before the vectors are in.
 */
export function createEngineEmbedder(engine: EngineAdapter, revisionId: string): { readonly revisionId: string; embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> } {
  return {
    revisionId,
    async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
      if (texts.length === 0) return [];
      const abort = new AbortController();
      const onAbort = () => abort.abort(signal?.reason);
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
      try {
        let text = '';
        let ended: string | undefined;
        for await (const ev of engine.generate({ input: { kind: 'embedding', items: texts }, maxOutputTokens: 0, sampling: {}, signal: abort.signal, generationId: `cache-embed-${revisionId}` })) {
          if (ev.type === 'delta') text += ev.text;
          else ended = ev.reason;
        }
        if (ended === 'aborted') throw new WeirError('deadline_exceeded', 'the embedding was stopped before it finished');
        const vectors = decodeEmbeddingDeltas(text);
        if (vectors.length !== texts.length) throw new WeirError('upstream_error', `the engine returned ${vectors.length} embeddings for ${texts.length} texts`);
        return vectors;
      } finally {
        signal?.removeEventListener('abort', onAbort);
      }
    },
  };
}

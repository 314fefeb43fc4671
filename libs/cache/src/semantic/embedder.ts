/**
 * The port the semantic tier embeds prompts through, bound to one embedding revision. Weir's
 * engines implement it (`createEngineEmbedder` in `@weir/engines`: a llama.cpp embedding
 * context, or an OpenAI-compatible upstream's `/v1/embeddings`), so the cache uses the same
 * models `/v1/embeddings` serves.
 */
export interface PromptEmbedder {
  /** The embedding revision's id (metrics, logs). */
  readonly revisionId: string;
  /**
   * One embedding per text, in order (raw: the tier normalises them). Rejects with the engine's
   * `WeirError` on a fault, or an `AbortError`-like error when `signal` fires.
   */
  embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]>;
}

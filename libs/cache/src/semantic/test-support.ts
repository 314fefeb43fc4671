import { createHash } from 'node:crypto';
import type { CachedAnswer } from '../cache-tier';
import type { PromptEmbedder } from './embedder';

/** Dimensions of {@link fakeEmbedder}'s vectors. */
export const FAKE_DIMENSIONS = 256;

/**
 * A deterministic bag-of-words embedder for unit tests: each lower-cased word adds ±1 at two
 * hashed positions. Prompts with the same words (case, punctuation and spacing aside) get the
 * same vector; one word in twenty changed gives a cosine of about 0.95. Words `blind` accepts
 * are left out — a model of real embeddings' weakness for negations, numbers and names, so
 * prompts differing only in them get a cosine of 1. Counts its calls.
 */
export function fakeEmbedder(revisionId = 'fake-embed@1', blind: (word: string) => boolean = () => false): PromptEmbedder & { calls: number; texts: number } {
  const self = {
    revisionId,
    calls: 0,
    texts: 0,
    async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
      signal?.throwIfAborted();
      self.calls++;
      self.texts += texts.length;
      return texts.map((t) => {
        const v = new Float32Array(FAKE_DIMENSIONS);
        for (const word of t.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? []) {
          if (blind(word)) continue;
          const h = createHash('sha256').update(word).digest();
          v[h[0]] += h[2] & 1 ? 1 : -1;
          v[h[1]] += h[3] & 1 ? 1 : -1;
        }
        return v;
      });
    },
  };
  return self;
}

/** A cached answer whose single delta names where it came from. */
export function answerOf(tag: string, storedAtMs = 0): CachedAnswer {
  return { modelRevision: 'rev@1', deltas: [tag], finishReason: 'stop', usage: { inputTokens: 3, outputTokens: 1, cachedInputTokens: 0 }, storedAtMs };
}

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

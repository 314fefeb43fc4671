/**
 * String similarity for the `similarity` scorer: how close a candidate revision's output is to
 * the reference output, in [0, 1]. Pure; no model, no network.
 *
 * An embedding similarity is out of scope: Weir serves no embeddings endpoint yet, and an eval
 * should not depend on a hosted one. Both metrics here work on text alone.
 */

/** The string-similarity metrics the `similarity` scorer offers. */
export const SIMILARITY_METRICS = ['token_jaccard', 'char_trigram_cosine'] as const;

/** One of {@link SIMILARITY_METRICS}. */
export type SimilarityMetric = (typeof SIMILARITY_METRICS)[number];

/**
 * Normalises text before it is compared: Unicode NFKC, lower case, every run of whitespace to
 * one space, trimmed. Two outputs that differ only in spacing, case or compatibility forms
 * (full-width letters, ligatures) compare equal.
 */
export function normalizeText(text: string): string {
  return text.normalize('NFKC').toLowerCase().replace(/\s+/gu, ' ').trim();
}

/** The words of normalised text: maximal runs of letters, marks and digits (punctuation dropped). */
export function wordTokens(text: string): string[] {
  return normalizeText(text).match(/[\p{L}\p{M}\p{N}]+/gu) ?? [];
}

/**
 * Jaccard similarity of the two texts' word sets: |A ∩ B| / |A ∪ B| over {@link wordTokens}
 * (Jaccard, "The distribution of the flora in the alpine zone", New Phytologist 11, 1912;
 * as used for near-duplicate text in Manning, Raghavan & Schütze, *Introduction to Information
 * Retrieval*, 2008, §19.6). Order and repetition are ignored. Two texts without any word (both
 * empty, or punctuation only) are 1 when their normalised forms are equal, else 0.
 */
export function tokenJaccard(a: string, b: string): number {
  const left = new Set(wordTokens(a));
  const right = new Set(wordTokens(b));
  if (left.size === 0 && right.size === 0) return normalizeText(a) === normalizeText(b) ? 1 : 0;
  let shared = 0;
  for (const token of left) if (right.has(token)) shared += 1;
  return shared / (left.size + right.size - shared);
}

/** Counts of the character trigrams of normalised text padded with one space on each side. */
function trigramCounts(text: string): Map<string, number> {
  const chars = Array.from(` ${normalizeText(text)} `);
  const counts = new Map<string, number>();
  for (let i = 0; i + 3 <= chars.length; i += 1) {
    const gram = chars.slice(i, i + 3).join('');
    counts.set(gram, (counts.get(gram) ?? 0) + 1);
  }
  return counts;
}

/**
 * Cosine similarity of the two texts' character-trigram count vectors: Σ aᵢbᵢ / (‖a‖ ‖b‖),
 * trigrams taken over code points of the normalised text padded with one space at each end
 * (the vector-space cosine of Manning, Raghavan & Schütze, *Introduction to Information
 * Retrieval*, 2008, §6.3.1, on character k-grams as in §3.3.4). Sensitive to word order and
 * small edits, unlike {@link tokenJaccard}. Two empty texts are 1; one empty text is 0.
 */
export function charTrigramCosine(a: string, b: string): number {
  const left = trigramCounts(a);
  const right = trigramCounts(b);
  // A padded empty text ("  ") has no trigram.
  if (left.size === 0 || right.size === 0) return left.size === right.size ? 1 : 0;
  let dot = 0;
  for (const [gram, n] of left) dot += n * (right.get(gram) ?? 0);
  const norm = (v: Map<string, number>) => Math.sqrt([...v.values()].reduce((sum, n) => sum + n * n, 0));
  // Rounding can push an identical pair a hair above 1.
  return Math.min(1, dot / (norm(left) * norm(right)));
}

/** The similarity of `a` and `b` by `metric`, in [0, 1]. */
export function stringSimilarity(metric: SimilarityMetric, a: string, b: string): number {
  switch (metric) {
    case 'token_jaccard':
      return tokenJaccard(a, b);
    case 'char_trigram_cosine':
      return charTrigramCosine(a, b);
    default: {
      const unreachable: never = metric;
      throw new Error(`unknown similarity metric ${String(unreachable)}`);
    }
  }
}

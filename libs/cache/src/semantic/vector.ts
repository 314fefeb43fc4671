/**
 * Vector helpers of the semantic tier: entries and queries are unit vectors, so cosine
 * similarity is a dot product.
 */

/**
 * `v` scaled to unit length (a new array). Throws `RangeError` for an empty vector, a zero
 * vector or one holding a non-finite value: such an embedding cannot be compared.
 */
export function normalised(v: Float32Array | readonly number[]): Float32Array {
  if (v.length === 0) throw new RangeError('empty embedding');
  let sum = 0;
  for (let i = 0; i < v.length; i++) {
    const x = v[i];
    if (!Number.isFinite(x)) throw new RangeError('embedding holds a non-finite value');
    sum += x * x;
  }
  if (sum === 0) throw new RangeError('zero embedding');
  const norm = Math.sqrt(sum);
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = v[i] / norm;
  return out;
}

/** Dot product of two vectors of the same length (the cosine of unit vectors); -1 when the lengths differ (never a match). */
export function dot(a: Float32Array, b: Float32Array): number {
  const n = a.length;
  if (n !== b.length) return -1;
  // Four accumulators: independent additions the CPU overlaps (about twice as fast in V8).
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; i++) s0 += a[i] * b[i];
  return s0 + s1 + s2 + s3;
}

/** Cosine similarity of two vectors of any length scale (each normalised first). */
export function cosineSimilarity(a: Float32Array | readonly number[], b: Float32Array | readonly number[]): number {
  return dot(normalised(a), normalised(b));
}

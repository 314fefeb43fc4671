import { cosineSimilarity, dot, normalised } from './vector';

describe('vector helpers', () => {
  it.each([1, 2, 3, 4, 5, 7, 8, 9, 64, 67])('dot equals the plain sum of products for length %i', (n) => {
    const a = Float32Array.from({ length: n }, (_, i) => Math.sin(i + 1));
    const b = Float32Array.from({ length: n }, (_, i) => Math.cos(3 * i + 2));
    let plain = 0;
    for (let i = 0; i < n; i++) plain += a[i] * b[i];
    expect(dot(a, b)).toBeCloseTo(plain, 10);
  });

  it('never matches vectors of different lengths', () => {
    expect(dot(new Float32Array([1, 0]), new Float32Array([1, 0, 0]))).toBe(-1);
  });

  it('normalises to unit length and refuses what cannot be compared', () => {
    const v = normalised([3, 4]);
    expect(Array.from(v)).toEqual([Math.fround(0.6), Math.fround(0.8)]);
    expect(() => normalised([])).toThrow(RangeError);
    expect(() => normalised([0, 0])).toThrow(RangeError);
    expect(() => normalised([1, Number.NaN])).toThrow(RangeError);
    expect(cosineSimilarity([1, 0], [2, 0])).toBeCloseTo(1, 6);
    expect(cosineSimilarity([1, 0], [0, 5])).toBeCloseTo(0, 6);
  });
});

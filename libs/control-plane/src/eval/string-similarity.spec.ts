import { charTrigramCosine, normalizeText, stringSimilarity, tokenJaccard, wordTokens } from './string-similarity';

describe('string similarity', () => {
  it('normalises case, width and whitespace', () => {
    expect(normalizeText('  Ｈello\t\n  WORLD ')).toBe('hello world');
    expect(wordTokens('Hello, world! 42 times')).toEqual(['hello', 'world', '42', 'times']);
  });

  it.each([
    ['identical', 'the cat sat', 'the cat sat', 1],
    ['order and case ignored', 'The cat sat', 'sat cat the', 1],
    ['repetition ignored', 'cat cat sat', 'cat sat', 1],
    // {the, cat, sat} vs {the, dog, sat}: 2 shared / 4 in the union.
    ['one word swapped', 'the cat sat', 'the dog sat', 0.5],
    ['disjoint', 'a b', 'c d', 0],
    ['both empty', '', '  ', 1],
    ['one empty', '', 'x', 0],
    ['punctuation only, different', '!!', '??', 0],
  ])('token Jaccard: %s', (_name, a, b, expected) => {
    expect(tokenJaccard(a, b)).toBeCloseTo(expected, 10);
  });

  it('character-trigram cosine matches the formula on a hand-computed pair', () => {
    // " ab " → { " ab":1, "ab ":1 }; " abc " → { " ab":1, "abc":1, "bc ":1 }: dot 1, norms √2 and √3.
    expect(charTrigramCosine('ab', 'abc')).toBeCloseTo(1 / Math.sqrt(6), 10);
    expect(charTrigramCosine('Once upon a time', 'once  upon a TIME')).toBe(1);
    expect(charTrigramCosine('', '')).toBe(1);
    expect(charTrigramCosine('', 'a')).toBe(0);
    expect(charTrigramCosine('abc', 'xyz')).toBe(0);
  });

  it('trigram cosine sees word order and small edits; Jaccard does not see order', () => {
    const a = 'the cat chased the dog';
    const b = 'the dog chased the cat';
    expect(tokenJaccard(a, b)).toBe(1);
    expect(charTrigramCosine(a, b)).toBeLessThan(1);
    expect(charTrigramCosine('colour', 'color')).toBeGreaterThan(0.5);
    expect(tokenJaccard('colour', 'color')).toBe(0);
  });

  it('dispatches by metric and stays in [0, 1]', () => {
    for (const metric of ['token_jaccard', 'char_trigram_cosine'] as const) {
      const s = stringSimilarity(metric, 'Lily went to the park.', 'Lily went to the big park!');
      expect(s).toBeGreaterThan(0.5);
      expect(s).toBeLessThanOrEqual(1);
    }
  });
});

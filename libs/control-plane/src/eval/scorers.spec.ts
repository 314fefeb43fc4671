import { isWeirError } from '@weir/core';
import { MIN_SIMILARITY_THRESHOLD, normalizeWhitespace, parseScorerSpec, scoreOutput } from './scorers';

const person = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'], additionalProperties: false };

describe('scorers', () => {
  it.each([
    ['same text', 'Once upon a time', 'Once upon a time', 1],
    ['whitespace differs', ' Once  upon\n a time ', 'Once upon a time', 1],
    ['case differs', 'once upon a time', 'Once upon a time', 0],
    ['one word differs', 'Once upon a day', 'Once upon a time', 0],
  ])('exact: %s', (_name, candidate, reference, score) => {
    expect(scoreOutput({ kind: 'exact', threshold: 1 }, { candidate, reference }).score).toBe(score);
  });

  it('exact explains a miss without quoting either output', () => {
    const result = scoreOutput({ kind: 'exact', threshold: 1 }, { candidate: 'secret-a', reference: 'secret-b' });
    expect(result).toEqual({ score: 0, detail: 'the output differs from the reference' });
  });

  it.each([
    ['valid', '{"name":"Lily"}', 1],
    ['valid, with whitespace', ' { "name" : "Lily" } ', 1],
    ['missing required field', '{}', 0],
    ['extra field', '{"name":"Lily","age":3}', 0],
    ['not JSON', 'Lily', 0],
    ['empty', '', 0],
  ])('json_schema: %s', (_name, candidate, score) => {
    const result = scoreOutput({ kind: 'json_schema', threshold: 1 }, { candidate, outputSchema: person });
    expect(result.score).toBe(score);
    if (score === 0) {
      expect(result.detail).toBeDefined();
      expect(result.detail).not.toContain('Lily');
    }
  });

  it('json_schema without a schema is an invalid_request, not a zero', () => {
    expect(() => scoreOutput({ kind: 'json_schema', threshold: 1 }, { candidate: '{}' })).toThrow(/output_schema/);
  });

  it('similarity scores by the metric and reports it below 1', () => {
    const spec = { kind: 'similarity', threshold: 0.5, metric: 'token_jaccard' } as const;
    expect(scoreOutput(spec, { candidate: 'the cat sat', reference: 'the cat sat' })).toEqual({ score: 1 });
    expect(scoreOutput(spec, { candidate: 'the cat sat', reference: 'the dog sat' })).toEqual({ score: 0.5, detail: 'token_jaccard similarity 0.500' });
    expect(() => scoreOutput(spec, { candidate: 'x' })).toThrow(/reference/);
  });

  it('normalises whitespace only', () => {
    expect(normalizeWhitespace('\t A \n\n b  ')).toBe('A b');
  });

  describe('parseScorerSpec', () => {
    it.each([
      [{ kind: 'exact' }, { kind: 'exact', threshold: 1 }],
      [{ kind: 'json_schema', threshold: 1 }, { kind: 'json_schema', threshold: 1 }],
      [{ kind: 'similarity', threshold: 0.8 }, { kind: 'similarity', threshold: 0.8, metric: 'token_jaccard' }],
      [{ kind: 'similarity', threshold: 0.05, metric: 'char_trigram_cosine' }, { kind: 'similarity', threshold: 0.05, metric: 'char_trigram_cosine' }],
    ])('accepts %j', (input, expected) => {
      expect(parseScorerSpec(input)).toEqual(expected);
    });

    it.each([
      [null, 'scorer'],
      [{ kind: 'embedding', threshold: 0.8 }, 'scorer.kind'],
      [{ kind: 'exact', threshold: 1.5 }, 'scorer.threshold'],
      // A threshold of 0 passes any output, even an empty one: refused for every kind.
      [{ kind: 'similarity', threshold: 0 }, 'scorer.threshold'],
      // Barely above 0 passes an output sharing one word: similarity needs at least 0.05.
      [{ kind: 'similarity', threshold: 1e-300 }, 'scorer.threshold'],
      [{ kind: 'similarity', threshold: 0.049, metric: 'char_trigram_cosine' }, 'scorer.threshold'],
      [{ kind: 'exact', threshold: 0 }, 'scorer.threshold'],
      [{ kind: 'json_schema', threshold: -0.1 }, 'scorer.threshold'],
      [{ kind: 'exact', threshold: '1' }, 'scorer.threshold'],
      [{ kind: 'similarity' }, 'scorer.threshold'],
      [{ kind: 'similarity', threshold: 0.5, metric: 'cosine' }, 'scorer.metric'],
      [{ kind: 'exact', metric: 'token_jaccard' }, 'scorer.metric'],
      [{ kind: 'exact', treshold: 1 }, 'scorer.treshold'],
    ])('refuses %j naming %s', (input, param) => {
      let caught: unknown;
      try {
        parseScorerSpec(input);
      } catch (err) {
        caught = err;
      }
      expect(isWeirError(caught) && [caught.code, caught.param]).toEqual(['invalid_request', param]);
    });

    it('says what the similarity floor is and why', () => {
      expect(() => parseScorerSpec({ kind: 'similarity', threshold: 1e-300 })).toThrow(
        '`scorer.threshold` must be at least 0.05 for the similarity scorer (got 1e-300): below that, an output sharing a single word with the reference passes; use a real pass mark such as 0.8',
      );
      // What 1e-300 let through: an unrelated output sharing one word scores above it, below the floor.
      const oneWord = scoreOutput({ kind: 'similarity', threshold: MIN_SIMILARITY_THRESHOLD, metric: 'token_jaccard' }, { candidate: 'the a b c d e f g h i j k l m n o p q r s t u v w', reference: 'the cat' });
      expect(oneWord.score).toBeGreaterThan(1e-300);
      expect(oneWord.score).toBeLessThan(MIN_SIMILARITY_THRESHOLD);
    });
  });
});

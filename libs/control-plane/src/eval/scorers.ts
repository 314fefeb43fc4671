/**
 * The eval scorers: each compares one candidate output with what it should be and returns a
 * score in [0, 1]. Pure functions; the runner applies them and the gate compares scores with
 * the run's threshold.
 *
 * - `exact`: 1 when the candidate equals the reference after whitespace normalisation (runs of
 *   whitespace become one space, ends trimmed; case and punctuation count), else 0.
 * - `json_schema`: 1 when the candidate is a JSON document valid against the golden prompt's
 *   `output_schema` (draft-07, 2019-09 or 2020-12, checked with ajv exactly as the gateway checks
 *   `output_schema`), else 0. Needs no reference.
 * - `similarity`: a string similarity with the reference ({@link stringSimilarity}:
 *   `token_jaccard`, default, or `char_trigram_cosine`). Embedding similarity is not offered:
 *   Weir has no embeddings endpoint to compute it with.
 */
import { WeirError } from '@weir/core';
import { compileOutputSchema } from '@weir/gateway';
import { SIMILARITY_METRICS, type SimilarityMetric, stringSimilarity } from './string-similarity';

/** The scorer kinds. */
export const SCORER_KINDS = ['exact', 'json_schema', 'similarity'] as const;

/** One of {@link SCORER_KINDS}. */
export type ScorerKind = (typeof SCORER_KINDS)[number];

/**
 * The least `threshold` a `similarity` scorer accepts: 0.05. Below it a candidate sharing one
 * word (or a few character trigrams) with the reference passes: with `token_jaccard`, one shared
 * word of twenty distinct ones already scores 0.05, and a threshold of 1e-300 passed any output
 * that shared anything. (Not a quality bar — pick one per use case, e.g. 0.8 — only a floor
 * below which the gate means nothing.)
 */
export const MIN_SIMILARITY_THRESHOLD = 0.05;

/**
 * A run's scorer, as stored in `eval_runs.scorer` and sent in `POST /admin/v1/evals`.
 * `threshold` is the least score, in (0, 1], each prompt must reach for the gate to pass (0 is
 * refused: every output, even an empty one, scores at least 0).
 */
export type ScorerSpec =
  | { kind: 'exact'; threshold: number }
  | { kind: 'json_schema'; threshold: number }
  | { kind: 'similarity'; threshold: number; metric: SimilarityMetric };

/** What one scoring looks at. */
export interface ScoreInput {
  /** The candidate revision's output. */
  candidate: string;
  /** What it is compared with (the stable revision's output, or the prompt's `expected`); unused by `json_schema`. */
  reference?: string;
  /** The golden prompt's `output_schema`; required by `json_schema`. */
  outputSchema?: object | null;
}

/** One score: `score` in [0, 1] and, when it is below 1, why (never output text). */
export interface Score {
  score: number;
  detail?: string;
}

/** Collapses every whitespace run to one space and trims the ends (the `exact` scorer's normalisation). */
export function normalizeWhitespace(text: string): string {
  return text.replace(/\s+/gu, ' ').trim();
}

/** True when `spec` compares with a reference output (`exact`, `similarity`); `json_schema` does not. */
export function needsReference(spec: ScorerSpec): boolean {
  return spec.kind !== 'json_schema';
}

/**
 * Scores one candidate output.
 * @throws WeirError `invalid_request` when the scorer needs a reference (or an output schema)
 *   that `input` lacks; the runner checks both before it calls this.
 */
export function scoreOutput(spec: ScorerSpec, input: ScoreInput): Score {
  switch (spec.kind) {
    case 'exact': {
      const reference = requireReference(spec, input);
      const same = normalizeWhitespace(input.candidate) === normalizeWhitespace(reference);
      return same ? { score: 1 } : { score: 0, detail: 'the output differs from the reference' };
    }
    case 'json_schema': {
      if (!input.outputSchema) throw new WeirError('invalid_request', 'the json_schema scorer needs the golden prompt to have an output_schema', { param: 'scorer' });
      const check = compileOutputSchema(input.outputSchema, 'output_schema').check(input.candidate);
      return check.ok ? { score: 1 } : { score: 0, detail: check.message };
    }
    case 'similarity': {
      const reference = requireReference(spec, input);
      const score = stringSimilarity(spec.metric, input.candidate, reference);
      return score >= 1 ? { score: 1 } : { score, detail: `${spec.metric} similarity ${score.toFixed(3)}` };
    }
    default: {
      const unreachable: never = spec;
      throw new WeirError('internal', `unknown scorer ${(unreachable as { kind: string }).kind}`);
    }
  }
}

function requireReference(spec: ScorerSpec, input: ScoreInput): string {
  if (input.reference === undefined) throw new WeirError('invalid_request', `the ${spec.kind} scorer needs a reference output`, { param: 'scorer' });
  return input.reference;
}

/**
 * Validates a scorer as sent on the wire: `{kind, threshold?, metric?}`. `threshold` is a number
 * greater than 0 and at most 1 (a threshold of 0 would pass any output); it defaults to 1 for
 * `exact` and `json_schema` (their scores are 0 or 1) and is required for `similarity`, where
 * it must be at least {@link MIN_SIMILARITY_THRESHOLD} (0.05); `metric` (similarity only)
 * defaults to `token_jaccard`.
 * @throws WeirError `invalid_request` (param `scorer…`) naming the bad field and the accepted values.
 */
export function parseScorerSpec(value: unknown): ScorerSpec {
  const bad = (param: string, why: string) => new WeirError('invalid_request', `\`${param}\` ${why}`, { param });
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw bad('scorer', 'must be an object {kind, threshold}');
  const { kind, threshold, metric, ...rest } = value as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw bad(`scorer.${unknown[0]}`, 'is not a scorer field (kind, threshold, metric)');
  if (typeof kind !== 'string' || !(SCORER_KINDS as readonly string[]).includes(kind)) throw bad('scorer.kind', `must be one of ${SCORER_KINDS.join(', ')}`);
  if (threshold !== undefined && (typeof threshold !== 'number' || !Number.isFinite(threshold) || threshold <= 0 || threshold > 1)) {
    throw bad('scorer.threshold', 'must be a number greater than 0 and at most 1 (a threshold of 0 would pass any output, even an empty one)');
  }
  if (kind === 'similarity') {
    if (threshold === undefined) throw bad('scorer.threshold', `is required for the similarity scorer (a number from ${MIN_SIMILARITY_THRESHOLD} to 1, e.g. 0.8)`);
    if ((threshold as number) < MIN_SIMILARITY_THRESHOLD) {
      throw bad(
        'scorer.threshold',
        `must be at least ${MIN_SIMILARITY_THRESHOLD} for the similarity scorer (got ${String(threshold)}): below that, an output sharing a single word with the reference passes; use a real pass mark such as 0.8`,
      );
    }
    if (metric !== undefined && (typeof metric !== 'string' || !(SIMILARITY_METRICS as readonly string[]).includes(metric))) {
      throw bad('scorer.metric', `must be one of ${SIMILARITY_METRICS.join(', ')}`);
    }
    return { kind, threshold: threshold as number, metric: (metric as SimilarityMetric | undefined) ?? 'token_jaccard' };
  }
  if (metric !== undefined) throw bad('scorer.metric', 'is only for the similarity scorer');
  return { kind: kind as 'exact' | 'json_schema', threshold: (threshold as number | undefined) ?? 1 };
}

/**
 * Replays a tenant's golden prompts on a candidate revision and on the alias's stable
 * revision, scores each candidate output, and builds the report the canary gate reads.
 */
import { WeirError } from '@weir/core';
import type { EvalGenerate, EvalGenerateResult, EvalLatencySummary, EvalPromptResult, EvalReport, EvalSide, GoldenPrompt } from './eval-types';
import { needsReference, scoreOutput, type ScorerSpec } from './scorers';

/** Default per-generation timeout of a replay (ms). */
export const DEFAULT_EVAL_CALL_TIMEOUT_MS = 60_000;

/** Options of {@link runEval}. */
export interface RunEvalOptions {
  /** The golden prompts, replayed one at a time in this order. */
  prompts: readonly GoldenPrompt[];
  /** Revision under evaluation. */
  candidate: string;
  /** The alias's stable revision, the comparison baseline. */
  stable: string;
  scorer: ScorerSpec;
  /** Candidate errors the gate tolerates: an integer ≥ 0 and below the number of prompts. Default 0. */
  allowedErrors?: number;
  generate: EvalGenerate;
  /** Each generation is aborted after this long (ms) and counts as an error. Default {@link DEFAULT_EVAL_CALL_TIMEOUT_MS}. */
  callTimeoutMs?: number;
}

/**
 * Runs an eval: for each prompt, the stable revision then the candidate (sequentially, so
 * their latencies are not measured against each other's load), greedy decoding, the prompt's
 * `max_tokens` and `output_schema`. The candidate's output is scored against the stable
 * revision's output (`exact`, `similarity`); when the stable revision failed on a prompt, the
 * prompt's `expected` is the reference, and without one the prompt is unscored (and fails the
 * gate). `json_schema` needs no reference.
 *
 * Gate: passes when at least one candidate output was scored (a run where the candidate failed
 * or went unscored on every prompt never passes, whatever `allowedErrors` says), every prompt
 * whose candidate did not fail scored ≥ `scorer.threshold`, no prompt is unscored, and
 * candidate errors ≤ `allowedErrors`.
 *
 * @throws WeirError `invalid_request` when `prompts` is empty, `allowedErrors` is not an integer
 *   from 0 to `prompts.length − 1` (param `allowed_errors`), or the scorer is `json_schema` and a
 *   prompt has no `output_schema` (before anything is generated).
 */
export async function runEval(options: RunEvalOptions): Promise<EvalReport> {
  const { prompts, scorer, generate } = options;
  const allowedErrors = options.allowedErrors ?? 0;
  const timeoutMs = options.callTimeoutMs ?? DEFAULT_EVAL_CALL_TIMEOUT_MS;
  if (prompts.length === 0) throw new WeirError('invalid_request', 'there are no golden prompts to replay for this use case; add some first');
  const allowedProblem = allowedErrorsProblem(allowedErrors, prompts.length);
  if (allowedProblem) throw new WeirError('invalid_request', allowedProblem, { param: 'allowed_errors' });
  if (scorer.kind === 'json_schema') {
    const missing = prompts.filter((p) => !p.output_schema).map((p) => p.id);
    if (missing.length > 0) {
      throw new WeirError('invalid_request', `the json_schema scorer needs every golden prompt to have an output_schema; ${missing.length} lack one (${missing.slice(0, 5).join(', ')})`, {
        param: 'scorer',
      });
    }
  }
  const results: EvalPromptResult[] = [];
  for (const prompt of prompts) {
    const stable = side(options.stable, await replay(generate, options.stable, prompt, timeoutMs));
    const candidate = side(options.candidate, await replay(generate, options.candidate, prompt, timeoutMs));
    results.push(judge(scorer, prompt, stable, candidate));
  }
  return report(scorer, allowedErrors, results);
}

/**
 * Why `allowedErrors` is unacceptable for a run of `promptCount` prompts, or undefined when it is
 * fine: it must be an integer from 0 to `promptCount − 1`, since a run whose candidate may fail
 * on every prompt would pass without one scored output.
 */
export function allowedErrorsProblem(allowedErrors: number, promptCount: number): string | undefined {
  if (!Number.isInteger(allowedErrors) || allowedErrors < 0) return `allowed_errors must be an integer >= 0, got ${allowedErrors}`;
  if (allowedErrors >= promptCount) {
    return `allowed_errors (${allowedErrors}) must be less than the number of golden prompts replayed (${promptCount}): at least one prompt must produce a scored candidate output for the gate to pass`;
  }
  return undefined;
}

async function replay(generate: EvalGenerate, revision: string, prompt: GoldenPrompt, timeoutMs: number): Promise<EvalGenerateResult> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const started = performance.now();
  try {
    const result = await generate(revision, {
      messages: prompt.messages,
      maxTokens: prompt.max_tokens,
      ...(prompt.output_schema ? { outputSchema: prompt.output_schema } : {}),
      signal: abort.signal,
    });
    if (abort.signal.aborted && !result.error) return { ...result, error: { code: 'deadline_exceeded', message: `no complete answer within ${timeoutMs} ms` } };
    return result;
  } catch (err) {
    // A port fault is the revision's failure on this prompt, reported without its cause.
    const code = err instanceof WeirError ? err.code : 'internal';
    const message = err instanceof WeirError ? err.message : 'the generation failed';
    return { text: '', ttftMs: null, totalMs: Math.round(performance.now() - started), error: { code, message } };
  } finally {
    clearTimeout(timer);
  }
}

function side(revision: string, result: EvalGenerateResult): EvalSide {
  return { revision, output: result.text, error: result.error ?? null, ttft_ms: result.ttftMs, total_ms: result.totalMs };
}

function judge(scorer: ScorerSpec, prompt: GoldenPrompt, stable: EvalSide, candidate: EvalSide): EvalPromptResult {
  const base = { prompt_id: prompt.id, stable, candidate };
  if (candidate.error) return { ...base, reference: 'none', score: null, detail: `the candidate failed: ${candidate.error.code}`, pass: false };
  let reference: EvalPromptResult['reference'] = 'none';
  let referenceText: string | undefined;
  if (needsReference(scorer)) {
    if (!stable.error) [reference, referenceText] = ['stable', stable.output];
    else if (prompt.expected !== null) [reference, referenceText] = ['expected', prompt.expected];
    else return { ...base, reference, score: null, detail: `the stable revision failed (${stable.error.code}) and the prompt has no expected answer`, pass: false };
  }
  const { score, detail } = scoreOutput(scorer, { candidate: candidate.output, reference: referenceText, outputSchema: prompt.output_schema });
  return { ...base, reference, score, detail: detail ?? null, pass: score >= scorer.threshold };
}

function report(scorer: ScorerSpec, allowedErrors: number, prompts: EvalPromptResult[]): EvalReport {
  const candidateErrors = prompts.filter((p) => p.candidate.error).length;
  const stableErrors = prompts.filter((p) => p.stable.error).length;
  const scored = prompts.filter((p) => p.score !== null);
  const unscored = prompts.filter((p) => p.score === null && !p.candidate.error).length;
  const below = scored.filter((p) => (p.score as number) < scorer.threshold).length;
  const reasons: string[] = [];
  if (scored.length === 0) reasons.push(`no candidate output was scored (${candidateErrors} candidate errors, ${unscored} unscored of ${prompts.length} prompts); a passing gate needs at least one`);
  if (below > 0) reasons.push(`${below} of ${prompts.length} prompts scored below the threshold ${scorer.threshold}`);
  if (unscored > 0) reasons.push(`${unscored} prompts could not be scored (the stable revision failed and they have no expected answer)`);
  if (candidateErrors > allowedErrors) reasons.push(`the candidate failed on ${candidateErrors} prompts; at most ${allowedErrors} allowed`);
  const passed = prompts.filter((p) => p.pass).length;
  return {
    scorer,
    allowed_errors: allowedErrors,
    prompts,
    totals: {
      prompts: prompts.length,
      passed,
      failed: prompts.length - passed,
      unscored,
      candidate_errors: candidateErrors,
      stable_errors: stableErrors,
      mean_score: scored.length === 0 ? null : scored.reduce((sum, p) => sum + (p.score as number), 0) / scored.length,
      candidate: latency(prompts.map((p) => p.candidate)),
      stable: latency(prompts.map((p) => p.stable)),
    },
    pass: prompts.length > 0 && reasons.length === 0,
    reasons,
  };
}

function latency(sides: EvalSide[]): EvalLatencySummary {
  const ttft = sides.map((s) => s.ttft_ms).filter((v): v is number => v !== null);
  const total = sides.filter((s) => !s.error).map((s) => s.total_ms);
  return { ttft_p50_ms: nearestRank(ttft, 0.5), ttft_p95_ms: nearestRank(ttft, 0.95), total_p50_ms: nearestRank(total, 0.5), total_p95_ms: nearestRank(total, 0.95) };
}

/**
 * The nearest-rank percentile: the smallest sample with at least `p` of the samples at or
 * below it (the value at rank ⌈p·n⌉ of the sorted samples); null for no sample.
 */
export function nearestRank(samples: readonly number[], p: number): number | null {
  if (samples.length === 0) return null;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)];
}

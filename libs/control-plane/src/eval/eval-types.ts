/**
 * The vocabulary of evals: golden prompts, the generation port the runner replays them
 * through, and the report a run produces (stored as `eval_runs.report`, returned by
 * `POST /admin/v1/evals`). Wire and storage shapes are snake_case.
 */
import type { ScorerSpec } from './scorers';

/** One message of a golden prompt (plain-text content, as on `/v1/chat/completions`). */
export interface GoldenMessage {
  role: 'system' | 'developer' | 'user' | 'assistant';
  content: string;
}

/** A stored golden prompt (`golden_prompts` row). */
export interface GoldenPrompt {
  id: string;
  tenant_id: string;
  /** The use case it belongs to (the `use_case` tenants send on requests). */
  use_case: string;
  messages: GoldenMessage[];
  /** Output token cap for each replay (≥ 1). */
  max_tokens: number;
  /** A JSON Schema (draft-07, 2019-09 or 2020-12) the output must match; also passed to the engine to constrain decoding. */
  output_schema: object | null;
  /** A reviewed answer; the reference when the stable revision fails on this prompt. */
  expected: string | null;
  created_at: string;
}

/** What one replay asks a revision to do (greedy: temperature 0, so replays are comparable). */
export interface EvalGenerateRequest {
  messages: GoldenMessage[];
  maxTokens: number;
  outputSchema?: object;
  /** Aborts the generation (the runner's per-call timeout). */
  signal: AbortSignal;
}

/**
 * One replay's outcome. `ttftMs` is null when no text arrived; `error` is set (and `text` is
 * what arrived before it) when the generation failed.
 */
export interface EvalGenerateResult {
  text: string;
  /** From the call to the first non-empty text (ms); null when none. */
  ttftMs: number | null;
  /** From the call to its end (ms). */
  totalMs: number;
  /** The error's code and public message, never its cause. */
  error?: { code: string; message: string };
}

/**
 * The generation port: replays one prompt on a revision. Resolves with `error` set for a
 * failed generation; rejects only on a fault of the port itself (treated as a failed
 * generation by the runner too).
 */
export type EvalGenerate = (revisionId: string, request: EvalGenerateRequest) => Promise<EvalGenerateResult>;

/** One revision's side of a prompt in the report. */
export interface EvalSide {
  revision: string;
  output: string;
  error: { code: string; message: string } | null;
  ttft_ms: number | null;
  total_ms: number;
}

/** One prompt's line in the report. */
export interface EvalPromptResult {
  prompt_id: string;
  stable: EvalSide;
  candidate: EvalSide;
  /** What the candidate was compared with: the stable output, the prompt's `expected`, or nothing (json_schema). */
  reference: 'stable' | 'expected' | 'none';
  /** In [0, 1]; null when the prompt could not be scored (candidate error, or no reference). */
  score: number | null;
  /** Why the score is below 1 or null (never output text). */
  detail: string | null;
  /** Score ≥ threshold and no candidate error. */
  pass: boolean;
}

/** Latency summary of one side over the run (ms; null when no sample). */
export interface EvalLatencySummary {
  ttft_p50_ms: number | null;
  ttft_p95_ms: number | null;
  total_p50_ms: number | null;
  total_p95_ms: number | null;
}

/** The report of one eval run. */
export interface EvalReport {
  scorer: ScorerSpec;
  /** Candidate errors the gate allows (default 0; always below the number of prompts). */
  allowed_errors: number;
  prompts: EvalPromptResult[];
  totals: {
    prompts: number;
    passed: number;
    failed: number;
    /** Prompts that could not be scored (no reference: the stable revision failed and no `expected`). */
    unscored: number;
    candidate_errors: number;
    stable_errors: number;
    /** Mean of the scored prompts' scores; null when none was scored. */
    mean_score: number | null;
    candidate: EvalLatencySummary;
    stable: EvalLatencySummary;
  };
  /** The gate's verdict: at least one candidate output scored, every prompt scored ≥ threshold (errors aside) and candidate errors ≤ allowed. */
  pass: boolean;
  /** Why the gate failed, one line per reason; empty when it passed. */
  reasons: string[];
}

/**
 * Eval-gated canaries (issue 7, item 6): golden prompts, eval runs and their scorers, the
 * canary gate the alias-weight route calls, the pin gate the policy routes call, the canary guard that rolls regressing canaries
 * back, and the admin routes. See docs/evals.md.
 */
export { SIMILARITY_METRICS, type SimilarityMetric, normalizeText, wordTokens, tokenJaccard, charTrigramCosine, stringSimilarity } from './string-similarity';
export { SCORER_KINDS, MIN_SIMILARITY_THRESHOLD, type ScorerKind, type ScorerSpec, type ScoreInput, type Score, normalizeWhitespace, needsReference, scoreOutput, parseScorerSpec } from './scorers';
export type {
  GoldenMessage,
  GoldenPrompt,
  EvalGenerateRequest,
  EvalGenerateResult,
  EvalGenerate,
  EvalSide,
  EvalPromptResult,
  EvalLatencySummary,
  EvalReport,
} from './eval-types';
export { DEFAULT_EVAL_CALL_TIMEOUT_MS, type RunEvalOptions, runEval, nearestRank } from './eval-runner';
export { type EngineEvalGenerator, type EngineEvalGeneratorOptions, createEngineEvalGenerator } from './engine-generate';
export {
  type GoldenPromptInput,
  type GoldenPromptStore,
  type StoredEvalRun,
  type NewEvalRun,
  type EvalRunStore,
  createGoldenPromptStore,
  createEvalRunStore,
} from './eval-store';
export { type CatalogAlias, type ModelCatalog, targetsOfAliasSpec, stableRevisionOf, createPgModelCatalog } from './model-catalog';
export {
  DEFAULT_EVAL_MAX_AGE_MS,
  MAX_GATED_WEIGHT,
  type CanaryGateOptions,
  type GatedArm,
  type EvalLookupOptions,
  type EvalLookup,
  assertCanaryGate,
  formerStableRevisions,
  lastAuditedAliasTargets,
  findPassingEval,
} from './canary-gate';
export { type PinGateOptions, type GatedPin, assertPinGate } from './pin-gate';
export { type ArmStats, type CanaryThresholds, DEFAULT_CANARY_THRESHOLDS, type CanaryVerdict, judgeCanary } from './canary-judge';
export { armStatsByRevision, NO_TRAFFIC } from './canary-stats';
export {
  CANARY_GUARD_ACTOR,
  targetsAfterRollback,
  type ArmSummary,
  type CanaryRolledBackEvent,
  type CanaryRollbackRequest,
  type CanaryRollback,
  type CanaryGuardLogger,
  type CanaryGuardOptions,
  type CanaryCheck,
  type CanaryGuard,
  createCanaryGuard,
} from './canary-guard';
export {
  MAX_GOLDEN_PROMPTS_PER_USE_CASE,
  DEFAULT_MAX_PROMPTS_PER_EVAL,
  MAX_GOLDEN_TEXT_CHARS,
  MAX_GOLDEN_MAX_TOKENS,
  type EvalAuditEntry,
  type EvalRoutesDeps,
  type EvalRoutesOptions,
  createEvalRouter,
} from './eval-routes';

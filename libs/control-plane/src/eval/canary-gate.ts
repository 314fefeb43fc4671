/**
 * The canary gate: raising a canary arm's share of an alias needs a recent, passing eval of
 * that revision on that alias. The control plane's alias-weight route calls
 * {@link assertCanaryGate} before it commits new targets.
 */
import type { Kysely } from 'kysely';
import { type AliasTarget, WeirError } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { createEvalRunStore, type EvalRunStore } from './eval-store';
import { createPgModelCatalog, type ModelCatalog, stableRevisionOf } from './model-catalog';

/** Default {@link CanaryGateOptions.maxAgeMs}: 7 days. */
export const DEFAULT_EVAL_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000;

/** Options of {@link assertCanaryGate}. */
export interface CanaryGateOptions {
  db: Kysely<WeirSchema>;
  /** The alias name (`model_aliases.id`). */
  alias: string;
  /** The targets about to be committed. */
  newTargets: readonly AliasTarget[];
  /** The alias's targets before the change. Default: read from `model_aliases` (none when the alias is new). */
  currentTargets?: readonly AliasTarget[];
  /** An eval older than this (ms) does not count. Default {@link DEFAULT_EVAL_MAX_AGE_MS} (7 days). */
  maxAgeMs?: number;
  /** Now (wall clock). Default `new Date()`. */
  now?: Date;
  /** Where aliases and revisions are read. Default {@link createPgModelCatalog}(db). */
  catalog?: ModelCatalog;
  /** Where eval runs are read. Default {@link createEvalRunStore}(db). */
  runs?: EvalRunStore;
}

/** One canary arm the gate let through, and the eval that let it. */
export interface GatedArm {
  revision: string;
  /** Share of the alias's traffic before and after (weight ÷ sum of weights, 0–1). */
  share_before: number;
  share_after: number;
  eval_run_id: string;
}

/** A weight's share of its targets (0 when every weight is 0 or the revision is absent). */
function shareOf(targets: readonly AliasTarget[], revision: string): number {
  const total = targets.reduce((sum, t) => sum + t.weight, 0);
  const weight = targets.find((t) => t.revision === revision)?.weight ?? 0;
  return total > 0 ? weight / total : 0;
}

/**
 * Checks the canary gate for a change of an alias's targets. Weights are relative, so the gate
 * compares each arm's share of traffic (weight ÷ sum of weights), not its raw weight: lowering
 * the stable weight raises the canaries' shares too.
 *
 * The stable arm is the current targets' largest weight (first listed on a tie), or, for an
 * alias without a current stable arm, the new targets'. Every other arm whose share grows needs
 * a finished, passing eval run (`eval_runs.pass`) of that revision on this alias, created after
 * the revision was and at most `maxAgeMs` ago. The stable arm, arms whose share shrinks or
 * stays, and arms removed need nothing (a rollback is never gated).
 *
 * @returns the gated arms with the eval that passed each (for the audit entry); empty when no
 *   canary's share grows.
 * @throws WeirError `conflict` (HTTP 409, `param: 'targets'`) naming the first canary revision
 *   without a qualifying eval, the alias, the cut-off time and how to produce one.
 */
export async function assertCanaryGate(options: CanaryGateOptions): Promise<GatedArm[]> {
  const { db, alias, newTargets } = options;
  const catalog = options.catalog ?? createPgModelCatalog(db);
  const runs = options.runs ?? createEvalRunStore(db);
  const now = options.now ?? new Date();
  const maxAgeMs = options.maxAgeMs ?? DEFAULT_EVAL_MAX_AGE_MS;
  const current = options.currentTargets ?? (await catalog.aliasTargets(alias)) ?? [];
  const stable = stableRevisionOf(current) ?? stableRevisionOf(newTargets);
  const gated: GatedArm[] = [];
  for (const target of newTargets) {
    if (target.revision === stable) continue;
    const before = shareOf(current, target.revision);
    const after = shareOf(newTargets, target.revision);
    // The epsilon keeps float noise in equal shares (1/3 vs 2/6) from counting as a raise.
    if (after <= before + 1e-9) continue;
    const createdAt = await catalog.revisionCreatedAt(target.revision);
    const oldest = now.getTime() - maxAgeMs;
    const since = new Date(Math.max(oldest, createdAt ? createdAt.getTime() : oldest));
    const run = await runs.latestPassing(alias, target.revision, since);
    if (!run) {
      throw new WeirError(
        'conflict',
        `Raising canary revision ${target.revision} on alias ${alias} to ${pct(after)} of traffic (from ${pct(before)}) needs a passing eval: there is no passing eval run of ${target.revision} on ${alias} since ${since.toISOString()} (its creation or ${Math.round(maxAgeMs / 3_600_000)} h ago, whichever is later). Run one with POST /admin/v1/evals {"tenant", "use_case", "alias": "${alias}", "candidate_revision": "${target.revision}", "scorer"} and retry.`,
        { param: 'targets' },
      );
    }
    gated.push({ revision: target.revision, share_before: before, share_after: after, eval_run_id: run.id });
  }
  return gated;
}

function pct(share: number): string {
  return `${Math.round(share * 1000) / 10}%`;
}

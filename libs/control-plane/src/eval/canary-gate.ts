/**
 * The canary gate: raising a canary arm's share of an alias needs a recent, passing eval of
 * that revision on that alias. The control plane's alias-weight route calls
 * {@link assertCanaryGate} before it commits new targets.
 */
import type { Kysely } from 'kysely';
import { type AliasTarget, WeirError } from '@weir/core';
import { MAX_ALIAS_TARGET_WEIGHT } from '@weir/config';
import type { WeirSchema } from '@weir/store-pg';
import { createEvalRunStore, type EvalRunStore } from './eval-store';
import { createPgModelCatalog, type ModelCatalog, stableRevisionOf, targetsOfAliasSpec } from './model-catalog';

/**
 * The largest alias target weight the gate accepts: the same bound as `@weir/config`'s
 * `MAX_ALIAS_TARGET_WEIGHT` (1,000,000), which validates the composed configuration after the
 * gate; the gate checks it first so a huge weight is a 400 rather than a share computed from an
 * overflowing sum.
 */
export const MAX_GATED_WEIGHT = MAX_ALIAS_TARGET_WEIGHT;

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
  /**
   * The revisions that were this alias's stable arm before (exempt from the gate). Default
   * {@link formerStableRevisions}(db, alias), read only when a raised arm has no passing eval.
   */
  formerStable?: () => Promise<ReadonlySet<string>>;
}

/** One canary arm the gate let through, and what let it: a passing eval, or a former stable arm. */
export interface GatedArm {
  revision: string;
  /** Share of the alias's traffic before and after (weight ÷ sum of weights, 0–1). */
  share_before: number;
  share_after: number;
  /** The passing eval run that let it through; null when `former_stable` did. */
  eval_run_id: string | null;
  /** Present (true) when no eval was needed: the revision was this alias's stable arm before. */
  former_stable?: true;
}

/** True for a weight that counts: a finite number > 0. */
function positive(weight: number): boolean {
  return Number.isFinite(weight) && weight > 0;
}

/**
 * A weight's share of its targets, 0–1 (0 when no weight is positive or the revision is
 * absent); NaN and infinite weights count as 0. When the plain sum overflows, weights are
 * divided by the largest before summing, so even a stored pair of 1e308 weights (accepted
 * before the weight bound existed) gives 0.5 each rather than 0 each of an Infinity total.
 */
function shareOf(targets: readonly AliasTarget[], revision: string): number {
  const weight = targets.find((t) => t.revision === revision)?.weight ?? 0;
  if (!positive(weight)) return 0;
  const total = targets.reduce((sum, t) => sum + (positive(t.weight) ? t.weight : 0), 0);
  if (Number.isFinite(total)) return weight / total;
  const max = targets.reduce((m, t) => (positive(t.weight) && t.weight > m ? t.weight : m), 0);
  const scaled = targets.reduce((sum, t) => sum + (positive(t.weight) ? t.weight / max : 0), 0);
  return weight / max / scaled;
}

/**
 * Refuses targets the gate cannot judge: a weight that is not a finite number from 0 to
 * {@link MAX_GATED_WEIGHT}, or a sum of weights that is not finite.
 * @throws WeirError `invalid_request` (HTTP 400, `param: 'targets[<i>].weight'` or `'targets'`).
 */
function assertJudgeableWeights(targets: readonly AliasTarget[]): void {
  targets.forEach((t, i) => {
    const w: unknown = t.weight;
    if (typeof w !== 'number' || !Number.isFinite(w) || w < 0 || w > MAX_GATED_WEIGHT) {
      throw new WeirError(
        'invalid_request',
        `targets[${i}].weight (revision ${t.revision}) must be a finite number from 0 to ${MAX_GATED_WEIGHT}, got ${String(w)}; weights are relative, so scale them down (e.g. 90 and 10).`,
        { param: `targets[${i}].weight` },
      );
    }
  });
  const total = targets.reduce((sum, t) => sum + t.weight, 0);
  if (!Number.isFinite(total)) {
    throw new WeirError('invalid_request', `The weights of the targets add up to ${total}, not a finite number; weights are relative, so scale them down.`, { param: 'targets' });
  }
}

/** The stable revision of one alias spec stored in an audit entry's `before`/`after` (`{spec: {...}}`), if any. */
function stableOfAuditState(state: unknown): string | undefined {
  if (state === null || typeof state !== 'object') return undefined;
  const spec = (state as { spec?: unknown }).spec;
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) return undefined;
  return stableRevisionOf(targetsOfAliasSpec(spec as Record<string, unknown>));
}

/**
 * The revisions that were the stable arm (largest weight, first on a tie) of `alias` in some
 * committed state of its current life, read from the audit log: every `before` and `after` of
 * the alias's entries (`alias.create`, `alias.update`, `alias.rollback`,
 * `alias.auto_rollback`), newest first, back to its latest `alias.create` (an `alias.delete`
 * ends the walk: an earlier alias of the same name is another alias). A configuration seed or
 * import writes no alias entry; the state it left is the `before` of the alias's next entry.
 *
 * @returns the set (empty for an alias without history).
 */
export async function formerStableRevisions(db: Kysely<WeirSchema>, alias: string): Promise<Set<string>> {
  const entries = await db
    .selectFrom('audit_log')
    .select(['action', 'before', 'after'])
    .where('entity_type', '=', 'alias')
    .where('entity_id', '=', alias)
    .orderBy('id', 'desc')
    .execute();
  const found = new Set<string>();
  for (const e of entries) {
    if (e.action === 'alias.delete') break;
    for (const state of [e.before, e.after]) {
      const stable = stableOfAuditState(state);
      if (stable) found.add(stable);
    }
    if (e.action === 'alias.create') break;
  }
  return found;
}

/**
 * Checks the canary gate for a change of an alias's targets. Weights are relative, so the gate
 * compares each arm's share of traffic (weight ÷ sum of weights), not its raw weight: lowering
 * the stable weight raises the canaries' shares too.
 *
 * The stable arm is the current targets' largest weight (first listed on a tie), or, for an
 * alias without a current stable arm, the new targets'. Every other arm whose share grows needs
 * a finished, passing eval run (`eval_runs.pass`, with at least one prompt passed) of that
 * revision on this alias, created after the revision was and at most `maxAgeMs` ago, unless
 * the revision was this alias's stable arm before ({@link formerStableRevisions}: returning to
 * a known-good revision is a rollback, never gated). The stable arm, arms whose share shrinks
 * or stays, and arms removed need nothing. An arm naming a revision that does not exist is not
 * judged: the configuration validation that follows refuses it (400 `invalid_config`, "unknown
 * revision").
 *
 * @returns the gated arms with the eval that passed each, or `former_stable` (for the audit
 *   entry); empty when no canary's share grows.
 * @throws WeirError `invalid_request` (HTTP 400, `param: 'targets[<i>].weight'`) when a new
 *   weight is not a finite number from 0 to {@link MAX_GATED_WEIGHT} (or, defensively, their sum
 *   is not finite); `conflict` (HTTP 409, `param: 'targets'`) naming the first canary revision
 *   without a qualifying eval, the alias, the cut-off time, how to produce one and how to roll back.
 */
export async function assertCanaryGate(options: CanaryGateOptions): Promise<GatedArm[]> {
  const { db, alias, newTargets } = options;
  assertJudgeableWeights(newTargets);
  const catalog = options.catalog ?? createPgModelCatalog(db);
  const runs = options.runs ?? createEvalRunStore(db);
  const now = options.now ?? new Date();
  const maxAgeMs = options.maxAgeMs ?? DEFAULT_EVAL_MAX_AGE_MS;
  const current = options.currentTargets ?? (await catalog.aliasTargets(alias)) ?? [];
  const stable = stableRevisionOf(current) ?? stableRevisionOf(newTargets);
  let formerStable: ReadonlySet<string> | undefined;
  const gated: GatedArm[] = [];
  for (const target of newTargets) {
    if (target.revision === stable) continue;
    const before = shareOf(current, target.revision);
    const after = shareOf(newTargets, target.revision);
    // The epsilon keeps float noise in equal shares (1/3 vs 2/6) from counting as a raise.
    if (after <= before + 1e-9) continue;
    const createdAt = await catalog.revisionCreatedAt(target.revision);
    // An unknown revision: the configuration validation after the gate reports it (400).
    if (!createdAt) continue;
    const oldest = now.getTime() - maxAgeMs;
    const since = new Date(Math.max(oldest, createdAt.getTime()));
    const run = await runs.latestPassing(alias, target.revision, since);
    if (run) {
      gated.push({ revision: target.revision, share_before: before, share_after: after, eval_run_id: run.id });
      continue;
    }
    formerStable ??= await (options.formerStable ?? (() => formerStableRevisions(db, alias)))();
    if (formerStable.has(target.revision)) {
      gated.push({ revision: target.revision, share_before: before, share_after: after, eval_run_id: null, former_stable: true });
      continue;
    }
    throw new WeirError(
      'conflict',
      `Raising canary revision ${target.revision} on alias ${alias} to ${pct(after)} of traffic (from ${pct(before)}) needs a passing eval: there is no passing eval run of ${target.revision} on ${alias} since ${since.toISOString()} (its creation or ${Math.round(maxAgeMs / 3_600_000)} h ago, whichever is later). Run one with POST /admin/v1/evals {"tenant", "use_case", "alias": "${alias}", "candidate_revision": "${target.revision}", "scorer"} and retry. (A revision that was this alias's stable arm before needs no eval; to undo the last change of the arms, use POST /admin/v1/aliases/${alias}/rollback.)`,
      { param: 'targets' },
    );
  }
  return gated;
}

function pct(share: number): string {
  return `${Math.round(share * 1000) / 10}%`;
}

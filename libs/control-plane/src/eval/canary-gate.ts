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
  /**
   * The alias's targets before the change. Default: read from `model_aliases`; for an alias that
   * does not exist, its targets before it was deleted ({@link lastAuditedAliasTargets}), none
   * for a name without history.
   */
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

/** The alias's audit entries, newest first (every life of the name, across deletions). */
function aliasAuditEntries(db: Kysely<WeirSchema>, alias: string) {
  return db.selectFrom('audit_log').select(['action', 'before', 'after']).where('entity_type', '=', 'alias').where('entity_id', '=', alias).orderBy('id', 'desc').execute();
}

/**
 * The revisions that were the stable arm (largest weight, first on a tie) of `alias` in some
 * committed state, read from the audit log: every `before` and `after` of the alias's entries
 * (`alias.create`, `alias.update`, `alias.rollback`, `alias.auto_rollback`, `alias.delete`).
 * The history spans deletions: an alias deleted and created again under the same name keeps
 * its earlier stable arms (they served all of that name's traffic), so deleting an alias never
 * makes returning to a known-good revision need an eval, nor lets an unknown one in as "new".
 * A configuration seed or import writes no alias entry; the state it left is the `before` of
 * the alias's next entry.
 *
 * @returns the set (empty for an alias without history).
 */
export async function formerStableRevisions(db: Kysely<WeirSchema>, alias: string): Promise<Set<string>> {
  const entries = await aliasAuditEntries(db, alias);
  const found = new Set<string>();
  for (const e of entries) {
    for (const state of [e.before, e.after]) {
      const stable = stableOfAuditState(state);
      if (stable) found.add(stable);
    }
  }
  return found;
}

/**
 * The targets `alias` last had according to the audit log, for judging an alias created again
 * under a deleted alias's name against the state it had before the deletion: the `before` of
 * the newest entry when that is an `alias.delete`, else the newest entry's `after`.
 *
 * @returns the targets (the `revision` shorthand as one target of weight 1), or undefined when
 *   the name has no audit history (a brand-new alias: nothing to compare with).
 */
export async function lastAuditedAliasTargets(db: Kysely<WeirSchema>, alias: string): Promise<AliasTarget[] | undefined> {
  const entries = await aliasAuditEntries(db, alias);
  for (const e of entries) {
    const state: unknown = e.action === 'alias.delete' ? e.before : e.after;
    const spec = state !== null && typeof state === 'object' ? (state as { spec?: unknown }).spec : undefined;
    if (spec !== null && typeof spec === 'object' && !Array.isArray(spec)) return targetsOfAliasSpec(spec as Record<string, unknown>);
  }
  return undefined;
}

/** Options of {@link findPassingEval}. */
export interface EvalLookupOptions {
  catalog: ModelCatalog;
  runs: EvalRunStore;
  alias: string;
  revision: string;
  /** Now (wall clock). */
  now: Date;
  /** An eval older than this (ms) does not count. */
  maxAgeMs: number;
}

/** What {@link findPassingEval} found: the run, none since `since`, or an unknown revision. */
export type EvalLookup = { kind: 'passed'; runId: string } | { kind: 'missing'; since: Date } | { kind: 'unknown_revision' };

/**
 * The gate's eval lookup: the newest finished, passing eval run (with at least one prompt
 * passed) of `revision` on `alias`, created after the revision was and at most `maxAgeMs` ago.
 * Used by the canary gate (alias weights) and the pin gate (tenant pins) alike.
 *
 * @returns `passed` with its id; `missing` with the cut-off time (the later of the revision's
 *   creation and `now − maxAgeMs`); `unknown_revision` when the revision does not exist.
 */
export async function findPassingEval(options: EvalLookupOptions): Promise<EvalLookup> {
  const createdAt = await options.catalog.revisionCreatedAt(options.revision);
  if (!createdAt) return { kind: 'unknown_revision' };
  const since = new Date(Math.max(options.now.getTime() - options.maxAgeMs, createdAt.getTime()));
  const run = await options.runs.latestPassing(options.alias, options.revision, since);
  return run ? { kind: 'passed', runId: run.id } : { kind: 'missing', since };
}

/**
 * Checks the canary gate for a change of an alias's targets. Weights are relative, so the gate
 * compares each arm's share of traffic (weight ÷ sum of weights), not its raw weight: lowering
 * the stable weight raises the canaries' shares too.
 *
 * The current targets are the alias's; for an alias being created under the name of a deleted
 * one, the targets it had before the deletion (so delete and re-create is judged like a `PUT`).
 * The stable arm is the current targets' largest weight (first listed on a tie), or, for an
 * alias without a current stable arm (a brand-new name: nothing to compare with), the new
 * targets'. Every other arm whose share grows needs a passing eval ({@link findPassingEval}: a
 * finished, passing run with at least one prompt passed, of that revision on this alias,
 * created after the revision was and at most `maxAgeMs` ago), unless the revision was this
 * alias's stable arm before ({@link formerStableRevisions}, across deletions: returning to a
 * known-good revision is a rollback, never gated). The stable arm, arms whose share shrinks
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
  let current = options.currentTargets ?? (await catalog.aliasTargets(alias));
  let recreated = false;
  if (current === undefined) {
    const audited = await lastAuditedAliasTargets(db, alias);
    recreated = audited !== undefined;
    current = audited ?? [];
  }
  const stable = stableRevisionOf(current) ?? stableRevisionOf(newTargets);
  let formerStable: ReadonlySet<string> | undefined;
  const gated: GatedArm[] = [];
  for (const target of newTargets) {
    if (target.revision === stable) continue;
    const before = shareOf(current, target.revision);
    const after = shareOf(newTargets, target.revision);
    // The epsilon keeps float noise in equal shares (1/3 vs 2/6) from counting as a raise.
    if (after <= before + 1e-9) continue;
    const found = await findPassingEval({ catalog, runs, alias, revision: target.revision, now, maxAgeMs });
    // An unknown revision: the configuration validation after the gate reports it (400).
    if (found.kind === 'unknown_revision') continue;
    if (found.kind === 'passed') {
      gated.push({ revision: target.revision, share_before: before, share_after: after, eval_run_id: found.runId });
      continue;
    }
    const since = found.since;
    formerStable ??= await (options.formerStable ?? (() => formerStableRevisions(db, alias)))();
    if (formerStable.has(target.revision)) {
      gated.push({ revision: target.revision, share_before: before, share_after: after, eval_run_id: null, former_stable: true });
      continue;
    }
    throw new WeirError(
      'conflict',
      `Raising canary revision ${target.revision} on alias ${alias} to ${pct(after)} of traffic (from ${pct(before)}) needs a passing eval: there is no passing eval run of ${target.revision} on ${alias} since ${since.toISOString()} (its creation or ${Math.round(maxAgeMs / 3_600_000)} h ago, whichever is later). Run one with POST /admin/v1/evals {"tenant", "use_case", "alias": "${alias}", "candidate_revision": "${target.revision}", "scorer"} and retry. (A revision that was this alias's stable arm before needs no eval; ${recreated ? `${alias} existed before and is judged against its arms before it was deleted` : `to undo the last change of the arms, use POST /admin/v1/aliases/${alias}/rollback`}.)`,
      { param: 'targets' },
    );
  }
  return gated;
}

function pct(share: number): string {
  return `${Math.round(share * 1000) / 10}%`;
}

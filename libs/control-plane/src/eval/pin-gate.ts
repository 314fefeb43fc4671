/**
 * The pin gate: a tenant pin moves all of that tenant's traffic on an alias (or one use case of
 * it) to one revision, so pinning a revision the alias has never served as its stable arm needs
 * the same passing eval as raising a canary. The control plane's policy routes (tenant create,
 * policy PUT and PATCH) call {@link assertPinGate} before they commit.
 */
import type { Kysely } from 'kysely';
import { WeirError } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { DEFAULT_EVAL_MAX_AGE_MS, findPassingEval, formerStableRevisions } from './canary-gate';
import { createEvalRunStore, type EvalRunStore } from './eval-store';
import { createPgModelCatalog, type ModelCatalog, stableRevisionOf } from './model-catalog';

/** Options of {@link assertPinGate}. */
export interface PinGateOptions {
  db: Kysely<WeirSchema>;
  /** The policy's `routes` before the change (anything else, e.g. absent, reads as none). */
  beforeRoutes: unknown;
  /** The policy's `routes` about to be committed (anything else reads as none). */
  afterRoutes: unknown;
  /** An eval older than this (ms) does not count. Default {@link DEFAULT_EVAL_MAX_AGE_MS} (7 days), as for the canary gate. */
  maxAgeMs?: number;
  /** Now (wall clock). Default `new Date()`. */
  now?: Date;
  /** Where aliases and revisions are read. Default {@link createPgModelCatalog}(db). */
  catalog?: ModelCatalog;
  /** Where eval runs are read. Default {@link createEvalRunStore}(db). */
  runs?: EvalRunStore;
  /** An alias's former stable revisions. Default {@link formerStableRevisions}(db, alias). */
  formerStable?: (alias: string) => Promise<ReadonlySet<string>>;
}

/** One new pin the gate let through, and what let it: a passing eval, or a former stable arm. */
export interface GatedPin {
  alias: string;
  /** Present when the route is for one use case. */
  use_case?: string;
  revision: string;
  /** The passing eval run that let it through; null when `former_stable` did. */
  eval_run_id: string | null;
  /** Present (true) when no eval was needed: the revision was the alias's stable arm before. */
  former_stable?: true;
}

interface PinRoute {
  index: number;
  alias: string;
  use_case?: string;
  pin: string;
}

/** The routes of a policy that pin a revision (malformed entries are left to validation). */
function pinsOf(routes: unknown): PinRoute[] {
  if (!Array.isArray(routes)) return [];
  return routes.flatMap((r: unknown, index) => {
    const route = r as { alias?: unknown; use_case?: unknown; pin?: unknown } | null;
    if (route === null || typeof route !== 'object' || typeof route.alias !== 'string' || typeof route.pin !== 'string') return [];
    return [{ index, alias: route.alias, ...(typeof route.use_case === 'string' ? { use_case: route.use_case } : {}), pin: route.pin }];
  });
}

const routeKey = (r: { alias: string; use_case?: string }): string => `${r.alias}\u0000${r.use_case ?? ''}`;

/**
 * Checks the pin gate for a tenant policy change. A pin is judged only when it is new or
 * changed (no route of the same alias and use case pinned the same revision before), so
 * editing other fields of a policy whose pin came from a configuration seed is never blocked.
 * A new pin needs nothing when it names the alias's current stable arm (largest weight, first
 * on a tie); otherwise it needs a passing eval of that revision on that alias (the canary
 * gate's lookup, `findPassingEval`: finished, passing, at least one prompt passed, newer than
 * the revision and at most `maxAgeMs` old), unless the revision was the alias's stable arm
 * before (`formerStableRevisions`). Removing or unpinning a route is never gated. A pin to an
 * unknown alias or revision is not judged: the configuration validation that follows refuses
 * it (400 `invalid_config`).
 *
 * @returns the judged pins with the eval that passed each, or `former_stable` (for the audit
 *   entry); empty when no pin needed one.
 * @throws WeirError `conflict` (HTTP 409, `param: 'routes[<i>].pin'`) naming the first pin
 *   without a qualifying eval, the alias, the cut-off time and the `POST /admin/v1/evals` to run.
 */
export async function assertPinGate(options: PinGateOptions): Promise<GatedPin[]> {
  const { db } = options;
  const catalog = options.catalog ?? createPgModelCatalog(db);
  const runs = options.runs ?? createEvalRunStore(db);
  const now = options.now ?? new Date();
  const maxAgeMs = options.maxAgeMs ?? DEFAULT_EVAL_MAX_AGE_MS;
  const formerStable = options.formerStable ?? ((alias: string) => formerStableRevisions(db, alias));
  const pinnedBefore = new Map(pinsOf(options.beforeRoutes).map((r) => [routeKey(r), r.pin]));
  const gated: GatedPin[] = [];
  for (const route of pinsOf(options.afterRoutes)) {
    if (pinnedBefore.get(routeKey(route)) === route.pin) continue;
    const targets = await catalog.aliasTargets(route.alias);
    // An unknown alias: the configuration validation after the gate reports it (400).
    if (!targets) continue;
    if (route.pin === stableRevisionOf(targets)) continue;
    const found = await findPassingEval({ catalog, runs, alias: route.alias, revision: route.pin, now, maxAgeMs });
    if (found.kind === 'unknown_revision') continue;
    const where = { alias: route.alias, ...(route.use_case !== undefined ? { use_case: route.use_case } : {}), revision: route.pin };
    if (found.kind === 'passed') {
      gated.push({ ...where, eval_run_id: found.runId });
      continue;
    }
    if ((await formerStable(route.alias)).has(route.pin)) {
      gated.push({ ...where, eval_run_id: null, former_stable: true });
      continue;
    }
    const scope = route.use_case !== undefined ? ` for use case ${route.use_case}` : '';
    throw new WeirError(
      'conflict',
      `Pinning alias ${route.alias}${scope} to revision ${route.pin} moves this tenant's traffic to a revision that is not the alias's stable arm (${stableRevisionOf(targets) ?? 'none'}) and never was, so it needs a passing eval: there is no passing eval run of ${route.pin} on ${route.alias} since ${found.since.toISOString()} (its creation or ${Math.round(maxAgeMs / 3_600_000)} h ago, whichever is later). Run one with POST /admin/v1/evals {"tenant", "use_case", "alias": "${route.alias}", "candidate_revision": "${route.pin}", "scorer"} and retry, or pin the stable arm.`,
      { param: `routes[${route.index}].pin` },
    );
  }
  return gated;
}

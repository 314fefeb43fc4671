/**
 * The admin API's view of the capacity controller (issue 7, deliverable 7):
 *
 * - `GET /capacity`: `{data: [<decision>…]}`, every pool's latest decision, by pool name;
 * - `GET /capacity/<pool>`: one pool's (`<pool>` may hold `/`, raw or as `%2F`); 404
 *   `not_found` when no telemetry of that pool has arrived.
 *
 * A decision in the admin API's snake_case: `pool`, `desired_replicas`,
 * `recommended_replicas`, `current_replicas`, `healthy_replicas`,
 * `demand_tokens_per_second`, `observed_tokens_per_second`, `backlog_tokens_per_second`,
 * `admitted_requests_per_second`, `replica_tokens_per_second`, `basis` (`measured`|`hint`),
 * `lines` (the arithmetic), `at`, `telemetry_at` (ISO-8601) and `telemetry_age_ms` (how old
 * its newest sample is now: a pool whose scheduler stopped publishing shows it).
 *
 * Read-only, so a `viewer` token suffices. The routes carry no authentication of their own:
 * mount them only inside the admin router (after its token check, before its 404), e.g.
 * `registerCapacityRoutes(router, {capacity})` next to the other `register…Routes`, or
 * `router.use(createCapacityRouter({capacity}))`.
 */
import express, { type Router } from 'express';
import type { CapacityDecision } from '@weir/capacity';
import type { Clock } from '@weir/core';
import { notFound } from './admin-error';
import { handle } from './routes/context';

/** Where the routes read decisions (`@weir/capacity`'s `CapacityController` fits). */
export interface CapacityDecisionSource {
  decisions(): readonly CapacityDecision[];
  decision(pool: string): CapacityDecision | undefined;
}

/** Dependencies of {@link registerCapacityRoutes}. */
export interface CapacityRoutesDeps {
  capacity: CapacityDecisionSource;
  /** Wall clock (ms since the epoch) for `telemetry_age_ms`. Default `Date.now`. */
  clock?: Clock;
}

/** One decision as the admin API shows it (see the module comment). */
export interface CapacityDecisionView {
  pool: string;
  desired_replicas: number;
  recommended_replicas: number;
  current_replicas: number;
  healthy_replicas: number;
  demand_tokens_per_second: number;
  observed_tokens_per_second: number;
  backlog_tokens_per_second: number;
  admitted_requests_per_second: number;
  replica_tokens_per_second: number;
  basis: CapacityDecision['basis'];
  lines: string[];
  at: string;
  telemetry_at: string;
  /** ms since `telemetry_at` (≥ 0). */
  telemetry_age_ms: number;
}

/** The admin API's view of `d` at wall-clock `now` (ms). */
export function capacityDecisionView(d: CapacityDecision, now: number): CapacityDecisionView {
  return {
    pool: d.pool,
    desired_replicas: d.desiredReplicas,
    recommended_replicas: d.recommendedReplicas,
    current_replicas: d.currentReplicas,
    healthy_replicas: d.healthyReplicas,
    demand_tokens_per_second: d.demandTokensPerSecond,
    observed_tokens_per_second: d.observedTokensPerSecond,
    backlog_tokens_per_second: d.backlogTokensPerSecond,
    admitted_requests_per_second: d.admittedRequestsPerSecond,
    replica_tokens_per_second: d.replicaTokensPerSecond,
    basis: d.basis,
    lines: [...d.lines],
    at: d.at,
    telemetry_at: d.telemetryAt,
    telemetry_age_ms: Math.max(0, Math.round(now - Date.parse(d.telemetryAt))),
  };
}

/** Adds `GET /capacity` and `GET /capacity/<pool>` to an admin router (see the module comment). */
export function registerCapacityRoutes(router: Router, deps: CapacityRoutesDeps): void {
  const now = () => (deps.clock ?? { now: () => Date.now() }).now();
  router.get(
    '/capacity',
    handle(async () => {
      const at = now();
      const data = [...deps.capacity.decisions()].sort((a, b) => (a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : 0)).map((d) => capacityDecisionView(d, at));
      return { data };
    }),
  );
  router.get(
    '/capacity/*pool',
    handle(async (req) => {
      // Express 5 gives a wildcard as its segments: a pool named `a/b` arrives as ['a', 'b'].
      const raw = req.params.pool as unknown as string | string[];
      const pool = Array.isArray(raw) ? raw.join('/') : raw;
      const d = deps.capacity.decision(pool);
      if (!d) throw notFound('capacity decision for pool', pool, 'decisions appear once the scheduler has published telemetry for the pool; GET /admin/v1/capacity lists the pools seen');
      return capacityDecisionView(d, now());
    }),
  );
}

/**
 * A router holding only the capacity routes, for `router.use(…)` inside the admin router.
 * Errors go to the enclosing router's error handler (`next(err)`).
 */
export function createCapacityRouter(deps: CapacityRoutesDeps): Router {
  const router = express.Router();
  registerCapacityRoutes(router, deps);
  return router;
}

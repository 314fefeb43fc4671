import { type AliasSpec, type Caller, capabilitiesOf, type PlatformConfig, type RevisionSpec, type RouteResult, type RouterService, type TenantRoute } from '@weir/core';
import { pickWeighted } from './weighted-pick';

/** The routing part of a configuration: what {@link Router.update} swaps. */
export type RoutingConfig = Pick<PlatformConfig, 'revisions' | 'aliases' | 'tenants'>;

/** A router whose routing can be replaced while it serves (canary weights, pins, fallbacks, rollback). */
export interface Router extends RouterService {
  /**
   * Replaces the routing atomically: requests resolved after this call see only the new
   * configuration, requests before it only the old one. The caller validates the configuration
   * (`parseConfig`); revisions are looked up from it, so a revision it no longer lists is no
   * longer routed to.
   */
  update(config: RoutingConfig): void;
}

/** The configuration indexed once per version, never per request. */
interface Index {
  revisions: Map<string, RevisionSpec>;
  aliases: Map<string, AliasSpec>;
  aliasList: AliasSpec[];
  allowed: Map<string, (alias: string) => boolean>;
  /** Tenant → `alias\0useCase` (or `alias\0`) → route. */
  routes: Map<string, Map<string, TenantRoute>>;
}

function indexOf(config: RoutingConfig): Index {
  return {
    revisions: new Map(config.revisions.map((r) => [r.id, r])),
    aliases: new Map(config.aliases.map((a) => [a.name, a])),
    aliasList: [...config.aliases],
    allowed: new Map(
      config.tenants.map((t) => {
        const set = new Set(t.allowedAliases);
        return [t.id, set.has('*') ? () => true : (alias: string) => set.has(alias)];
      }),
    ),
    routes: new Map(config.tenants.map((t) => [t.id, routesOf(t)])),
  };
}

/**
 * A tenant's routes by `alias\0useCase` (or `alias\0`): its `routes`, then each use case's chain
 * (`model`, `pin`, `fallbacks`) as the route of its model and name — the most specific route of
 * a request naming the use case. (parse-config refuses a route and a use case for the same pair.)
 */
function routesOf(t: RoutingConfig['tenants'][number]): Map<string, TenantRoute> {
  const out = new Map((t.routes ?? []).map((r) => [`${r.alias}\u0000${r.useCase ?? ''}`, r]));
  for (const u of t.useCases ?? []) {
    out.set(`${u.model}\u0000${u.name}`, { alias: u.model, useCase: u.name, ...(u.pin !== undefined ? { pin: u.pin } : {}), ...(u.fallbacks !== undefined ? { fallbacks: u.fallbacks } : {}) });
  }
  return out;
}

/**
 * The router (ARCHITECTURE.md §2 step 1): alias → revision for one caller.
 *
 * - **Access**: only aliases the caller's tenant may use; an unknown alias and a forbidden one
 *   answer the same `model_not_found`, so aliases are not disclosed across tenants.
 * - **Pins**: a tenant route for the alias (the one naming the request's use case first — a
 *   use case's own chain is such a route — else the one for the alias alone) may pin a
 *   revision: every matching request goes there.
 * - **Canary**: otherwise the alias's weighted targets, the arm chosen by a hash of `stickyKey`
 *   (`pickWeighted`): the same key always lands on the same arm while the weights stand.
 * - **Fallbacks**: the route's chain, else the alias's, without the chosen revision and without
 *   revisions the configuration no longer lists (tried in order before the first token).
 * - **Live**: {@link Router.update} swaps the routing atomically (a watched file, an admin
 *   endpoint): a canary's weight change or a rollback applies to the next request.
 */
export function createRouter(initial: RoutingConfig): Router {
  let index = indexOf(initial);

  const routeFor = (caller: Caller, alias: string, useCase: string | undefined): TenantRoute | undefined => {
    const routes = index.routes.get(caller.tenantId);
    if (!routes || routes.size === 0) return undefined;
    return (useCase !== undefined ? routes.get(`${alias}\u0000${useCase}`) : undefined) ?? routes.get(`${alias}\u0000`);
  };

  return {
    async resolve(caller, aliasName, stickyKey, useCase): Promise<RouteResult> {
      const current = index;
      const alias = current.aliases.get(aliasName);
      if (!alias || !(current.allowed.get(caller.tenantId)?.(aliasName) ?? false)) {
        return {
          ok: false,
          reason: 'model_not_found',
          message: `The model '${aliasName}' does not exist or you do not have access to it; GET /v1/models lists the models you can use.`,
        };
      }
      const route = routeFor(caller, aliasName, useCase);
      const revisionId =
        route?.pin ??
        pickWeighted(
          alias.targets.map((t) => ({ value: t.revision, weight: t.weight })),
          stickyKey,
        );
      const revision = revisionId === undefined ? undefined : current.revisions.get(revisionId);
      if (!revision) {
        return { ok: false, reason: 'model_not_found', message: `The model '${aliasName}' has no serving revision.` };
      }
      const chain = route?.fallbacks ?? alias.fallbacks ?? [];
      const fallbacks: RevisionSpec[] = [];
      for (const id of chain) {
        const r = current.revisions.get(id);
        if (r && id !== revision.id && !fallbacks.includes(r)) fallbacks.push(r);
      }
      // A canary arm that cannot serve (no replica yet, its breaker open, failing before the
      // first token) falls back to the alias's stable arm last, when the stable arm can do all the
      // canary can (so adding it never refuses a request the canary would take). Not for pins.
      if (!route?.pin) {
        const stable = stableArmOf(alias.targets);
        const s = stable === undefined ? undefined : current.revisions.get(stable);
        if (s && s.id !== revision.id && !fallbacks.includes(s) && coversCapabilities(s, revision)) fallbacks.push(s);
      }
      return { ok: true, route: { alias, revision, fallbacks } };
    },
    async listAliases(caller) {
      const current = index;
      const may = current.allowed.get(caller.tenantId);
      return may ? current.aliasList.filter((a) => may(a.name)) : [];
    },
    update(config) {
      index = indexOf(config);
    },
  };
}

/** {@link createRouter}, named for callers that route over one configuration and never update it. */
export function createStaticRouter(config: RoutingConfig): Router {
  return createRouter(config);
}

/** The stable arm of an alias: the target with the largest weight (the first listed on a tie); undefined without a weighted target. */
export function stableArmOf(targets: readonly { revision: string; weight: number }[]): string | undefined {
  let best: { revision: string; weight: number } | undefined;
  for (const t of targets) if (t.weight > 0 && (best === undefined || t.weight > best.weight)) best = t;
  return best?.revision;
}

/** Whether `a` offers every capability `b` offers (streaming, tools, JSON output). */
function coversCapabilities(a: RevisionSpec, b: RevisionSpec): boolean {
  const ca = capabilitiesOf(a);
  const cb = capabilitiesOf(b);
  return (ca.streaming || !cb.streaming) && (ca.tools || !cb.tools) && (ca.jsonOutput || !cb.jsonOutput);
}

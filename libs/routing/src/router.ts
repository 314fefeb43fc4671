import type { AliasSpec, Caller, PlatformConfig, RevisionSpec, RouteResult, RouterService } from '@weir/core';
import { pickWeighted } from './weighted-pick';

/**
 * A router over a static, validated configuration: alias → revision by canary weight
 * (sticky per request id), restricted to the aliases the caller's tenant may use. An unknown
 * alias and one the tenant may not use answer the same `model_not_found`, so aliases are not
 * disclosed across tenants. The configuration is indexed once here, never per request.
 */
export function createStaticRouter(config: PlatformConfig): RouterService {
  const revisions = new Map<string, RevisionSpec>(config.revisions.map((r) => [r.id, r]));
  const aliases = new Map<string, AliasSpec>(config.aliases.map((a) => [a.name, a]));
  const allowed = new Map<string, (alias: string) => boolean>(
    config.tenants.map((t) => {
      const set = new Set(t.allowedAliases);
      return [t.id, set.has('*') ? () => true : (alias: string) => set.has(alias)];
    }),
  );
  const mayUse = (caller: Caller, alias: string) => allowed.get(caller.tenantId)?.(alias) ?? false;

  return {
    async resolve(caller, aliasName, stickyKey): Promise<RouteResult> {
      const alias = aliases.get(aliasName);
      if (!alias || !mayUse(caller, aliasName)) {
        return {
          ok: false,
          reason: 'model_not_found',
          message: `The model '${aliasName}' does not exist or you do not have access to it; GET /v1/models lists the models you can use.`,
        };
      }
      const revisionId = pickWeighted(
        alias.targets.map((t) => ({ value: t.revision, weight: t.weight })),
        stickyKey,
      );
      const revision = revisionId === undefined ? undefined : revisions.get(revisionId);
      if (!revision) {
        return { ok: false, reason: 'model_not_found', message: `The model '${aliasName}' has no serving revision.` };
      }
      return { ok: true, route: { alias, revision, fallbacks: [] } };
    },
    async listAliases(caller) {
      return config.aliases.filter((a) => mayUse(caller, a.name));
    },
  };
}

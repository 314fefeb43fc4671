import type { Kysely } from 'kysely';
import type { WeirSchema } from '@weir/store-pg';
import type { ConfigFileObject, JsonObject } from './config-shapes';

/**
 * Assembles the stored rows into a configuration-file object (snake_case, the shape
 * `parseConfig` accepts): `revisions` (spec, plus `deprecation` when set), `aliases`, `tenants`
 * (id, internal id `uid`, name, apps with their internal ids and limits, then the tenant's policy fields: limits and budgets,
 * routes, `disabled`, `kill_switch`, `content_logging`, `redaction_profile`, …), `redaction_profiles` (when any) and `defaults`. Entities come
 * in creation order (then id), so the same rows always compose to the same object.
 *
 * @param db a database or an open transaction (composition inside the change's transaction sees the change).
 */
export async function composeConfig(db: Kysely<WeirSchema>): Promise<ConfigFileObject> {
  const revisions = await db.selectFrom('model_revisions').select(['spec', 'deprecation']).orderBy('created_at').orderBy('id').execute();
  const aliases = await db.selectFrom('model_aliases').select(['id', 'spec']).orderBy('created_at').orderBy('id').execute();
  const tenants = await db
    .selectFrom('tenants')
    .leftJoin('tenant_policies', 'tenant_policies.tenant_id', 'tenants.id')
    .select(['tenants.id', 'tenants.uid', 'tenants.name', 'tenant_policies.policy'])
    .orderBy('tenants.created_at')
    .orderBy('tenants.id')
    .execute();
  const apps = await db.selectFrom('apps').select(['id', 'uid', 'tenant_id', 'name', 'limits']).orderBy('created_at').orderBy('id').execute();
  const defaults = await db.selectFrom('platform_defaults').select(['spec']).executeTakeFirst();
  const profiles = await db.selectFrom('redaction_profiles').select(['id', 'spec']).orderBy('created_at').orderBy('id').execute();

  const appsByTenant = new Map<string, JsonObject[]>();
  for (const a of apps) {
    const list = appsByTenant.get(a.tenant_id) ?? [];
    list.push({ id: a.id, uid: a.uid, name: a.name, ...(a.limits && Object.keys(a.limits).length > 0 ? { limits: a.limits } : {}) });
    appsByTenant.set(a.tenant_id, list);
  }
  return {
    revisions: revisions.map((r) => ({ ...r.spec, ...(r.deprecation ? { deprecation: r.deprecation } : {}) })),
    aliases: aliases.map((a) => ({ name: a.id, ...a.spec })),
    // Internal ids ride in the snapshot (issue 14 §4): a data plane drops the state of one that disappears.
    tenants: tenants.map((t) => ({ id: t.id, uid: t.uid, name: t.name, apps: appsByTenant.get(t.id) ?? [], ...(t.policy ?? {}) })),
    ...(profiles.length > 0 ? { redaction_profiles: Object.fromEntries(profiles.map((p) => [p.id, p.spec as JsonObject])) } : {}),
    defaults: defaults?.spec ?? {},
  };
}

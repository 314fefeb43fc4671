import type { Kysely } from 'kysely';
import type { WeirSchema } from '@weir/store-pg';
import { CONFIG_EXTENSIONS_EMITTED, type ConfigFileObject, type JsonObject, TENANT_EXTENSION_FIELDS } from './config-shapes';

/** Options of {@link composeConfig}. */
export interface ComposeConfigOptions {
  /** Emit tenant `disabled`/`kill_switch`/`content_logging`/`redaction_profile` and revision `deprecation`. Default {@link CONFIG_EXTENSIONS_EMITTED}. */
  emitExtensions?: boolean;
}

/**
 * Assembles the stored rows into a configuration-file object (snake_case, the shape
 * `parseConfig` accepts): `revisions` (spec, plus `deprecation`), `aliases`, `tenants` (id,
 * name, apps with their limits, then the tenant's policy fields) and `defaults`. Entities come
 * in creation order (then id), so the same rows always compose to the same object.
 *
 * @param db a database or an open transaction (composition inside the change's transaction sees the change).
 */
export async function composeConfig(db: Kysely<WeirSchema>, options: ComposeConfigOptions = {}): Promise<ConfigFileObject> {
  const emit = options.emitExtensions ?? CONFIG_EXTENSIONS_EMITTED;
  const revisions = await db.selectFrom('model_revisions').select(['spec', 'deprecation']).orderBy('created_at').orderBy('id').execute();
  const aliases = await db.selectFrom('model_aliases').select(['id', 'spec']).orderBy('created_at').orderBy('id').execute();
  const tenants = await db
    .selectFrom('tenants')
    .leftJoin('tenant_policies', 'tenant_policies.tenant_id', 'tenants.id')
    .select(['tenants.id', 'tenants.name', 'tenant_policies.policy'])
    .orderBy('tenants.created_at')
    .orderBy('tenants.id')
    .execute();
  const apps = await db.selectFrom('apps').select(['id', 'tenant_id', 'name', 'limits']).orderBy('created_at').orderBy('id').execute();
  const defaults = await db.selectFrom('platform_defaults').select(['spec']).executeTakeFirst();

  const appsByTenant = new Map<string, JsonObject[]>();
  for (const a of apps) {
    const list = appsByTenant.get(a.tenant_id) ?? [];
    list.push({ id: a.id, name: a.name, ...(a.limits && Object.keys(a.limits).length > 0 ? { limits: a.limits } : {}) });
    appsByTenant.set(a.tenant_id, list);
  }
  const hidden = new Set<string>(emit ? [] : TENANT_EXTENSION_FIELDS);
  return {
    revisions: revisions.map((r) => ({ ...r.spec, ...(emit && r.deprecation ? { deprecation: r.deprecation } : {}) })),
    aliases: aliases.map((a) => ({ name: a.id, ...a.spec })),
    tenants: tenants.map((t) => {
      const policy = Object.fromEntries(Object.entries(t.policy ?? {}).filter(([k]) => !hidden.has(k)));
      return { id: t.id, name: t.name, apps: appsByTenant.get(t.id) ?? [], ...policy };
    }),
    defaults: defaults?.spec ?? {},
  };
}

/**
 * Internal tenant ids (`uid`, migration 0012) for a configuration read from a file. Snapshots of
 * the control plane carry each tenant's `uid`; a file does not, while the callers the API keys name
 * do (`tenantUid` from the key's row). State filed per tenant on the gateway — the semantic
 * tier's policies, the cache entries a policy change drops — is keyed by `tenantKeyOf` (the uid
 * when there is one), so the gateway fills the file's tenants in with the uids of their rows.
 */
import type { TenantSpec } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import type { Kysely } from 'kysely';

/** The `uid` of every tenant row, by tenant id (one query; call at start, after `bootstrapTenants`). */
export async function loadTenantUids(db: Kysely<WeirSchema>): Promise<Map<string, string>> {
  const rows = await db.selectFrom('tenants').select(['id', 'uid']).execute();
  return new Map(rows.flatMap((r) => (r.uid ? [[r.id, r.uid] as [string, string]] : [])));
}

/**
 * `tenants` with each one that has no `uid` given the uid of its row in `uids` (by id); a tenant
 * with a uid, or without a row, is returned unchanged. Pure; no copy when nothing changes.
 */
export function withTenantUids(tenants: readonly TenantSpec[], uids: ReadonlyMap<string, string>): readonly TenantSpec[] {
  if (tenants.every((t) => t.uid !== undefined || !uids.has(t.id))) return tenants;
  return tenants.map((t) => {
    const uid = t.uid === undefined ? uids.get(t.id) : undefined;
    return uid === undefined ? t : { ...t, uid };
  });
}

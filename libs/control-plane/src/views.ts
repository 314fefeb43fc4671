import type { Selectable } from 'kysely';
import type { WeirSchema } from '@weir/store-pg';
import type { JsonObject } from './config-shapes';

/**
 * What the admin API returns for each entity (snake_case, ISO-8601 UTC times). Secrets never
 * appear: API keys and admin tokens show only their public prefix.
 */

type Row<T extends keyof WeirSchema> = Selectable<WeirSchema[T]>;

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/** An app of a tenant. */
export function appView(a: Pick<Row<'apps'>, 'id' | 'uid' | 'tenant_id' | 'name' | 'limits' | 'created_at'>) {
  return { id: a.id, internal_id: a.uid, tenant_id: a.tenant_id, name: a.name, limits: a.limits ?? {}, created_at: iso(a.created_at) };
}

/** A tenant with its apps and policy. */
/**
 * A tenant with its apps and policy. `internal_id` is what its state and ledger rows are filed
 * under (issue 14 §4): it changes when a tenant is deleted and created again with the same id.
 */
export function tenantView(t: Pick<Row<'tenants'>, 'id' | 'uid' | 'name' | 'created_at'>, apps: ReturnType<typeof appView>[], policy: JsonObject) {
  return { id: t.id, internal_id: t.uid, name: t.name, created_at: iso(t.created_at), apps, policy };
}

/** An API key: its public prefix, never its hash or plaintext. */
export function apiKeyView(k: Pick<Row<'api_keys'>, 'id' | 'prefix' | 'tenant_id' | 'app_id' | 'label' | 'created_at' | 'revoked_at'>) {
  return {
    id: k.id,
    prefix: k.prefix,
    display: `wk_${k.prefix}_…`,
    tenant_id: k.tenant_id,
    app_id: k.app_id,
    label: k.label,
    created_at: iso(k.created_at),
    revoked_at: iso(k.revoked_at),
  };
}

/** A revision: its immutable spec and its deprecation (null when none). */
export function revisionView(r: Row<'model_revisions'>) {
  return { id: r.id, spec: r.spec, deprecation: r.deprecation, created_at: iso(r.created_at), updated_at: iso(r.updated_at) };
}

/** An alias: its name and spec (targets or revision, fallbacks, description). */
export function aliasView(a: Row<'model_aliases'>) {
  return { name: a.id, spec: { name: a.id, ...a.spec }, created_at: iso(a.created_at), updated_at: iso(a.updated_at) };
}

/** A pool. */
export function poolView(p: Row<'pools'>) {
  return { id: p.id, ...p.spec, created_at: iso(p.created_at), updated_at: iso(p.updated_at) };
}

/** An admin token: its public prefix and role, never its hash or plaintext. */
export function adminTokenView(t: Pick<Row<'admin_tokens'>, 'id' | 'prefix' | 'role' | 'label' | 'created_at' | 'revoked_at'>) {
  return { id: t.id, prefix: t.prefix, display: `wa_${t.prefix}_…`, role: t.role, label: t.label, created_at: iso(t.created_at), revoked_at: iso(t.revoked_at) };
}

/** A snapshot without its configuration (lists). */
export function snapshotSummaryView(s: Pick<Row<'config_snapshots'>, 'version' | 'schema_version' | 'issued_at' | 'created_by' | 'published_at'>) {
  return { version: Number(s.version), schema_version: s.schema_version, issued_at: iso(s.issued_at), created_by: s.created_by, published_at: iso(s.published_at) };
}

/** An audit entry. */
export function auditView(e: Row<'audit_log'>) {
  return {
    id: Number(e.id),
    at: iso(e.at),
    actor: { id: e.actor_id, label: e.actor_label },
    action: e.action,
    entity_type: e.entity_type,
    entity_id: e.entity_id,
    before: e.before ?? null,
    after: e.after ?? null,
    snapshot_version: e.snapshot_version === null ? null : Number(e.snapshot_version),
  };
}

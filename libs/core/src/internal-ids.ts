/**
 * Internal ids of tenants and apps (issue 14 §4): nothing of a tenant outlives it.
 *
 * A tenant's (or app's) `id` is a display slug that an operator may reuse after deleting it.
 * Everything Weir stores or caches about a tenant — idempotency keys and their results,
 * retained generations, budget rows, leases, token buckets, concurrency, ledger visibility —
 * is filed under its *internal id* instead, given once at creation and never reused:
 * `<slug>~<16 hex>` (migration 0012; `~` is not allowed in ids, so an internal id never equals
 * a slug). A tenant or app created before migration 0012 keeps its slug as its internal id,
 * so the state it already has stays where it was.
 *
 * Deleting the tenant retires its internal id; a tenant created later with the same slug gets
 * a new one and so sees none of the old state.
 */

import type { TenantSpec } from './platform-config';

/** Separates the slug from the random part of an internal id; never part of a slug. */
export const INTERNAL_ID_SEPARATOR = '~';

/** Something that names a tenant, with its internal id when known. */
export interface TenantRef {
  tenantId: string;
  /** The tenant's internal id; absent: the slug is the internal id (before migration 0012, or a store without internal ids). */
  tenantUid?: string;
}

/** Something that names an app, with its internal id when known. */
export interface AppRef {
  appId: string;
  /** The app's internal id; absent: the app id is its internal id. */
  appUid?: string;
}

/** The key a tenant's stored and cached state is filed under: its internal id, else its slug. */
export function tenantKeyOf(ref: TenantRef): string {
  return ref.tenantUid ?? ref.tenantId;
}

/** The key an app's stored and cached state is filed under: its internal id, else its id. */
export function appKeyOf(ref: AppRef): string {
  return ref.appUid ?? ref.appId;
}

/** The slug an internal id was made for (`acme~3f…` → `acme`; a legacy internal id is its slug). */
export function slugOfInternalId(internalId: string): string {
  const at = internalId.indexOf(INTERNAL_ID_SEPARATOR);
  return at < 0 ? internalId : internalId.slice(0, at);
}

/**
 * The internal ids a configuration change retires: those of `before`'s tenants (and their
 * apps) that `after` no longer has — deleted, or deleted and created again under the same
 * slug with a new internal id. Only internal ids the configuration names count (a
 * configuration file names none). A data-plane process drops what it holds for them
 * (retained generations, admission scopes) when it applies `after`.
 */
export function retiredInternalIds(before: readonly TenantSpec[], after: readonly TenantSpec[]): Set<string> {
  const live = new Set<string>();
  for (const t of after) {
    if (t.uid !== undefined) live.add(t.uid);
    for (const a of t.apps) if (a.uid !== undefined) live.add(a.uid);
  }
  const retired = new Set<string>();
  for (const t of before) {
    if (t.uid !== undefined && !live.has(t.uid)) retired.add(t.uid);
    for (const a of t.apps) if (a.uid !== undefined && !live.has(a.uid)) retired.add(a.uid);
  }
  return retired;
}

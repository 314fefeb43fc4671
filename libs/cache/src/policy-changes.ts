/**
 * What a configuration change means for the cache: the tenants whose entries must go because
 * their policy was turned off (every tier) or the tenant was deleted (docs/caching.md).
 */
import { type TenantSpec, tenantKeyOf } from '@weir/core';
import { cacheEnabled } from './cache-policy';

/**
 * Internal ids (`tenantKeyOf`) of tenants whose cache was on in `before` and is off, or gone, in
 * `after`. A tenant whose policy changed but stays on keeps its entries (each entry keeps the TTL
 * it was stored with); a tier turned off alone is simply not read any more.
 */
export function cacheDropsOf(before: readonly TenantSpec[], after: readonly TenantSpec[]): string[] {
  const key = (t: TenantSpec) => tenantKeyOf({ tenantId: t.id, ...(t.uid !== undefined ? { tenantUid: t.uid } : {}) });
  const on = new Set(after.filter((t) => cacheEnabled(t.cache)).map(key));
  return before.filter((t) => cacheEnabled(t.cache) && !on.has(key(t))).map(key);
}

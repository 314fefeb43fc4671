/**
 * The response cache a gateway process serves from, as the platform setting `defaults.cache`
 * configures it (docs/caching.md): the exact tier in this process (bounded by bytes) or the
 * Postgres tier shared by a fleet (purged of expired rows every minute), then any further tiers
 * (the semantic tier). One composition for every gateway: the all-in-one's and the split's.
 */
import { type CacheDefaults, DEFAULT_CACHE, SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS, type TenantSpec } from '@weir/core';
import type { CacheTier } from './cache-tier';
import { createMemoryExactTier } from './memory-exact-tier';
import { cacheDropsOf } from './policy-changes';
import { createResponseCache, type ResponseCache } from './response-cache';

/** An exact tier whose expired entries are deleted on demand (`createPgExactCacheTier` of `@weir/store-pg`). */
export interface PurgeableCacheTier extends CacheTier {
  /** Deletes expired entries; resolves how many. */
  purgeExpired(): Promise<number>;
}

/** The byte caps of `defaults.cache`, given to the shared exact tier. */
export interface SharedTierBounds {
  /** The whole tier's cap (bytes). */
  maxBytes: number;
  /** One tenant's cap (bytes); absent: the tier's default (a quarter of `maxBytes`). */
  maxBytesPerTenant?: number;
}

/** Options of {@link createGatewayResponseCache}. */
export interface GatewayResponseCacheOptions {
  /** The platform's `defaults.cache`. Default {@link DEFAULT_CACHE} (in-process, 64 MiB, 50 ms lookups). */
  settings?: CacheDefaults;
  /**
   * Makes the shared exact tier, called once when `settings.exactStore` is `postgres` (e.g.
   * `(onFault, bounds) => createPgExactCacheTier(db, { onFault, ...bounds })`); `onFault` reports
   * its failed stores and drops; `bounds` are `settings.maxBytes` and `settings.maxBytesPerTenant`
   * (bytes), which bound the shared tier as they bound the in-process one. Required for `postgres`.
   */
  sharedExactTier?: (onFault: (op: 'store' | 'drop', err: unknown) => void, bounds: SharedTierBounds) => PurgeableCacheTier;
  /** Tiers tried after the exact one, in order (the semantic tier). Default none. */
  moreTiers?: readonly CacheTier[];
  /** A tier fault (`op`: `lookup`, `store`, `drop`, `purge`), taken as a miss; never given content. Default none. */
  onFault?: (tier: CacheTier['tier'], op: 'lookup' | 'store' | 'drop' | 'purge', err: unknown) => void;
  /** How often the shared tier's expired entries are purged (ms). Default 60,000. */
  purgeEveryMs?: number;
}

/** The gateway's response cache, with what a configuration change and a shutdown need. */
export interface GatewayResponseCache extends ResponseCache {
  /** Where the exact tier lives. */
  readonly exactStore: CacheDefaults['exactStore'];
  /**
   * Applies a new snapshot's tenants: drops the entries of every tenant whose policy was on in
   * `before` and is off, or gone, in `after` (`cacheDropsOf`). Returns how many tenants it dropped.
   */
  applyTenants(before: readonly TenantSpec[], after: readonly TenantSpec[]): number;
  /** Stops the purge timer. Idempotent. */
  close(): void;
}

/**
 * Creates the cache `options.settings` describes.
 * @throws TypeError when `exactStore` is `postgres` and no `sharedExactTier` is given.
 */
export function createGatewayResponseCache(options: GatewayResponseCacheOptions = {}): GatewayResponseCache {
  const settings = options.settings ?? DEFAULT_CACHE;
  const fault = options.onFault ?? (() => undefined);
  let shared: PurgeableCacheTier | undefined;
  if (settings.exactStore === 'postgres') {
    if (!options.sharedExactTier) throw new TypeError('createGatewayResponseCache: defaults.cache.exact_store is postgres, but no shared exact tier was given');
    shared = options.sharedExactTier((op, err) => fault('exact', op, err), {
      maxBytes: settings.maxBytes,
      ...(settings.maxBytesPerTenant !== undefined ? { maxBytesPerTenant: settings.maxBytesPerTenant } : {}),
    });
  }
  const exact =
    shared ?? createMemoryExactTier({ maxBytes: settings.maxBytes, ...(settings.maxBytesPerTenant !== undefined ? { maxBytesPerTenant: settings.maxBytesPerTenant } : {}) });
  const cache = createResponseCache({
    tiers: [exact, ...(options.moreTiers ?? [])],
    lookupTimeoutMs: settings.lookupTimeoutMs,
    semanticLookupTimeoutMs: settings.semanticLookupTimeoutMs ?? SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS,
    onFault: fault,
  });
  const purge = shared;
  const timer = purge ? setInterval(() => void purge.purgeExpired().catch((err: unknown) => fault('exact', 'purge', err)), options.purgeEveryMs ?? 60_000) : undefined;
  timer?.unref();
  return {
    exactStore: settings.exactStore,
    lookup: (policy, q) => cache.lookup(policy, q),
    store: (policy, q, answer) => cache.store(policy, q, answer),
    dropTenant: (tenantKey) => cache.dropTenant(tenantKey),
    forget: (policy, q, hit) => cache.forget(policy, q, hit),
    applyTenants(before, after) {
      const drops = cacheDropsOf(before, after);
      for (const tenantKey of drops) cache.dropTenant(tenantKey);
      return drops.length;
    },
    close() {
      if (timer) clearInterval(timer);
    },
  };
}

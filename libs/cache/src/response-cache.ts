/**
 * The tiers in order (exact, then the others — the semantic tier plugs in here): one lookup that
 * returns the first hit among the tiers the tenant's policy turns on, bounded in time, and one
 * store that writes every such tier in the background. Faults of a tier are misses (reported to
 * `onFault`), never errors of the request.
 */
import type { TenantCachePolicy } from '@weir/core';
import type { CacheHit, CachedAnswer, CacheQuery, CacheTier } from './cache-tier';

/** Options of {@link createResponseCache}. */
export interface ResponseCacheOptions {
  /** The tiers, tried in this order (put the exact tier first). */
  tiers: readonly CacheTier[];
  /** How long one request's lookups may take in all (ms) before it is a miss. Default 50. */
  lookupTimeoutMs?: number;
  /**
   * The same budget (ms) for a request whose tenant's policy turns the semantic tier on: the
   * prompt is embedded first (an engine call, ~7–16 ms on the tiny model). Default
   * `lookupTimeoutMs`. Read per request from a boolean of the policy (no parsing).
   */
  semanticLookupTimeoutMs?: number;
  /** A tier that threw or rejected (lookup or store); never given content. Default none. */
  onFault?: (tier: CacheTier['tier'], op: 'lookup' | 'store', err: unknown) => void;
}

/** The gateway's view of its cache tiers. */
export interface ResponseCache {
  /** The first hit among the tiers `policy` turns on, in order; undefined on a miss or after the timeout. Never throws. */
  lookup(policy: TenantCachePolicy, q: CacheQuery): Promise<CacheHit | undefined>;
  /** Stores in every tier `policy` turns on, with that tier's TTL; returns at once (background). */
  store(policy: TenantCachePolicy, q: CacheQuery, answer: CachedAnswer): void;
  /** Drops a tenant's entries from every tier. */
  dropTenant(tenantKey: string): void;
  /** Drops the entry `hit` came from (its tier's `forget`, when it has one), e.g. an answer output moderation flags. Never throws. */
  forget(policy: TenantCachePolicy, q: CacheQuery, hit: CacheHit): void;
}

/** The TTL of `tier` under `policy` (ms), or undefined when the policy turns that tier off. */
export function tierTtlMs(policy: TenantCachePolicy, tier: CacheTier['tier']): number | undefined {
  if (tier === 'exact') return policy.exact.enabled ? policy.exact.ttlMs : undefined;
  return policy.semantic?.enabled ? policy.semantic.ttlMs : undefined;
}

/** Creates the cache over `options.tiers`. */
export function createResponseCache(options: ResponseCacheOptions): ResponseCache {
  const { tiers } = options;
  const timeoutMs = options.lookupTimeoutMs ?? 50;
  const semanticTimeoutMs = options.semanticLookupTimeoutMs ?? timeoutMs;
  const fault = options.onFault ?? (() => undefined);

  const lookupAll = async (policy: TenantCachePolicy, q: CacheQuery, signal: AbortSignal): Promise<CacheHit | undefined> => {
    for (const tier of tiers) {
      if (signal.aborted) return undefined;
      if (tierTtlMs(policy, tier.tier) === undefined) continue;
      try {
        const hit = await tier.lookup(q, signal);
        if (hit) return hit;
      } catch (err) {
        fault(tier.tier, 'lookup', err);
      }
    }
    return undefined;
  };

  return {
    lookup(policy, q) {
      const controller = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => {
          controller.abort();
          resolve(undefined);
        }, policy.semantic?.enabled ? semanticTimeoutMs : timeoutMs);
        timer.unref();
      });
      return Promise.race([lookupAll(policy, q, controller.signal), timeout]).finally(() => clearTimeout(timer));
    },
    store(policy, q, answer) {
      for (const tier of tiers) {
        const ttl = tierTtlMs(policy, tier.tier);
        if (ttl === undefined) continue;
        try {
          tier.store(q, answer, ttl).catch((err: unknown) => fault(tier.tier, 'store', err));
        } catch (err) {
          fault(tier.tier, 'store', err);
        }
      }
    },
    dropTenant(tenantKey) {
      for (const tier of tiers) tier.dropTenant(tenantKey);
    },
    forget(_policy, q, hit) {
      for (const tier of tiers) {
        if (tier.tier !== hit.tier) continue;
        try {
          tier.forget?.(q);
        } catch (err) {
          fault(tier.tier, 'store', err);
        }
      }
    },
  };
}

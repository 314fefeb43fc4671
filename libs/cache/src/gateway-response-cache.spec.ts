import { DEFAULT_CACHE, type TenantCachePolicy, type TenantSpec, tenantKeyOf } from '@weir/core';
import type { CachedAnswer, CacheHit, CacheQuery, CacheTier } from './cache-tier';
import { createGatewayResponseCache, type PurgeableCacheTier } from './gateway-response-cache';

const policy: TenantCachePolicy = { exact: { enabled: true, ttlMs: 5_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 };
const query = (tenantKey: string, exactKey = 'k'): CacheQuery => ({ partition: { tenantKey, revisionId: 'r@1', template: '', paramsKey: 'p' }, exactKey, promptText: 'hi' });
const answer: CachedAnswer = { modelRevision: 'r@1', deltas: ['x'], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0 }, storedAtMs: 0 };

/** A shared exact tier that records what it was asked. */
function sharedTier(purge: () => Promise<number> = async () => 0) {
  const calls: string[] = [];
  const entries = new Map<string, CachedAnswer>();
  const tier: PurgeableCacheTier = {
    tier: 'exact',
    async lookup(q): Promise<CacheHit | undefined> {
      calls.push(`lookup ${q.exactKey}`);
      const hit = entries.get(q.exactKey);
      return hit ? { tier: 'exact', answer: hit } : undefined;
    },
    async store(q, a, ttl) {
      calls.push(`store ${q.exactKey} ${ttl}`);
      entries.set(q.exactKey, a);
    },
    dropTenant: (key) => void calls.push(`drop ${key}`),
    purgeExpired: () => (calls.push('purge'), purge()),
  };
  return { tier, calls };
}

const tenant = (id: string, cache?: TenantCachePolicy): TenantSpec => ({ id, name: id, uid: `${id.padEnd(16, '0').slice(0, 16)}`, apps: [], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 8 }, ...(cache ? { cache } : {}) });

afterEach(() => jest.useRealTimers());

describe('createGatewayResponseCache', () => {
  it('keeps the exact tier in memory by default, bounded by the settings', async () => {
    const cache = createGatewayResponseCache({ settings: { ...DEFAULT_CACHE, maxBytes: 1_024, maxBytesPerTenant: 1_024 } });
    expect(cache.exactStore).toBe('memory');
    cache.store(policy, query('t~1'), answer);
    await new Promise((r) => setImmediate(r));
    await expect(cache.lookup(policy, query('t~1'))).resolves.toMatchObject({ tier: 'exact', answer: { deltas: ['x'] } });
    // An answer larger than the whole budget is not kept.
    cache.store(policy, query('t~1', 'big'), { ...answer, deltas: ['y'.repeat(4_096)] });
    await new Promise((r) => setImmediate(r));
    await expect(cache.lookup(policy, query('t~1', 'big'))).resolves.toBeUndefined();
    cache.close();
  });

  it('uses the shared tier for exact_store postgres, reports its faults as the exact tier, and purges it on a timer until closed', async () => {
    jest.useFakeTimers();
    const faults: string[] = [];
    let purges = 0;
    const shared = sharedTier(async () => {
      purges++;
      if (purges === 2) throw new Error('database gone');
      return 3;
    });
    let given: ((op: 'store' | 'drop', err: unknown) => void) | undefined;
    const cache = createGatewayResponseCache({
      settings: { ...DEFAULT_CACHE, exactStore: 'postgres' },
      sharedExactTier: (onFault) => ((given = onFault), shared.tier),
      onFault: (tier, op) => faults.push(`${tier}:${op}`),
      purgeEveryMs: 1_000,
    });
    expect(cache.exactStore).toBe('postgres');
    cache.store(policy, query('t~1'), answer);
    await expect(cache.lookup(policy, query('t~1'))).resolves.toMatchObject({ tier: 'exact' });
    expect(shared.calls).toEqual(['store k 5000', 'lookup k']);
    given?.('drop', new Error('x'));
    expect(faults).toEqual(['exact:drop']);
    await jest.advanceTimersByTimeAsync(2_000);
    expect(purges).toBe(2);
    expect(faults).toEqual(['exact:drop', 'exact:purge']);
    cache.close();
    await jest.advanceTimersByTimeAsync(5_000);
    expect(purges).toBe(2);
  });

  it('gives the shared tier the byte caps of defaults.cache', () => {
    const seen: unknown[] = [];
    createGatewayResponseCache({ settings: { ...DEFAULT_CACHE, exactStore: 'postgres', maxBytes: 1_000_000, maxBytesPerTenant: 10_000 }, sharedExactTier: (_f, bounds) => (seen.push(bounds), sharedTier().tier) }).close();
    createGatewayResponseCache({ settings: { ...DEFAULT_CACHE, exactStore: 'postgres' }, sharedExactTier: (_f, bounds) => (seen.push(bounds), sharedTier().tier) }).close();
    expect(seen).toEqual([{ maxBytes: 1_000_000, maxBytesPerTenant: 10_000 }, { maxBytes: DEFAULT_CACHE.maxBytes }]);
  });

  it('refuses postgres without a shared tier', () => {
    expect(() => createGatewayResponseCache({ settings: { ...DEFAULT_CACHE, exactStore: 'postgres' } })).toThrow(/no shared exact tier/);
  });

  it('tries the further tiers after the exact one', async () => {
    const looked: string[] = [];
    const semantic: CacheTier = {
      tier: 'semantic',
      lookup: async () => (looked.push('semantic'), { tier: 'semantic', answer, similarity: 0.99 }),
      store: async () => undefined,
      dropTenant: () => undefined,
    };
    const cache = createGatewayResponseCache({ moreTiers: [semantic] });
    const both = { ...policy, semantic: { enabled: true, ttlMs: 1_000 } };
    await expect(cache.lookup(both, query('t~1'))).resolves.toMatchObject({ tier: 'semantic' });
    expect(looked).toEqual(['semantic']);
  });

  it('drops the tenants a snapshot turns the cache off for, or deletes, and keeps the others', () => {
    const shared = sharedTier();
    const cache = createGatewayResponseCache({ settings: { ...DEFAULT_CACHE, exactStore: 'postgres' }, sharedExactTier: () => shared.tier });
    const before = [tenant('a', policy), tenant('b', policy), tenant('c', policy), tenant('d')];
    const after = [tenant('a', policy), tenant('b'), tenant('d', policy)];
    expect(cache.applyTenants(before, after)).toBe(2);
    const key = (t: TenantSpec) => tenantKeyOf({ tenantId: t.id, tenantUid: t.uid as string });
    expect(shared.calls).toEqual([`drop ${key(before[1])}`, `drop ${key(before[2])}`]);
    cache.close();
  });
});

import type { TenantCachePolicy } from '@weir/core';
import type { CachedAnswer, CacheHit, CacheQuery, CacheTier } from './cache-tier';
import { createMemoryExactTier } from './memory-exact-tier';
import { createResponseCache } from './response-cache';

const q: CacheQuery = { partition: { tenantKey: 't', revisionId: 'r', template: '', paramsKey: 'p' }, exactKey: 'k', promptText: 'hi' };
const a: CachedAnswer = { modelRevision: 'r', deltas: ['x'], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0 }, storedAtMs: 0 };
const exactOnly: TenantCachePolicy = { exact: { enabled: true, ttlMs: 5_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0 };

/** A semantic tier that records calls and answers what it is told. */
function fakeSemantic(behaviour: 'hit' | 'miss' | 'throw' | 'hang'): CacheTier & { stored: number[]; looked: number } {
  const calls = { stored: [] as number[], looked: 0 };
  return {
    tier: 'semantic',
    ...calls,
    get looked() {
      return calls.looked;
    },
    async lookup(_q, signal): Promise<CacheHit | undefined> {
      calls.looked++;
      if (behaviour === 'throw') throw new Error('index down');
      if (behaviour === 'hang') return new Promise((resolve) => signal?.addEventListener('abort', () => resolve(undefined)));
      return behaviour === 'hit' ? { tier: 'semantic', answer: a, similarity: 0.97 } : undefined;
    },
    async store(_q, _a, ttl) {
      calls.stored.push(ttl);
    },
    dropTenant() {},
  } as CacheTier & { stored: number[]; looked: number };
}

describe('createResponseCache', () => {
  it('forget drops the entry from the tier that answered only (the exact tier deletes it)', async () => {
    const exact = createMemoryExactTier();
    const semantic = fakeSemantic('hit');
    const cache = createResponseCache({ tiers: [exact, semantic] });
    const other: CacheQuery = { ...q, exactKey: 'k2' };
    await exact.store(q, a, 5_000);
    await exact.store(other, a, 5_000);
    const hit = await cache.lookup(exactOnly, q);
    expect(hit?.tier).toBe('exact');
    cache.forget(exactOnly, q, hit as CacheHit);
    await expect(cache.lookup(exactOnly, q)).resolves.toBeUndefined();
    await expect(cache.lookup(exactOnly, other)).resolves.toMatchObject({ tier: 'exact' });
    // A semantic hit: the exact tier is untouched, and a tier without forget is skipped without error.
    cache.forget(exactOnly, other, { tier: 'semantic', answer: a });
    await expect(cache.lookup(exactOnly, other)).resolves.toMatchObject({ tier: 'exact' });
  });

  it('tries exact first, then the next tier; only tiers the policy turns on', async () => {
    const exact = createMemoryExactTier();
    const semantic = fakeSemantic('hit');
    const cache = createResponseCache({ tiers: [exact, semantic] });
    await expect(cache.lookup(exactOnly, q)).resolves.toBeUndefined();
    expect(semantic.looked).toBe(0);
    const both = { ...exactOnly, semantic: { enabled: true, ttlMs: 9_000 } };
    await expect(cache.lookup(both, q)).resolves.toMatchObject({ tier: 'semantic', similarity: 0.97 });
    await exact.store(q, a, 1_000);
    await expect(cache.lookup(both, q)).resolves.toMatchObject({ tier: 'exact' });
  });

  it('a tier that throws is a miss reported to onFault', async () => {
    const faults: string[] = [];
    const cache = createResponseCache({ tiers: [fakeSemantic('throw')], onFault: (tier, op) => faults.push(`${tier}:${op}`) });
    await expect(cache.lookup({ ...exactOnly, semantic: { enabled: true, ttlMs: 1 } }, q)).resolves.toBeUndefined();
    expect(faults).toEqual(['semantic:lookup']);
  });

  it('a lookup past the timeout is a miss and aborts the tier', async () => {
    const cache = createResponseCache({ tiers: [fakeSemantic('hang')], lookupTimeoutMs: 5 });
    await expect(cache.lookup({ ...exactOnly, semantic: { enabled: true, ttlMs: 1 } }, q)).resolves.toBeUndefined();
  });

  it('a tenant whose semantic tier is on gets the semantic lookup budget, others the plain one', async () => {
    /** A tier (named `tier`) that hits 40 ms after it is asked, unless aborted first. */
    const slow = (tier: 'exact' | 'semantic'): CacheTier => ({
      tier,
      lookup: (_q, signal) =>
        new Promise((resolve) => {
          const t = setTimeout(() => resolve({ tier, answer: a }), 40);
          signal?.addEventListener('abort', () => (clearTimeout(t), resolve(undefined)));
        }),
      store: async () => undefined,
      dropTenant: () => undefined,
    });
    const cache = createResponseCache({ tiers: [slow('exact'), slow('semantic')], lookupTimeoutMs: 5, semanticLookupTimeoutMs: 5_000 });
    await expect(cache.lookup(exactOnly, q)).resolves.toBeUndefined();
    await expect(cache.lookup({ ...exactOnly, semantic: { enabled: true, ttlMs: 1_000 } }, q)).resolves.toMatchObject({ tier: 'exact' });
    const off = { ...exactOnly, exact: { enabled: false, ttlMs: 1_000 }, semantic: { enabled: true, ttlMs: 1_000 } };
    await expect(cache.lookup(off, q)).resolves.toMatchObject({ tier: 'semantic' });
  });

  it('stores in each enabled tier with that tier’s TTL', async () => {
    const exact = createMemoryExactTier();
    const semantic = fakeSemantic('miss');
    const cache = createResponseCache({ tiers: [exact, semantic] });
    cache.store({ ...exactOnly, semantic: { enabled: true, ttlMs: 9_000 } }, q, a);
    await new Promise((r) => setImmediate(r));
    expect(exact.stats().entries).toBe(1);
    expect(semantic.stored).toEqual([9_000]);
    cache.dropTenant('t');
    expect(exact.stats().entries).toBe(0);
  });
});

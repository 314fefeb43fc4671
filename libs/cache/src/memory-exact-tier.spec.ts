import type { CachedAnswer, CacheQuery } from './cache-tier';
import { createMemoryExactTier } from './memory-exact-tier';

function query(tenantKey: string, key: string, revisionId = 'rev-a'): CacheQuery {
  return { partition: { tenantKey, revisionId, template: '', paramsKey: 'p' }, exactKey: `${tenantKey}:${revisionId}:${key}`, promptText: key };
}

function answer(text: string): CachedAnswer {
  return { modelRevision: 'rev-a', deltas: [text], finishReason: 'stop', usage: { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0 }, storedAtMs: 0 };
}

/** Bytes one entry of `text` with the key of `query(t, k)` costs (512 overhead + UTF-16). */
const sizeOf = (q: CacheQuery, text: string) => 512 + (q.exactKey.length + text.length + 16) * 2;

describe('createMemoryExactTier', () => {
  it('returns what was stored, and nothing for an unknown key', async () => {
    const tier = createMemoryExactTier();
    await tier.store(query('t1', 'a'), answer('hello'), 60_000);
    await expect(tier.lookup(query('t1', 'a'))).resolves.toEqual({ tier: 'exact', answer: answer('hello') });
    await expect(tier.lookup(query('t1', 'b'))).resolves.toBeUndefined();
  });

  it('expires entries after their TTL (fake clock)', async () => {
    let now = 1_000;
    const tier = createMemoryExactTier({ now: () => now });
    await tier.store(query('t1', 'a'), answer('x'), 10_000);
    now = 10_999;
    await expect(tier.lookup(query('t1', 'a'))).resolves.toBeDefined();
    now = 11_000;
    await expect(tier.lookup(query('t1', 'a'))).resolves.toBeUndefined();
    expect(tier.stats().entries).toBe(0);
  });

  it('never answers a query of another partition, even under the same exact key', async () => {
    const tier = createMemoryExactTier();
    const q = query('t1', 'a');
    await tier.store(q, answer('x'), 60_000);
    await expect(tier.lookup({ ...q, partition: { ...q.partition, tenantKey: 't2' } })).resolves.toBeUndefined();
    await expect(tier.lookup({ ...q, partition: { ...q.partition, revisionId: 'rev-b' } })).resolves.toBeUndefined();
    await expect(tier.lookup({ ...q, partition: { ...q.partition, template: 'x@1' } })).resolves.toBeUndefined();
  });

  it('evicts the least recently used entries when the total budget is full', async () => {
    const one = sizeOf(query('t1', 'k0'), 'v');
    const tier = createMemoryExactTier({ maxBytes: one * 3, maxBytesPerTenant: one * 3 });
    for (const k of ['k0', 'k1', 'k2']) await tier.store(query('t1', k), answer('v'), 60_000);
    await tier.lookup(query('t1', 'k0')); // k0 is now the most recent
    await tier.store(query('t1', 'k3'), answer('v'), 60_000);
    await expect(tier.lookup(query('t1', 'k1'))).resolves.toBeUndefined();
    for (const k of ['k0', 'k2', 'k3']) await expect(tier.lookup(query('t1', k))).resolves.toBeDefined();
    expect(tier.stats()).toEqual({ entries: 3, bytes: one * 3, tenants: 1 });
  });

  it('one tenant cannot evict another: it is held to its own cap', async () => {
    const one = sizeOf(query('t1', 'k10'), 'v');
    const tier = createMemoryExactTier({ maxBytes: one * 4, maxBytesPerTenant: one * 2 });
    await tier.store(query('t2', 'k00'), answer('v'), 60_000);
    await tier.store(query('t2', 'k01'), answer('v'), 60_000);
    for (let i = 10; i < 50; i++) await tier.store(query('t1', `k${i}`), answer('v'), 60_000);
    expect(tier.tenantBytes('t1')).toBe(one * 2);
    await expect(tier.lookup(query('t2', 'k00'))).resolves.toBeDefined();
    await expect(tier.lookup(query('t2', 'k01'))).resolves.toBeDefined();
    // The busy tenant keeps its most recent entries.
    await expect(tier.lookup(query('t1', 'k49'))).resolves.toBeDefined();
    await expect(tier.lookup(query('t1', 'k47'))).resolves.toBeUndefined();
  });

  it('refuses an answer larger than the tenant cap, and replaces an entry under the same key', async () => {
    const tier = createMemoryExactTier({ maxBytes: 100_000, maxBytesPerTenant: 2_000 });
    await tier.store(query('t1', 'big'), answer('x'.repeat(5_000)), 60_000);
    expect(tier.stats().entries).toBe(0);
    await tier.store(query('t1', 'a'), answer('one'), 60_000);
    await tier.store(query('t1', 'a'), answer('two'), 60_000);
    expect(tier.stats().entries).toBe(1);
    await expect(tier.lookup(query('t1', 'a'))).resolves.toMatchObject({ answer: { deltas: ['two'] } });
  });

  it('drops expired entries first when it needs room', async () => {
    let now = 0;
    const one = sizeOf(query('t1', 'k0'), 'v');
    const tier = createMemoryExactTier({ maxBytes: one * 2, maxBytesPerTenant: one * 2, now: () => now });
    await tier.store(query('t1', 'k0'), answer('v'), 60_000);
    await tier.store(query('t1', 'k1'), answer('v'), 1_000);
    now = 5_000;
    await tier.store(query('t2', 'k2'), answer('v'), 60_000);
    await expect(tier.lookup(query('t1', 'k0'))).resolves.toBeDefined();
  });

  it('dropTenant removes only that tenant', async () => {
    const tier = createMemoryExactTier();
    await tier.store(query('t1', 'a'), answer('x'), 60_000);
    await tier.store(query('t2', 'a'), answer('y'), 60_000);
    tier.dropTenant('t1');
    await expect(tier.lookup(query('t1', 'a'))).resolves.toBeUndefined();
    await expect(tier.lookup(query('t2', 'a'))).resolves.toBeDefined();
    expect(tier.stats().tenants).toBe(1);
  });

  it('rejects a zero budget', () => {
    expect(() => createMemoryExactTier({ maxBytes: 0 })).toThrow(RangeError);
  });
});

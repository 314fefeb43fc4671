import { guardSignatureOf } from './guard';
import { createInMemorySemanticStore } from './in-memory-semantic-store';
import type { SemanticPartition } from './partition-key';
import type { SemanticEntry } from './semantic-store';
import { answerOf } from './test-support';
import { normalised } from './vector';

const P: SemanticPartition = { tenantKey: 'acme~0000000000000001', revisionId: 'r@1', template: '', paramsKey: 'p1', embeddingRevision: 'e@1' };
const entry = (v: number[], tag: string, expiresAtMs = 1_000_000): SemanticEntry => ({ vector: normalised(v), guard: guardSignatureOf(''), answer: answerOf(tag), storedAtMs: 0, expiresAtMs });
const tags = (cs: Array<{ entry: SemanticEntry }>) => cs.map((c) => c.entry.answer.deltas[0]);

describe('createInMemorySemanticStore', () => {
  it('returns the matches at or above the threshold, best first, up to the limit', async () => {
    const s = createInMemorySemanticStore();
    await s.put(P, entry([1, 0, 0], 'x'), 0);
    await s.put(P, entry([0.99, 0.14, 0], 'near'), 0);
    await s.put(P, entry([0, 1, 0], 'y'), 0);
    const found = await s.search(P, normalised([1, 0, 0]), 0.9, 5, 1);
    expect(tags(found)).toEqual(['x', 'near']);
    expect(found[0].similarity).toBeCloseTo(1, 6);
    expect(found[1].similarity).toBeGreaterThan(0.9);
    expect(tags(await s.search(P, normalised([1, 0, 0]), 0.9, 1, 1))).toEqual(['x']);
  });

  it.each([
    ['tenant', { tenantKey: 'acme~0000000000000002' }],
    ['revision', { revisionId: 'r@2' }],
    ['template', { template: 'faq@1' }],
    ['params', { paramsKey: 'p2' }],
    ['embedding revision', { embeddingRevision: 'e@2' }],
  ])('never finds an entry of another partition (%s differs), even an identical vector', async (_what, change) => {
    const s = createInMemorySemanticStore();
    await s.put(P, entry([1, 2, 3], 'mine'), 0);
    expect(await s.search({ ...P, ...change }, normalised([1, 2, 3]), 0.95, 5, 1)).toEqual([]);
    expect(tags(await s.search(P, normalised([1, 2, 3]), 0.95, 5, 1))).toEqual(['mine']);
  });

  it('does not serve expired entries and forgets them', async () => {
    const s = createInMemorySemanticStore();
    await s.put(P, entry([1, 0], 'old', 100), 0);
    expect(tags(await s.search(P, normalised([1, 0]), 0.9, 5, 99))).toEqual(['old']);
    expect(await s.search(P, normalised([1, 0]), 0.9, 5, 100)).toEqual([]);
    expect(s.stats()).toEqual({ partitions: 0, entries: 0 });
  });

  it('evicts the least recently used entry of a full partition (a search touches what it returns)', async () => {
    const s = createInMemorySemanticStore({ maxEntriesPerPartition: 2 });
    await s.put(P, entry([1, 0, 0], 'a'), 0);
    await s.put(P, entry([0, 1, 0], 'b'), 0);
    await s.search(P, normalised([1, 0, 0]), 0.99, 1, 1); // touches a
    await s.put(P, entry([0, 0, 1], 'c'), 0); // evicts b
    expect(tags(await s.search(P, normalised([0, 1, 0]), 0.99, 5, 1))).toEqual([]);
    expect(tags(await s.search(P, normalised([1, 0, 0]), 0.99, 5, 1))).toEqual(['a']);
    expect(tags(await s.search(P, normalised([0, 0, 1]), 0.99, 5, 1))).toEqual(['c']);
  });

  it('bounds a tenant over all its partitions, leaving other tenants alone', async () => {
    const s = createInMemorySemanticStore({ maxEntriesPerTenant: 2 });
    const other = { ...P, tenantKey: 'beta~0000000000000009' };
    await s.put(other, entry([1, 0], 'other'), 0);
    await s.put({ ...P, template: 't1' }, entry([1, 0], 't1'), 0);
    await s.put({ ...P, template: 't2' }, entry([1, 0], 't2'), 0);
    await s.put({ ...P, template: 't3' }, entry([1, 0], 't3'), 0);
    expect(await s.search({ ...P, template: 't1' }, normalised([1, 0]), 0.9, 5, 1)).toEqual([]);
    expect(tags(await s.search({ ...P, template: 't3' }, normalised([1, 0]), 0.9, 5, 1))).toEqual(['t3']);
    expect(tags(await s.search(other, normalised([1, 0]), 0.9, 5, 1))).toEqual(['other']);
    expect(s.stats().entries).toBe(3);
  });

  it('drops every partition of one tenant', async () => {
    const s = createInMemorySemanticStore();
    const other = { ...P, tenantKey: 'beta~0000000000000009' };
    await s.put(P, entry([1, 0], 'a'), 0);
    await s.put({ ...P, revisionId: 'r@2' }, entry([1, 0], 'b'), 0);
    await s.put(other, entry([1, 0], 'c'), 0);
    await s.dropTenant(P.tenantKey);
    expect(await s.search(P, normalised([1, 0]), 0.9, 5, 1)).toEqual([]);
    expect(await s.search({ ...P, revisionId: 'r@2' }, normalised([1, 0]), 0.9, 5, 1)).toEqual([]);
    expect(tags(await s.search(other, normalised([1, 0]), 0.9, 5, 1))).toEqual(['c']);
    expect(s.stats()).toEqual({ partitions: 1, entries: 1 });
  });

  it('never matches vectors of different dimensions', async () => {
    const s = createInMemorySemanticStore();
    await s.put(P, entry([1, 0, 0], 'three'), 0);
    expect(await s.search(P, normalised([1, 0]), -1, 5, 1)).toEqual([]);
  });
});

/**
 * The Postgres semantic-cache store on PGlite and on the machine's real Postgres: exact cosine
 * inside one partition only, TTL, LRU bounds per partition and tenant, dropping a tenant, and
 * the semantic tier over it (hit, guarded miss, no hit across partitions).
 */
import { cosineSimilarity, createSemanticTier, guardSignatureOf, normalised, type SemanticEntry, type SemanticPartition } from '@weir/cache';
import { createPgSemanticStore } from './semantic-store';
import { createTestDatabase, type TestDatabase } from './testing';

const P: SemanticPartition = { tenantKey: 'acme~00000000000000a1', revisionId: 'r@1', template: '', paramsKey: 'p1', embeddingRevision: 'e@1' };
const answer = (tag: string) => ({ modelRevision: 'r@1', deltas: [tag, ' ✓'], finishReason: 'stop', usage: { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0 }, storedAtMs: 5 });
const entry = (v: number[], tag: string, expiresAtMs = 10_000, text = ''): SemanticEntry => ({ vector: normalised(v), guard: guardSignatureOf(text), answer: answer(tag), storedAtMs: 5, expiresAtMs });

/** Letters as dimensions: a prompt's vector counts its letters a–z (deterministic, near for near texts). */
const letterEmbedder = {
  revisionId: 'e@1',
  embed: async (texts: string[]) =>
    texts.map((t) => {
      const v = new Float32Array(26);
      for (const c of t.toLowerCase()) if (c >= 'a' && c <= 'z') v[c.charCodeAt(0) - 97]++;
      return v;
    }),
};

describe.each([['pglite' as const], ['postgres' as const]])('pg semantic store on %s', (kind) => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
  }, 30_000);
  afterAll(() => database.close());
  beforeEach(async () => {
    await database.db.deleteFrom('semantic_cache_entries').execute();
  });

  it('finds matches of its own partition only, best first, with exact cosine and the entry as stored', async () => {
    const s = createPgSemanticStore(database.db);
    await s.put(P, entry([1, 0, 0], 'x', 10_000, 'The price of Tea is 5'), 1);
    await s.put(P, entry([0.99, 0.14, 0], 'near'), 1);
    await s.put(P, entry([0, 1, 0], 'y'), 1);
    for (const other of [{ tenantKey: 'beta~00000000000000b2' }, { revisionId: 'r@2' }, { template: 't@1' }, { paramsKey: 'p2' }, { embeddingRevision: 'e@2' }]) {
      await s.put({ ...P, ...other }, entry([1, 0, 0], 'foreign'), 1);
    }
    const found = await s.search(P, normalised([1, 0, 0]), 0.9, 5, 2);
    expect(found.map((f) => f.entry.answer.deltas[0])).toEqual(['x', 'near']);
    expect(found[0].similarity).toBeCloseTo(1, 6);
    expect(found[1].similarity).toBeCloseTo(0.99 / Math.hypot(0.99, 0.14), 6);
    expect(found[0].entry.guard).toEqual(guardSignatureOf('The price of Tea is 5'));
    expect(found[0].entry.answer).toEqual(answer('x'));
    expect(found[0].entry.expiresAtMs).toBe(10_000);
    expect(await s.search({ ...P, tenantKey: 'gamma~0000000000000c3' }, normalised([1, 0, 0]), 0.5, 5, 2)).toEqual([]);
  });

  it("serves nothing expired, and a put sweeps the partition's expired rows", async () => {
    const s = createPgSemanticStore(database.db);
    await s.put(P, entry([1, 0], 'old', 100), 1);
    expect(await s.search(P, normalised([1, 0]), 0.9, 5, 99)).toHaveLength(1);
    expect(await s.search(P, normalised([1, 0]), 0.9, 5, 100)).toEqual([]);
    await s.put(P, entry([0, 1], 'new', 1_000), 200);
    expect(await database.db.selectFrom('semantic_cache_entries').select('id').execute()).toHaveLength(1);
  });

  it('keeps the most recently used entries within the partition and tenant bounds', async () => {
    const s = createPgSemanticStore(database.db, { maxEntriesPerPartition: 2, maxEntriesPerTenant: 3 });
    await s.put(P, entry([1, 0, 0], 'a'), 1);
    await s.put(P, entry([0, 1, 0], 'b'), 2);
    await s.search(P, normalised([1, 0, 0]), 0.99, 1, 3); // touches a
    await s.put(P, entry([0, 0, 1], 'c'), 4); // evicts b
    expect(await s.search(P, normalised([0, 1, 0]), 0.99, 5, 5)).toEqual([]);
    expect((await s.search(P, normalised([1, 0, 0]), 0.99, 5, 5)).map((f) => f.entry.answer.deltas[0])).toEqual(['a']);
    await s.put({ ...P, template: 't1' }, entry([1, 0, 0], 't1'), 6);
    await s.put({ ...P, template: 't2' }, entry([1, 0, 0], 't2'), 7); // the tenant's fourth: its least recently used (c) goes
    expect(await s.search(P, normalised([0, 0, 1]), 0.99, 5, 8)).toEqual([]);
    expect(await database.db.selectFrom('semantic_cache_entries').select('id').where('tenant_key', '=', P.tenantKey).execute()).toHaveLength(3);
  });

  it("drops one tenant's entries only", async () => {
    const s = createPgSemanticStore(database.db);
    await s.put(P, entry([1, 0], 'a'), 1);
    await s.put({ ...P, tenantKey: 'beta~00000000000000b2' }, entry([1, 0], 'b'), 1);
    await s.dropTenant(P.tenantKey);
    expect(await s.search(P, normalised([1, 0]), 0.9, 5, 2)).toEqual([]);
    expect(await s.search({ ...P, tenantKey: 'beta~00000000000000b2' }, normalised([1, 0]), 0.9, 5, 2)).toHaveLength(1);
  });

  it('backs the semantic tier: a repeat hits, a negated prompt is a guarded miss, another tenant never hits', async () => {
    const tier = createSemanticTier({
      store: createPgSemanticStore(database.db),
      embedderFor: () => letterEmbedder,
      policyFor: () => ({ enabled: true, threshold: 0.95, embeddingRevision: 'e@1' }),
      clock: () => 1_000,
    });
    const partition = { tenantKey: P.tenantKey, revisionId: 'r@1', template: '', paramsKey: 'p1' };
    await tier.store({ partition, exactKey: 'k1', promptText: 'is the bridge open today' }, answer('yes'), 60_000);
    const hit = await tier.lookup({ partition, exactKey: 'k2', promptText: 'Is the bridge open today?' });
    expect(hit?.answer).toEqual(answer('yes'));
    // "not" adds three letters: a cosine above the threshold for the letter counts, refused by the guard.
    const [a, b] = await letterEmbedder.embed(['is the bridge open today', 'is the bridge not open today']);
    expect(cosineSimilarity(a, b)).toBeGreaterThan(0.95);
    expect(await tier.lookup({ partition, exactKey: 'k3', promptText: 'is the bridge not open today' })).toBeUndefined();
    expect(await tier.lookup({ partition: { ...partition, tenantKey: 'beta~00000000000000b2' }, exactKey: 'k1', promptText: 'is the bridge open today' })).toBeUndefined();
    const rows = await database.db.selectFrom('semantic_cache_entries').selectAll().execute();
    expect(JSON.stringify(rows)).not.toContain('bridge');
  });
});

/**
 * The all-in-one's semantic tier composition (`createSemanticCache`): embedders only for
 * embedding revisions the process has an engine for, policies recompiled per snapshot, and the
 * entries of a tenant whose tier is turned off or moved to another embedding revision dropped.
 */
import { type CachedAnswer, type CacheQuery, createInMemorySemanticStore, type SemanticLookupOutcome, type SemanticStore } from '@weir/cache';
import { encodeEmbeddingDelta, type EngineAdapter, type EngineEvent, type EngineRequest, type RevisionSpec, type TenantCachePolicy, type TenantSpec } from '@weir/core';
import { createSemanticCache } from './semantic-cache';

/** An embedding engine answering every text with the same unit vector; counts its calls. */
function embeddingEngine(): EngineAdapter & { calls: number } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 1, contextTokens: 64 },
    calls: 0,
    async countInputTokens() {
      return 1;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.calls++;
      if (request.input.kind !== 'embedding') throw new Error('not an embedding input');
      for (let i = 0; i < request.input.items.length; i++) yield { type: 'delta', text: encodeEmbeddingDelta([1, 0, 0, 0]), tokens: 0 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 1, outputTokens: 0 }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

const revision = (id: string, kind?: 'embedding'): RevisionSpec =>
  ({ id, model: id, engine: { kind: 'simulated' }, contextWindow: 64, maxOutputTokens: 8, defaultOutputTokens: 8, pricing: { inputPerMTok: 1, outputPerMTok: 1 }, ...(kind ? { kind, embedding: { dimensions: 4, variableDimensions: false } } : {}) }) as RevisionSpec;
const policy = (embeddingRevision: string, enabled = true): TenantCachePolicy => ({ exact: { enabled: true, ttlMs: 60_000 }, semantic: { enabled, ttlMs: 60_000, embeddingRevision }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 });
const tenant = (cache?: TenantCachePolicy): TenantSpec => ({ id: 't', name: 'T', apps: [], allowedAliases: ['*'], defaultDeadlineMs: 1_000, limits: { maxConcurrent: 1 }, ...(cache ? { cache } : {}) });
const q: CacheQuery = { partition: { tenantKey: 't', revisionId: 'gen@1', template: '', paramsKey: 'p' }, exactKey: 'k', promptText: 'user: hello there' };
const answer: CachedAnswer = { modelRevision: 'gen@1', deltas: ['hi'], finishReason: 'stop', usage: { inputTokens: 2, outputTokens: 1, cachedInputTokens: 0 }, storedAtMs: 0 };

function setup(tenants: TenantSpec[]) {
  const engines = new Map<string, EngineAdapter & { calls: number }>([['emb@1', embeddingEngine()], ['emb@2', embeddingEngine()], ['gen@1', embeddingEngine()]]);
  const inner = createInMemorySemanticStore();
  const dropped: string[] = [];
  const store: SemanticStore = { ...inner, dropTenant: async (key) => (dropped.push(key), inner.dropTenant(key)) };
  const outcomes: SemanticLookupOutcome[] = [];
  const warnings: unknown[] = [];
  const cache = createSemanticCache({
    revisions: [revision('gen@1'), revision('emb@1', 'embedding'), revision('emb@2', 'embedding')],
    engineFor: (id) => engines.get(id),
    tenants,
    store,
    metrics: { lookup: (o) => void outcomes.push(o), embedding: () => undefined },
    logger: { warn: (obj) => void warnings.push(obj) },
  });
  return { cache, engines, inner, dropped, outcomes, warnings };
}

describe('createSemanticCache (all-in-one composition)', () => {
  it('embeds with the policy revision’s engine, stores, and hits', async () => {
    const { cache, engines, outcomes } = setup([tenant(policy('emb@1'))]);
    await expect(cache.tier.lookup(q)).resolves.toBeUndefined();
    await cache.tier.store(q, answer, 60_000);
    await expect(cache.tier.lookup({ ...q, exactKey: 'k2', promptText: 'user: hello  there!' })).resolves.toMatchObject({ tier: 'semantic', answer: { deltas: ['hi'] } });
    expect(outcomes).toEqual(['miss', 'hit']);
    // The lookup's vector served the store: two lookups, two embeddings.
    expect(engines.get('emb@1')?.calls).toBe(2);
    expect(engines.get('gen@1')?.calls).toBe(0);
  });

  it('a tenant without a policy, or turned off, is a miss that embeds nothing', async () => {
    const { cache, engines } = setup([tenant()]);
    await expect(cache.tier.lookup(q)).resolves.toBeUndefined();
    cache.update([tenant(policy('emb@1', false))]);
    await expect(cache.tier.lookup(q)).resolves.toBeUndefined();
    expect(engines.get('emb@1')?.calls).toBe(0);
  });

  it('a snapshot that turns the tier off, or moves it to another embedding revision, drops the tenant’s entries', async () => {
    const { cache, dropped, inner } = setup([tenant(policy('emb@1'))]);
    await cache.tier.store(q, answer, 60_000);
    expect(inner.stats().entries).toBe(1);
    cache.update([tenant(policy('emb@1'))]);
    expect(dropped).toEqual([]);
    cache.update([tenant(policy('emb@2'))]);
    expect(dropped).toEqual(['t']);
    expect(inner.stats().entries).toBe(0);
    cache.update([tenant(policy('emb@2', false))]);
    expect(dropped).toEqual(['t', 't']);
  });

  it('a policy naming an embedding revision without an engine here is a miss (error) and one warning', async () => {
    const { cache, outcomes, warnings } = setup([]);
    cache.update([tenant(policy('emb@9'))]);
    expect(warnings).toEqual([expect.objectContaining({ embeddingRevisions: ['emb@9'] })]);
    await expect(cache.tier.lookup(q)).resolves.toBeUndefined();
    expect(outcomes).toEqual(['error']);
    // A generation revision's engine is never an embedder (the config refuses such a policy; this is the second lock).
    cache.update([tenant(policy('gen@1'))]);
    expect(warnings.at(-1)).toEqual(expect.objectContaining({ embeddingRevisions: ['gen@1'] }));
  });
});

import type { CacheQuery } from '../cache-tier';
import { createInMemorySemanticStore } from './in-memory-semantic-store';
import type { GuardReason } from './guard';
import type { SemanticCacheMetrics, SemanticLookupOutcome } from './metrics';
import { parseSemanticCachePolicy, type SemanticCachePolicy } from './policy';
import { createSemanticTier, type SemanticTierOptions } from './semantic-tier';
import { answerOf, fakeEmbedder } from './test-support';

const TENANT = 'acme~00000000000000a1';
const partition = { tenantKey: TENANT, revisionId: 'stories@1', template: '', paramsKey: 'k1' };
const q = (promptText: string, exactKey = promptText): CacheQuery => ({ partition, exactKey, promptText });

/** Words the test embedder does not see: it finds prompts that differ only in them identical (cosine 1). */
const BLIND = new Set(['not', '5', '50', 'france', 'spain', 'love', 'hate']);

function setup(policy: Partial<SemanticCachePolicy> = {}, extra: Partial<SemanticTierOptions> = {}) {
  const embedder = fakeEmbedder('e@1', (w) => BLIND.has(w));
  const store = createInMemorySemanticStore();
  let now = 1_000;
  const outcomes: Array<[SemanticLookupOutcome, GuardReason | undefined]> = [];
  const durations: number[] = [];
  const metrics: SemanticCacheMetrics = { lookup: (o, r) => outcomes.push([o, r]), embedding: (_rev, s) => durations.push(s) };
  const full: SemanticCachePolicy = { enabled: true, threshold: 0.97, embeddingRevision: 'e@1', ...policy };
  const tier = createSemanticTier({
    store,
    embedderFor: (id) => (id === 'e@1' ? embedder : undefined),
    policyFor: (t) => (t === TENANT ? full : undefined),
    clock: () => now,
    metrics,
    ...extra,
  });
  return { tier, embedder, store, outcomes, durations, advance: (ms: number) => (now += ms) };
}

describe('createSemanticTier', () => {
  it('serves a stored answer to the same prompt written differently, with its similarity', async () => {
    const { tier, outcomes, durations } = setup();
    expect(await tier.lookup(q('What is the capital of France?'))).toBeUndefined();
    await tier.store(q('What is the capital of France?'), answerOf('paris'), 60_000);
    const hit = await tier.lookup(q('what is the capital of France', 'other-exact-key'));
    expect(hit?.tier).toBe('semantic');
    expect(hit?.answer.deltas).toEqual(['paris']);
    expect(hit?.similarity).toBeCloseTo(1, 5);
    expect(outcomes).toEqual([
      ['miss', undefined],
      ['hit', undefined],
    ]);
    expect(durations.length).toBeGreaterThanOrEqual(2);
  });

  it('reuses the embedding of the lookup that missed when the answer is stored', async () => {
    const { tier, embedder } = setup();
    await tier.lookup(q('Tell me a story about a cat'));
    await tier.store(q('Tell me a story about a cat'), answerOf('story'), 60_000);
    expect(embedder.calls).toBe(1);
    await tier.store(q('Tell me a story about a dog'), answerOf('dog'), 60_000);
    expect(embedder.calls).toBe(2);
  });

  it.each([
    ['Is it safe to take aspirin with ibuprofen today?', 'Is it not safe to take aspirin with ibuprofen today?', 'negation'],
    ['Convert 5 miles to kilometres for me please', 'Convert 50 miles to kilometres for me please', 'number'],
    ['What is the capital of France in short?', 'What is the capital of Spain in short?', 'entity'],
    ['Translate "I love you" into Italian please', 'Translate "I hate you" into Italian please', 'quote'],
  ])('turns a match above the threshold into a guarded miss: %j / %j', async (stored, asked, reason) => {
    // The embedder is blind to the words that differ: the pair matches at cosine 1, far above the threshold.
    const { tier, outcomes } = setup({ threshold: 0.99 });
    await tier.store(q(stored), answerOf('a'), 60_000);
    expect(await tier.lookup(q(asked))).toBeUndefined();
    // …and the very same prompt still hits, so the miss is the guard's doing.
    expect((await tier.lookup(q(stored)))?.answer.deltas).toEqual(['a']);
    outcomes.pop();
    expect(outcomes.at(-1)).toEqual(['guarded_miss', reason]);
  });

  it('skips a guarded candidate for a lower one the guard accepts', async () => {
    const { tier } = setup({ threshold: 0.95 });
    const words = 'convert miles to km now and round the result to whole numbers for a report on the trip we took';
    await tier.store(q(`${words.replace('miles', '5 miles')}`), answerOf('five'), 60_000);
    await tier.store(q(`${words.replace('miles', '50 miles')} please`), answerOf('fifty'), 60_000);
    const hit = await tier.lookup(q(words.replace('miles', '50 miles')));
    expect(hit?.answer.deltas).toEqual(['fifty']);
    expect(hit?.similarity).toBeLessThan(1);
  });

  it('applies the floor even when the policy asks for less', async () => {
    // A policy object built by hand below the floor (parse refuses it): the tier still uses 0.95.
    const { tier, outcomes } = setup({ threshold: 0.5 });
    await tier.store(q('one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty'.replace(/\b\w+\b/g, (w) => `w${w}`)), answerOf('a'), 60_000);
    // 2 of 20 words changed: a cosine near 0.9, above 0.5 but below the floor.
    const asked = 'wone wtwo wthree wfour wfive wsix wseven weight wnine wten weleven wtwelve wthirteen wfourteen wfifteen wsixteen wseventeen weighteen xx yy';
    expect(await tier.lookup(q(asked))).toBeUndefined();
    expect(outcomes.at(-1)).toEqual(['miss', undefined]);
  });

  it('honours a stricter threshold', async () => {
    const { tier } = setup({ threshold: 0.999 });
    await tier.store(q('a b c d e f g h i j k l m n o p q r s t'), answerOf('a'), 60_000);
    expect(await tier.lookup(q('a b c d e f g h i j k l m n o p q r s u'))).toBeUndefined();
    expect((await tier.lookup(q('A b c d e f g h i j k l m n o p q r s t.')))?.answer.deltas).toEqual(['a']);
  });

  it('expires entries after the policy TTL (else the TTL given to store)', async () => {
    const withPolicyTtl = setup({ ttlMs: 5_000 });
    await withPolicyTtl.tier.store(q('hello there friend'), answerOf('a'), 60_000);
    withPolicyTtl.advance(4_999);
    expect(await withPolicyTtl.tier.lookup(q('hello there friend'))).toBeDefined();
    withPolicyTtl.advance(1);
    expect(await withPolicyTtl.tier.lookup(q('hello there friend'))).toBeUndefined();

    const withStoreTtl = setup();
    await withStoreTtl.tier.store(q('hello there friend'), answerOf('a'), 2_000);
    withStoreTtl.advance(2_000);
    expect(await withStoreTtl.tier.lookup(q('hello there friend'))).toBeUndefined();
  });

  it('does nothing, not even an embedding, for a tenant whose policy is off', async () => {
    const embedder = fakeEmbedder('e@1');
    const off = parseSemanticCachePolicy(undefined);
    if (!off.ok) throw new Error('unreachable');
    const tier = createSemanticTier({ store: createInMemorySemanticStore(), embedderFor: () => embedder, policyFor: () => off.policy });
    await tier.store(q('hello'), answerOf('a'), 60_000);
    expect(await tier.lookup(q('hello'))).toBeUndefined();
    expect(embedder.calls).toBe(0);
  });

  it('answers miss (error) when the embedder fails or is missing, and logs no text', async () => {
    const warnings: object[] = [];
    const failing = { revisionId: 'e@1', embed: () => Promise.reject(new Error('boom: secret prompt text')) };
    const outcomes: SemanticLookupOutcome[] = [];
    const tier = createSemanticTier({
      store: createInMemorySemanticStore(),
      embedderFor: () => failing,
      policyFor: () => ({ enabled: true, threshold: 0.97, embeddingRevision: 'e@1' }),
      metrics: { lookup: (o) => outcomes.push(o), embedding: () => undefined },
      logger: { warn: (o) => warnings.push(o) },
    });
    expect(await tier.lookup(q('secret prompt text'))).toBeUndefined();
    await expect(tier.store(q('secret prompt text'), answerOf('a'), 1_000)).resolves.toBeUndefined();
    expect(outcomes).toEqual(['error']);
    expect(JSON.stringify(warnings)).not.toContain('secret');
    const none = createSemanticTier({ store: createInMemorySemanticStore(), embedderFor: () => undefined, policyFor: () => ({ enabled: true, threshold: 0.97, embeddingRevision: 'gone@1' }) });
    expect(await none.lookup(q('x'))).toBeUndefined();
  });

  it('keeps entries of two embedding revisions apart (a changed policy starts empty)', async () => {
    const e1 = fakeEmbedder('e@1');
    const e2 = fakeEmbedder('e@2');
    let policy: SemanticCachePolicy = { enabled: true, threshold: 0.97, embeddingRevision: 'e@1' };
    const tier = createSemanticTier({ store: createInMemorySemanticStore(), embedderFor: (id) => (id === 'e@1' ? e1 : e2), policyFor: () => policy });
    await tier.store(q('same words here'), answerOf('a'), 60_000);
    policy = { ...policy, embeddingRevision: 'e@2' };
    expect(await tier.lookup(q('same words here'))).toBeUndefined();
  });

  it('forgets a dropped tenant', async () => {
    const { tier } = setup();
    await tier.store(q('hello there friend'), answerOf('a'), 60_000);
    tier.dropTenant(TENANT);
    await new Promise((r) => setImmediate(r));
    expect(await tier.lookup(q('hello there friend'))).toBeUndefined();
  });
});

describe('parseSemanticCachePolicy', () => {
  const kinds = (id: string) => (id === 'tiny-embed@1' ? 'embedding' : id === 'stories@1' ? 'generation' : undefined);
  it('parses a full policy and defaults the threshold', () => {
    expect(parseSemanticCachePolicy({ enabled: true, embedding_revision: 'tiny-embed@1', ttl_ms: 60_000 }, 'p', kinds)).toEqual({
      ok: true,
      policy: { enabled: true, threshold: 0.97, ttlMs: 60_000, embeddingRevision: 'tiny-embed@1' },
    });
    expect(parseSemanticCachePolicy({ enabled: false })).toEqual({ ok: true, policy: { enabled: false, threshold: 0.97 } });
  });
  it.each([
    [{ enabled: true, embedding_revision: 'tiny-embed@1', threshold: 0.9 }, 'p.threshold: 0.9 is below the floor of 0.95'],
    [{ enabled: true, embedding_revision: 'tiny-embed@1', threshold: 1.2 }, 'p.threshold: 1.2 is above 1'],
    [{ enabled: true }, 'p.embedding_revision: required when the semantic cache is enabled'],
    [{ enabled: true, embedding_revision: 'stories@1' }, "p.embedding_revision: revision 'stories@1' is a generation model, not an embedding model"],
    [{ enabled: true, embedding_revision: 'nope@1' }, "p.embedding_revision: no revision 'nope@1'"],
    [{ enabled: 'yes', embedding_revision: 'tiny-embed@1' }, 'p.enabled: expected true or false'],
    [{ enabled: true, embedding_revision: 'tiny-embed@1', ttl_ms: 5 }, 'p.ttl_ms: expected an integer number of ms in [1000'],
    [{ enabled: true, embedding_revision: 'tiny-embed@1', treshold: 0.99 }, 'p.treshold: unknown field'],
    [[], 'p: expected an object'],
  ])('refuses %j', (raw, message) => {
    const r = parseSemanticCachePolicy(raw, 'p', kinds);
    expect(r.ok).toBe(false);
    expect(r.ok ? [] : r.errors.join('\n')).toContain(message);
  });
});

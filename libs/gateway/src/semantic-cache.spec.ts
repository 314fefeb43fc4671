/**
 * The semantic cache tier on the request path (issue 15 item 2; docs/caching.md "Semantic
 * cache"), through the real app, pipeline, scheduler and relay over a scripted engine that counts
 * its generations, with the exact tier first and a deterministic fake embedder: a near-duplicate
 * prompt is a semantic hit after an exact miss, the guard turns a negated or renumbered prompt
 * into a miss, and no hit crosses a tenant, a model revision, a template or an embedding revision.
 */
import { createHash } from 'node:crypto';
import {
  type AdmissionService,
  type EngineAdapter,
  type EngineEvent,
  type EngineRequest,
  type PlatformConfig,
  type TenantCachePolicy,
  type UsageRecord,
} from '@weir/core';
import {
  createInMemorySemanticStore,
  createMemoryExactTier,
  createResponseCache,
  createSemanticTier,
  type InMemorySemanticStore,
  type MemoryExactTier,
  type PromptEmbedder,
  type SemanticCachePolicy,
  type SemanticLookupOutcome,
  semanticPoliciesOf,
} from '@weir/cache';
import { priceUsage } from '@weir/ledger';
import { createParser } from 'eventsource-parser';
import type { CacheEvent } from './pipeline';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** An engine that streams `w0 w1 …` (5 words) and counts its generations. */
function countingEngine(): EngineAdapter & { started: number } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    started: 0,
    async countInputTokens(input: EngineRequest['input']) {
      return input.kind === 'text' ? input.text.split(/\s+/).filter(Boolean).length : 4;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.started++;
      let n = 0;
      for (; n < Math.min(5, request.maxOutputTokens); n++) {
        await new Promise((r) => setTimeout(r, 1));
        yield { type: 'delta', text: `w${n} `, tokens: 1 };
      }
      yield { type: 'end', reason: n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 4, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

/** Words a real embedding model barely sees (the guard's categories): left out of the fake vectors, so prompts differing only in them have a cosine of 1. */
const BLIND = new Set(['not', 'no', 'never', "isn't", "don't"]);

/**
 * A deterministic bag-of-words embedder: each lower-cased word (digits and {@link BLIND} words
 * left out) adds ±1 at two hashed positions of 128. Case, punctuation and spacing do not change
 * the vector. Counts its calls.
 */
function fakeEmbedder(revisionId: string): PromptEmbedder & { calls: number } {
  const self = {
    revisionId,
    calls: 0,
    async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
      signal?.throwIfAborted();
      self.calls++;
      return texts.map((t) => {
        const v = new Float32Array(128);
        for (const word of t.toLowerCase().match(/[\p{L}']+/gu) ?? []) {
          if (BLIND.has(word)) continue;
          const h = createHash('sha256').update(word).digest();
          v[h[0] % 128] += h[2] & 1 ? 1 : -1;
          v[h[1] % 128] += h[3] & 1 ? 1 : -1;
        }
        return v;
      });
    },
  };
  return self;
}

const PRICING = { inputPerMTok: 2_000, outputPerMTok: 8_000, cachedInputPerMTok: 1_000 };
const SEMANTIC: TenantCachePolicy = {
  exact: { enabled: true, ttlMs: 60_000 },
  semantic: { enabled: true, ttlMs: 60_000, threshold: 0.97, embeddingRevision: 'emb@1' },
  deterministicOnly: true,
  allowOptIn: true,
  hitPriceFraction: 0.25,
};
const EXACT_ONLY: TenantCachePolicy = { ...SEMANTIC, semantic: { enabled: false, ttlMs: 60_000, embeddingRevision: 'emb@1' } };

/** Tenants `t` and `u` with their policies; aliases `fake` → `fake@1` and `fake2` → `fake@2`. */
function configWith(policyT: TenantCachePolicy | undefined, policyU: TenantCachePolicy | undefined = policyT): PlatformConfig {
  const base = twoTenantConfig(fakeRevision(PRICING));
  return {
    ...base,
    revisions: [...base.revisions, { ...fakeRevision(PRICING), id: 'fake@2', model: 'fake2' }],
    aliases: [...base.aliases, { name: 'fake2', targets: [{ revision: 'fake@2', weight: 1 }] }],
    tenants: base.tenants.map((t) => {
      const p = t.id === 't' ? policyT : policyU;
      return p ? { ...t, cache: p } : t;
    }),
  };
}

let harness: TestGateway;
let engine: ReturnType<typeof countingEngine>;
let embedders: Map<string, ReturnType<typeof fakeEmbedder>>;
let records: UsageRecord[];
let exact: MemoryExactTier;
let store: InMemorySemanticStore;
let events: CacheEvent[];
let outcomes: SemanticLookupOutcome[];
let reasons: (string | undefined)[];
let policies: Map<string, SemanticCachePolicy>;

async function start(config: PlatformConfig) {
  engine = countingEngine();
  records = [];
  events = [];
  outcomes = [];
  reasons = [];
  embedders = new Map(['emb@1', 'emb@2'].map((id) => [id, fakeEmbedder(id)]));
  let n = 0;
  const admission: AdmissionService = {
    async reserve() {
      return { ok: true, reservationId: `rsv_${++n}` };
    },
    async settle() {},
    async release() {},
  };
  exact = createMemoryExactTier();
  store = createInMemorySemanticStore();
  policies = semanticPoliciesOf(config.tenants);
  const semantic = createSemanticTier({
    store,
    embedderFor: (id) => embedders.get(id),
    policyFor: (tenantKey) => policies.get(tenantKey),
    metrics: { lookup: (o, r) => (outcomes.push(o), reasons.push(r)), embedding: () => undefined },
  });
  harness = await startTestGateway({
    config,
    engine,
    admission,
    records,
    cache: createResponseCache({ tiers: [exact, semantic], semanticLookupTimeoutMs: 2_000 }),
    observer: { onCache: (e) => events.push(e) },
  });
}

afterEach(async () => {
  await harness?.close();
});

/** Waits until `check()` holds (the background stores and settlement after an answer). */
async function until(check: () => boolean, ms = 2_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: 'fake', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 8, ...extra });
const QUESTION = 'Is the bridge to Paris open today?';
const NEAR = '  is the bridge to Paris open today ';

/** Sends `body` as tenant `t` (or `apiKey`), reads the answer, and returns the cache headers. */
async function ask(body: unknown, headers: Record<string, string> = {}, apiKey?: string): Promise<{ cache: string | null; tier: string | null; content: string }> {
  const res = await harness.post('/v1/chat/completions', body, headers, apiKey);
  expect(res.status).toBe(200);
  const json = (await res.json()) as { choices: { message: { content: string } }[] };
  return { cache: res.headers.get('x-weir-cache'), tier: res.headers.get('x-weir-cache-tier'), content: json.choices[0].message.content };
}

/** Asks `body` and waits until its answer is stored in both tiers. */
async function prime(body: unknown, apiKey?: string) {
  const before = store.stats().entries;
  expect((await ask(body, {}, apiKey)).cache).toBe('miss');
  await until(() => store.stats().entries === before + 1);
}

/** The SSE events of a response, with the per-response fields (id, created) blanked. */
async function sseEvents(res: Response): Promise<unknown[]> {
  const out: unknown[] = [];
  const parser = createParser({
    onEvent: (e) => {
      if (e.data === '[DONE]') return void out.push('[DONE]');
      const obj = JSON.parse(e.data) as Record<string, unknown>;
      delete obj.id;
      delete obj.created;
      out.push(obj);
    },
  });
  parser.feed(await res.text());
  return out;
}

describe('the semantic cache on the request path', () => {
  it('a near-duplicate prompt is a semantic hit after an exact miss: no upstream call, one usage row `semantic` at the policy price', async () => {
    await start(configWith(SEMANTIC));
    await prime(chat(QUESTION));
    expect(exact.stats().entries).toBe(1);
    expect(engine.started).toBe(1);

    const hit = await ask(chat(NEAR));
    expect(hit).toEqual({ cache: 'hit', tier: 'semantic', content: 'w0 w1 w2 w3 w4 ' });
    expect(engine.started).toBe(1);
    expect(outcomes).toEqual(['miss', 'hit']);

    // The exact repeat is still answered by the exact tier, without embedding.
    const calls = embedders.get('emb@1')?.calls;
    expect(await ask(chat(QUESTION))).toMatchObject({ cache: 'hit', tier: 'exact' });
    expect(embedders.get('emb@1')?.calls).toBe(calls);
    expect(engine.started).toBe(1);

    await until(() => records.length === 3);
    const [miss, semantic, exactHit] = records;
    expect(miss.cacheHit).toBeUndefined();
    expect(semantic.cacheHit).toBe('semantic');
    expect(exactHit.cacheHit).toBe('exact');
    const full = priceUsage(PRICING, { inputTokens: miss.inputTokens, outputTokens: miss.outputTokens, cachedInputTokens: 0 });
    expect(semantic.costNanoUsd).toBe(Math.round(full * 0.25));
    expect(events.map((e) => `${e.result}:${e.tier ?? ''}`)).toEqual(['miss:', 'hit:semantic', 'hit:exact']);
  });

  it('the guard turns a negated or renumbered prompt into a miss, though the vectors are equal', async () => {
    await start(configWith(SEMANTIC));
    await prime(chat('Is the bridge open today?'));
    expect((await ask(chat('Is the bridge not open today?'))).cache).toBe('miss');
    await prime(chat('Give me 3 reasons to visit'));
    expect((await ask(chat('Give me 4 reasons to visit'))).cache).toBe('miss');
    expect((await ask(chat('Give me 3 reasons to visit!'))).tier).toBe('semantic');
    expect(outcomes).toEqual(['miss', 'guarded_miss', 'miss', 'guarded_miss', 'hit']);
    expect(reasons.filter(Boolean)).toEqual(['negation', 'number']);
    expect(engine.started).toBe(4);
  });

  it('never hits across tenants, model revisions, templates or embedding revisions', async () => {
    await start(configWith(SEMANTIC));
    await prime(chat(QUESTION));
    // Another tenant (same policy, same embedder).
    expect((await ask(chat(NEAR), {}, harness.otherKey.plaintext)).cache).toBe('miss');
    // Another model revision (alias fake2 → fake@2).
    expect((await ask(chat(NEAR, { model: 'fake2' }))).cache).toBe('miss');
    // A named template vs the "no template" partition.
    expect((await ask(chat(NEAR), { 'x-weir-prompt-template': 'faq@1' })).cache).toBe('miss');
    // An output-changing parameter.
    expect((await ask(chat(NEAR, { max_tokens: 7 }))).cache).toBe('miss');
    expect(engine.started).toBe(5);
    // The tenant moves to another embedding revision: a new, empty index.
    policies.set([...policies.keys()].find((k) => k.startsWith('t')) as string, { enabled: true, threshold: 0.97, ttlMs: 60_000, embeddingRevision: 'emb@2' });
    expect((await ask(chat(NEAR))).cache).toBe('miss');
    expect(embedders.get('emb@2')?.calls).toBeGreaterThan(0);
    expect(engine.started).toBe(6);
    expect(outcomes.filter((o) => o === 'hit')).toEqual([]);
  });

  it('a streamed semantic hit has the same events as the streamed miss', async () => {
    await start(configWith(SEMANTIC));
    const missRes = await harness.post('/v1/chat/completions', chat(QUESTION, { stream: true, stream_options: { include_usage: true } }));
    expect(missRes.headers.get('x-weir-cache')).toBe('miss');
    const miss = await sseEvents(missRes);
    await until(() => store.stats().entries === 1);
    const hitRes = await harness.post('/v1/chat/completions', chat(NEAR, { stream: true, stream_options: { include_usage: true } }));
    expect(hitRes.headers.get('x-weir-cache')).toBe('hit');
    expect(hitRes.headers.get('x-weir-cache-tier')).toBe('semantic');
    const hit = await sseEvents(hitRes);
    // The same events but for the usage chunk's cost (the hit's is its policy price) and Weir's overhead.
    const strip = (events: unknown[]) =>
      events.map((e) => (typeof e === 'object' && e !== null && 'weir' in e ? { ...e, weir: { ...(e as { weir: object }).weir, cost_usd: 0, overhead_ms: 0 } } : e));
    expect(strip(hit)).toEqual(strip(miss));
    expect((hit.at(-2) as { weir: { cost_usd: number } }).weir.cost_usd).toBeLessThan((miss.at(-2) as { weir: { cost_usd: number } }).weir.cost_usd);
    expect(hit.at(-1)).toBe('[DONE]');
    expect(hit.at(-2)).toMatchObject({ choices: [], usage: { completion_tokens: 5 } });
    expect(engine.started).toBe(1);
  });

  it('a tenant whose semantic tier is off never embeds: exact hits only', async () => {
    await start(configWith(EXACT_ONLY));
    expect((await ask(chat(QUESTION))).cache).toBe('miss');
    await until(() => exact.stats().entries === 1);
    expect((await ask(chat(NEAR))).cache).toBe('miss');
    expect((await ask(chat(QUESTION))).tier).toBe('exact');
    await new Promise((r) => setTimeout(r, 20));
    expect(embedders.get('emb@1')?.calls).toBe(0);
    expect(store.stats().entries).toBe(0);
    expect(outcomes).toEqual([]);
  });

  it('personalised and no-store requests never reach the semantic tier', async () => {
    await start(configWith(SEMANTIC));
    await prime(chat(QUESTION));
    const calls = embedders.get('emb@1')?.calls;
    expect((await ask(chat(NEAR, { user: 'end-user-1' }))).cache).toBe('bypass');
    expect((await ask(chat(NEAR), { 'cache-control': 'no-store' })).cache).toBe('bypass');
    await new Promise((r) => setTimeout(r, 20));
    expect(embedders.get('emb@1')?.calls).toBe(calls);
    expect(store.stats().entries).toBe(1);
    expect(engine.started).toBe(3);
  });
});

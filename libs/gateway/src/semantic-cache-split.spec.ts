/**
 * The semantic cache in the split topology (issue 15 item 2; docs/caching.md "The split
 * topology"), as `apps/gateway` wires it: the real app and pipeline with admission (on budget
 * leases) behind its gRPC server, the scheduler and the streaming relay behind theirs, the
 * gateway's gRPC clients — and the semantic tier embedding prompts through that same relay client
 * (`relayEmbeddersOf`: internal embedding jobs on the embedding revision's replica, a scripted
 * engine whose vectors are a bag of words, so similarity is controlled). Proves: a paraphrase is a
 * semantic hit with no generation; no hit crosses a tenant or a model revision; the guard turns a
 * negated or renumbered prompt into a miss; an embedding slower than the lookup budget is a miss
 * and the request is still answered (and the relay is told to stop it); the cache's embeddings
 * are never billed (no usage row, no admission call); and gateways sharing the Postgres store
 * (PGlite here) hit each other's entries.
 */
import { createHash } from 'node:crypto';
import { createInMemoryLeaseStore, createLeasedAdmission, type LeasedAdmission } from '@weir/admission';
import {
  createGatewayResponseCache,
  createInMemorySemanticStore,
  createTenantSemanticCache,
  type GatewayResponseCache,
  type SemanticLookupOutcome,
  type SemanticStore,
} from '@weir/cache';
import {
  type AdmissionService,
  DEFAULT_CACHE,
  encodeEmbeddingDelta,
  type EngineAdapter,
  type EngineEvent,
  type EngineRequest,
  type PlatformConfig,
  type RelayService,
  type RevisionSpec,
  type SchedulerService,
  type TenantCachePolicy,
  type UsageRecord,
} from '@weir/core';
import type { Relay } from '@weir/streaming';
import { createPgSemanticStore, createTestDatabase, type TestDatabase } from '@weir/store-pg';
import {
  type GrpcServiceBinding,
  createAdmissionGrpcServer,
  createAdmitGrpcClient,
  createRelayGrpcClient,
  createRelayGrpcServer,
  createSchedulerGrpcClient,
  createSchedulerGrpcServer,
  startGrpcServer,
} from '@weir/transport-grpc';
import { relayEmbeddersOf } from './relay-embedder';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** A generation engine that streams `w0 … w4` and counts its generations. */
function countingEngine(): EngineAdapter & { started: number } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    started: 0,
    async countInputTokens() {
      return 4;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.started++;
      let n = 0;
      for (; n < Math.min(5, request.maxOutputTokens); n++) yield { type: 'delta', text: `w${n} `, tokens: 1 };
      yield { type: 'end', reason: n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 4, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

/** Words a real embedding model barely sees (the guard's categories): left out of the vectors, so prompts differing only in them have a cosine of 1. */
const BLIND = new Set(['not', 'no', 'never']);
const DIMENSIONS = 128;

/** The bag-of-words vector of a text: each lower-cased word (digits and {@link BLIND} words left out) adds ±1 at two hashed positions. */
function bagOfWords(text: string): Float32Array {
  const v = new Float32Array(DIMENSIONS);
  for (const word of text.toLowerCase().match(/[\p{L}']+/gu) ?? []) {
    if (BLIND.has(word)) continue;
    const h = createHash('sha256').update(word).digest();
    v[h[0] % DIMENSIONS] += h[2] & 1 ? 1 : -1;
    v[h[1] % DIMENSIONS] += h[3] & 1 ? 1 : -1;
  }
  return v;
}

/**
 * A scripted embedding engine (the embedding revision's replica, reached through the relay):
 * {@link bagOfWords} vectors, after `delayMs` (0 by default; the wait ends early when the
 * relay aborts it). Counts the texts it embedded and the calls it saw aborted.
 */
function embeddingEngine(): EngineAdapter & { texts: number; aborted: number; delayMs: number } {
  const engine = {
    kind: 'fake-embedding',
    capacity: { slots: 4, contextTokens: 512 },
    texts: 0,
    aborted: 0,
    delayMs: 0,
    async countInputTokens() {
      return 4;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      if (request.input.kind !== 'embedding') throw new Error('the embedding engine was asked to generate');
      if (engine.delayMs > 0) {
        const signal = request.signal;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, engine.delayMs);
          signal?.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
        });
        if (signal?.aborted) {
          engine.aborted++;
          yield { type: 'end', reason: 'aborted', usage: { inputTokens: 0, outputTokens: 0 }, usageSource: 'reported' };
          return;
        }
      }
      const items = request.input.items;
      engine.texts += items.length;
      for (const item of items) yield { type: 'delta', text: encodeEmbeddingDelta(bagOfWords(typeof item === 'string' ? item : item.join(' '))), tokens: 0 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 4 * items.length, outputTokens: 0 }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

const PRICING = { inputPerMTok: 2_000, outputPerMTok: 8_000, cachedInputPerMTok: 1_000 };
const EMB: RevisionSpec = {
  ...fakeRevision({ inputPerMTok: 2, outputPerMTok: 0, cachedInputPerMTok: 2 }),
  id: 'emb@1',
  model: 'emb',
  kind: 'embedding',
  contextWindow: 512,
  embedding: { dimensions: DIMENSIONS, variableDimensions: false },
};
const SEMANTIC: TenantCachePolicy = {
  exact: { enabled: true, ttlMs: 60_000 },
  semantic: { enabled: true, ttlMs: 60_000, threshold: 0.97, embeddingRevision: 'emb@1' },
  deterministicOnly: true,
  allowOptIn: true,
  hitPriceFraction: 0.25,
};
/** The replicas the test gateway runs: `r<i>` per revision in config order (`fake@1`, `fake@2`, `emb@1`). */
const REPLICAS = [
  { id: 'r0', revisionId: 'fake@1' },
  { id: 'r1', revisionId: 'fake@2' },
  { id: 'r2', revisionId: 'emb@1' },
];

/** Tenants `t` and `u` with the semantic policy (and a month budget); aliases `fake` → `fake@1`, `fake2` → `fake@2`, `emb` → `emb@1`. */
function config(): PlatformConfig {
  const base = twoTenantConfig(fakeRevision(PRICING));
  return {
    ...base,
    revisions: [...base.revisions, { ...fakeRevision(PRICING), id: 'fake@2', model: 'fake2' }, EMB],
    aliases: [...base.aliases, { name: 'fake2', targets: [{ revision: 'fake@2', weight: 1 }] }, { name: 'emb', targets: [{ revision: 'emb@1', weight: 1 }] }],
    tenants: base.tenants.map((t) => ({ ...t, cache: SEMANTIC, limits: { ...t.limits, monthlyBudgetUsd: 10 } })),
  };
}

/** Counts the calls of each method a binding serves (plain and multiplexed calls alike). */
function counting(binding: GrpcServiceBinding, calls: Record<string, number>): GrpcServiceBinding {
  const handlers = Object.fromEntries(
    Object.entries(binding.handlers).map(([name, handler]) => [
      name,
      (...args: unknown[]) => {
        calls[name] = (calls[name] ?? 0) + 1;
        return (handler as (...a: unknown[]) => unknown)(...args);
      },
    ]),
  );
  return { ...binding, handlers: handlers as GrpcServiceBinding['handlers'] };
}

/** One split gateway and what the tests read of it. */
interface SplitStack {
  harness: TestGateway;
  engine: ReturnType<typeof countingEngine>;
  embedder: ReturnType<typeof embeddingEngine>;
  admission: LeasedAdmission;
  records: UsageRecord[];
  /** gRPC calls the admission instance served, by method. */
  calls: Record<string, number>;
  /** Relay jobs the gateway started over gRPC, by route (the cache's embeddings among them). */
  relayed: Record<string, number>;
  outcomes: SemanticLookupOutcome[];
  cache: GatewayResponseCache;
  /** Entries the semantic tier has finished storing. */
  stored: () => number;
}

const stops: Array<() => unknown> = [];

/** Starts a split gateway whose semantic tier keeps its entries in `store` (default one in memory). */
async function startSplit(options: { store?: SemanticStore; semanticLookupTimeoutMs?: number } = {}): Promise<SplitStack> {
  const c = config();
  const engine = countingEngine();
  const embedder = embeddingEngine();
  const records: UsageRecord[] = [];
  const calls: Record<string, number> = {};
  const relayed: Record<string, number> = {};
  const outcomes: SemanticLookupOutcome[] = [];
  const admission = createLeasedAdmission({ tenants: c.tenants, mode: 'shared' }, { store: createInMemoryLeaseStore() });
  // The gateway's one relay client, bound once the relay's gRPC server is up: the pipeline and the cache's embedder share it.
  let relayClient: RelayService | undefined;
  const relay: RelayService = {
    start(job) {
      relayed[job.route] = (relayed[job.route] ?? 0) + 1;
      return (relayClient as RelayService).start(job);
    },
  };
  const timeoutMs = options.semanticLookupTimeoutMs ?? 2_000;
  const store = options.store ?? createInMemorySemanticStore();
  let stored = 0;
  const semantic = createTenantSemanticCache({
    embedders: relayEmbeddersOf({ relay, revisions: c.revisions, replicas: REPLICAS, timeoutMs }),
    tenants: c.tenants,
    store: {
      search: (...args) => store.search(...args),
      dropTenant: (tenantKey) => store.dropTenant(tenantKey),
      put: async (...args) => (await store.put(...args), void stored++),
    },
    metrics: { lookup: (o) => outcomes.push(o), embedding: () => undefined },
    logger: { warn() {} },
  });
  const cache = createGatewayResponseCache({ settings: { ...DEFAULT_CACHE, semanticLookupTimeoutMs: timeoutMs }, moreTiers: [semantic.tier] });
  stops.push(() => cache.close());
  const admitVia = async (impl: AdmissionService, scheduler: SchedulerService) => {
    const schedulerServer = await startGrpcServer({ services: [createSchedulerGrpcServer(scheduler)] });
    const admissionsScheduler = createSchedulerGrpcClient({ address: schedulerServer.address });
    const admissionServer = await startGrpcServer({ services: [counting(createAdmissionGrpcServer(impl, { scheduler: admissionsScheduler }), calls)] });
    const gatewaysScheduler = createSchedulerGrpcClient({ address: schedulerServer.address });
    const admit = createAdmitGrpcClient({ addresses: [admissionServer.address], scheduler: gatewaysScheduler });
    stops.push(
      () => admit.close(),
      () => gatewaysScheduler.close(),
      () => admissionServer.close(),
      () => admissionsScheduler.close(),
      () => schedulerServer.close(),
    );
    return { admit, scheduler: gatewaysScheduler };
  };
  const relayVia = async (inProcess: Relay): Promise<Relay> => {
    const server = await startGrpcServer({ services: [createRelayGrpcServer(inProcess)] });
    const client = createRelayGrpcClient({ address: server.address });
    relayClient = client;
    stops.push(
      () => client.close(),
      () => server.close(),
    );
    return relay;
  };
  const harness = await startTestGateway({ config: c, engine, engines: { 'emb@1': embedder }, admission, records, admitVia, relayVia, cache });
  stops.push(
    () => harness.close(),
    () => admission.stop({ returnLeases: false }),
  );
  return { harness, engine, embedder, admission, records, calls, relayed, outcomes, cache, stored: () => stored };
}

afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function until(check: () => boolean, ms = 3_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: 'fake', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 8, ...extra });
/** Two wordings of one question: the same words in another order and punctuation (an exact miss, a cosine of 1). */
const QUESTION = 'Please tell me the capital of France.';
const PARAPHRASE = 'The capital of France: tell me, please?';

/** Sends `body` to `stack` as tenant `t` (or `apiKey`), reads the answer, returns the cache headers and content. */
async function ask(stack: SplitStack, body: unknown, apiKey?: string): Promise<{ status: number; cache: string | null; tier: string | null; content: string }> {
  const res = await stack.harness.post('/v1/chat/completions', body, {}, apiKey);
  const json = (await res.json()) as { choices: { message: { content: string } }[] };
  return { status: res.status, cache: res.headers.get('x-weir-cache'), tier: res.headers.get('x-weir-cache-tier'), content: json.choices[0].message.content };
}

/** Asks `body` (a miss) and waits until the semantic tier stored it (the embedding's relay job done, the entry searchable). */
async function prime(stack: SplitStack, body: unknown, apiKey?: string) {
  const [records, stored] = [stack.records.length, stack.stored()];
  expect(await ask(stack, body, apiKey)).toMatchObject({ status: 200, cache: 'miss' });
  await until(() => stack.stored() === stored + 1 && stack.records.length === records + 1 && stack.admission.snapshot().held === 0);
}

describe('the semantic cache in the split (embeddings through the relay over gRPC)', () => {
  it('a paraphrase is a semantic hit: no generation, one usage row `semantic`; the cache’s embeddings are relay jobs nobody is billed for', async () => {
    const s = await startSplit();
    await prime(s, chat(QUESTION));
    expect(s.engine.started).toBe(1);
    // The lookup embedded the prompt through the relay; the store reused that vector.
    expect(s.relayed).toEqual({ 'chat.completions': 1, embeddings: 1 });
    expect(s.embedder.texts).toBe(1);

    const hit = await ask(s, chat(PARAPHRASE));
    expect(hit).toEqual({ status: 200, cache: 'hit', tier: 'semantic', content: 'w0 w1 w2 w3 w4 ' });
    expect(s.engine.started).toBe(1);
    expect(s.outcomes).toEqual(['miss', 'hit']);
    expect(s.relayed).toEqual({ 'chat.completions': 1, embeddings: 2 });

    await until(() => s.records.length === 2 && (s.calls.settle ?? 0) === 2);
    // One row per request, none for the two embeddings; the hit at the policy's price, admitted by one Reserve.
    expect(s.records.map((r) => [r.route, r.cacheHit ?? null])).toEqual([
      ['chat.completions', null],
      ['chat.completions', 'semantic'],
    ]);
    expect(s.records[1].costNanoUsd).toBe(Math.round(s.records[0].costNanoUsd * 0.25));
    expect(s.calls).toEqual({ admit: 1, reserve: 1, settle: 2 });
    await until(() => s.admission.snapshot().held === 0);
  });

  it('never hits across tenants or model revisions', async () => {
    const s = await startSplit();
    await prime(s, chat(QUESTION));
    // Tenant `u` has the same policy and asks the same paraphrase.
    expect((await ask(s, chat(PARAPHRASE), s.harness.otherKey.plaintext)).cache).toBe('miss');
    // Alias fake2 → revision fake@2.
    expect((await ask(s, chat(PARAPHRASE, { model: 'fake2' }))).cache).toBe('miss');
    expect(s.engine.started).toBe(3);
    expect(s.outcomes).toEqual(['miss', 'miss', 'miss']);
    // The original partition still answers.
    expect(await ask(s, chat(PARAPHRASE))).toMatchObject({ cache: 'hit', tier: 'semantic' });
    expect(s.engine.started).toBe(3);
  });

  it('the guard turns a negated or renumbered prompt into a miss, though the vectors are equal', async () => {
    const s = await startSplit();
    await prime(s, chat('Is the bridge to Paris open today?'));
    expect((await ask(s, chat('Is the bridge to Paris not open today?'))).cache).toBe('miss');
    await prime(s, chat('Give me 3 reasons to visit Paris'));
    expect((await ask(s, chat('Give me 4 reasons to visit Paris'))).cache).toBe('miss');
    expect((await ask(s, chat('give me 3 reasons to visit Paris!'))).tier).toBe('semantic');
    expect(s.outcomes).toEqual(['miss', 'guarded_miss', 'miss', 'guarded_miss', 'hit']);
    expect(s.engine.started).toBe(4);
  });

  it('an embedding slower than the lookup budget is a miss: the request is answered, the relay is told to stop the embedding, nothing is billed for it', async () => {
    const s = await startSplit({ semanticLookupTimeoutMs: 100 });
    s.embedder.delayMs = 5_000;
    const answer = await ask(s, chat(QUESTION));
    expect(answer).toEqual({ status: 200, cache: 'miss', tier: null, content: 'w0 w1 w2 w3 w4 ' });
    expect(s.engine.started).toBe(1);
    // The lookup's embedding and the store's retry were both given up and stopped on the replica.
    await until(() => s.embedder.aborted === 2);
    expect(s.embedder.texts).toBe(0);
    expect(s.outcomes).toEqual(['error']);
    await until(() => s.records.length === 1 && s.admission.snapshot().held === 0);
    expect(s.records.map((r) => r.route)).toEqual(['chat.completions']);

    // Nothing was stored semantically (the exact tier has the answer); once the embedding model
    // is quick again, the same gateway caches as usual.
    expect(s.stored()).toBe(0);
    s.embedder.delayMs = 0;
    await prime(s, chat(PARAPHRASE));
    expect(await ask(s, chat('France, the capital of: please tell me'))).toMatchObject({ cache: 'hit', tier: 'semantic' });
    expect(s.engine.started).toBe(2);
  });

  describe('with the Postgres store shared by the fleet (PGlite)', () => {
    let database: TestDatabase;
    beforeAll(async () => {
      database = await createTestDatabase({ kind: 'pglite' });
    }, 30_000);
    afterAll(() => database.close());

    it('a paraphrase asked at one gateway is a semantic hit at another', async () => {
      const a = await startSplit({ store: createPgSemanticStore(database.db) });
      const b = await startSplit({ store: createPgSemanticStore(database.db) });
      await prime(a, chat(QUESTION));
      // Stored through a: b's exact tier (in its process) is empty, the semantic store is shared.
      const rows = await database.db.selectFrom('semantic_cache_entries').select((e) => e.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
      expect(Number(rows.n)).toBe(1);
      expect(await ask(b, chat(PARAPHRASE))).toMatchObject({ status: 200, cache: 'hit', tier: 'semantic', content: 'w0 w1 w2 w3 w4 ' });
      expect(b.engine.started).toBe(0);
      // Tenant `u` at b still misses.
      expect((await ask(b, chat(PARAPHRASE), b.harness.otherKey.plaintext)).cache).toBe('miss');
      expect(b.engine.started).toBe(1);
    });
  });
});

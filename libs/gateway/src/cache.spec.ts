/**
 * The response cache on the request path (issue 15 item 1; docs/caching.md), through the real
 * app, pipeline, scheduler and relay over a scripted engine that counts its generations: a hit
 * never reaches the engine, is admitted (reserved and settled), recorded as one usage row with
 * `cacheHit` at the tenant's cache price, and is answered with the same events as the miss.
 */
import { type AdmissionService, type EngineAdapter, type EngineEvent, type EngineRequest, type PlatformConfig, type ReservationRequest, type TenantCachePolicy, type TenantModeration, type UsageRecord } from '@weir/core';
import { createMemoryExactTier, createResponseCache, type MemoryExactTier } from '@weir/cache';
import { compileModerationPolicies, type ModerationPolicies } from '@weir/moderation';
import { priceUsage } from '@weir/ledger';
import { createParser } from 'eventsource-parser';
import type { CacheEvent } from './pipeline';
import { createMemoryIdempotencyStore } from './idempotency';
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

const POLICY: TenantCachePolicy = { exact: { enabled: true, ttlMs: 60_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.25 };

/** Events or bodies without the `weir` object's `cost_usd` and `overhead_ms` (what differs between a miss, its hit and a replay). */
function withoutCost(events: unknown[]): unknown[] {
  return events.map((e) => {
    if (typeof e !== 'object' || e === null || !('weir' in e)) return e;
    const { cost_usd: _c, overhead_ms: _o, ...weir } = (e as { weir: Record<string, unknown> }).weir;
    return { ...e, weir };
  });
}
const PRICING = { inputPerMTok: 2_000, outputPerMTok: 8_000, cachedInputPerMTok: 1_000 };

function configWith(policyT: TenantCachePolicy | undefined, policyU: TenantCachePolicy | undefined = policyT): PlatformConfig {
  const base = twoTenantConfig(fakeRevision(PRICING));
  return {
    ...base,
    tenants: base.tenants.map((t) => {
      const p = t.id === 't' ? policyT : policyU;
      return p ? { ...t, cache: p } : t;
    }),
  };
}

let harness: TestGateway;
let engine: ReturnType<typeof countingEngine>;
let reserves: ReservationRequest[];
let settles: { id: string; cost: number }[];
let releases: string[];
let records: UsageRecord[];
let now: number;
let tier: MemoryExactTier;
let events: CacheEvent[];
/** When set, the next reserve is refused with this (then cleared). */
let refuseNext: 'budget_exhausted' | undefined;

async function start(config: PlatformConfig, moderation?: ModerationPolicies) {
  engine = countingEngine();
  reserves = [];
  refuseNext = undefined;
  settles = [];
  releases = [];
  records = [];
  events = [];
  now = 1_000_000;
  let n = 0;
  const admission: AdmissionService = {
    async reserve(r) {
      reserves.push(r);
      if (refuseNext) {
        const reason = refuseNext;
        refuseNext = undefined;
        return { ok: false, reason, message: 'The monthly budget of tenant t is spent.' };
      }
      return { ok: true, reservationId: `rsv_${++n}` };
    },
    async settle(id, s) {
      settles.push({ id, cost: s.costNanoUsd });
    },
    async release(id) {
      releases.push(id);
    },
  };
  tier = createMemoryExactTier({ now: () => now });
  harness = await startTestGateway({
    config,
    engine,
    admission,
    records,
    idempotency: createMemoryIdempotencyStore(),
    cache: createResponseCache({ tiers: [tier] }),
    observer: { onCache: (e) => events.push(e) },
    ...(moderation ? { moderation } : {}),
  });
}

afterEach(async () => {
  await harness?.close();
});

/** Waits until `check()` holds (the background store and settlement after an answer). */
async function until(check: () => boolean, ms = 2_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'fake', messages: [{ role: 'user', content: 'hello there' }], temperature: 0, max_tokens: 8, ...extra });

/** The SSE events of a response, with the per-response fields (id, created, timings) blanked. */
async function sseEvents(res: Response): Promise<unknown[]> {
  const text = await res.text();
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
  parser.feed(text);
  return out;
}

describe('the exact cache on /v1/chat/completions', () => {
  it('a repeat is a hit: no upstream call, the same answer, one usage row with cache_hit at the policy price', async () => {
    await start(configWith(POLICY));
    const first = await harness.post('/v1/chat/completions', chat());
    expect(first.status).toBe(200);
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    const a = (await first.json()) as { choices: { message: { content: string } }[]; usage: unknown };
    await until(() => tier.stats().entries === 1);

    const second = await harness.post('/v1/chat/completions', chat());
    expect(second.status).toBe(200);
    expect(second.headers.get('x-weir-cache')).toBe('hit');
    expect(second.headers.get('x-weir-cache-tier')).toBe('exact');
    expect(second.headers.get('x-weir-model-revision')).toBe('fake@1');
    const b = (await second.json()) as typeof a;
    expect(b.choices).toEqual(a.choices);
    expect(b.usage).toEqual(a.usage);
    expect(engine.started).toBe(1);

    await until(() => records.length === 2 && settles.length === 2);
    const [miss, hit] = records;
    expect(miss.cacheHit).toBeUndefined();
    expect(hit.cacheHit).toBe('exact');
    expect(hit.inputTokens).toBe(miss.inputTokens);
    expect(hit.outputTokens).toBe(miss.outputTokens);
    const full = priceUsage(PRICING, { inputTokens: miss.inputTokens, outputTokens: miss.outputTokens, cachedInputTokens: 0 });
    expect(miss.costNanoUsd).toBe(full);
    expect(hit.costNanoUsd).toBe(Math.round(full * 0.25));
    // Admitted like any request: reserved (its worst case is what it is billed) and settled.
    expect(reserves).toHaveLength(2);
    expect(reserves[1]).toMatchObject({ inputTokens: miss.inputTokens, maxOutputTokens: miss.outputTokens, worstCaseCostNanoUsd: hit.costNanoUsd });
    expect(settles[1]).toEqual({ id: 'rsv_2', cost: hit.costNanoUsd });
    expect(events.map((e) => e.result)).toEqual(['miss', 'hit']);
    expect(events[1]).toMatchObject({ tier: 'exact', savedNanoUsd: full - hit.costNanoUsd });
  });

  it('a streamed hit has the same events as the streamed miss (chunks, finish, usage chunk, [DONE])', async () => {
    await start(configWith(POLICY));
    const body = chat({ stream: true, stream_options: { include_usage: true } });
    const missRes = await harness.post('/v1/chat/completions', body);
    expect(missRes.headers.get('x-weir-cache')).toBe('miss');
    const miss = await sseEvents(missRes);
    await until(() => tier.stats().entries === 1);
    const hitRes = await harness.post('/v1/chat/completions', body);
    expect(hitRes.headers.get('x-weir-cache')).toBe('hit');
    expect(hitRes.headers.get('content-type')).toMatch(/text\/event-stream/);
    const hit = await sseEvents(hitRes);
    // The same events but for what each cost and Weir's overhead: the hit reports its policy price.
    const costOf = (events: unknown[]) => (events.at(-2) as { weir: { cost_usd: number } }).weir.cost_usd;
    expect(costOf(hit)).toBeCloseTo(costOf(miss) * 0.25, 12);
    expect(withoutCost(hit)).toEqual(withoutCost(miss));
    expect(hit.at(-1)).toBe('[DONE]');
    expect(hit.at(-2)).toMatchObject({ choices: [], usage: { completion_tokens: 5 } });
    expect(engine.started).toBe(1);
  });

  it('a streamed miss serves a non-streamed hit (stream is not in the key)', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat({ stream: true }))).text();
    await until(() => tier.stats().entries === 1);
    const res = await harness.post('/v1/chat/completions', chat());
    expect(res.headers.get('x-weir-cache')).toBe('hit');
    expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content).toBe('w0 w1 w2 w3 w4 ');
  });

  it('a hit is refused by admission like any request: 429, nothing served, nothing recorded', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1 && records.length === 1);
    refuseNext = 'budget_exhausted';
    const refused = await harness.post('/v1/chat/completions', chat());
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('budget_exhausted');
    expect(refused.headers.get('x-should-retry')).toBe('false');
    await new Promise((r) => setTimeout(r, 20));
    expect(records).toHaveLength(1);
    expect(settles).toHaveLength(1);
    expect(engine.started).toBe(1);
  });

  it('two tenants with the same prompt never share an entry', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1);
    const other = await harness.post('/v1/chat/completions', chat(), {}, harness.otherKey.plaintext);
    expect(other.headers.get('x-weir-cache')).toBe('miss');
    await other.json();
    expect(engine.started).toBe(2);
    await until(() => tier.stats().entries === 2);
    expect(tier.stats().tenants).toBe(2);
  });

  it('an output-changing parameter is a miss; an irrelevant one is a hit', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1);
    const changed = await harness.post('/v1/chat/completions', chat({ max_tokens: 7 }));
    expect(changed.headers.get('x-weir-cache')).toBe('miss');
    await changed.json();
    const same = await harness.post('/v1/chat/completions', chat({ metadata: { run: '7' } }));
    expect(same.headers.get('x-weir-cache')).toBe('hit');
    await same.json();
    expect(engine.started).toBe(2);
  });

  it('personalised traffic (`user`) is neither served from nor stored in the cache', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1);
    const res = await harness.post('/v1/chat/completions', chat({ user: 'end-user-1' }));
    expect(res.headers.get('x-weir-cache')).toBe('bypass');
    await res.json();
    expect(engine.started).toBe(2);
    await new Promise((r) => setTimeout(r, 20));
    expect(tier.stats().entries).toBe(1);
    expect(events.at(-1)).toMatchObject({ result: 'bypass', reason: 'personalised' });
  });

  it('a use case the policy marks personalised is never cached', async () => {
    await start(configWith({ ...POLICY, personalisedUseCases: ['coach'] }));
    for (let i = 0; i < 2; i++) {
      const res = await harness.post('/v1/chat/completions', chat(), { 'x-weir-use-case': 'coach' });
      expect(res.headers.get('x-weir-cache')).toBe('bypass');
      await res.json();
    }
    expect(engine.started).toBe(2);
  });

  it('Cache-Control: no-cache skips the read but stores; no-store does neither', async () => {
    await start(configWith(POLICY));
    const noStore = await harness.post('/v1/chat/completions', chat(), { 'cache-control': 'no-store' });
    expect(noStore.headers.get('x-weir-cache')).toBe('bypass');
    await noStore.json();
    await new Promise((r) => setTimeout(r, 20));
    expect(tier.stats().entries).toBe(0);
    const noCache = await harness.post('/v1/chat/completions', chat(), { 'cache-control': 'no-cache' });
    expect(noCache.headers.get('x-weir-cache')).toBe('bypass');
    await noCache.json();
    await until(() => tier.stats().entries === 1);
    const again = await harness.post('/v1/chat/completions', chat({ weir_cache: 'no-cache' }));
    expect(again.headers.get('x-weir-cache')).toBe('bypass');
    await again.json();
    const hit = await harness.post('/v1/chat/completions', chat());
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    await hit.json();
    expect(engine.started).toBe(3);
  });

  it('an entry expires after the policy TTL', async () => {
    await start(configWith({ ...POLICY, exact: { enabled: true, ttlMs: 10_000 } }));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1);
    now += 9_999;
    expect((await harness.post('/v1/chat/completions', chat())).headers.get('x-weir-cache')).toBe('hit');
    now += 2;
    const expired = await harness.post('/v1/chat/completions', chat());
    expect(expired.headers.get('x-weir-cache')).toBe('miss');
    await expired.json();
    expect(engine.started).toBe(2);
  });

  it('a non-deterministic request bypasses unless it opts in (when the policy allows it)', async () => {
    await start(configWith(POLICY, { ...POLICY, allowOptIn: false }));
    const hot = chat({ temperature: 0.8 });
    const bypass = await harness.post('/v1/chat/completions', hot);
    expect(bypass.headers.get('x-weir-cache')).toBe('bypass');
    await bypass.json();
    const optIn = await harness.post('/v1/chat/completions', { ...hot, weir_cache: 'opt_in' });
    expect(optIn.headers.get('x-weir-cache')).toBe('miss');
    await optIn.json();
    await until(() => tier.stats().entries === 1);
    expect((await harness.post('/v1/chat/completions', { ...hot, weir_cache: 'opt_in' })).headers.get('x-weir-cache')).toBe('hit');
    const refused = await harness.post('/v1/chat/completions', { ...hot, weir_cache: 'opt_in' }, {}, harness.otherKey.plaintext);
    expect(refused.headers.get('x-weir-cache')).toBe('bypass');
    await refused.json();
  });

  it('templates partition the cache; an undeclared template is a 400 that holds nothing', async () => {
    await start(configWith({ ...POLICY, templates: ['faq'] }));
    await (await harness.post('/v1/chat/completions', chat({ weir_prompt_template: 'faq@1' }))).json();
    await until(() => tier.stats().entries === 1);
    const v2 = await harness.post('/v1/chat/completions', chat(), { 'x-weir-prompt-template': 'faq@2' });
    expect(v2.headers.get('x-weir-cache')).toBe('miss');
    await v2.json();
    const v1 = await harness.post('/v1/chat/completions', chat(), { 'x-weir-prompt-template': 'faq@1' });
    expect(v1.headers.get('x-weir-cache')).toBe('hit');
    await v1.json();
    const none = await harness.post('/v1/chat/completions', chat());
    expect(none.headers.get('x-weir-cache')).toBe('miss');
    await none.json();
    const reservedBefore = reserves.length;
    const bad = await harness.post('/v1/chat/completions', chat({ weir_prompt_template: 'other@1' }));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe('weir_prompt_template');
    expect(reserves.length).toBe(reservedBefore);
  });

  it('a malformed cache field is a 400 even when the policy is off', async () => {
    await start(configWith(undefined));
    const res = await harness.post('/v1/chat/completions', chat({ weir_cache: 'always' }));
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('weir_cache');
    expect(engine.started).toBe(0);
  });

  it('with the policy off: no header, nothing stored, every request reaches the engine', async () => {
    await start(configWith(undefined));
    for (let i = 0; i < 2; i++) {
      const res = await harness.post('/v1/chat/completions', chat());
      expect(res.headers.get('x-weir-cache')).toBeNull();
      await res.json();
    }
    expect(engine.started).toBe(2);
    expect(tier.stats().entries).toBe(0);
    expect(events).toEqual([]);
  });

  it('an idempotent replay is a replay, not a cache hit; a later unkeyed repeat is a hit', async () => {
    await start(configWith(POLICY));
    const first = await harness.post('/v1/chat/completions', chat(), { 'idempotency-key': 'k-1' });
    await first.json();
    await until(() => tier.stats().entries === 1 && records.length === 1);
    const replay = await harness.post('/v1/chat/completions', chat(), { 'idempotency-key': 'k-1' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('x-weir-cache')).toBeNull();
    await replay.json();
    const hit = await harness.post('/v1/chat/completions', chat());
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    await hit.json();
    await until(() => records.length === 2);
    expect(records.map((r) => r.cacheHit ?? null)).toEqual([null, 'exact']);
    expect(engine.started).toBe(1);
  });

  it('a keyed hit leaves its result for retries of the same key', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1);
    const hit = await harness.post('/v1/chat/completions', chat(), { 'idempotency-key': 'k-2' });
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    const a = await hit.json();
    const replay = await harness.post('/v1/chat/completions', chat(), { 'idempotency-key': 'k-2' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    // A replay bills nothing new: no cost or overhead, the rest the same.
    expect(replay.headers.get('x-weir-cost-usd')).toBeNull();
    expect(await replay.json()).toEqual(withoutCost([a])[0]);
    await until(() => records.length === 2);
    expect(engine.started).toBe(1);
  });
});

describe('the exact cache on the other routes', () => {
  it.each([
    ['/v1/completions', { model: 'fake', prompt: 'once upon a time', temperature: 0, max_tokens: 8 }],
    ['/v1/generations', { model_alias: 'fake', input: 'once upon a time', temperature: 0, max_output_tokens: 8 }],
    ['/v1/responses', { model: 'fake', input: 'once upon a time', temperature: 0, max_output_tokens: 8 }],
  ])('%s: a repeat is a hit with the same body', async (path, body) => {
    await start(configWith(POLICY));
    const strip = (o: Record<string, unknown>) => {
      const { id: _id, created: _c, created_at: _ca, generation_id: _g, request_id: _r, ...rest } = o;
      // The cost (the hit is billed at the cache price) and Weir's overhead differ by design.
      return JSON.stringify(rest)
        .replace(/(gen|resp|msg)_[A-Za-z0-9_-]+/g, '<id>')
        .replace(/"cost_usd":[0-9.e-]+/g, '"cost_usd":0')
        .replace(/"overhead_ms":[0-9.e-]+/g, '"overhead_ms":0');
    };
    const first = await harness.post(path, body);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    const a = (await first.json()) as Record<string, unknown>;
    await until(() => tier.stats().entries === 1);
    const second = await harness.post(path, body);
    expect(second.headers.get('x-weir-cache')).toBe('hit');
    const b = (await second.json()) as Record<string, unknown>;
    expect(strip(b)).toBe(strip(a));
    expect(engine.started).toBe(1);
  });

  it('/v1/generations: a streamed hit has the same events as the streamed miss (start, deltas, end)', async () => {
    await start(configWith(POLICY));
    const body = { model_alias: 'fake', input: 'once upon a time', temperature: 0, max_output_tokens: 8, stream: true };
    const events = async (res: Response) => {
      const out: { event: string; data: Record<string, unknown> }[] = [];
      const parser = createParser({ onEvent: (e) => void out.push({ event: e.event ?? 'message', data: JSON.parse(e.data) as Record<string, unknown> }) });
      parser.feed(await res.text());
      // Per-response ids and the cost (the hit is billed at the cache price) differ by design.
      return out.map(({ event, data }) => {
        const { generation_id: _g, request_id: _r, usage, ...rest } = data;
        return { event, ...rest, ...(usage ? { usage: { ...(usage as object), cost_usd: 0 } } : {}) };
      });
    };
    const miss = await harness.post('/v1/generations', body);
    expect(miss.headers.get('x-weir-cache')).toBe('miss');
    const a = await events(miss);
    await until(() => tier.stats().entries === 1);
    const hit = await harness.post('/v1/generations', body);
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    const b = await events(hit);
    expect(b).toEqual(a);
    expect(b.map((e) => e.event)).toEqual(['start', 'delta', 'delta', 'delta', 'delta', 'delta', 'end']);
    expect(engine.started).toBe(1);
  });

  it('the same prompt on two routes is two entries (the wire shape differs)', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/completions', { model: 'fake', prompt: 'hi there', temperature: 0, max_tokens: 8 })).json();
    const gen = await harness.post('/v1/generations', { model_alias: 'fake', input: 'hi there', temperature: 0, max_output_tokens: 8 });
    expect(gen.headers.get('x-weir-cache')).toBe('miss');
    await gen.json();
    expect(engine.started).toBe(2);
  });
});

describe('personalisation and Cache-Control (breaker15 findings 01 and 09)', () => {
  /** Seeds the entry of `chat()` with one miss, then sends `extra`/`headers` and returns its x-weir-cache. */
  async function afterSeed(extra: Record<string, unknown>, headers?: Record<string, string>): Promise<string | null> {
    const res = await harness.post('/v1/chat/completions', chat(extra), headers);
    const status = res.headers.get('x-weir-cache');
    await res.json();
    return status;
  }

  it('a `user` longer than 256 characters is personalised: never served, never stored', async () => {
    await start(configWith(POLICY));
    const alice = `alice-${'a'.repeat(300)}`;
    const bob = `bob-${'b'.repeat(300)}`;
    expect(await afterSeed({ user: alice })).toBe('bypass');
    await new Promise((r) => setTimeout(r, 20));
    expect(tier.stats().entries).toBe(0);
    expect(await afterSeed({ user: bob })).toBe('bypass');
    expect(engine.started).toBe(2);
    // An entry stored by anonymous traffic is not served to a long-`user` request either.
    expect(await afterSeed({})).toBe('miss');
    await until(() => tier.stats().entries === 1);
    expect(await afterSeed({ user: bob })).toBe('bypass');
    expect(engine.started).toBe(4);
    expect(events.at(-1)).toMatchObject({ result: 'bypass', reason: 'personalised' });
  });

  it('`safety_identifier` (chat and responses) is personalised; an empty `user` is no end user; `prompt_cache_key` is in the key', async () => {
    await start(configWith(POLICY));
    expect(await afterSeed({})).toBe('miss');
    await until(() => tier.stats().entries === 1);
    expect(await afterSeed({ safety_identifier: 'user-1234' })).toBe('bypass');
    expect(await afterSeed({ user: '' })).toBe('hit');
    expect(engine.started).toBe(2);
    const responses = { model: 'fake', input: 'hello there', temperature: 0, max_output_tokens: 8 };
    const first = await harness.post('/v1/responses', responses);
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    await first.json();
    await until(() => tier.stats().entries === 2);
    const personal = await harness.post('/v1/responses', { ...responses, safety_identifier: 'user-1234' });
    expect(personal.headers.get('x-weir-cache')).toBe('bypass');
    await personal.json();
    const longUser = await harness.post('/v1/responses', { ...responses, user: 'u'.repeat(500) });
    expect(longUser.headers.get('x-weir-cache')).toBe('bypass');
    await longUser.json();
    expect(engine.started).toBe(5);
    // `prompt_cache_key` (OpenAI's per-user replacement of `user` for caching) scopes the entries.
    expect(await afterSeed({ prompt_cache_key: 'alice' })).toBe('miss');
    await until(() => tier.stats().entries === 3);
    expect(await afterSeed({ prompt_cache_key: 'bob' })).toBe('miss');
    await until(() => tier.stats().entries === 4);
    expect(await afterSeed({ prompt_cache_key: 'alice' })).toBe('hit');
  });

  it.each([
    ['no-store;', 0],
    ['NO-STORE', 0],
    ['private, no-store', 0],
    ['no-cache="x"', 1],
    ['max-age=0', 1],
    ['Max-Age=0, private', 1],
  ])('Cache-Control %p is not answered from the cache (and stores %p entries)', async (cc, stored) => {
    await start(configWith(POLICY));
    expect(await afterSeed({}, { 'cache-control': cc })).toBe('bypass');
    await new Promise((r) => setTimeout(r, 20));
    if (stored) await until(() => tier.stats().entries === 1);
    expect(tier.stats().entries).toBe(stored);
    expect(await afterSeed({}, { 'cache-control': cc })).toBe('bypass');
    expect(engine.started).toBe(2);
  });

  it('an unknown directive or max-age > 0 does not refuse the cache', async () => {
    await start(configWith(POLICY));
    expect(await afterSeed({})).toBe('miss');
    await until(() => tier.stats().entries === 1);
    expect(await afterSeed({}, { 'cache-control': 'nostore' })).toBe('hit');
    expect(await afterSeed({}, { 'cache-control': 'max-age=600' })).toBe('hit');
    expect(engine.started).toBe(1);
  });

  it('a personalised use case matches in any case (x-weir-use-case: Coach for `coach`)', async () => {
    await start(configWith({ ...POLICY, personalisedUseCases: ['coach'] }));
    for (const useCase of ['Coach', 'COACH', 'coach']) {
      expect(await afterSeed({}, { 'x-weir-use-case': useCase })).toBe('bypass');
    }
    await new Promise((r) => setTimeout(r, 20));
    expect(tier.stats().entries).toBe(0);
    expect(engine.started).toBe(3);
  });
});

describe('a recent budget refusal and cache hits (breaker15 finding: a refusal blocks cheap hits)', () => {
  it('after an expensive request is refused for budget, a hit still goes to admission (and is served); a miss gets the remembered refusal without a reservation', async () => {
    await start(configWith(POLICY));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1 && records.length === 1);
    refuseNext = 'budget_exhausted';
    const expensive = await harness.post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'a long expensive question' }], max_tokens: 16 }));
    expect(expensive.status).toBe(429);
    await expensive.json();
    const reservesBefore = reserves.length;
    // The hit: admission is asked (its worst case is the hit's price) and accepts it.
    const hit = await harness.post('/v1/chat/completions', chat());
    expect(hit.status).toBe(200);
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    await hit.json();
    expect(reserves.length).toBe(reservesBefore + 1);
    // A miss within the hold gets the remembered refusal after the lookup: no reservation, no engine.
    const miss = await harness.post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'another question' }] }));
    expect(miss.status).toBe(429);
    const body = (await miss.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('budget_exhausted');
    expect(body.error.message).toMatch(/^recently refused/);
    expect(reserves.length).toBe(reservesBefore + 1);
    expect(engine.started).toBe(1);
  });
});

describe('moderation of cache hits (docs/caching.md "Moderation")', () => {
  /** Tenant t's moderation, switchable between requests (as a policy change would). */
  let current: TenantModeration | undefined;
  const switchable = (base: PlatformConfig): ModerationPolicies => {
    let compiledFor: TenantModeration | undefined;
    let compiled = compileModerationPolicies(base);
    const now = () => {
      if (compiledFor !== current) {
        compiledFor = current;
        compiled = compileModerationPolicies({ ...base, tenants: base.tenants.map((t) => (t.id === 't' && current ? { ...t, moderation: current } : t)) });
      }
      return compiled;
    };
    return { of: (k) => now().of(k), get any() { return now().any; }, engine: (n) => now().engine(n) };
  };

  it.each([false, true])('input: a hit the rules engine blocks is 400 content_filter, its reservation released, nothing billed (stream %s)', async (stream) => {
    current = undefined;
    const config = configWith(POLICY);
    await start(config, switchable(config));
    expect((await harness.post('/v1/chat/completions', chat({ stream }))).status).toBe(200);
    await until(() => tier.stats().entries === 1 && records.length === 1);
    current = { input: { engine: 'rules', fail: 'closed', timeoutMs: 1_000 }, rules: { lists: [{ category: 'violence', phrases: ['hello'] }] } };
    const res = await harness.post('/v1/chat/completions', chat({ stream }));
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string } };
    expect(body.error.code).toBe('content_filter');
    expect(JSON.stringify(body)).not.toContain('w0');
    await until(() => records.length === 2);
    expect(records[1]).toMatchObject({ finishReason: 'content_filter', outputTokens: 0, costNanoUsd: 0 });
    expect(records[1].cacheHit).toBeUndefined();
    expect(releases).toEqual(['rsv_2']);
    expect(settles).toHaveLength(1);
    expect(engine.started).toBe(1);
  });

  it('input: a keyed request and an unkeyed miss blocked by the rules engine never reach the engine', async () => {
    current = { input: { engine: 'rules', fail: 'closed', timeoutMs: 1_000 }, rules: { lists: [{ category: 'violence', phrases: ['hello'] }] } };
    const config = configWith(POLICY);
    await start(config, switchable(config));
    const unkeyed = await harness.post('/v1/chat/completions', chat());
    expect(unkeyed.status).toBe(400);
    const keyed = await harness.post('/v1/chat/completions', chat(), { 'idempotency-key': 'k-blocked-1' });
    expect(keyed.status).toBe(400);
    expect(((await keyed.json()) as { error: { code: string } }).error.code).toBe('content_filter');
    await until(() => records.length === 2);
    expect(records.map((r) => r.finishReason)).toEqual(['content_filter', 'content_filter']);
    expect(engine.started).toBe(0);
    expect(tier.stats().entries).toBe(0);
  });

  it('output: a cached answer the output policy now flags is not served: the entry is dropped and the request runs live, cut there', async () => {
    current = undefined;
    const config = configWith(POLICY);
    await start(config, switchable(config));
    const first = (await (await harness.post('/v1/chat/completions', chat())).json()) as { choices: { message: { content: string } }[] };
    expect(first.choices[0].message.content).toBe('w0 w1 w2 w3 w4 ');
    await until(() => tier.stats().entries === 1 && records.length === 1);
    current = { output: { engine: 'rules', fail: 'closed', timeoutMs: 1_000, windowChars: 8, overlapChars: 4 }, rules: { lists: [{ category: 'violence', phrases: ['w3'] }] } };
    const res = await harness.post('/v1/chat/completions', chat());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-cache')).toBe('miss');
    const body = (await res.json()) as { choices: { message: { content: string }; finish_reason: string }[] };
    expect(body.choices[0].finish_reason).toBe('content_filter');
    expect(body.choices[0].message.content).not.toContain('w3');
    expect(engine.started).toBe(2);
    // Dropped, and the cut answer is not stored: the next request runs live again.
    expect(tier.stats().entries).toBe(0);
    await until(() => records.length === 2);
    expect(records[1].cacheHit).toBeUndefined();
    expect(events.map((e) => e.result)).toEqual(['miss', 'miss']);
    // A clean output policy serves the hit.
    current = { output: { engine: 'rules', fail: 'closed', timeoutMs: 1_000, windowChars: 8, overlapChars: 4 }, rules: { lists: [{ category: 'violence', phrases: ['w9'] }] } };
    await (await harness.post('/v1/chat/completions', chat({ max_tokens: 9 }))).json();
    await until(() => tier.stats().entries === 1);
    const hit = await harness.post('/v1/chat/completions', chat({ max_tokens: 9 }));
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    expect(((await hit.json()) as typeof first).choices[0].message.content).toBe('w0 w1 w2 w3 w4 ');
  });
});

describe('the exact cache on /v1/messages (Anthropic Messages API)', () => {
  const message = (extra: Record<string, unknown> = {}) => ({ model: 'fake', max_tokens: 8, temperature: 0, system: 'Be brief.', messages: [{ role: 'user', content: 'hello there' }], ...extra });

  it('a repeat is a hit with the same message and stream; another system prompt is a miss; metadata.user_id is personalised (bypass)', async () => {
    await start(configWith(POLICY));
    const first = await harness.post('/v1/messages', message());
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    const a = (await first.json()) as { content: unknown; usage: unknown; stop_reason: string };
    await until(() => tier.stats().entries === 1);

    const second = await harness.post('/v1/messages', message());
    expect(second.headers.get('x-weir-cache')).toBe('hit');
    const b = (await second.json()) as typeof a;
    expect(b.content).toEqual(a.content);
    expect(b.usage).toEqual(a.usage);
    expect(b.stop_reason).toBe(a.stop_reason);
    expect(engine.started).toBe(1);

    const streamed = await harness.post('/v1/messages', message({ stream: true }));
    expect(streamed.headers.get('x-weir-cache')).toBe('hit');
    const deltas = (await sseEvents(streamed)).filter((e) => (e as { type: string }).type === 'content_block_delta');
    expect(deltas.map((e) => (e as { delta: { text: string } }).delta.text).join('')).toBe((a.content as { text: string }[])[0].text);
    expect(engine.started).toBe(1);

    const otherSystem = await harness.post('/v1/messages', message({ system: 'Be long.' }));
    expect(otherSystem.headers.get('x-weir-cache')).toBe('miss');
    const personal = await harness.post('/v1/messages', message({ metadata: { user_id: 'u-1' } }));
    expect(personal.headers.get('x-weir-cache')).toBe('bypass');
    expect(engine.started).toBe(3);
  });
});

/**
 * Idempotency keys, retained streams (`GET /v1/generations/{id}/events` with Last-Event-ID)
 * and the admission headers, through the real express app, pipeline, scheduler and relay over
 * a scripted engine and a counting fake admission.
 */
import { type AdmissionService, type EngineAdapter, type EngineEvent, type EngineRequest, type ReservationRequest, type ReserveResult, type UsageRecord, WeirError } from '@weir/core';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import type { Gateway } from './app';
import { createMemoryIdempotencyStore, requestBodySha256 } from './idempotency';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const config = twoTenantConfig();

/** An engine that streams `tokens` words, `delayMs` apart, and counts its generations. */
function scriptedEngine(tokens: number, delayMs: number): EngineAdapter & { started: number; delayMs: number; failAfter?: number; refuse?: WeirError } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    started: 0,
    delayMs,
    failAfter: undefined as number | undefined,
    refuse: undefined as WeirError | undefined,
    async countInputTokens(input: EngineRequest['input']) {
      return input.kind === 'text' ? input.text.split(/\s+/).filter(Boolean).length : 4;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.started++;
      if (engine.refuse) throw engine.refuse;
      let n = 0;
      for (; n < Math.min(tokens, request.maxOutputTokens); n++) {
        if (request.signal.aborted) break;
        if (engine.failAfter !== undefined && n === engine.failAfter) throw new WeirError('upstream_error', 'the upstream closed mid-stream');
        await new Promise((r) => setTimeout(r, engine.delayMs));
        yield { type: 'delta', text: `w${n} `, tokens: 1 };
      }
      yield { type: 'end', reason: request.signal.aborted ? 'aborted' : n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 2, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

let harness: TestGateway;
let url: string;
let gateway: Gateway;
let key: TestGateway['key'];
let otherKey: TestGateway['otherKey'];
let engine: ReturnType<typeof scriptedEngine>;
let reserves: ReservationRequest[];
let settles: string[];
let releases: string[];
let nextReserve: (() => ReserveResult) | undefined;
let records: UsageRecord[];
let store: ReturnType<typeof createMemoryIdempotencyStore>;

beforeEach(async () => {
  engine = scriptedEngine(5, 2);
  reserves = [];
  settles = [];
  releases = [];
  nextReserve = undefined;
  store = createMemoryIdempotencyStore();
  let n = 0;
  const admission: AdmissionService = {
    async reserve(r) {
      reserves.push(r);
      const forced = nextReserve?.();
      nextReserve = undefined;
      return (
        forced ?? {
          ok: true,
          reservationId: `rsv_${++n}`,
          rateLimits: { requests: { limit: 60, remaining: 60 - n, resetMs: n * 1000 }, tokens: { limit: 10_000, remaining: 10_000 - n * 13, resetMs: 1500 } },
        }
      );
    },
    async settle(id) {
      settles.push(id);
    },
    async release(id) {
      releases.push(id);
    },
  };
  harness = await startTestGateway({ config, engine, admission, idempotency: store });
  ({ url, gateway, key, otherKey, records } = harness);
});

afterEach(() => harness.close());

const post = (path: string, body: unknown, extra: Record<string, string> = {}, apiKey?: string) => harness.post(path, body, extra, apiKey);
const get = (path: string, extra: Record<string, string> = {}) => harness.get(path, extra);

async function sse(res: Response): Promise<EventSourceMessage[]> {
  const out: EventSourceMessage[] = [];
  const p = createParser({ onEvent: (e) => out.push(e) });
  p.feed(await res.text());
  return out;
}

/** Waits until the async settlement after a stream's end has run. */
async function until(check: () => boolean, ms = 2_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('requestBodySha256', () => {
  it('ignores key order, whitespace and delivery fields, and tells different requests apart', () => {
    const a = requestBodySha256('generations', { model_alias: 'm', input: 'hi', max_output_tokens: 3, stream: true, request_id: 'x' });
    const b = requestBodySha256('generations', JSON.parse('{ "max_output_tokens": 3, "input": "hi",  "model_alias": "m" }'));
    expect(a).toBe(b);
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(requestBodySha256('generations', { model_alias: 'm', input: 'hi', max_output_tokens: 4 })).not.toBe(b);
    expect(requestBodySha256('completions', { model_alias: 'm', input: 'hi', max_output_tokens: 3 })).not.toBe(b);
  });
});

describe('memory idempotency store', () => {
  it('claims once, conflicts until expiry, completes only for the claimant, and purges', async () => {
    let now = 1_000;
    const store = createMemoryIdempotencyStore({ now: () => now });
    const claim = { tenantId: 't', requestId: 'r', bodySha256: 'h', route: 'generations' as const, leaseUntilMs: 2_000 };
    expect(await store.claim({ ...claim, generationId: 'gen_1' })).toEqual({ claimed: true });
    const second = await store.claim({ ...claim, generationId: 'gen_2' });
    expect(second).toMatchObject({ claimed: false, existing: { generationId: 'gen_1', state: 'running' } });
    expect(await store.claim({ ...claim, tenantId: 'other', generationId: 'gen_3' })).toEqual({ claimed: true });
    const result = { generationId: 'gen_2', requestId: 'r', route: 'generations' as const, modelRevision: 'm@1', createdS: 1, deltas: ['a'], outcome: {} as never };
    await store.complete('t', 'r', result, 9_000);
    expect((await store.get('t', 'r'))?.state).toBe('running');
    await store.complete('t', 'r', { ...result, generationId: 'gen_1' }, 9_000);
    expect(await store.findResult('t', 'gen_1')).toMatchObject({ deltas: ['a'] });
    expect(await store.findResult('u', 'gen_1')).toBeUndefined();
    now = 9_001;
    expect(await store.claim({ ...claim, generationId: 'gen_4', leaseUntilMs: 20_000 })).toEqual({ claimed: true });
    await store.abandon('t', 'r', 'gen_1');
    expect((await store.get('t', 'r'))?.generationId).toBe('gen_4');
    await store.abandon('t', 'r', 'gen_4');
    expect(await store.get('t', 'r')).toBeUndefined();
    expect(await store.purgeExpired(30_000)).toBe(1);
  });
});

describe('idempotent requests', () => {
  const body = { request_id: 'order-42', model_alias: 'fake', input: 'a b', max_output_tokens: 4 };

  it('answers a repeated request_id with the original result: no second reservation, generation or charge', async () => {
    const first = await post('/v1/generations', body);
    expect(first.status).toBe(200);
    const a = (await first.json()) as { generation_id: string; text: string; usage: unknown };
    await until(() => settles.length === 1);
    const second = await post('/v1/generations', { ...body, input: 'a  b'.replace('  ', ' ') });
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.json()).toEqual(a);
    expect(reserves).toHaveLength(1);
    expect(engine.started).toBe(1);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ requestId: 'order-42', generationId: a.generation_id });
  });

  it('refuses the same request_id with a different body with 409 naming the field, and holds nothing', async () => {
    expect((await post('/v1/generations', body)).status).toBe(200);
    const res = await post('/v1/generations', { ...body, input: 'something else' });
    expect(res.status).toBe(409);
    const err = (await res.json()) as { error: { code: string; param: string; message: string } };
    expect(err.error).toMatchObject({ code: 'conflict', param: 'request_id' });
    expect(err.error.message).toContain('order-42');
    expect(reserves).toHaveLength(1);
  });

  it('keeps tenants apart: another tenant with the same request_id gets its own generation', async () => {
    const a = (await (await post('/v1/generations', body)).json()) as { generation_id: string };
    const b = (await (await post('/v1/generations', body, {}, otherKey.plaintext)).json()) as { generation_id: string };
    expect(b.generation_id).not.toBe(a.generation_id);
    expect(reserves.map((r) => r.caller.tenantId)).toEqual(['t', 'u']);
  });

  it('lets a repeat that arrives while the original streams follow it live, with the same event ids', async () => {
    engine.delayMs = 15;
    const streamBody = { ...body, stream: true };
    const first = post('/v1/generations', streamBody);
    await until(() => engine.started === 1);
    const second = post('/v1/generations', streamBody);
    const [ea, eb] = await Promise.all([first.then(sse), second.then(sse)]);
    expect(eb.map((e) => [e.id, e.event, e.data])).toEqual(ea.map((e) => [e.id, e.event, e.data]));
    expect(ea.map((e) => e.id)).toEqual(['1', '2', '3', '4', '5', '6']);
    expect(reserves).toHaveLength(1);
    expect(engine.started).toBe(1);
  });

  it('replays a finished stream for a streaming repeat, and a streamed original as JSON', async () => {
    const original = await sse(await post('/v1/generations', { ...body, stream: true }));
    await until(() => settles.length === 1);
    const replay = await sse(await post('/v1/generations', { ...body, stream: true }));
    expect(replay).toEqual(original);
    const asJson = (await (await post('/v1/generations', body)).json()) as { text: string; generation_id: string };
    expect(asJson.text).toBe(original.filter((e) => e.event === 'delta').map((e) => (JSON.parse(e.data) as { text: string }).text).join(''));
    expect(asJson.generation_id).toBe((JSON.parse(original[0].data) as { generation_id: string }).generation_id);
    expect(reserves).toHaveLength(1);
  });

  it('lets a retry run when the original was rejected before any work (the key is released)', async () => {
    nextReserve = () => ({ ok: false, reason: 'rate_limited', message: 'slow down', retryAfterMs: 200 });
    expect((await post('/v1/generations', body)).status).toBe(429);
    const retry = await post('/v1/generations', body);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(reserves).toHaveLength(2);
    expect(engine.started).toBe(1);
  });

  it('accepts Idempotency-Key on the OpenAI routes and validates it', async () => {
    const chat = { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 };
    const a = await (await post('/v1/chat/completions', chat, { 'Idempotency-Key': 'k-1' })).json();
    await until(() => settles.length === 1);
    const b = await post('/v1/chat/completions', chat, { 'Idempotency-Key': 'k-1' });
    expect(b.headers.get('idempotent-replayed')).toBe('true');
    // The same answer; a replay bills nothing new, so it has no cost or overhead of its own (docs/api.md).
    const { cost_usd: _c, overhead_ms: _o, ...weir } = (a as { weir: Record<string, unknown> }).weir;
    expect(await b.json()).toEqual({ ...(a as object), weir });
    expect(reserves).toHaveLength(1);
    const bad = await post('/v1/chat/completions', chat, { 'Idempotency-Key': 'has spaces' });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { param: 'Idempotency-Key' } });
  });
});

describe('GET /v1/generations/{id}/events', () => {
  it('replays the retained stream, and resumes after Last-Event-ID', async () => {
    const original = await sse(await post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 4, stream: true }));
    const id = (JSON.parse(original[0].data) as { generation_id: string }).generation_id;
    await until(() => settles.length === 1);
    expect(await sse(await get(`/v1/generations/${id}/events`))).toEqual(original);
    expect(await sse(await get(`/v1/generations/${id}/events`, { 'Last-Event-ID': '3' }))).toEqual(original.slice(3));
    expect(await sse(await get(`/v1/generations/${id}/events?last_event_id=1`))).toEqual(original.slice(1));
    expect(await sse(await get(`/v1/generations/${id}/events`, { 'Last-Event-ID': '6' }))).toEqual([]);
  });

  it('follows a running generation live from the middle', async () => {
    engine.delayMs = 20;
    const res = post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 5, stream: true });
    await until(() => gateway.registry.active().length === 1 && (gateway.registry.active()[0].transcript?.deltas.length ?? 0) >= 2);
    const id = gateway.registry.active()[0].generationId;
    const resumed = await sse(await get(`/v1/generations/${id}/events`, { 'Last-Event-ID': '2' }));
    const original = await sse(await res);
    expect(resumed).toEqual(original.slice(2));
    expect(resumed.at(-1)?.event).toBe('end');
  });

  it('rejects a malformed Last-Event-ID, and hides other tenants\' generations', async () => {
    const original = await sse(await post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 2, stream: true }));
    const id = (JSON.parse(original[0].data) as { generation_id: string }).generation_id;
    const bad = await get(`/v1/generations/${id}/events`, { 'Last-Event-ID': 'abc' });
    expect(bad.status).toBe(400);
    const other = await fetch(`${url}/v1/generations/${id}/events`, { headers: { Authorization: `Bearer ${otherKey.plaintext}` } });
    expect(other.status).toBe(404);
    expect((await get('/v1/generations/gen_unknown/events')).status).toBe(404);
  });
});

describe('admission headers', () => {
  it('sends x-ratelimit-* on admitted responses', async () => {
    const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit-requests')).toBe('60');
    expect(res.headers.get('x-ratelimit-remaining-requests')).toBe('59');
    expect(res.headers.get('x-ratelimit-reset-requests')).toBe('1s');
    expect(res.headers.get('x-ratelimit-limit-tokens')).toBe('10000');
    expect(res.headers.get('x-ratelimit-remaining-tokens')).toBe('9987');
    expect(res.headers.get('x-ratelimit-reset-tokens')).toBe('1.5s');
  });

  it('sends Retry-After, retry-after-ms and x-ratelimit-* on a rate-limit rejection', async () => {
    nextReserve = () => ({
      ok: false,
      reason: 'rate_limited',
      message: 'Your app is over its 100 tokens per minute; retry in 2.4 s.',
      retryAfterMs: 2_400,
      rateLimits: { tokens: { limit: 100, remaining: 3, resetMs: 58_000 } },
    });
    const res = await post('/v1/generations', { model_alias: 'fake', input: 'a' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('3');
    expect(res.headers.get('retry-after-ms')).toBe('2400');
    expect(res.headers.get('x-ratelimit-remaining-tokens')).toBe('3');
    expect(res.headers.get('x-ratelimit-reset-tokens')).toBe('58s');
    expect(res.headers.get('x-should-retry')).toBeNull();
    expect(await res.json()).toMatchObject({ error: { type: 'rate_limit_error', code: 'rate_limited' } });
  });

  it('marks an exhausted budget not retryable', async () => {
    nextReserve = () => ({ ok: false, reason: 'budget_exhausted', message: 'The monthly budget of tenant t is spent.' });
    const res = await post('/v1/completions', { model: 'fake', prompt: 'a' });
    expect(res.status).toBe(429);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(res.headers.get('retry-after')).toBeNull();
    expect(await res.json()).toMatchObject({ error: { type: 'insufficient_quota', code: 'budget_exhausted' } });
    expect(releases).toHaveLength(0);
  });
});

describe('idempotency keys: header, ignored fields, disconnects, other gateways', () => {
  const body = { model_alias: 'fake', input: 'a b', max_output_tokens: 4 };

  it('takes the key of POST /v1/generations from an Idempotency-Key header too, and refuses two different keys', async () => {
    const a = await (await post('/v1/generations', body, { 'Idempotency-Key': 'hk-1' })).json();
    await until(() => settles.length === 1);
    const again = await post('/v1/generations', { ...body, request_id: 'hk-1' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(a);
    const both = await post('/v1/generations', { ...body, request_id: 'hk-2' }, { 'Idempotency-Key': 'hk-3' });
    expect(both.status).toBe(400);
    expect(await both.json()).toMatchObject({ error: { param: 'request_id' } });
    expect(reserves).toHaveLength(1);
  });

  it('ignores `user` but not the use case (body or header) when telling a repeat from another request', async () => {
    const chat = { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 };
    expect((await post('/v1/chat/completions', chat, { 'Idempotency-Key': 'u-1', 'x-weir-use-case': 'search' })).status).toBe(200);
    await until(() => settles.length === 1);
    const withUser = await post('/v1/chat/completions', { ...chat, user: 'bob' }, { 'Idempotency-Key': 'u-1', 'x-weir-use-case': 'search' });
    expect(withUser.headers.get('idempotent-replayed')).toBe('true');
    const otherUseCase = await post('/v1/chat/completions', chat, { 'Idempotency-Key': 'u-1', 'x-weir-use-case': 'summaries' });
    expect(otherUseCase.status).toBe(409);
    expect(otherUseCase.headers.get('x-should-retry')).toBe('false');
    expect(reserves).toHaveLength(1);
  });

  it('keeps a keyed generation running when its client leaves, so a repeat gets the whole answer', async () => {
    engine.delayMs = 15;
    const abort = new AbortController();
    const res = await fetch(`${url}/v1/generations`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key.plaintext}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...body, request_id: 'left-1', stream: true }),
      signal: abort.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    abort.abort();
    await until(() => settles.length === 1, 5_000);
    const again = (await (await post('/v1/generations', { ...body, request_id: 'left-1' })).json()) as { finish_reason: string; usage: { output_tokens: number } };
    expect(again).toMatchObject({ finish_reason: 'length', usage: { output_tokens: 4 } });
    expect(engine.started).toBe(1);
  });

  it('makes a reader on another gateway wait for a keyed generation running there, then serves its stream', async () => {
    const claim = { tenantId: 't', requestId: 'remote-1', bodySha256: 'x', generationId: 'gen_remote', route: 'generations' as const, leaseUntilMs: Date.now() + 60_000 };
    expect(await store.claim(claim)).toEqual({ claimed: true });
    const reading = get('/v1/generations/gen_remote/events', { 'Last-Event-ID': '1' }).then(sse);
    await new Promise((r) => setTimeout(r, 150));
    const outcome = { finishReason: 'stop' as const, usage: { inputTokens: 2, outputTokens: 2 }, costNanoUsd: 4_000, modelRevision: 'fake@1', timings: { queueMs: 0, ttftMs: 1, totalMs: 2 } };
    await store.complete('t', 'remote-1', { generationId: 'gen_remote', requestId: 'remote-1', route: 'generations', modelRevision: 'fake@1', createdS: 1, deltas: ['Hi', ' there'], outcome }, Date.now() + 60_000);
    const events = await reading;
    expect(events.map((e) => [e.id, e.event])).toEqual([
      ['2', 'delta'],
      ['3', 'delta'],
      ['4', 'end'],
    ]);
  });

  it('answers a known path with the wrong method 405 with Allow', async () => {
    const a = await fetch(`${url}/v1/generations/gen_x/events`, { method: 'POST', headers: { Authorization: `Bearer ${key.plaintext}` } });
    expect(a.status).toBe(405);
    expect(a.headers.get('allow')).toBe('GET');
    const b = await fetch(`${url}/v1/generations/gen_x/cancel`, { method: 'DELETE', headers: { Authorization: `Bearer ${key.plaintext}` } });
    expect(b.status).toBe(405);
    expect(b.headers.get('allow')).toBe('POST');
  });

  it('tells the official clients not to retry a request larger than a rate limit allows', async () => {
    nextReserve = () => ({ ok: false, reason: 'rate_limited', message: 'This request needs 203 tokens; the limit is 100 per minute, so it can never pass: lower max_tokens.' });
    const res = await post('/v1/generations', body);
    expect(res.status).toBe(429);
    expect(res.headers.get('x-should-retry')).toBe('false');
  });
});

describe('failures are not results', () => {
  const body = { model_alias: 'fake', input: 'a b', max_output_tokens: 4 };

  it('tells a retry of a generation that failed mid-stream that it was interrupted, and never runs or bills it again (ADR 0002)', async () => {
    engine.failAfter = 2;
    const first = (await (await post('/v1/generations', { ...body, request_id: 'fail-1' })).json()) as { finish_reason: string; usage: { output_tokens: number } };
    expect(first).toMatchObject({ finish_reason: 'error', usage: { output_tokens: 2 } });
    await until(() => settles.length === 1);
    engine.failAfter = undefined;
    const retry = await post('/v1/generations', { ...body, request_id: 'fail-1' });
    expect(retry.status).toBe(409);
    expect(retry.headers.get('x-should-retry')).toBe('false');
    const error = ((await retry.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('conflict');
    expect(error.message).toMatch(/failed after producing 2 tokens, which were billed; send a new key/);
    expect(engine.started).toBe(1);
    expect(records.map((r) => r.finishReason)).toEqual(['error']);
  });

  it('runs a retry anew when the first attempt failed before any output (it billed nothing)', async () => {
    engine.failAfter = 0;
    const first = await post('/v1/generations', { ...body, request_id: 'fail-0' });
    expect(first.status).toBeGreaterThanOrEqual(500);
    engine.failAfter = undefined;
    const retry = await post('/v1/generations', { ...body, request_id: 'fail-0' });
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await retry.json()).toMatchObject({ finish_reason: 'length', usage: { output_tokens: 4 } });
    expect(engine.started).toBe(2);
  });

  it('passes a refusal\'s retry hint on as Retry-After', async () => {
    engine.refuse = new WeirError('engine_unavailable', 'the replica is restarting; retry shortly', { retryable: true, retryAfterMs: 1_500 });
    const res = await post('/v1/generations', body);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('2');
    expect(res.headers.get('retry-after-ms')).toBe('1500');
  });
});

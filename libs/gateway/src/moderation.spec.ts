/**
 * Moderation on the request path (issue 15 items 6–8), over HTTP through the real gateway,
 * pipeline and relay, with a scripted engine that counts what it produced:
 * - input moderation runs while the request is routed and dispatched; a block stops the
 *   upstream before any token reaches the client (400 `content_filter`, streamed or not), one
 *   usage record `content_filter` billing what the upstream produced;
 * - output moderation cuts the stream on every wire (`finish_reason: content_filter`, Weir's
 *   `end`, the Responses API's `incomplete`), never letting the flagged phrase through, even
 *   split across deltas and windows; one usage record billing what was produced;
 * - `POST /v1/moderations` with the official `openai` client.
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, EngineRequest, PlatformConfig, TenantModeration } from '@weir/core';
import { compileModerationPolicies, type ModerationEngine, type ModerationPolicies } from '@weir/moderation';
import type { Relay } from '@weir/streaming';
import { createRelayGrpcClient, createRelayGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import OpenAI from 'openai';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies are read loosely
type Json = any;

/** An engine that streams `pieces` one per `delayMs`, one token each, and counts what it produced. */
function scriptedEngine(pieces: string[], delayMs: number) {
  const stats = { produced: 0, aborted: false, started: 0 };
  const engine: EngineAdapter = {
    kind: 'scripted',
    capacity: { slots: 4, contextTokens: 4_096 },
    async countInputTokens(input) {
      const text = input.kind === 'text' ? input.text : input.kind === 'embedding' ? input.items.join(' ') : input.messages.map((m) => m.content).join(' ');
      return Math.max(1, text.split(/\s+/).filter(Boolean).length);
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      stats.started++;
      let n = 0;
      for (const p of pieces) {
        if (n >= request.maxOutputTokens) break;
        await new Promise((r) => setTimeout(r, delayMs));
        if (request.signal.aborted) {
          stats.aborted = true;
          yield { type: 'end', reason: 'aborted', usage: { inputTokens: 3, outputTokens: n, cachedInputTokens: 0 }, usageSource: 'reported' };
          return;
        }
        n++;
        stats.produced++;
        yield { type: 'delta', text: p, tokens: 1 };
      }
      yield { type: 'end', reason: n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 3, outputTokens: n, cachedInputTokens: 0 }, usageSource: 'reported' };
    },
    async close() {},
  };
  return { engine, stats };
}

/** A rules engine behind a set latency (ms). */
function slow(inner: ModerationEngine, ms: number): ModerationEngine {
  return { name: 'slow', kind: 'test', check: async (texts, signal) => (await new Promise((r) => setTimeout(r, ms)), inner.check(texts, signal)) };
}

function configWith(moderation: TenantModeration): PlatformConfig {
  const base = twoTenantConfig({ ...twoTenantConfig().revisions[0], contextWindow: 4_096, maxOutputTokens: 256, defaultOutputTokens: 200 });
  return { ...base, tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, moderation } : t)) };
}

const RULES = { lists: [{ category: 'violence', phrases: ['red dragon'] }] };

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

/** Things the split topology started (the relay's gRPC server and client), stopped after each test. */
const splitParts: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const stop of splitParts.splice(0)) await stop();
});

/** The relay behind a real gRPC server, reached through the relay gRPC client (the split's relay service and the gateway's client). */
async function overGrpc(relay: Relay): Promise<Relay> {
  const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
  const client = createRelayGrpcClient({ address: server.address });
  splitParts.push(() => client.close(), () => server.close());
  return client;
}

async function start(pieces: string[], delayMs: number, moderation: TenantModeration, wrap?: (p: ModerationPolicies) => ModerationPolicies, split = false) {
  const config = configWith(moderation);
  const s = scriptedEngine(pieces, delayMs);
  const compiled = compileModerationPolicies(config);
  gw = await startTestGateway({ config, engine: s.engine, admission: createInMemoryAdmission({ tenants: config.tenants }), moderation: wrap ? wrap(compiled) : compiled, ...(split ? { relayVia: overGrpc } : {}) });
  return { gw, stats: s.stats, admission: undefined };
}

/** Waits until `records` has `n` entries (the relay journals after the client's end). */
async function records(g: TestGateway, n: number) {
  for (let i = 0; i < 200 && g.records.length < n; i++) await new Promise((r) => setTimeout(r, 5));
  return g.records;
}

const chat = (stream: boolean) => ({ model: 'fake', messages: [{ role: 'user', content: 'tell me about the red dragon' }], stream });

describe('input moderation', () => {
  const policy: TenantModeration = { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: RULES };
  const slowInput = (ms: number) => (p: ModerationPolicies): ModerationPolicies => ({
    ...p,
    of: (k) => {
      const plan = p.of(k);
      return plan?.input ? { ...plan, input: { ...plan.input, engine: slow(plan.input.engine, ms) } } : plan;
    },
  });

  it.each([false, true])('blocks a flagged prompt on /v1/messages (stream %s) with Anthropic’s 400 invalid_request_error naming the category', async (stream) => {
    const { gw } = await start([' a', ' b'], 5, policy);
    const res = await gw.post('/v1/messages', { model: 'fake', max_tokens: 10, stream, system: 'Be kind.', messages: [{ role: 'user', content: 'tell me about the red dragon' }] });
    expect(res.status).toBe(400);
    const body = (await res.json()) as Json;
    expect(body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(body.error.message).toContain('violence');
  });

  it.each([false, true])('blocks a flagged prompt after the upstream started (stream %s): 400 content_filter, the upstream stopped, one usage record billing what it produced', async (stream) => {
    // The upstream's first token comes at ~5 ms; the check answers at ~150 ms.
    const { gw, stats } = await start(Array.from({ length: 100 }, (_, i) => ` w${i}`), 5, policy, slowInput(150));
    const res = await gw.post('/v1/chat/completions', chat(stream));
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toContain('application/json');
    const body = (await res.json()) as Json;
    expect(body.error).toMatchObject({ code: 'content_filter', type: 'invalid_request_error' });
    expect(body.error.message).toContain('violence');
    expect(JSON.stringify(body)).not.toContain(' w0');
    const [rec] = await records(gw, 1);
    await new Promise((r) => setTimeout(r, 30));
    expect(gw.records).toHaveLength(1);
    expect(stats.aborted).toBe(true);
    expect(stats.produced).toBeGreaterThan(0);
    expect(stats.produced).toBeLessThan(100);
    expect(rec).toMatchObject({ finishReason: 'content_filter', outputTokens: stats.produced });
  });

  it('lets a clean prompt through once the slow check passes: the whole answer, one stop record', async () => {
    const { gw, stats } = await start([' a', ' b', ' c'], 2, policy, slowInput(60));
    const res = await gw.post('/v1/chat/completions', { ...chat(false), messages: [{ role: 'user', content: 'a calm question' }] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Json;
    expect(body.choices[0]).toMatchObject({ message: { content: ' a b c' }, finish_reason: 'stop' });
    expect(stats.produced).toBe(3);
    expect((await records(gw, 1))[0]).toMatchObject({ finishReason: 'stop', outputTokens: 3 });
  });

  it('fails closed on an engine error (503, retryable) and open when the policy says so', async () => {
    const broken = (p: ModerationPolicies): ModerationPolicies => ({
      ...p,
      of: (k) => {
        const plan = p.of(k);
        return plan?.input ? { ...plan, input: { ...plan.input, engine: { name: 'broken', kind: 'test', check: async () => Promise.reject(new Error('down')) } } } : plan;
      },
    });
    let { gw } = await start([' a', ' b'], 2, policy, broken);
    let res = await gw.post('/v1/chat/completions', { ...chat(false), messages: [{ role: 'user', content: 'fine' }] });
    expect(res.status).toBe(503);
    expect(((await res.json()) as Json).error.code).toBe('upstream_unavailable');
    expect((await records(gw, 1))[0].finishReason).toBe('content_filter');
    await gw.close();
    ({ gw } = await start([' a', ' b'], 2, { ...policy, input: { ...policy.input!, fail: 'open' } }, broken));
    res = await gw.post('/v1/chat/completions', { ...chat(false), messages: [{ role: 'user', content: 'fine' }] });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Json).choices[0].message.content).toBe(' a b');
  });
});

describe('output moderation', () => {
  // "red dragon" split across deltas and across 16-character windows (overlap 12).
  const pieces = ['Once', ' upon a', ' time', ' there', ' was a re', 'd dr', 'agon', ' who', ' flew', ' far', ' away', '.'];
  const policy: TenantModeration = { output: { engine: 'rules', windowChars: 16, overlapChars: 12, fail: 'closed', timeoutMs: 2_000 }, rules: RULES };
  const produced = (stats: { produced: number }) => stats.produced;

  async function expectCut(text: string, stats: { produced: number; aborted: boolean }, gw: TestGateway) {
    expect(text).not.toContain('red dragon');
    expect(text).not.toContain('dragon');
    expect(text.startsWith('Once upon a time')).toBe(true);
    const [rec] = await records(gw, 1);
    await new Promise((r) => setTimeout(r, 20));
    expect(gw.records).toHaveLength(1);
    expect(rec.finishReason).toBe('content_filter');
    expect(rec.outputTokens).toBe(produced(stats));
    expect(stats.produced).toBeLessThan(pieces.length);
  }

  const sseData = async (res: Response): Promise<Json[]> => (await res.text()).split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));

  it('chat completions, not streamed: finish_reason content_filter, the flagged window withheld', async () => {
    const { gw, stats } = await start(pieces, 3, policy);
    const res = await gw.post('/v1/chat/completions', chat(false));
    expect(res.status).toBe(200);
    const body = (await res.json()) as Json;
    expect(body.choices[0].finish_reason).toBe('content_filter');
    await expectCut(body.choices[0].message.content, stats, gw);
  });

  it.each([false, true])('Anthropic messages (stream %s): stop_reason refusal, the flagged window withheld', async (stream) => {
    const { gw, stats } = await start(pieces, 3, policy);
    const res = await gw.post('/v1/messages', { model: 'fake', max_tokens: 100, stream, messages: [{ role: 'user', content: 'tell me a story' }] });
    expect(res.status).toBe(200);
    if (!stream) {
      const body = (await res.json()) as Json;
      expect(body.stop_reason).toBe('refusal');
      await expectCut(body.content[0].text, stats, gw);
      return;
    }
    const events = await sseData(res);
    expect(events.find((e) => e.type === 'message_delta').delta.stop_reason).toBe('refusal');
    await expectCut(events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join(''), stats, gw);
  });

  it('chat completions, streamed', async () => {
    const { gw, stats } = await start(pieces, 3, policy);
    const chunks = await sseData(await gw.post('/v1/chat/completions', chat(true)));
    const text = chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
    expect(chunks.map((c) => c.choices?.[0]?.finish_reason).filter(Boolean)).toEqual(['content_filter']);
    await expectCut(text, stats, gw);
  });

  it.each([false, true])('completions (stream %s)', async (stream) => {
    const { gw, stats } = await start(pieces, 3, policy);
    const res = await gw.post('/v1/completions', { model: 'fake', prompt: 'a story', max_tokens: 100, stream });
    if (!stream) {
      const body = (await res.json()) as Json;
      expect(body.choices[0].finish_reason).toBe('content_filter');
      return expectCut(body.choices[0].text, stats, gw);
    }
    const chunks = await sseData(res);
    expect(chunks.map((c) => c.choices?.[0]?.finish_reason).filter(Boolean)).toEqual(['content_filter']);
    await expectCut(chunks.map((c) => c.choices?.[0]?.text ?? '').join(''), stats, gw);
  });

  it.each([false, true])("Weir's /v1/generations (stream %s): end with finish_reason content_filter", async (stream) => {
    const { gw, stats } = await start(pieces, 3, policy);
    const res = await gw.post('/v1/generations', { model_alias: 'fake', input: 'a story', stream });
    if (!stream) {
      const body = (await res.json()) as Json;
      expect(body.finish_reason).toBe('content_filter');
      return expectCut(body.text, stats, gw);
    }
    const raw = await res.text();
    const events = raw.split('\n\n').filter((b) => b.includes('event: '));
    const data = (name: string) => events.filter((b) => b.includes(`event: ${name}`)).map((b) => JSON.parse(b.split('\n').find((l) => l.startsWith('data: '))!.slice(6)));
    expect(data('end')).toHaveLength(1);
    expect(data('end')[0].finish_reason).toBe('content_filter');
    await expectCut(data('delta').map((d) => d.text).join(''), stats, gw);
  });

  it.each([false, true])('Responses API (stream %s): incomplete, reason content_filter', async (stream) => {
    const { gw, stats } = await start(pieces, 3, policy);
    const res = await gw.post('/v1/responses', { model: 'fake', input: 'a story', stream });
    if (!stream) {
      const body = (await res.json()) as Json;
      expect(body).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'content_filter' } });
      return expectCut(body.output[0].content[0].text, stats, gw);
    }
    const chunks = await sseData(res);
    const text = chunks.filter((c) => c.type === 'response.output_text.delta').map((c) => c.delta).join('');
    expect(chunks.at(-1)).toMatchObject({ type: 'response.incomplete', response: { incomplete_details: { reason: 'content_filter' } } });
    await expectCut(text, stats, gw);
  });

  /** An upstream that hands the relay every delta in one read (a fast upstream: many SSE events per chunk). */
  function oneReadEngine(deltas: string[]): EngineAdapter {
    return {
      kind: 'fast',
      capacity: { slots: 4, contextTokens: 4_096 },
      countInputTokens: async () => 3,
      generate(): AsyncIterable<EngineEvent> {
        const all: EngineEvent[] = [...deltas.map((t): EngineEvent => ({ type: 'delta', text: t, tokens: 1 })), { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: deltas.length, cachedInputTokens: 0 }, usageSource: 'reported' }];
        let given = false;
        return {
          nextBatch: async () => (given ? undefined : ((given = true), all)),
          async *[Symbol.asyncIterator]() {
            yield* all;
          },
        } as AsyncIterable<EngineEvent>;
      },
      async close() {},
    };
  }

  it.each([15, 50, 3_000])('holds back at most one window when a read brings many deltas (%i-character deltas): the clean text before the flagged window is released', async (size) => {
    const clean = 'The girl played in the sunny garden with her dog. '.repeat(60);
    const whole = `${clean}Then the red dragon came. And more after it.`;
    const deltas: string[] = [];
    for (let i = 0; i < whole.length; i += size) deltas.push(whole.slice(i, i + size));
    const config = configWith({ output: { engine: 'rules', windowChars: 64, overlapChars: 16, fail: 'closed', timeoutMs: 2_000 }, rules: RULES });
    gw = await startTestGateway({ config, engine: oneReadEngine(deltas), admission: createInMemoryAdmission({ tenants: config.tenants }), moderation: compileModerationPolicies(config) });
    const chunks = await sseData(await gw.post('/v1/chat/completions', { ...chat(true), max_tokens: 256 }));
    const text = chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
    expect(chunks.map((c) => c.choices?.[0]?.finish_reason).filter(Boolean)).toEqual(['content_filter']);
    expect(text).not.toContain('dragon');
    expect(whole.startsWith(text)).toBe(true);
    // At most one window (64 characters) of the clean text is held back with the flagged one.
    expect(text.length).toBeGreaterThanOrEqual(whole.indexOf('red dragon') + 'red dragon'.length - 64);
    expect((await records(gw, 1))[0]).toMatchObject({ finishReason: 'content_filter' });
  });

  it('an answer cut at the output limit under output moderation releases its clean text and ends length', async () => {
    const deltas = Array.from({ length: 300 }, (_, i) => `w${i} `);
    const config = configWith({ output: { engine: 'rules', windowChars: 64, overlapChars: 16, fail: 'closed', timeoutMs: 2_000 }, rules: RULES });
    gw = await startTestGateway({ config, engine: oneReadEngine(deltas), admission: createInMemoryAdmission({ tenants: config.tenants }), moderation: compileModerationPolicies(config) });
    const body = (await (await gw.post('/v1/chat/completions', { ...chat(false), max_tokens: 100 })).json()) as Json;
    expect(body.choices[0]).toMatchObject({ finish_reason: 'length', message: { content: deltas.slice(0, 100).join('') } });
  });

  it('releases a clean answer whole (the held tail is checked at the end)', async () => {
    const clean = ['Once', ' upon', ' a', ' time', '.'];
    const { gw } = await start(clean, 1, policy);
    const body = (await (await gw.post('/v1/chat/completions', chat(false))).json()) as Json;
    expect(body.choices[0]).toMatchObject({ message: { content: 'Once upon a time.' }, finish_reason: 'stop' });
    expect((await records(gw, 1))[0]).toMatchObject({ finishReason: 'stop', outputTokens: 5 });
  });

  it('a keyed request retains only what the client was sent (a repeat replays the cut answer)', async () => {
    const { gw } = await start(pieces, 3, policy);
    const first = (await (await gw.post('/v1/chat/completions', chat(false), { 'Idempotency-Key': 'k-1' })).json()) as Json;
    await records(gw, 1);
    const again = await gw.post('/v1/chat/completions', chat(false), { 'Idempotency-Key': 'k-1' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const body = (await again.json()) as Json;
    expect(body.choices[0].message.content).toBe(first.choices[0].message.content);
    expect(body.choices[0].finish_reason).toBe('content_filter');
    expect(gw.records).toHaveLength(1);
  });
});

describe('POST /v1/moderations', () => {
  it("answers the official client's moderations.create with the tenant's engine", async () => {
    const { gw } = await start([' a'], 1, { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: { ...RULES, patterns: [{ category: 'custom', pattern: '(?i)code\\s*word\\s*\\d{3}' }] } });
    const client = new OpenAI({ apiKey: gw.key.plaintext, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const out = await client.moderations.create({ model: 'omni-moderation-latest', input: ['a red  Dragon appears', 'nothing here', 'say CODE WORD 123'] });
    expect(out.results.map((r) => r.flagged)).toEqual([true, false, true]);
    expect(out.results[0].categories).toMatchObject({ violence: true });
    expect((out.results[2].categories as unknown as Record<string, boolean>).custom).toBe(true);
    expect(out.model).toBe('omni-moderation-latest');
    expect(gw.records).toHaveLength(0);
  });

  it("is held to the tenant's requests per minute and concurrency: 429 with rate-limit headers, the engine not called, no usage row", async () => {
    const moderation: TenantModeration = { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: RULES };
    const base = configWith(moderation);
    const limited = (limits: PlatformConfig['tenants'][number]['limits']): PlatformConfig => ({ ...base, tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, limits } : t)) });
    // Requests per minute: 2 pass, the 3rd is refused before the engine is called.
    let config = limited({ maxConcurrent: 8, requestsPerMinute: 2 });
    let calls = 0;
    const counting = (p: ModerationPolicies): ModerationPolicies => ({
      ...p,
      of: (k) => {
        const plan = p.of(k);
        if (!plan) return plan;
        const inner = plan.api;
        return { ...plan, api: { name: inner.name, kind: inner.kind, check: (texts, signal) => (calls++, inner.check(texts, signal)) } };
      },
    });
    gw = await startTestGateway({ config, engine: scriptedEngine([' a'], 1).engine, admission: createInMemoryAdmission({ tenants: config.tenants }), moderation: counting(compileModerationPolicies(config)) });
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 4; i++) {
      last = await gw.post('/v1/moderations', { input: 'hello' });
      statuses.push(last.status);
      if (i < 3) await last.text();
    }
    expect(statuses).toEqual([200, 200, 429, 429]);
    expect(((await (last as Response).json()) as Json).error.code).toBe('rate_limited');
    expect((last as Response).headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect((last as Response).headers.get('retry-after')).toBeTruthy();
    expect(calls).toBe(2);
    expect(gw.records).toHaveLength(0);
    await gw.close();

    // Concurrency 1: with a slow engine, of 3 parallel calls 1 passes, 2 are refused; afterwards the slot is free again.
    config = limited({ maxConcurrent: 1 });
    calls = 0;
    const counted = counting(compileModerationPolicies(config));
    const slowPolicies: ModerationPolicies = {
      ...counted,
      of: (k) => {
        const plan = counted.of(k);
        return plan ? { ...plan, api: slow(plan.api, 150) } : plan;
      },
    };
    gw = await startTestGateway({ config, engine: scriptedEngine([' a'], 1).engine, admission: createInMemoryAdmission({ tenants: config.tenants }), moderation: slowPolicies });
    const parallel = await Promise.all([0, 1, 2].map(() => gw!.post('/v1/moderations', { input: 'hello' })));
    const codes = await Promise.all(parallel.map(async (r) => (r.status === 200 ? 200 : `${r.status} ${((await r.json()) as Json).error.code}`)));
    expect(codes.filter((c) => c === 200)).toHaveLength(1);
    expect(codes.filter((c) => c === '429 concurrency_limited')).toHaveLength(2);
    expect(calls).toBe(1);
    expect((await gw.post('/v1/moderations', { input: 'hello' })).status).toBe(200);
    expect(gw.records).toHaveLength(0);
  });

  it('400 for a tenant without a policy, and for a bad body', async () => {
    const { gw } = await start([' a'], 1, { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: RULES });
    const other = await gw.post('/v1/moderations', { input: 'x' }, {}, gw.otherKey.plaintext);
    expect(other.status).toBe(400);
    expect(((await other.json()) as Json).error.message).toContain('not configured');
    const bad = await gw.post('/v1/moderations', { input: [{ type: 'image_url' }] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as Json).error.param).toBe('input[0]');
    expect((await gw.post('/v1/moderations', { input: 'x' }, {}, 'wk_bad_key')).status).toBe(401);
  });
});

describe('input moderation and idempotency keys', () => {
  it('a keyed request is checked before dispatch: blocked, it never reaches the upstream; its key is freed and a retry is checked (and blocked) anew', async () => {
    const policy: TenantModeration = { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: RULES };
    const slowPolicies = (p: ModerationPolicies): ModerationPolicies => ({ ...p, of: (k) => { const plan = p.of(k); return plan?.input ? { ...plan, input: { ...plan.input, engine: slow(plan.input.engine, 80) } } : plan; } });
    const { gw, stats } = await start([' a', ' b', ' c'], 1, policy, slowPolicies);
    const first = await gw.post('/v1/chat/completions', chat(false), { 'Idempotency-Key': 'blocked-1' });
    expect(first.status).toBe(400);
    expect(((await first.json()) as Json).error.code).toBe('content_filter');
    const [rec] = await records(gw, 1);
    expect(rec).toMatchObject({ finishReason: 'content_filter', outputTokens: 0 });
    expect(stats.produced).toBe(0);
    const again = await gw.post('/v1/chat/completions', chat(false), { 'Idempotency-Key': 'blocked-1' });
    expect(again.status).toBe(400);
    expect(((await again.json()) as Json).error.code).toBe('content_filter');
    // One zero-token record per attempt (each was admitted, then ended before any engine work).
    await records(gw, 2);
    expect(gw.records.map((r) => [r.finishReason, r.outputTokens, r.costNanoUsd])).toEqual([
      ['content_filter', 0, 0],
      ['content_filter', 0, 0],
    ]);
    expect(stats.started).toBe(0);
  });
});

describe('the split topology (the relay behind its gRPC server)', () => {
  it('stops the upstream as input_flagged over gRPC: 400 content_filter, one record billing what it produced', async () => {
    const policy: TenantModeration = { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: RULES };
    const slowPolicies = (p: ModerationPolicies): ModerationPolicies => ({ ...p, of: (k) => { const plan = p.of(k); return plan?.input ? { ...plan, input: { ...plan.input, engine: slow(plan.input.engine, 150) } } : plan; } });
    const { gw, stats } = await start(Array.from({ length: 100 }, (_, i) => ` w${i}`), 5, policy, slowPolicies, true);
    const res = await gw.post('/v1/chat/completions', chat(true));
    expect(res.status).toBe(400);
    expect(((await res.json()) as Json).error.code).toBe('content_filter');
    const [rec] = await records(gw, 1);
    expect(stats.aborted).toBe(true);
    expect(stats.produced).toBeLessThan(100);
    expect(rec).toMatchObject({ finishReason: 'content_filter', errorCode: 'content_filter', outputTokens: stats.produced });
  });

  it('cuts the output on the relay side: the flagged window never crosses gRPC', async () => {
    const pieces = ['Once', ' upon a', ' time', ' there', ' was a re', 'd dr', 'agon', ' who', ' flew', '.'];
    const { gw, stats } = await start(pieces, 3, { output: { engine: 'rules', windowChars: 16, overlapChars: 12, fail: 'closed', timeoutMs: 2_000 }, rules: RULES }, undefined, true);
    const body = (await (await gw.post('/v1/chat/completions', chat(false))).json()) as Json;
    expect(body.choices[0].finish_reason).toBe('content_filter');
    expect(body.choices[0].message.content).not.toContain('dragon');
    expect((await records(gw, 1))[0]).toMatchObject({ finishReason: 'content_filter', outputTokens: stats.produced });
  });
});

describe('input moderation slower than the whole answer (unkeyed)', () => {
  it('the client still gets only the 400: no text of the finished answer reaches it', async () => {
    const policy: TenantModeration = { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: RULES };
    const slowPolicies = (p: ModerationPolicies): ModerationPolicies => ({ ...p, of: (k) => { const plan = p.of(k); return plan?.input ? { ...plan, input: { ...plan.input, engine: slow(plan.input.engine, 200) } } : plan; } });
    const { gw, stats } = await start([' secret', ' answer'], 1, policy, slowPolicies);
    for (const stream of [false, true]) {
      const res = await gw.post('/v1/chat/completions', chat(stream));
      expect(res.status).toBe(400);
      const text = await res.text();
      expect(text).toContain('content_filter');
      expect(text).not.toContain('secret');
    }
    // The upstream finished before the verdict: its records stand as it finished (docs/safety.md, known limit).
    await records(gw, 2);
    expect(stats.produced).toBe(4);
    expect(gw.records.map((r) => r.outputTokens)).toEqual([2, 2]);
  });
});

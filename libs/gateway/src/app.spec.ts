/**
 * The gateway over real domain parts (router, admission, scheduler, relay) and a
 * hand-written engine, so every path — rejections, queueing, mid-stream failure, cancel —
 * can be driven deterministically.
 */
import { createRecordingSettlements } from '@weir/testing';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInMemoryAdmission, type InMemoryAdmission } from '@weir/admission';
import {
  type AdmissionService,
  type CancelMessage,
  DEFAULT_ADMISSION,
  type EngineAdapter,
  type EngineEvent,
  type EngineRequest,
  type PlatformConfig,
  type RevisionSpec,
  type UsageRecord,
  WeirError,
  mintApiKey,
} from '@weir/core';
import { createStaticRouter } from '@weir/routing';
import { createSlotScheduler } from '@weir/scheduling';
import { createRelay } from '@weir/streaming';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { createGatewayApp, type Gateway } from './app';
import { createGenerationPipeline } from './pipeline';

interface FakeEngineOptions {
  tokens: number;
  delayMs: number;
  failAfter?: number;
}

function fakeEngine(options: FakeEngineOptions): EngineAdapter & { options: FakeEngineOptions; started: number } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 1, contextTokens: 64 },
    options,
    started: 0,
    async countInputTokens(input: EngineRequest['input']) {
      const text = input.kind === 'text' ? input.text : input.kind === 'chat' ? input.messages.map((m) => m.content).join(' ') : '';
      return text.split(/\s+/).filter(Boolean).length;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.started++;
      let n = 0;
      for (; n < Math.min(engine.options.tokens, request.maxOutputTokens); n++) {
        if (request.signal.aborted) break;
        if (engine.options.failAfter !== undefined && n === engine.options.failAfter) throw new WeirError('upstream_error', 'the upstream closed mid-stream');
        await new Promise((r) => setTimeout(r, engine.options.delayMs));
        if (request.signal.aborted) break; // stopped while producing this token: it never comes
        yield { type: 'delta', text: `w${n} `, tokens: 1 };
      }
      yield { type: 'end', reason: request.signal.aborted ? 'aborted' : n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 2, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

const revision: RevisionSpec = {
  id: 'fake@1',
  model: 'fake',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'x', api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 64,
  maxOutputTokens: 32,
  defaultOutputTokens: 8,
  pricing: { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 },
};
const config: PlatformConfig = {
  revisions: [revision],
  aliases: [{ name: 'fake', targets: [{ revision: 'fake@1', weight: 1 }] }],
  tenants: [
    { id: 't', name: 'T', apps: [{ id: 'a', name: 'A', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 3 } },
    { id: 'u', name: 'U', apps: [{ id: 'b', name: 'B', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 3 } },
  ],
  defaults: { cancelGraceMs: 20, maxBodyBytes: 4096, sseHeartbeatMs: 50, maxQueuePerReplica: 1, admission: { ...DEFAULT_ADMISSION } },
};

const key = mintApiKey();
const otherTenantKey = mintApiKey();
const clock = { now: () => performance.now() };

let server: Server;
let url: string;
let gateway: Gateway;
let engine: ReturnType<typeof fakeEngine>;
let admission: InMemoryAdmission;
let records: UsageRecord[];
let admissionOverride: Partial<AdmissionService> = {};
let cancels: CancelMessage[];
let finished: Map<string, UsageRecord>;
let splitMode = false;

beforeEach(async () => {
  engine = fakeEngine({ tokens: 5, delayMs: 2 });
  admission = createInMemoryAdmission({ tenants: config.tenants, retryAfterMs: 1500 });
  admissionOverride = {};
  records = [];
  cancels = [];
  finished = new Map();
  const router = createStaticRouter(config);
  const pipeline = createGenerationPipeline({
    router,
    admission: { reserve: (r) => (admissionOverride.reserve ?? admission.reserve)(r), settle: admission.settle, release: admission.release },
    scheduler: createSlotScheduler({ replicas: [{ id: 'r0', revisionId: 'fake@1', slots: 1 }], maxQueuePerReplica: 1, clock }),
    relay: createRelay({ engineFor: () => engine, settlements: createRecordingSettlements(records), clock, cancelGraceMs: 20 }),
    countInputTokens: (_rev, input) => engine.countInputTokens(input),
    settlements: createRecordingSettlements(records),
    tenants: new Map(config.tenants.map((t) => [t.id, t])),
    clock,
  });
  gateway = createGatewayApp({
    pipeline,
    router,
    apiKeys: {
      findByHash: async (h) =>
        h === key.sha256
          ? { keyId: 'k', prefix: key.prefix, tenantId: 't', appId: 'a' }
          : h === otherTenantKey.sha256
            ? { keyId: 'k2', prefix: otherTenantKey.prefix, tenantId: 'u', appId: 'b' }
            : undefined,
    },
    defaults: config.defaults,
    clock,
    logger: { info() {}, warn() {}, error() {} },
    ...(splitMode
      ? {
          cancelTopic: { publish: (m: CancelMessage) => cancels.push(m), subscribe: () => () => undefined },
          findFinished: async (_tenantId: string, id: string) => finished.get(id),
        }
      : {}),
  });
  server = createServer(gateway.app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  gateway.registry.close();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const headers = { Authorization: `Bearer ${key.plaintext}`, 'Content-Type': 'application/json' };
const post = (path: string, body: unknown, extra: Record<string, string> = {}) =>
  fetch(`${url}${path}`, { method: 'POST', headers: { ...headers, ...extra }, body: JSON.stringify(body) });

async function events(res: Response): Promise<EventSourceMessage[]> {
  const out: EventSourceMessage[] = [];
  const p = createParser({ onEvent: (e) => out.push(e) });
  p.feed(await res.text());
  return out;
}

const settleAll = () => new Promise((r) => setTimeout(r, 30));

describe('gateway', () => {
  it('echoes a well-formed x-request-id and makes one otherwise', async () => {
    const a = await fetch(`${url}/healthz`, { headers: { 'x-request-id': 'abc-123' } });
    expect(a.headers.get('x-request-id')).toBe('abc-123');
    const b = await fetch(`${url}/healthz`, { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(b.headers.get('x-request-id')).toMatch(/^req_/);
  });

  it('rejects over the concurrency limit with 429, Retry-After and retry-after-ms, and holds nothing', async () => {
    admissionOverride.reserve = async () => ({ ok: false, reason: 'concurrency_limited', message: 'too many in flight', retryAfterMs: 1500 });
    const res = await post('/v1/generations', { model_alias: 'fake', input: 'a b' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('2');
    expect(res.headers.get('retry-after-ms')).toBe('1500');
    expect(await res.json()).toMatchObject({ error: { type: 'rate_limit_error', code: 'concurrency_limited' } });
    expect(engine.started).toBe(0);
    expect(records).toHaveLength(0);
  });

  it('answers an exhausted budget with insufficient_quota and x-should-retry: false', async () => {
    admissionOverride.reserve = async () => ({ ok: false, reason: 'budget_exhausted', message: 'monthly budget spent' });
    const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(429);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(await res.json()).toMatchObject({ error: { type: 'insufficient_quota', code: 'budget_exhausted' } });
  });

  it('lets clients retry a budget whose rest other admission instances hold: Retry-After, no x-should-retry: false', async () => {
    admissionOverride.reserve = async () => ({ ok: false, reason: 'budget_exhausted', message: 'held by other admission instances', retryAfterMs: 3_000 });
    const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('3');
    expect(res.headers.get('x-should-retry')).toBeNull();
    expect(await res.json()).toMatchObject({ error: { type: 'insufficient_quota', code: 'budget_exhausted' } });
    expect(engine.started).toBe(0);
  });

  it('queues behind a busy slot, rejects the overflow with 503 queue_full, and releases every reservation', async () => {
    engine.options.delayMs = 20;
    const first = post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 5 });
    await new Promise((r) => setTimeout(r, 20));
    const second = post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 5 });
    await new Promise((r) => setTimeout(r, 20));
    const third = await post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 5 });
    expect(third.status).toBe(503);
    expect(third.headers.get('retry-after')).toBeTruthy();
    expect(await third.json()).toMatchObject({ error: { code: 'queue_full' } });
    expect((await first).status).toBe(200);
    const secondBody = (await (await second).json()) as { finish_reason: string };
    expect(secondBody.finish_reason).toBe('length');
    await settleAll();
    expect(admission.held()).toEqual([]);
    expect(records).toHaveLength(2);
  });

  it('ends a Weir stream whose deadline passes in the queue with one end event (deadline) and a zero-token record', async () => {
    engine.options.delayMs = 30;
    const busy = post('/v1/generations', { model_alias: 'fake', input: 'a', max_output_tokens: 10 });
    await new Promise((r) => setTimeout(r, 20));
    const res = await post('/v1/generations', { model_alias: 'fake', input: 'a', stream: true, deadline_ms: 50 });
    const evs = await events(res);
    expect(evs.map((e) => e.event)).toEqual(['start', 'end']);
    expect(evs.map((e) => e.id)).toEqual(['1', '2']);
    expect(JSON.parse(evs[1].data)).toMatchObject({ finish_reason: 'deadline', usage: { output_tokens: 0, cost_usd: 0 } });
    await busy;
    await settleAll();
    expect(records.find((r) => r.status === 'deadline')).toMatchObject({ outputTokens: 0, costNanoUsd: 0 });
    expect(admission.held()).toEqual([]);
  });

  it('reports a mid-stream failure in-band on OpenAI streams, without [DONE] or a clean finish', async () => {
    engine.options.failAfter = 2;
    const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
    expect(res.status).toBe(200);
    const evs = await events(res);
    const last = JSON.parse(evs.at(-1)?.data as string);
    expect(last).toEqual({ error: { message: 'the upstream closed mid-stream', type: 'server_error', param: null, code: 'upstream_error' } });
    expect(evs.some((e) => e.data === '[DONE]')).toBe(false);
    expect(evs.filter((e) => e.data.includes('"finish_reason":"stop"'))).toHaveLength(0);
    await settleAll();
    expect(records[0]).toMatchObject({ status: 'failed', outputTokens: 2 });
  });

  it('ends a Weir stream that fails mid-way with an end event carrying the error', async () => {
    engine.options.failAfter = 3;
    const evs = await events(await post('/v1/generations', { model_alias: 'fake', input: 'x', stream: true }));
    const end = JSON.parse(evs.at(-1)?.data as string);
    expect(evs.at(-1)?.event).toBe('end');
    expect(end).toMatchObject({ finish_reason: 'error', usage: { output_tokens: 3 }, error: { code: 'upstream_error', type: 'server_error' } });
  });

  it('answers a failure before any output with an HTTP error on both stream routes, not a 200 stream', async () => {
    engine.options.failAfter = 0;
    const weirStream = await post('/v1/generations', { model_alias: 'fake', input: 'x', stream: true });
    expect(weirStream.status).toBe(502);
    expect(await weirStream.json()).toMatchObject({ error: { code: 'upstream_error' } });
    const openAiStream = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(openAiStream.status).toBe(502);
    await settleAll();
    expect(records.every((r) => r.status === 'failed' && r.outputTokens === 0)).toBe(true);
    expect(admission.held()).toEqual([]);
  });

  it('ends an OpenAI stream cancelled through the API with an in-band error, never a clean stop', async () => {
    engine.options = { tokens: 1000, delayMs: 5 };
    const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 32 });
    const generationId = res.headers.get('x-weir-generation-id') as string;
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await post(`/v1/generations/${generationId}/cancel`, {});
    let text = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    expect(text).toContain('"code":"cancelled"');
    expect(text).not.toContain('"finish_reason":"stop"');
    expect(text).not.toContain('[DONE]');
  });

  it('answers a cancel with the status the generation ended in (cancelled, with what it billed), not running', async () => {
    engine.options = { tokens: 1000, delayMs: 5 };
    const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 32 });
    expect(res.status).toBe(200);
    const generationId = res.headers.get('x-weir-generation-id') as string;
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    const cancel = await post(`/v1/generations/${generationId}/cancel`, {});
    expect(cancel.status).toBe(200);
    const body = (await cancel.json()) as { status: string; finish_reason: string; usage: { output_tokens: number } };
    expect(body).toMatchObject({ generation_id: generationId, status: 'cancelled', finish_reason: 'cancelled' });
    expect(body.usage.output_tokens).toBeGreaterThan(0);
    await reader.cancel();
  });

  it('answers 504 deadline_exceeded on the OpenAI routes when the deadline passes before the first token, stream or not', async () => {
    engine.options = { tokens: 5, delayMs: 300 };
    for (const stream of [false, true]) {
      const started = engine.started;
      const res = await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], stream, max_tokens: 8 }, { 'x-weir-deadline-ms': '60' });
      expect(engine.started).toBe(started + 1); // it reached the engine: not a deadline in the queue
      expect(res.status).toBe(504);
      expect(await res.json()).toMatchObject({ error: { type: 'timeout_error', code: 'deadline_exceeded', message: expect.stringContaining('before the model produced any output') } });
    }
  });

  it('sends : ping heartbeats while a stream is idle', async () => {
    engine.options = { tokens: 2, delayMs: 120 };
    const res = await post('/v1/generations', { model_alias: 'fake', input: 'x', stream: true });
    const raw = await res.text();
    expect(raw).toContain(': ping');
  });

  it('cancels on a client disconnect and records cancelled', async () => {
    engine.options = { tokens: 1000, delayMs: 5 };
    const abort = new AbortController();
    const res = await fetch(`${url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ model_alias: 'fake', input: 'x', stream: true, max_output_tokens: 32 }), signal: abort.signal });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    abort.abort();
    await new Promise((r) => setTimeout(r, 150));
    expect(records).toHaveLength(1);
    expect(records[0].status).toBe('cancelled');
    expect(records[0].outputTokens).toBeLessThan(32);
    expect(admission.held()).toEqual([]);
  });

  it('refuses new work while draining, and reports not ready', async () => {
    await gateway.drain(0);
    const res = await post('/v1/generations', { model_alias: 'fake', input: 'x' });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: { code: 'shutting_down' } });
    expect((await fetch(`${url}/readyz`)).status).toBe(503);
  });

  it('keeps another tenant out of a generation: GET and cancel answer 404', async () => {
    const body = (await (await post("/v1/generations", { model_alias: "fake", input: "x" })).json()) as { generation_id: string };
    const mine = await fetch(`${url}/v1/generations/${body.generation_id}`, { headers });
    expect(mine.status).toBe(200);
    const theirs = { Authorization: `Bearer ${otherTenantKey.plaintext}` };
    expect((await fetch(`${url}/v1/generations/${body.generation_id}`, { headers: theirs })).status).toBe(404);
    expect((await fetch(`${url}/v1/generations/${body.generation_id}/cancel`, { method: 'POST', headers: theirs })).status).toBe(404);
    const unknown = await fetch(`${url}/v1/generations/${body.generation_id}`, { headers: { Authorization: `Bearer ${mintApiKey().plaintext}` } });
    expect(unknown.status).toBe(401);
  });

  it('releases the reservation when the scheduler is unreachable, and answers with its error', async () => {
    const failing = createGenerationPipeline({
      router: createStaticRouter(config),
      admission,
      scheduler: { acquire: async () => Promise.reject(new WeirError('upstream_unavailable', 'scheduler unreachable', { retryable: true })) },
      relay: createRelay({ engineFor: () => engine, settlements: createRecordingSettlements(), clock }),
      countInputTokens: async () => 2,
      settlements: createRecordingSettlements(),
      tenants: new Map(config.tenants.map((t) => [t.id, t])),
      clock,
    });
    const admitted = await failing.admit({
      caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' },
      route: 'generations',
      alias: 'fake',
      generationId: 'gen_x',
      requestId: 'gen_x',
      input: { kind: 'text', text: 'hi' },
      sampling: {},
      arrivedAt: clock.now(),
    });
    expect(admission.held()).toHaveLength(1);
    await expect(admitted.start(new AbortController().signal)).rejects.toMatchObject({ code: 'upstream_unavailable' });
    expect(admission.held()).toEqual([]);
  });

  it('answers unknown routes with a JSON 404', async () => {
    const res = await fetch(`${url}/v2/nothing`, { headers });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { code: 'not_found' } });
  });
});

describe('gateway in a split topology', () => {
  beforeAll(() => {
    splitMode = true;
  });
  afterAll(() => {
    splitMode = false;
  });

  it('fans a cancel for a generation it does not hold out to the relays, with the caller’s tenant', async () => {
    const res = await post('/v1/generations/gen_elsewhere/cancel', {});
    expect(res.status).toBe(202);
    expect(await res.json()).toEqual({ generation_id: 'gen_elsewhere', status: 'cancel_requested' });
    expect(cancels).toEqual([{ generationId: 'gen_elsewhere', tenantId: 't', cause: 'cancel_requested' }]);
  });

  it('answers GET and cancel for a generation another gateway finished from the ledger, for its tenant only', async () => {
    const rec = {
      generationId: 'gen_done',
      requestId: 'r1',
      tenantId: 't',
      appId: 'a',
      apiKeyId: 'k',
      route: 'generations',
      modelAlias: 'fake',
      modelRevision: 'fake@1',
      inputTokens: 2,
      outputTokens: 5,
      cachedInputTokens: 0,
      costNanoUsd: 7_000,
      status: 'completed',
      finishReason: 'stop',
      errorCode: null,
      queueMs: 0,
      ttftMs: 1,
      totalMs: 2,
      startedAt: new Date(),
      finishedAt: new Date(),
    } satisfies UsageRecord;
    finished.set('gen_done', rec);
    const got = await (await fetch(`${url}/v1/generations/gen_done`, { headers })).json();
    expect(got).toMatchObject({ generation_id: 'gen_done', status: 'completed', usage: { output_tokens: 5, cost_usd: 0.000007 } });
    const cancel = await post('/v1/generations/gen_done/cancel', {});
    expect(cancel.status).toBe(200);
    expect(cancels).toEqual([]);
    const theirs = await fetch(`${url}/v1/generations/gen_done`, { headers: { Authorization: `Bearer ${otherTenantKey.plaintext}` } });
    expect(theirs.status).toBe(404);
  });
});

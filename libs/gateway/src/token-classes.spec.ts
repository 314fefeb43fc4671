/**
 * Token classes priced and billed right, and cost you can read (issue 16 §4–5), through the whole
 * request path over HTTP: the real gateway, pipeline and relay with the real OpenAI-compatible and
 * Anthropic adapters on scripted upstreams that report each provider's usage shape.
 *
 * - OpenAI-compatible: `prompt_tokens_details.cached_tokens` (inside `prompt_tokens`) and
 *   `completion_tokens_details.reasoning_tokens` (inside `completion_tokens`).
 * - Anthropic: `cache_creation_input_tokens` and `cache_read_input_tokens`, reported beside
 *   `input_tokens` (total input = all three).
 *
 * For each shape, on `/v1/chat/completions`, `/v1/completions` and `/v1/responses`, streamed and
 * not: the usage the client reads (OpenAI's details fields), the cost it reads (`x-weir-cost-usd`
 * and `x-weir-overhead-ms`, or the `weir` object of the stream's final event), and the ledger's
 * usage record — each class and the cost exactly. The chat cases also run with the relay behind
 * its gRPC server and client (the split's relay service and the gateway's relay client).
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineSpec, PlatformConfig, RevisionPricing, RevisionSpec, UsageRecord } from '@weir/core';
import { createAnthropicEngine, createOpenAICompatibleEngine } from '@weir/engines';
import type { Relay } from '@weir/streaming';
import { anthropicStreamEvents, chatStreamEvents, type ScriptedUpstream, sseReply, startScriptedUpstream } from '@weir/testing';
import { createRelayGrpcClient, createRelayGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import { createParser } from 'eventsource-parser';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** Claude-like prices with every class set apart (USD per million tokens). */
const PRICES: RevisionPricing = { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3, cacheWriteInputPerMTok: 3.75, reasoningPerMTok: 20 };

/** What each upstream reports, what the ledger must record, and what it costs at {@link PRICES}. */
const SHAPES = {
  openai: {
    alias: 'oai',
    wire: { prompt_tokens: 1_200, completion_tokens: 300, prompt_tokens_details: { cached_tokens: 1_024 }, completion_tokens_details: { reasoning_tokens: 256 } },
    record: { inputTokens: 1_200, cachedInputTokens: 1_024, cacheWriteInputTokens: undefined, outputTokens: 300, reasoningTokens: 256 },
    // 176 uncached × $3 + 1,024 reads × $0.30 + 44 output × $15 + 256 reasoning × $20, per MTok:
    // nano-USD = tokens × USD/MTok × 1,000.
    costNano: 176 * 3_000 + 1_024 * 300 + 44 * 15_000 + 256 * 20_000,
    costHeader: '0.006615200',
  },
  anthropic: {
    alias: 'claude',
    wire: { input_tokens: 12, cache_creation_input_tokens: 1_500, cache_read_input_tokens: 3_000, output_tokens: 40 },
    record: { inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, outputTokens: 40, reasoningTokens: undefined },
    // 12 uncached × $3 + 3,000 reads × $0.30 + 1,500 writes × $3.75 + 40 output × $15.
    costNano: 12 * 3_000 + 3_000 * 300 + 1_500 * 3_750 + 40 * 15_000,
    costHeader: '0.007161000',
  },
} as const;
type Shape = keyof typeof SHAPES;

/** A prompt long enough that the input admission reserves (its UTF-8 byte bound) covers every reported count. */
const PROMPT = 'tell me a story '.repeat(400);

let openaiUpstream: ScriptedUpstream;
let anthropicUpstream: ScriptedUpstream;

function revision(id: string, engine: EngineSpec): RevisionSpec {
  return { id, model: id.split('@')[0], engine, contextWindow: 100_000, maxOutputTokens: 1_024, defaultOutputTokens: 512, pricing: PRICES };
}

function config(): PlatformConfig {
  const oai = revision('oai@1', { kind: 'openai-compatible', baseUrl: openaiUpstream.url, upstreamModel: 'o', api: 'chat', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 8 });
  const claude = revision('claude@1', {
    kind: 'anthropic',
    baseUrl: anthropicUpstream.url.replace(/\/v1$/, ''),
    upstreamModel: 'c',
    firstTokenTimeoutMs: 5_000,
    idleTimeoutMs: 5_000,
    maxConcurrency: 8,
  });
  const base = twoTenantConfig(oai);
  return {
    ...base,
    revisions: [oai, claude],
    aliases: [
      { name: 'oai', targets: [{ revision: 'oai@1', weight: 1 }] },
      { name: 'claude', targets: [{ revision: 'claude@1', weight: 1 }] },
    ],
    defaults: { ...base.defaults, maxBodyBytes: 65_536 },
  };
}

/** Things a split gateway started (the relay's gRPC server and client), stopped with it. */
const splitParts: Array<() => Promise<void> | void> = [];

async function overGrpc(relay: Relay): Promise<Relay> {
  const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
  const client = createRelayGrpcClient({ address: server.address });
  splitParts.push(() => client.close(), () => server.close());
  return client;
}

async function gatewayFor(topology: 'all-in-one' | 'split'): Promise<TestGateway> {
  const c = config();
  const engines = {
    'oai@1': createOpenAICompatibleEngine(c.revisions[0].engine as Extract<EngineSpec, { kind: 'openai-compatible' }>, { env: {} }),
    'claude@1': createAnthropicEngine(c.revisions[1].engine as Extract<EngineSpec, { kind: 'anthropic' }>, { env: {} }),
  };
  return startTestGateway({
    config: c,
    engine: engines['oai@1'],
    engines,
    admission: createInMemoryAdmission({ tenants: c.tenants }),
    ...(topology === 'split' ? { relayVia: overGrpc } : {}),
  });
}

type Route = 'chat' | 'completions' | 'responses';

function requestOf(route: Route, alias: string, stream: boolean): [string, Record<string, unknown>] {
  switch (route) {
    case 'chat':
      return ['/v1/chat/completions', { model: alias, messages: [{ role: 'user', content: PROMPT }], max_tokens: 400, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }];
    case 'completions':
      return ['/v1/completions', { model: alias, prompt: PROMPT, max_tokens: 400, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }];
    case 'responses':
      return ['/v1/responses', { model: alias, input: PROMPT, max_output_tokens: 400, stream }];
  }
}

/** Every SSE event of a response: `[DONE]` as the string, others parsed. */
async function sseEvents(res: Response): Promise<unknown[]> {
  const out: unknown[] = [];
  const parser = createParser({ onEvent: (e) => void out.push(e.data === '[DONE]' ? '[DONE]' : JSON.parse(e.data)) });
  parser.feed(await res.text());
  return out;
}

/** Usage and the `weir` object as the client reads them, from the body or the stream's final event. */
async function clientView(route: Route, stream: boolean, res: Response): Promise<{ usage: Record<string, unknown>; weir: Record<string, unknown> }> {
  if (!stream) {
    const body = (await res.json()) as Record<string, unknown>;
    if (route === 'responses') return { usage: body.usage as Record<string, unknown>, weir: body.weir as Record<string, unknown> };
    return { usage: body.usage as Record<string, unknown>, weir: body.weir as Record<string, unknown> };
  }
  const events = await sseEvents(res);
  if (route === 'responses') {
    const completed = events.find((e) => (e as { type?: string }).type === 'response.completed') as { response: { usage: Record<string, unknown>; weir: Record<string, unknown> } };
    return { usage: completed.response.usage, weir: completed.response.weir };
  }
  expect(events.at(-1)).toBe('[DONE]');
  const last = events.at(-2) as { choices: unknown[]; usage: Record<string, unknown>; weir: Record<string, unknown> };
  expect(last.choices).toEqual([]);
  return { usage: last.usage, weir: last.weir };
}

/** The client wire's usage for a shape: OpenAI's chat/completions usage or the Responses usage. */
function expectedUsage(route: Route, shape: Shape): Record<string, unknown> {
  const r = SHAPES[shape].record;
  const write = r.cacheWriteInputTokens ? { cache_write_tokens: r.cacheWriteInputTokens } : {};
  if (route === 'responses') {
    return {
      input_tokens: r.inputTokens,
      input_tokens_details: { cached_tokens: r.cachedInputTokens, ...write },
      output_tokens: r.outputTokens,
      output_tokens_details: { reasoning_tokens: r.reasoningTokens ?? 0 },
      total_tokens: r.inputTokens + r.outputTokens,
    };
  }
  return {
    prompt_tokens: r.inputTokens,
    completion_tokens: r.outputTokens,
    total_tokens: r.inputTokens + r.outputTokens,
    prompt_tokens_details: { cached_tokens: r.cachedInputTokens, ...write },
    completion_tokens_details: { reasoning_tokens: r.reasoningTokens ?? 0 },
  };
}

async function recordOf(gw: TestGateway, generationId: string): Promise<UsageRecord> {
  for (let i = 0; i < 500; i++) {
    const r = gw.records.find((x) => x.generationId === generationId);
    if (r) return r;
    await new Promise((res) => setTimeout(res, 5));
  }
  throw new Error(`no usage record for ${generationId}`);
}

beforeAll(async () => {
  openaiUpstream = await startScriptedUpstream();
  anthropicUpstream = await startScriptedUpstream();
  openaiUpstream.setScript(() => sseReply(chatStreamEvents(['Once', ' upon'], { usage: SHAPES.openai.wire })));
  anthropicUpstream.setScript(() => sseReply(anthropicStreamEvents(['Once', ' upon'], { usage: SHAPES.anthropic.wire })));
});
afterAll(async () => {
  await openaiUpstream.close();
  await anthropicUpstream.close();
});

describe.each<['all-in-one' | 'split']>([['all-in-one'], ['split']])('token classes and cost, relay %s', (topology) => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayFor(topology);
  });
  afterAll(async () => {
    await gw.close();
    for (const stop of splitParts.splice(0)) await stop();
  });

  const routes: Route[] = topology === 'split' ? ['chat'] : ['chat', 'completions', 'responses'];
  const cases = routes.flatMap((route) => (['openai', 'anthropic'] as Shape[]).flatMap((shape) => [false, true].map((stream) => [route, shape, stream] as const)));

  it.each(cases)('%s with the %s usage shape (stream: %s): client usage, cost and the ledger row exactly', async (route, shape, stream) => {
    const s = SHAPES[shape];
    const [path, body] = requestOf(route, s.alias, stream);
    const res = await gw.post(path, body);
    expect(res.status).toBe(200);
    const generationId = res.headers.get('x-weir-generation-id') as string;
    if (stream) {
      // The headers went out before the cost was known: it is in the final event instead.
      expect(res.headers.get('x-weir-cost-usd')).toBeNull();
    } else {
      expect(res.headers.get('x-weir-cost-usd')).toBe(s.costHeader);
      expect(Number(res.headers.get('x-weir-overhead-ms'))).toBeGreaterThanOrEqual(0);
    }
    const view = await clientView(route, stream, res);
    expect(view.usage).toEqual(expectedUsage(route, shape));
    expect(view.weir.cost_usd).toBe(s.costNano / 1e9);
    expect(typeof view.weir.overhead_ms).toBe('number');
    expect(view.weir.overhead_ms as number).toBeGreaterThanOrEqual(0);

    const record = await recordOf(gw, generationId);
    expect({
      inputTokens: record.inputTokens,
      cachedInputTokens: record.cachedInputTokens,
      cacheWriteInputTokens: record.cacheWriteInputTokens,
      outputTokens: record.outputTokens,
      reasoningTokens: record.reasoningTokens,
    }).toEqual(s.record);
    expect(record.costNanoUsd).toBe(s.costNano);
  });
});

describe('x-weir-overhead-ms leaves out the upstream\'s time', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayFor('all-in-one');
  });
  afterAll(async () => {
    openaiUpstream.setScript(() => sseReply(chatStreamEvents(['Once', ' upon'], { usage: SHAPES.openai.wire })));
    await gw.close();
  });

  it('a slow upstream (≥ 500 ms) is not Weir\'s overhead', async () => {
    // 6 SSE steps, 100 ms apart: the upstream attempt lasts at least 500 ms.
    openaiUpstream.setScript(() => sseReply(chatStreamEvents(['Once', ' upon'], { usage: SHAPES.openai.wire }), { delayMs: 100 }));
    const started = performance.now();
    const res = await gw.post('/v1/chat/completions', { model: 'oai', messages: [{ role: 'user', content: PROMPT }], max_tokens: 400 });
    expect(res.status).toBe(200);
    await res.json();
    const elapsed = performance.now() - started;
    const overhead = Number(res.headers.get('x-weir-overhead-ms'));
    expect(elapsed).toBeGreaterThanOrEqual(500);
    // The whole request took the upstream's ≥ 500 ms and more; Weir's share excludes them (a
    // generous 100 ms margin for the relay's whole-ms rounding).
    expect(overhead).toBeLessThanOrEqual(elapsed - 400);
  });
});

describe('/v1/messages (Anthropic inbound) reports the classes in Anthropic\'s wire', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayFor('all-in-one');
  });
  afterAll(() => gw.close());

  it.each(['openai', 'anthropic'] as Shape[])('%s usage shape: cache reads and writes apart from input_tokens, the cost header, the ledger row', async (shape) => {
    const s = SHAPES[shape];
    const res = await gw.post('/v1/messages', { model: s.alias, max_tokens: 400, messages: [{ role: 'user', content: PROMPT }] }, { 'anthropic-version': '2023-06-01' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-cost-usd')).toBe(s.costHeader);
    const body = (await res.json()) as { usage: Record<string, number> };
    const r = s.record;
    expect(body.usage).toMatchObject({
      input_tokens: r.inputTokens - r.cachedInputTokens - (r.cacheWriteInputTokens ?? 0),
      cache_read_input_tokens: r.cachedInputTokens,
      cache_creation_input_tokens: r.cacheWriteInputTokens ?? 0,
      output_tokens: r.outputTokens,
    });
    const record = await recordOf(gw, res.headers.get('x-weir-generation-id') as string);
    expect(record.costNanoUsd).toBe(s.costNano);
  });
});

describe('the final chunk of a chat stream without include_usage', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayFor('all-in-one');
  });
  afterAll(() => gw.close());

  it('has no usage chunk and so no cost: OpenAI sends usage only when asked', async () => {
    const res = await gw.post('/v1/chat/completions', { model: 'oai', messages: [{ role: 'user', content: PROMPT }], max_tokens: 400, stream: true });
    const events = await sseEvents(res);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.some((e) => typeof e === 'object' && e !== null && (e as { usage?: unknown }).usage)).toBe(false);
    expect(events.some((e) => typeof e === 'object' && e !== null && (e as { weir?: { cost_usd?: unknown } }).weir?.cost_usd !== undefined)).toBe(false);
  });
});

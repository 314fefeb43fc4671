/**
 * Count what was produced; every attempt visible, one charge (issue 13, items 3 and 4), through
 * the whole request path over HTTP: the real gateway, pipeline, failover and relay, with the
 * real OpenAI-compatible and Anthropic adapters on scripted upstreams that count what they send.
 *
 * - A stream cut after 3 / 5 / 8 / 61 tokens is billed exactly the tokens the upstream sent:
 *   its own running count (`reported`, continuous usage), the revision's tokenizer over the
 *   text received (`counted`), else the content deltas (`estimated`) — never a byte bound.
 * - A first attempt that fails (503) before any output, then a fallback that answers: one usage
 *   record naming the fallback, attempts [failed, answered], the failed one billed nothing;
 *   headers, `GET /v1/generations/{id}` and the stream's end name the fallback.
 * - When every attempt fails before any output: one record of 0 tokens and cost 0.
 * The fallback cases run in both topologies: the relay in-process (all-in-one) and behind its
 * gRPC server and client (the split's relay service and the gateway's relay client).
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineSpec, PlatformConfig, RevisionSpec, TokenizerName, UsageRecord } from '@weir/core';
import { createAnthropicEngine, createOpenAICompatibleEngine, tiktokenTokenizer } from '@weir/engines';
import type { Relay } from '@weir/streaming';
import { countingAnthropicScript, countingModelScript, type ScriptedUpstream, startScriptedUpstream } from '@weir/testing';
import { createRelayGrpcClient, createRelayGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** Prompt tokens the counting upstreams report. */
const PROMPT_TOKENS = 7;

function revision(id: string, engine: EngineSpec, pricing = { inputPerMTok: 1_000, outputPerMTok: 2_000, cachedInputPerMTok: 1_000 }): RevisionSpec {
  return { id, model: id.split('@')[0], engine, contextWindow: 4_096, maxOutputTokens: 256, defaultOutputTokens: 128, pricing };
}

function openai(url: string, extra: { continuousUsageStats?: boolean; tokenizer?: TokenizerName } = {}): EngineSpec {
  return { kind: 'openai-compatible', baseUrl: url, upstreamModel: 'm', api: 'chat', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 8, ...extra };
}

/** A config whose alias `m` routes to `revisions[0]` with the others as its fallback chain. */
function configOf(revisions: RevisionSpec[]): PlatformConfig {
  const base = twoTenantConfig(revisions[0]);
  return { ...base, revisions, aliases: [{ name: 'm', targets: [{ revision: revisions[0].id, weight: 1 }], ...(revisions.length > 1 ? { fallbacks: revisions.slice(1).map((r) => r.id) } : {}) }] };
}

/** How the gateway reaches its relay: in-process (the all-in-one) or over gRPC (the split). */
type Topology = 'all-in-one' | 'split';

/** Things a split gateway started (the relay's gRPC server and client), stopped with it. */
const splitParts: Array<() => Promise<void> | void> = [];

/** The relay behind a real gRPC server, reached through the relay gRPC client (as the split gateway does). */
async function overGrpc(relay: Relay): Promise<Relay> {
  const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
  const client = createRelayGrpcClient({ address: server.address });
  splitParts.push(() => client.close(), () => server.close());
  return client;
}

async function gatewayFor(revisions: RevisionSpec[], topology: Topology = 'all-in-one'): Promise<TestGateway> {
  const config = configOf(revisions);
  const engines = Object.fromEntries(
    revisions.map((r) => [r.id, r.engine.kind === 'anthropic' ? createAnthropicEngine(r.engine, { env: {} }) : createOpenAICompatibleEngine(r.engine as Extract<EngineSpec, { kind: 'openai-compatible' }>, { env: {} })]),
  );
  const gw = await startTestGateway({
    config,
    engine: engines[revisions[0].id],
    engines,
    admission: createInMemoryAdmission({ tenants: config.tenants }),
    ...(topology === 'split' ? { relayVia: overGrpc } : {}),
  });
  return {
    ...gw,
    async close() {
      await gw.close();
      for (const stop of splitParts.splice(0)) await stop();
    },
  };
}

/**
 * Streams `POST /v1/generations`, calls `onDelta(n)` after each delta event, and returns the
 * response's headers, the number of deltas and the end event's data.
 */
async function streamGeneration(gw: TestGateway, onDelta: (n: number, generationId: string) => Promise<void> | void = () => undefined) {
  const res = await gw.post('/v1/generations', { model_alias: 'm', input: 'the cat', max_output_tokens: 200, stream: true });
  expect(res.status).toBe(200);
  const generationId = res.headers.get('x-weir-generation-id') as string;
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let deltas = 0;
  let start: Record<string, unknown> | undefined;
  let end: Record<string, unknown> | undefined;
  while (!end) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut: number;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const name = /^event: (.*)$/m.exec(event)?.[1];
      const data = /^data: (.*)$/m.exec(event)?.[1];
      if (name === 'start') start = JSON.parse(data as string) as Record<string, unknown>;
      if (name === 'delta') await onDelta(++deltas, generationId);
      if (name === 'end') end = JSON.parse(data as string) as Record<string, unknown>;
    }
  }
  await reader.cancel().catch(() => undefined);
  return { headers: res.headers, generationId, deltas, start, end };
}

/** The request's one usage record, once written. */
async function recordOf(gw: TestGateway, generationId: string): Promise<UsageRecord> {
  for (let i = 0; i < 200 && !gw.records.some((r) => r.generationId === generationId); i++) await new Promise((r) => setTimeout(r, 10));
  const records = gw.records.filter((r) => r.generationId === generationId);
  expect(records).toHaveLength(1);
  return records[0];
}

describe('billing a cut stream the tokens the upstream produced', () => {
  let upstream: ScriptedUpstream;
  let gw: TestGateway | undefined;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
    await tiktokenTokenizer('cl100k_base').load();
  });
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });
  afterAll(() => upstream.close());

  const modes: Array<[string, { continuousUsageStats?: boolean; tokenizer?: TokenizerName }, UsageRecord['usageSource']]> = [
    ['continuous usage', { continuousUsageStats: true }, 'reported'],
    ['a declared tokenizer', { tokenizer: 'cl100k_base' }, 'counted'],
    ['neither', {}, 'estimated'],
  ];
  const cases = modes.flatMap(([name, extra, source]) => [3, 5, 8, 61].map((k) => [name, k, extra, source] as const));

  it.each(cases)('with %s: a stream cancelled after %i tokens bills exactly those', async (_name, k, extra, source) => {
    upstream.setScript(countingModelScript({ tokens: k, then: 'hang', promptTokens: PROMPT_TOKENS }));
    gw = await gatewayFor([revision('solo@1', openai(upstream.url, extra))]);
    const g = await streamGeneration(gw, async (n, id) => {
      if (n === k) await gw!.post(`/v1/generations/${id}/cancel`, {});
    });
    expect(g.end).toMatchObject({ finish_reason: 'cancelled', usage: { output_tokens: k } });
    const record = await recordOf(gw, g.generationId);
    const sent = upstream.requests.at(-1)?.tokensSent;
    expect(sent).toBe(k);
    expect(record).toMatchObject({ outputTokens: k, usageSource: source, finishReason: 'cancelled' });
    // The input: the upstream's own count when it reported one, else the revision's count.
    if (source === 'reported') expect(record.inputTokens).toBe(PROMPT_TOKENS);
    expect(record.costNanoUsd).toBe(record.inputTokens * 1_000_000 + k * 2_000_000);
    expect(record.attempts).toEqual([expect.objectContaining({ attempt: 1, revisionId: 'solo@1', outcome: 'answered', outputTokens: k })]);
  });

  it.each([
    ['a declared tokenizer', 'cl100k_base' as const, 'counted'],
    ['no tokenizer', undefined, 'estimated'],
  ])('with %s: an upstream dying after 8 tokens bills those 8', async (_name, tokenizer, source) => {
    upstream.setScript(countingModelScript({ tokens: 8, then: 'destroy' }));
    gw = await gatewayFor([revision('solo@1', openai(upstream.url, tokenizer ? { tokenizer } : {}))]);
    const g = await streamGeneration(gw);
    expect(g.deltas).toBe(8);
    const record = await recordOf(gw, g.generationId);
    expect(record).toMatchObject({ status: 'failed', outputTokens: 8, usageSource: source });
  });

  it.each([
    ['a declared tokenizer', 'cl100k_base' as const, 'counted'],
    ['no tokenizer', undefined, 'estimated'],
  ])('anthropic with %s: a stream cut after 5 tokens (before message_delta) bills those 5 and its reported input', async (_name, tokenizer, source) => {
    upstream.setScript(countingAnthropicScript({ tokens: 5, then: 'hang', promptTokens: PROMPT_TOKENS }));
    const origin = upstream.url.replace(/\/v1$/, '');
    gw = await gatewayFor([
      revision('claude@1', { kind: 'anthropic', baseUrl: origin, upstreamModel: 'c', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 8, ...(tokenizer ? { tokenizer } : {}) }),
    ]);
    const g = await streamGeneration(gw, async (n, id) => {
      if (n === 5) await gw!.post(`/v1/generations/${id}/cancel`, {});
    });
    expect(upstream.requests.at(-1)?.tokensSent).toBe(5);
    const record = await recordOf(gw, g.generationId);
    expect(record).toMatchObject({ outputTokens: 5, inputTokens: PROMPT_TOKENS, usageSource: source, finishReason: 'cancelled' });
  });
});

describe.each<Topology>(['all-in-one', 'split'])('%s: a fallback after a failure before any output', (topology) => {
  let failing: ScriptedUpstream;
  let answering: ScriptedUpstream;
  let gw: TestGateway;
  const first = () => revision('first@1', openai(failing.url), { inputPerMTok: 5_000, outputPerMTok: 5_000, cachedInputPerMTok: 5_000 });
  const second = () => revision('second@1', openai(answering.url));
  beforeAll(async () => {
    failing = await startScriptedUpstream({ script: () => ({ kind: 'error', status: 503 }) });
    answering = await startScriptedUpstream({ script: countingModelScript({ tokens: 4, promptTokens: PROMPT_TOKENS }) });
    gw = await gatewayFor([first(), second()], topology);
  });
  afterAll(async () => {
    await gw.close();
    await failing.close();
    await answering.close();
  });

  const expectOneRecordOnTheFallback = (record: UsageRecord) => {
    expect(record.modelRevision).toBe('second@1');
    // Priced at the answering revision (1,000 / 2,000 USD per Mtok), reported by its upstream.
    expect(record).toMatchObject({ inputTokens: PROMPT_TOKENS, outputTokens: 4, costNanoUsd: PROMPT_TOKENS * 1_000_000 + 4 * 2_000_000, usageSource: 'reported' });
    expect(record.attempts).toEqual([
      expect.objectContaining({ attempt: 1, revisionId: 'first@1', provider: 'openai-compatible', outcome: 'failed', errorCode: 'upstream_unavailable', inputTokens: 0, outputTokens: 0, ttftMs: null }),
      expect.objectContaining({ attempt: 2, revisionId: 'second@1', outcome: 'answered', inputTokens: PROMPT_TOKENS, outputTokens: 4 }),
    ]);
    expect(record.attempts?.[1].ttftMs).not.toBeNull();
  };

  it('non-streaming: the answer, its headers and its one record name the revision that answered', async () => {
    const before = gw.records.length;
    const res = await gw.post('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-model-revision')).toBe('second@1');
    expect(res.headers.get('x-weir-fallback-reason')).toBe('upstream_unavailable');
    const id = res.headers.get('x-weir-generation-id') as string;
    const record = await recordOf(gw, id);
    expect(gw.records.length - before).toBe(1);
    expectOneRecordOnTheFallback(record);
    const resource = (await (await gw.get(`/v1/generations/${id}`)).json()) as Record<string, unknown>;
    expect(resource.model_revision).toBe('second@1');
  });

  it('streaming: the headers (sent before the first token), the start and end events and GET name it too', async () => {
    const g = await streamGeneration(gw);
    expect(g.deltas).toBe(4);
    expect(g.headers.get('x-weir-model-revision')).toBe('second@1');
    expect(g.headers.get('x-weir-fallback-reason')).toBe('upstream_unavailable');
    expect(g.start).toMatchObject({ model_revision: 'second@1' });
    expect(g.end).toMatchObject({ model_used: 'second@1', fallback_reason: 'upstream_unavailable' });
    expectOneRecordOnTheFallback(await recordOf(gw, g.generationId));
    const resource = (await (await gw.get(`/v1/generations/${g.generationId}`)).json()) as Record<string, unknown>;
    expect(resource.model_revision).toBe('second@1');
  });

  it('when every attempt fails before any output: one record of 0 tokens and cost 0, every attempt on it', async () => {
    answering.setScript(() => ({ kind: 'error', status: 503 }));
    try {
      const res = await gw.post('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 });
      expect(res.status).toBe(503);
      const id = res.headers.get('x-weir-generation-id');
      const record = id ? await recordOf(gw, id) : (gw.records.at(-1) as UsageRecord);
      expect(record).toMatchObject({ status: 'failed', inputTokens: 0, outputTokens: 0, costNanoUsd: 0 });
      expect(record.attempts?.map((a) => [a.revisionId, a.outcome])).toEqual([
        ['first@1', 'failed'],
        ['second@1', 'failed'],
      ]);
    } finally {
      answering.setScript(countingModelScript({ tokens: 4, promptTokens: PROMPT_TOKENS }));
    }
  });
});

/**
 * `POST /v1/embeddings` over the real pipeline (router, admission, scheduler, relay) and the
 * scripted engine: the OpenAI shapes (float and base64, the four input forms, the official
 * client), one usage row per request with no output tokens, the reservation (input × input
 * price), and the 400s — each before any reservation or engine call.
 */
import { createInMemoryAdmission } from '@weir/admission';
import { type PlatformConfig, type RevisionSpec } from '@weir/core';
import { createScriptedEngine, SCRIPTED_INPUT_TOKENS, scriptedEmbedding } from '@weir/testing';
import type { Relay } from '@weir/streaming';
import { createRelayGrpcClient, createRelayGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import { createOpenAI } from '@ai-sdk/openai';
import { embed, embedMany } from 'ai';
import OpenAI from 'openai';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const EMBED: RevisionSpec = {
  ...fakeRevision({ inputPerMTok: 2, outputPerMTok: 1_000_000, cachedInputPerMTok: 2 }),
  id: 'embed@1',
  kind: 'embedding',
  embedding: { dimensions: 4, variableDimensions: false },
};

function config(budgetUsd?: number): PlatformConfig {
  const base = twoTenantConfig();
  return {
    ...base,
    revisions: [...base.revisions, EMBED],
    aliases: [...base.aliases, { name: 'emb', targets: [{ revision: 'embed@1', weight: 1 }] }],
    tenants: base.tenants.map((t) => (budgetUsd !== undefined && t.id === 't' ? { ...t, limits: { ...t.limits, monthlyBudgetUsd: budgetUsd } } : t)),
    defaults: { ...base.defaults, maxBodyBytes: 256 * 1024 },
  };
}

const floats = (v: number[]) => Array.from(new Float32Array(v));
/** The JSON of a response, loosely typed for assertions. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = async (res: Response): Promise<any> => res.json();

describe('POST /v1/embeddings', () => {
  let gw: TestGateway;
  let engine: ReturnType<typeof createScriptedEngine>;
  const start = async (budgetUsd?: number) => {
    const c = config(budgetUsd);
    engine = createScriptedEngine();
    gw = await startTestGateway({ config: c, engine, admission: createInMemoryAdmission({ tenants: c.tenants }) });
  };
  afterEach(() => gw?.close());

  it("answers OpenAI's list of float vectors, in order, and bills one row: the input tokens, no output", async () => {
    await start();
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: ['hello', 'weir'], encoding_format: 'float', user: 'end-user-1' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-model-revision')).toBe('embed@1');
    const body = await json(res);
    expect(body).toEqual({
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: floats(scriptedEmbedding('hello')) },
        { object: 'embedding', index: 1, embedding: floats(scriptedEmbedding('weir')) },
      ],
      model: 'emb',
      usage: { prompt_tokens: 2 * SCRIPTED_INPUT_TOKENS, total_tokens: 2 * SCRIPTED_INPUT_TOKENS },
    });
    await waitFor(() => gw.records.length === 1);
    expect(gw.records[0]).toMatchObject({ route: 'embeddings', modelAlias: 'emb', modelRevision: 'embed@1', inputTokens: 14, outputTokens: 0, status: 'completed' });
    // 14 tokens at $2 per million: 28,000 nano-USD.
    expect(gw.records[0].costNanoUsd).toBe(28_000);
    expect(engine.requests[0]).toMatchObject({ input: { kind: 'embedding', items: ['hello', 'weir'] }, maxOutputTokens: 0 });
  });

  it('takes a string, a token array and an array of token arrays; answers base64 when asked', async () => {
    await start();
    const one = await json(await gw.post('/v1/embeddings', { model: 'emb', input: 'solo' }));
    expect(one.data).toHaveLength(1);
    expect(one.data[0].embedding).toEqual(floats(scriptedEmbedding('solo')));
    const tokens = await json(await gw.post('/v1/embeddings', { model: 'emb', input: [5, 6, 7] }));
    expect(tokens.data[0].embedding).toEqual(floats(scriptedEmbedding([5, 6, 7])));
    // A token array is its own count (3), reserved exactly; the bill never passes the reservation.
    expect(tokens.usage.prompt_tokens).toBe(3);
    const many = await json(await gw.post('/v1/embeddings', { model: 'emb', input: [[1, 2], [3]], encoding_format: 'base64' }));
    const decoded = many.data.map((d: { embedding: string }) => Array.from(new Float32Array(new Uint8Array(Buffer.from(d.embedding, 'base64')).buffer)));
    expect(decoded).toEqual([floats(scriptedEmbedding([1, 2])), floats(scriptedEmbedding([3]))]);
  });

  it("works with the official OpenAI client's embeddings.create (base64 by default, decoded by the client)", async () => {
    await start();
    const client = new OpenAI({ apiKey: gw.key.plaintext, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const r = await client.embeddings.create({ model: 'emb', input: ['alpha', 'beta'] });
    expect(r.data.map((d) => d.embedding)).toEqual([floats(scriptedEmbedding('alpha')), floats(scriptedEmbedding('beta'))]);
    expect(r.usage).toEqual({ prompt_tokens: 14, total_tokens: 14 });
    await expect(client.embeddings.create({ model: 'fake', input: 'x' })).rejects.toMatchObject({ status: 400 });
  });

  it("works with the Vercel AI SDK's embed and embedMany (its OpenAI provider pointed at Weir)", async () => {
    await start();
    const provider = createOpenAI({ apiKey: gw.key.plaintext, baseURL: `${gw.url}/v1` });
    const one = await embed({ model: provider.embedding('emb'), value: 'gamma', maxRetries: 0 });
    expect(one.embedding).toEqual(floats(scriptedEmbedding('gamma')));
    expect(one.usage.tokens).toBe(SCRIPTED_INPUT_TOKENS);
    const many = await embedMany({ model: provider.embedding('emb'), values: ['delta', 'epsilon'], maxRetries: 0 });
    expect(many.embeddings).toEqual([floats(scriptedEmbedding('delta')), floats(scriptedEmbedding('epsilon'))]);
    await waitFor(() => gw.records.length === 2);
    expect(gw.records.map((r) => [r.route, r.inputTokens, r.outputTokens])).toEqual([
      ['embeddings', SCRIPTED_INPUT_TOKENS, 0],
      ['embeddings', 2 * SCRIPTED_INPUT_TOKENS, 0],
    ]);
    // A generation model named as an embedding model: the SDK surfaces Weir's 400.
    await expect(embed({ model: provider.embedding('fake'), value: 'x', maxRetries: 0 })).rejects.toMatchObject({ statusCode: 400 });
  });

  it.each([
    ['an empty string', { model: 'emb', input: '' }, 'input', 'is empty'],
    ['an empty list', { model: 'emb', input: [] }, 'input', 'is empty'],
    ['an empty item', { model: 'emb', input: ['a', ''] }, 'input[1]', 'is empty'],
    ['an empty token array', { model: 'emb', input: [[1], []] }, 'input[1]', 'is empty'],
    ['2,049 inputs', { model: 'emb', input: Array.from({ length: 2049 }, () => 'a') }, 'input', 'at most 2048'],
    ['an unknown field', { model: 'emb', input: 'a', temperature: 0 }, 'temperature', 'unknown field'],
    ['a bad encoding_format', { model: 'emb', input: 'a', encoding_format: 'int8' }, 'encoding_format', ''],
    ['a generation model', { model: 'fake', input: 'a' }, 'model', 'is not an embedding model'],
    ['dimensions the model cannot give', { model: 'emb', input: 'a', dimensions: 2 }, 'dimensions', 'cannot shorten'],
    ['an input over the context window', { model: 'emb', input: [Array.from({ length: 65 }, (_, i) => i)] }, 'input', 'at most 64 tokens per input'],
  ])('refuses %s with a 400 before any work', async (_what, body, param, message) => {
    await start();
    const res = await gw.post('/v1/embeddings', body);
    expect(res.status).toBe(400);
    const err = (await json(res)).error;
    expect(err.param).toBe(param);
    expect(err.message).toContain(message);
    expect(engine.requests).toHaveLength(0);
    expect(gw.records).toHaveLength(0);
  });

  it('replays a repeat with the same Idempotency-Key: the same vectors, one usage row', async () => {
    await start();
    const first = await gw.post('/v1/embeddings', { model: 'emb', input: ['once', 'twice'] }, { 'Idempotency-Key': 'emb-key-1' });
    expect(first.status).toBe(200);
    const firstBody = await json(first);
    await waitFor(() => gw.records.length === 1);
    const again = await gw.post('/v1/embeddings', { model: 'emb', input: ['once', 'twice'] }, { 'Idempotency-Key': 'emb-key-1' });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect((await json(again)).data).toEqual(firstBody.data);
    expect(engine.requests).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 50));
    expect(gw.records).toHaveLength(1);
  });

  it('refuses an embedding model on /v1/chat/completions and /v1/completions', async () => {
    await start();
    for (const [path, body] of [
      ['/v1/chat/completions', { model: 'emb', messages: [{ role: 'user', content: 'hi' }] }],
      ['/v1/completions', { model: 'emb', prompt: 'hi' }],
    ] as const) {
      const res = await gw.post(path, body);
      expect(res.status).toBe(400);
      const err = (await json(res)).error;
      expect(err.param).toBe('model');
      expect(err.message).toContain('is an embedding model');
    }
    expect(engine.requests).toHaveLength(0);
  });

  it('reserves the input at the input price only (no output), and refuses past the budget', async () => {
    // $2 per million input tokens, $1 per output token: an output reservation of even one token would pass $0.0001.
    await start(0.00002);
    expect((await gw.post('/v1/embeddings', { model: 'emb', input: 'a' })).status).toBe(200); // 7 tokens: $0.000014
    const refused = await gw.post('/v1/embeddings', { model: 'emb', input: ['a', 'b'] }); // 14 more: past $0.00002
    expect(refused.status).toBe(429);
    expect((await json(refused)).error.code).toBe('budget_exhausted');
  });
});

describe('POST /v1/embeddings in the split topology (the relay over gRPC)', () => {
  const stops: Array<() => Promise<void> | void> = [];
  afterAll(async () => {
    for (const stop of stops.reverse()) await stop();
  });

  it('carries texts and token arrays to the engine and the vectors back, billed as in-process', async () => {
    const c = config();
    const engine = createScriptedEngine();
    const gw = await startTestGateway({
      config: c,
      engine,
      admission: createInMemoryAdmission({ tenants: c.tenants }),
      relayVia: async (relay: Relay) => {
        const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
        const client = createRelayGrpcClient({ address: server.address });
        stops.push(() => server.close(), () => client.close());
        return client;
      },
    });
    stops.push(() => gw.close());
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: [[9, 8], [7]] });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.data.map((d: { embedding: number[] }) => d.embedding)).toEqual([floats(scriptedEmbedding([9, 8])), floats(scriptedEmbedding([7]))]);
    expect(engine.requests[0].input).toEqual({ kind: 'embedding', items: [[9, 8], [7]] });
    await waitFor(() => gw.records.length === 1);
    expect(gw.records[0]).toMatchObject({ route: 'embeddings', inputTokens: 3, outputTokens: 0 });
    const text = await json(await gw.post('/v1/embeddings', { model: 'emb', input: 'over grpc' }));
    expect(text.data[0].embedding).toEqual(floats(scriptedEmbedding('over grpc')));
  });
});

async function waitFor(cond: () => boolean, ms = 2_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

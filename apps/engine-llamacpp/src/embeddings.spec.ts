/**
 * An embedding revision's replica (`ENGINE_EMBEDDING=true`) on the real tiny model: `POST
 * /v1/embeddings` as the relay's OpenAI-compatible adapter calls it in the split topology, and
 * that adapter reading it back (the path of a split `/v1/embeddings`).
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { decodeEmbeddingDeltas, type EngineEvent } from '@weir/core';
import { createLlamaCppEngine, createOpenAICompatibleEngine, type LlamaCppEngine, silentLogger } from '@weir/engines';
import { collectEngineEvents, engineRequest, tinyModelPath } from '@weir/testing';
import { createEngineServer } from './server';

let engine: LlamaCppEngine;
let http: Server;
let url: string;

beforeAll(async () => {
  engine = await createLlamaCppEngine({ kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences: 2, contextSize: 128, testTokenDelayMs: 0, embeddingOnly: true });
  const app = createEngineServer({ engine, modelName: 'stories260k-embed@1', logger: silentLogger });
  http = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});

afterAll(async () => {
  http.closeAllConnections();
  await new Promise((r) => http.close(r));
  await engine.close();
});

const post = (body: unknown) => fetch(`${url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('engine server POST /v1/embeddings (real tiny model)', () => {
  it('answers one float vector per input with the prompt tokens', async () => {
    const res = await post({ model: 'x', input: ['Once upon a time', [1, 2, 3]] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Array<{ index: number; embedding: number[] }>; usage: { prompt_tokens: number }; model: string };
    expect(body.model).toBe('stories260k-embed@1');
    expect(body.data.map((d) => d.index)).toEqual([0, 1]);
    expect(body.data.every((d) => d.embedding.length === 64)).toBe(true);
    expect(body.usage.prompt_tokens).toBe(1 + engine.tokenize('Once upon a time') + 3);
  });

  it('refuses empty or malformed input and generation on an embedding replica', async () => {
    expect((await post({ input: '' })).status).toBe(400);
    expect((await post({ input: [] })).status).toBe(400);
    expect((await post({ input: [{ text: 'x' }] })).status).toBe(400);
    const chat = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(chat.status).toBe(400);
  });

  it('is read back by the relay’s OpenAI-compatible adapter with the same vectors as the engine gives in-process', async () => {
    const adapter = createOpenAICompatibleEngine(
      { kind: 'openai-compatible', baseUrl: `${url}/v1`, upstreamModel: 'stories260k-embed@1', api: 'chat', firstTokenTimeoutMs: 10_000, idleTimeoutMs: 10_000, maxConcurrency: 2 },
      { env: {} },
    );
    const input = { kind: 'embedding' as const, items: ['The dog ran home.'] };
    const remote = await collectEngineEvents(adapter, engineRequest(input, { maxOutputTokens: 0 }));
    const local = await collectEngineEvents(engine, engineRequest(input, { maxOutputTokens: 0 }));
    const vectors = (events: EngineEvent[]) => decodeEmbeddingDeltas(events.map((e) => (e.type === 'delta' ? e.text : '')).join('')).map((v) => Array.from(v));
    expect(remote.error).toBeUndefined();
    expect(vectors(remote.events)).toEqual(vectors(local.events));
    expect(remote.events.at(-1)).toMatchObject({ type: 'end', reason: 'stop', usage: { inputTokens: 1 + engine.tokenize('The dog ran home.'), outputTokens: 0 }, usageSource: 'reported' });
  });
});

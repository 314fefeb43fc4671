import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SimulatedEngineSpec } from '@weir/core';
import { createOpenAICompatibleEngine, createSimulatedEngine, type SimulatedEngine, silentLogger } from '@weir/engines';
import { collectEngineEvents, describeEngineContract, engineRequest, freePort } from '@weir/testing';
import OpenAI from 'openai';
import { profileFromEnv } from './profile-env';
import { createSimServer } from './sim-server';

const fast = (overrides: Partial<SimulatedEngineSpec> = {}): SimulatedEngineSpec => ({
  kind: 'simulated',
  prefillTokensPerSecond: 1_000_000,
  decodeStepMs: [[1, 1]],
  kvTokens: 4096,
  maxSequences: 4,
  seed: 1,
  ...overrides,
});

async function serve(engine: SimulatedEngine, port = 0): Promise<{ url: string; close(): Promise<void> }> {
  const app = createSimServer(engine, { modelName: 'sim', logger: silentLogger });
  const http: Server = await new Promise((resolve) => {
    const s = app.listen(port, '127.0.0.1', () => resolve(s));
  });
  const { port: bound } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${bound}`,
    close: async () => {
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
      await engine.close();
    },
  };
}

const adapterFor = (url: string, api: 'chat' | 'completions' = 'chat', extra: { gracefulStop?: boolean } = {}) =>
  createOpenAICompatibleEngine({
    kind: 'openai-compatible',
    baseUrl: `${url}/v1`,
    upstreamModel: 'sim',
    api,
    firstTokenTimeoutMs: 5000,
    idleTimeoutMs: 5000,
    maxConcurrency: 4,
    contextTokens: 4096,
    continuousUsageStats: true,
    ...extra,
  });

describeEngineContract('openai-compatible → engine-sim server', async () => {
  const normal = await serve(createSimulatedEngine(fast()));
  const slow = await serve(createSimulatedEngine(fast({ decodeStepMs: [[1, 3]] })));
  const refused = await freePort();
  return {
    adapter: adapterFor(normal.url),
    slowAdapter: adapterFor(slow.url, 'chat', { gracefulStop: true }),
    oversizedInput: { kind: 'text', text: 'word '.repeat(5000) },
    oversizedCodes: ['context_length_exceeded'],
    faults: [{ name: 'connection refused', adapter: adapterFor(`http://127.0.0.1:${refused}`), code: 'upstream_unavailable' }],
    close: async () => {
      await Promise.all([normal.close(), slow.close()]);
    },
  };
});

describe('engine-sim over HTTP', () => {
  let s: { url: string; close(): Promise<void> };
  let engine: SimulatedEngine;
  beforeAll(async () => {
    engine = createSimulatedEngine(fast());
    s = await serve(engine);
  });
  afterAll(() => s.close());

  it('streams filler tokens with usage to the official openai client, and says it is simulated', async () => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { data, response } = await client.chat.completions
      .create({ model: 'sim', messages: [{ role: 'user', content: 'Once upon a time' }], max_completion_tokens: 3, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    expect(response.headers.get('x-weir-simulated')).toBe('true');
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null | undefined;
    for await (const chunk of data) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe('tok1 tok2 tok3');
    expect(finish).toBe('length');
    expect(usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
    const models = await client.models.list();
    expect(models.data.map((m) => [m.id, m.owned_by])).toEqual([['sim', 'weir-simulator']]);
  });

  it('answers /v1/completions (16 tokens by default) and the stream helper’s final completion', async () => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const completion = await client.completions.create({ model: 'sim', prompt: 'Once' });
    expect(completion.usage?.completion_tokens).toBe(16);
    const final = await client.chat.completions
      .stream({ model: 'sim', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 10, stop: ['tok4'], stream_options: { include_usage: true } })
      .finalChatCompletion();
    expect(final.choices[0]).toMatchObject({ message: { content: 'tok1 tok2 tok3' }, finish_reason: 'stop' });
  });

  it('marks every response simulated, errors and probes included', async () => {
    for (const res of [
      await fetch(`${s.url}/healthz`),
      await fetch(`${s.url}/readyz`),
      await fetch(`${s.url}/nope`),
      await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' }),
    ]) {
      expect(res.headers.get('x-weir-simulated')).toBe('true');
    }
  });

  it('stops a running generation on POST /v1/stop/{id} and serves its usage, equal to the engine’s count', async () => {
    const slowEngine = createSimulatedEngine(fast({ decodeStepMs: [[1, 5]] }));
    const slow = await serve(slowEngine);
    try {
      const before = slowEngine.stats().generatedTokens;
      const controller = new AbortController();
      const request = engineRequest({ kind: 'text', text: 'Once upon a time' }, { maxOutputTokens: 400, signal: controller.signal });
      const { events } = await collectEngineEvents(adapterFor(slow.url, 'chat', { gracefulStop: true }), request, (e, i) => {
        if (e.type === 'delta' && i === 4) controller.abort();
      });
      const end = events.at(-1);
      if (end?.type !== 'end') throw new Error('no end');
      expect(end.reason).toBe('aborted');
      const produced = slowEngine.stats().generatedTokens - before;
      expect(end.usage.outputTokens).toBe(produced);
      const usage = (await (await fetch(`${slow.url}/v1/generations/${request.generationId}/usage`)).json()) as Record<string, unknown>;
      expect(usage).toMatchObject({ generation_id: request.generationId, completion_tokens: produced, finished: true });
    } finally {
      await slow.close();
    }
  });
});

describe('profileFromEnv', () => {
  it('defaults to issue 5’s example profile', () => {
    expect(profileFromEnv({})).toEqual({ kind: 'simulated', prefillTokensPerSecond: 10_000, decodeStepMs: [[1, 20], [32, 40]], kvTokens: 65_536, maxSequences: 32, seed: 1 });
  });
  it('reads every variable', () => {
    expect(profileFromEnv({ SIM_PREFILL_TPS: '5000', SIM_DECODE_MS: '1:10,16:30', SIM_KV_TOKENS: '8192', SIM_MAX_SEQUENCES: '16', SIM_SEED: '9' })).toEqual({
      kind: 'simulated',
      prefillTokensPerSecond: 5000,
      decodeStepMs: [
        [1, 10],
        [16, 30],
      ],
      kvTokens: 8192,
      maxSequences: 16,
      seed: 9,
    });
  });
  it.each([
    [{ SIM_KV_TOKENS: '1.5' }, 'SIM_KV_TOKENS'],
    [{ SIM_DECODE_MS: '20' }, 'SIM_DECODE_MS'],
    [{ SIM_DECODE_MS: '32:40,1:20' }, 'SIM_DECODE_MS'],
    [{ SIM_PREFILL_TPS: 'fast' }, 'SIM_PREFILL_TPS'],
  ])('names the variable at fault (%j)', (env, name) => {
    expect(() => profileFromEnv(env)).toThrow(name);
  });
});

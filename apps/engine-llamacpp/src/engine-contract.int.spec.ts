/**
 * The shared engine contract, run against the OpenAI-compatible adapter pointed at this app
 * (a real model server: the llama.cpp engine on the tiny model, started in-process on a free
 * port). It proves the two halves agree on the wire: chunks, usage, finish reasons, errors.
 */
import type { Server } from 'node:http';
import { createLlamaCppEngine, createOpenAICompatibleEngine, type LlamaCppEngine, silentLogger } from '@weir/engines';
import { collectEngineEvents, describeEngineContract, engineRequest, freePort, tinyModelPath } from '@weir/testing';
import { createEngineServer } from './server';

async function serve(engine: LlamaCppEngine): Promise<{ url: string; close(): Promise<void> }> {
  const port = await freePort();
  const app = createEngineServer({ engine, modelName: 'stories260k', logger: silentLogger });
  const http: Server = await new Promise((resolve) => {
    const s = app.listen(port, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${port}/v1`,
    close: async () => {
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
      await engine.close();
    },
  };
}

const engineSpec = (sequences: number, testTokenDelayMs: number) =>
  ({ kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences, contextSize: 256, testTokenDelayMs }) as const;

const adapterFor = (url: string, api: 'chat' | 'completions' = 'chat') =>
  createOpenAICompatibleEngine({
    kind: 'openai-compatible',
    baseUrl: url,
    upstreamModel: 'stories260k',
    api,
    firstTokenTimeoutMs: 5000,
    idleTimeoutMs: 5000,
    maxConcurrency: 2,
    contextTokens: 256,
  });

describeEngineContract('openai-compatible → engine-llamacpp server (real model)', async () => {
  const normal = await serve(await createLlamaCppEngine(engineSpec(2, 0)));
  const slow = await serve(await createLlamaCppEngine(engineSpec(1, 5)));
  const refused = await freePort();
  return {
    adapter: adapterFor(normal.url),
    slowAdapter: adapterFor(slow.url),
    input: { kind: 'chat', messages: [{ role: 'user', content: 'Once upon a time' }] },
    oversizedInput: { kind: 'chat', messages: [{ role: 'user', content: 'Once upon a time '.repeat(80) }] },
    oversizedCodes: ['context_length_exceeded'],
    faults: [{ name: 'connection refused', adapter: adapterFor(`http://127.0.0.1:${refused}/v1`), code: 'upstream_unavailable' }],
    close: async () => {
      await Promise.all([normal.close(), slow.close()]);
    },
  };
});

describe('openai-compatible adapter on the engine server agrees with the engine itself', () => {
  it('yields the same greedy text and the engine’s own usage on both APIs', async () => {
    const engine = await createLlamaCppEngine(engineSpec(2, 0));
    const server = await serve(engine);
    try {
      const input = { kind: 'text', text: 'Once upon a time' } as const;
      const direct = await collectEngineEvents(engine, engineRequest(input, { maxOutputTokens: 12 }));
      for (const api of ['chat', 'completions'] as const) {
        const viaHttp = await collectEngineEvents(adapterFor(server.url, api), engineRequest(input, { maxOutputTokens: 12 }));
        const text = (r: typeof direct) => r.events.map((e) => (e.type === 'delta' ? e.text : '')).join('');
        expect(text(viaHttp)).toBe(text(direct));
        // The wire adds `cachedInputTokens: 0` (prompt_tokens_details); everything else is equal.
        expect(viaHttp.events[viaHttp.events.length - 1]).toMatchObject(direct.events[direct.events.length - 1]);
      }
    } finally {
      await server.close();
    }
  });
});

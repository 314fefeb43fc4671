/**
 * `GET /v1/generations/{id}/usage` on the real tiny model: the per-generation count equals the
 * usage the stream reported and the engine's own counters, also for a generation whose client
 * went away mid-stream (the case reconciliation settles).
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLlamaCppEngine, type LlamaCppEngine, silentLogger } from '@weir/engines';
import { tinyModelPath } from '@weir/testing';
import { createEngineServer } from './server';

let engine: LlamaCppEngine;
let http: Server;
let url: string;

beforeAll(async () => {
  engine = await createLlamaCppEngine({ kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences: 2, contextSize: 256, testTokenDelayMs: 10 });
  const app = createEngineServer({ engine, modelName: 'stories260k', logger: silentLogger });
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

interface UsageBody {
  generation_id: string;
  prompt_tokens: number | null;
  completion_tokens: number;
  finished: boolean;
  finish_reason: string | null;
}

const lookup = async (id: string): Promise<{ status: number; body: UsageBody }> => {
  const res = await fetch(`${url}/v1/generations/${id}/usage`);
  return { status: res.status, body: (await res.json()) as UsageBody };
};

const chat = (id: string, maxTokens: number, signal?: AbortSignal) =>
  fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_tokens: maxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    }),
    signal,
  });

async function waitFinished(id: string): Promise<UsageBody> {
  const until = Date.now() + 10_000;
  for (;;) {
    const { status, body } = await lookup(id);
    if (status === 200 && body.finished) return body;
    if (Date.now() > until) throw new Error(`generation ${id} never finished: ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it('answers the engine’s own count of a finished generation, equal to the stream’s usage and the counters', async () => {
  const before = engine.stats();
  const res = await chat('gen_usage_full', 9);
  const text = await res.text();
  const usageLine = text.split('\n\n').filter((b) => b.includes('"choices":[]')).at(-1) as string;
  const streamed = JSON.parse(usageLine.slice('data: '.length)) as { usage: { prompt_tokens: number; completion_tokens: number } };
  const body = await waitFinished('gen_usage_full');
  expect(body).toEqual({ generation_id: 'gen_usage_full', prompt_tokens: 5, completion_tokens: 9, finished: true, finish_reason: 'length' });
  expect(streamed.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 9 });
  const after = engine.stats();
  expect([after.promptTokens - before.promptTokens, after.generatedTokens - before.generatedTokens]).toEqual([5, 9]);
});

it('counts a generation whose client vanished mid-stream exactly as the engine’s counters do', async () => {
  const before = engine.stats();
  const abort = new AbortController();
  const res = await chat('gen_usage_cut', 200, abort.signal);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  let seen = 0;
  while (seen < 4) {
    const { value } = await reader.read();
    seen += new TextDecoder().decode(value).split('"content"').length - 1;
  }
  const running = await lookup('gen_usage_cut');
  expect(running.body).toMatchObject({ finished: false, prompt_tokens: null });
  expect(running.body.completion_tokens).toBeGreaterThanOrEqual(3);
  abort.abort();
  const body = await waitFinished('gen_usage_cut');
  const after = engine.stats();
  expect(body.finish_reason).toBe('aborted');
  expect(body.completion_tokens).toBeLessThan(200);
  expect([body.prompt_tokens, body.completion_tokens]).toEqual([after.promptTokens - before.promptTokens, after.generatedTokens - before.generatedTokens]);
});

it('answers 404 for a generation it never ran', async () => {
  const { status, body } = await lookup('gen_never');
  expect(status).toBe(404);
  expect(body).toMatchObject({ error: { code: 'not_found' } });
});

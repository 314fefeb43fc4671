/**
 * Exact billing of a stream cut mid-way across the network: the OpenAI-compatible adapter
 * (with `gracefulStop` and `continuousUsageStats`, as the split relay uses it) asks this
 * engine to stop instead of cutting the connection, and bills the engine's own final count,
 * which equals the engine's token counter. Without the graceful stop, the bill is the
 * running count the adapter last saw.
 */
import type { Server } from 'node:http';
import { createLlamaCppEngine, createOpenAICompatibleEngine, type LlamaCppEngine, silentLogger } from '@weir/engines';
import { collectEngineEvents, engineRequest, freePort, tinyModelPath } from '@weir/testing';
import { createEngineServer } from './server';

let engine: LlamaCppEngine;
let http: Server;
let url: string;

beforeAll(async () => {
  engine = await createLlamaCppEngine({ kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences: 2, contextSize: 256, testTokenDelayMs: 15 });
  const port = await freePort();
  const app = createEngineServer({ engine, modelName: 'stories260k', logger: silentLogger });
  http = await new Promise((resolve) => {
    const s = app.listen(port, '127.0.0.1', () => resolve(s));
  });
  url = `http://127.0.0.1:${port}/v1`;
});

afterAll(async () => {
  http.closeAllConnections();
  await new Promise((r) => http.close(r));
  await engine.close();
});

const adapter = (gracefulStop: boolean) =>
  createOpenAICompatibleEngine({
    kind: 'openai-compatible',
    baseUrl: url,
    upstreamModel: 'stories260k',
    api: 'chat',
    firstTokenTimeoutMs: 5_000,
    idleTimeoutMs: 5_000,
    maxConcurrency: 2,
    contextTokens: 256,
    continuousUsageStats: true,
    gracefulStop,
  });

const story = { kind: 'chat' as const, messages: [{ role: 'user' as const, content: 'Once upon a time' }] };

it.each([true, false])('bills a stream stopped mid-way by the engine’s own count (graceful stop: %s)', async (graceful) => {
  const before = engine.stats().generatedTokens;
  const controller = new AbortController();
  const { events } = await collectEngineEvents(adapter(graceful), engineRequest(story, { maxOutputTokens: 200, signal: controller.signal }), (e, i) => {
    if (e.type === 'delta' && i === 5) controller.abort();
  });
  const end = events.at(-1);
  expect(end).toMatchObject({ type: 'end', reason: 'aborted', usageSource: 'reported' });
  // Let the engine notice and stop, then compare with its counter.
  await new Promise((r) => setTimeout(r, 300));
  expect(engine.stats().activeSequences).toBe(0);
  const produced = engine.stats().generatedTokens - before;
  expect(produced).toBeGreaterThanOrEqual(5);
  expect(produced).toBeLessThan(200);
  if (end?.type !== 'end') throw new Error('no end');
  if (graceful) expect(end.usage.outputTokens).toBe(produced);
  else expect(end.usage.outputTokens).toBeLessThanOrEqual(produced);
});

it('answers 404 for a stop of an unknown generation', async () => {
  const res = await fetch(`${url}/stop/gen_unknown`, { method: 'POST' });
  expect(res.status).toBe(404);
});

it('puts the cumulative usage on every content chunk when asked (continuous_usage_stats), so a cut stream is billed exactly', async () => {
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories260k', messages: story.messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }),
  });
  const text = await res.text();
  const chunks = text
    .split('\n\n')
    .map((e) => e.replace(/^data: /, ''))
    .filter((d) => d.startsWith('{'))
    .map((d) => JSON.parse(d) as { choices: Array<{ delta?: { content?: string } }>; usage?: { prompt_tokens: number; completion_tokens: number } | null });
  const content = chunks.filter((c) => (c.choices[0]?.delta?.content ?? '') !== '');
  expect(content.length).toBeGreaterThan(0);
  let last = 0;
  for (const c of content) {
    expect(c.usage?.prompt_tokens).toBeGreaterThan(0);
    expect(c.usage?.completion_tokens).toBeGreaterThan(last);
    last = c.usage?.completion_tokens ?? last;
  }
  // The final usage chunk agrees with the last running count (or exceeds it by tokens that completed no text).
  const final = chunks.at(-1)?.usage;
  expect(final?.completion_tokens).toBeGreaterThanOrEqual(last);
  expect(final?.completion_tokens).toBeLessThanOrEqual(12);
});

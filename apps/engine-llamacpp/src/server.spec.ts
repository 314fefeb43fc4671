import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLlamaCppEngine, type LlamaCppEngine, silentLogger } from '@weir/engines';
import { tinyModelPath } from '@weir/testing';
import OpenAI from 'openai';
import { createEngineServer, type EngineServerOptions } from './server';

/** The parts of OpenAI response and chunk bodies these tests read. */
interface OpenAiJson {
  id: string;
  object: string;
  choices: Array<{
    delta?: { role?: string; content?: string };
    message?: { content: string };
    text?: string;
    finish_reason: string | null;
  }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
}

interface Running {
  url: string;
  engine: LlamaCppEngine;
  close(): Promise<void>;
}

async function start(engineOverrides: { sequences?: number; testTokenDelayMs?: number } = {}, server: Partial<EngineServerOptions> = {}): Promise<Running> {
  const engine = await createLlamaCppEngine({
    kind: 'llamacpp',
    modelPath: tinyModelPath(),
    threads: 1,
    sequences: engineOverrides.sequences ?? 2,
    contextSize: 256,
    testTokenDelayMs: engineOverrides.testTokenDelayMs ?? 0,
  });
  const app = createEngineServer({ engine, modelName: 'stories260k', logger: silentLogger, ...server });
  const http: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    engine,
    close: async () => {
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
      await engine.close();
    },
  };
}

const post = (url: string, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** Splits an SSE body into its `data:` payloads and checks it has no other fields. */
function dataEvents(body: string): string[] {
  const blocks = body.split('\n\n').filter((b) => b.length > 0);
  for (const block of blocks) for (const line of block.split('\n')) expect(line.startsWith('data: ') || line.startsWith(':')).toBe(true);
  return blocks.map((b) => b.slice('data: '.length));
}

describe('engine-llamacpp server (real tiny model, in-process)', () => {
  let s: Running;
  beforeAll(async () => {
    s = await start();
  });
  afterAll(() => s.close());

  it('answers a non-stream chat completion', async () => {
    const res = await post(`${s.url}/v1/chat/completions`, {
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_tokens: 8,
      temperature: 0,
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as OpenAiJson;
    expect(body.object).toBe('chat.completion');
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(body.choices[0].message?.content).toBe(', there was a little girl');
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 8, total_tokens: 13 });
  });

  it('constrains the output to response_format json_schema with the grammar (what a relay sends for output_schema)', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 } }, required: ['name'], additionalProperties: false };
    const res = await post(`${s.url}/v1/chat/completions`, {
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_tokens: 40,
      temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } },
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as OpenAiJson;
    const parsed = JSON.parse(body.choices[0].message?.content ?? '') as { name: unknown };
    expect(Object.keys(parsed)).toEqual(['name']);
    expect(typeof parsed.name).toBe('string');
    // json_object names no schema: nothing to constrain with.
    const refused = await post(`${s.url}/v1/chat/completions`, { model: 'stories260k', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, response_format: { type: 'json_object' } });
    expect(refused.status).toBe(400);
  });

  it('streams OpenAI chunks: role, content, finish, usage (choices []), [DONE], no id: fields', async () => {
    const res = await post(`${s.url}/v1/chat/completions`, {
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_completion_tokens: 6,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = dataEvents(await res.text());
    expect(events[events.length - 1]).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as OpenAiJson);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    expect(text).toBe(', there was a little g');
    const finish = chunks[chunks.length - 2];
    expect(finish.choices[0]).toMatchObject({ delta: {}, finish_reason: 'length' });
    const usage = chunks[chunks.length - 1];
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 });
  });

  it('names the stop sequence that ended a stream in the finish chunk’s `stop_reason`, as vLLM does', async () => {
    const res = await post(`${s.url}/v1/chat/completions`, { model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_completion_tokens: 12, temperature: 0, stop: ['little', 'zebra'], stream: true });
    const chunks = dataEvents(await res.text())
      .slice(0, -1)
      .map((e) => JSON.parse(e) as OpenAiJson & { choices: Array<{ stop_reason?: unknown }> });
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(', there was a');
    expect(chunks[chunks.length - 1].choices[0]).toMatchObject({ finish_reason: 'stop', stop_reason: 'little' });
  });

  it('puts cumulative usage on every content chunk when asked (vLLM continuous_usage_stats)', async () => {
    const res = await post(`${s.url}/v1/chat/completions`, {
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_completion_tokens: 8,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    const chunks = dataEvents(await res.text())
      .slice(0, -1)
      .map((e) => JSON.parse(e) as OpenAiJson);
    const content = chunks.filter((c) => c.choices[0]?.delta?.content);
    expect(content.length).toBeGreaterThan(0);
    const counts = content.map((c) => c.usage?.completion_tokens ?? -1);
    expect(counts.every((n, i) => n >= 1 && (i === 0 || n > counts[i - 1]))).toBe(true);
    expect(content.every((c) => c.usage?.prompt_tokens === 5)).toBe(true);
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(8);
    expect(counts.at(-1)).toBeLessThanOrEqual(8);
  });

  it('serves /v1/completions with OpenAI’s default of 16 tokens', async () => {
    const res = await post(`${s.url}/v1/completions`, { model: 'x', prompt: 'Once upon a time', temperature: 0 });
    const body = (await res.json()) as OpenAiJson;
    expect(body.object).toBe('text_completion');
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage?.completion_tokens).toBe(16);
  });

  it('works with the real openai client (stream helper requires finish_reason and usage)', async () => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = client.chat.completions.stream({
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_completion_tokens: 10,
      temperature: 0,
      stop: ['Lily'],
      stream_options: { include_usage: true },
    });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0].message.content).toBe(', there was a little girl named');
    expect(final.choices[0].finish_reason).toBe('stop');
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['stories260k']);
  });

  it.each([
    ['messages missing', { model: 'm' }, 'messages'],
    ['bad temperature', { model: 'm', messages: [{ role: 'user', content: 'x' }], temperature: 3 }, 'temperature'],
    ['bad role', { model: 'm', messages: [{ role: 'wizard', content: 'x' }] }, 'messages.0.role'],
    ['n > 1', { model: 'm', messages: [{ role: 'user', content: 'x' }], n: 2 }, 'n'],
  ])('rejects a bad body (%s) with 400 naming the field', async (_name, body, param) => {
    const res = await post(`${s.url}/v1/chat/completions`, body);
    expect(res.status).toBe(400);
    const error = ((await res.json()) as { error: Record<string, unknown> }).error;
    expect(error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_request', param });
    expect(String(error.message)).toContain(param);
  });

  it('rejects malformed JSON and over-long prompts with OpenAI error bodies', async () => {
    const bad = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('invalid_json');
    const long = await post(`${s.url}/v1/chat/completions`, {
      model: 'm',
      stream: true,
      messages: [{ role: 'user', content: 'Once upon a time '.repeat(80) }],
    });
    expect(long.status).toBe(400);
    expect(await long.json()).toEqual({
      error: { message: expect.any(String), type: 'invalid_request_error', param: 'input', code: 'context_length_exceeded' },
    });
  });

  it('answers health, readiness, models and stats', async () => {
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${s.url}/readyz`)).status).toBe(200);
    const models = (await (await fetch(`${s.url}/v1/models`)).json()) as { object: string; data: unknown[] };
    expect(models).toEqual({ object: 'list', data: [{ id: 'stories260k', object: 'model', created: 0, owned_by: 'weir' }] });
    const stats = (await (await fetch(`${s.url}/stats`)).json()) as Record<string, number>;
    expect(stats).toMatchObject({ activeSequences: 0, inUse: 0, queued: 0, slots: 2 });
    expect(stats.generatedTokens).toBeGreaterThan(0);
    expect(stats.promptTokens).toBeGreaterThan(0);
  });

  it('counts prompt tokens with its own tokenizer on POST /tokenize (BOS included, chat rendered as the engine does)', async () => {
    const text = (await (await post(`${s.url}/tokenize`, { input: 'Once upon a time' })).json()) as { input_tokens: number };
    expect(text.input_tokens).toBe(s.engine.tokenize('Once upon a time') + 1);
    const chat = (await (await post(`${s.url}/tokenize`, { input: [{ role: 'user', content: 'Once upon a time' }] })).json()) as { input_tokens: number };
    expect(chat.input_tokens).toBe(await s.engine.countInputTokens({ kind: 'chat', messages: [{ role: 'user', content: 'Once upon a time' }] }));
    const bad = await post(`${s.url}/tokenize`, { input: 42 });
    expect(bad.status).toBe(400);
  });
});

describe('engine-llamacpp server: queueing and disconnects', () => {
  it('queues requests FIFO when every sequence is busy and answers 503 when the queue is full', async () => {
    const s = await start({ sequences: 1, testTokenDelayMs: 3 }, { maxQueue: 1 });
    try {
      const body = { model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 30, temperature: 0 };
      const first = post(`${s.url}/v1/chat/completions`, body);
      await new Promise((r) => setTimeout(r, 30));
      const second = post(`${s.url}/v1/chat/completions`, body);
      await new Promise((r) => setTimeout(r, 30));
      const third = await post(`${s.url}/v1/chat/completions`, body);
      expect(third.status).toBe(503);
      expect(third.headers.get('retry-after')).toBe('1');
      expect(((await third.json()) as { error: { code: string } }).error.code).toBe('queue_full');
      const [a, b] = await Promise.all([first, second]);
      expect([a.status, b.status]).toEqual([200, 200]);
      expect(s.engine.stats().completed).toBe(2);
    } finally {
      await s.close();
    }
  });

  it('aborts the generation when the client disconnects mid-stream', async () => {
    const s = await start({ sequences: 1, testTokenDelayMs: 10 });
    try {
      const controller = new AbortController();
      const res = await fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 200, stream: true }),
        signal: controller.signal,
      });
      const reader = res.body!.getReader();
      await reader.read();
      await new Promise((r) => setTimeout(r, 50));
      controller.abort();
      await new Promise((r) => setTimeout(r, 100));
      const atStop = s.engine.stats();
      await new Promise((r) => setTimeout(r, 150));
      const later = s.engine.stats();
      expect(atStop.activeSequences).toBe(0);
      expect(later.generatedTokens).toBe(atStop.generatedTokens);
      expect(atStop.generatedTokens).toBeLessThan(50);
      expect(atStop.completed).toBe(1);
    } finally {
      await s.close();
    }
  });

  it('reports not ready and refuses generations while draining', async () => {
    let draining = false;
    const s = await start({}, { isDraining: () => draining });
    try {
      draining = true;
      expect((await fetch(`${s.url}/readyz`)).status).toBe(503);
      const res = await post(`${s.url}/v1/completions`, { model: 'm', prompt: 'Once' });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('shutting_down');
    } finally {
      await s.close();
    }
  });
});

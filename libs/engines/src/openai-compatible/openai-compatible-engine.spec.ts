import type { EngineEvent, GenerationInput } from '@weir/core';
import { isWeirError, WeirError } from '@weir/core';
import {
  chatCompletionBody,
  chatStreamEvents,
  chatToolCallStreamEvents,
  collectEngineEvents,
  completionStreamEvents,
  describeEngineContract,
  engineRequest,
  fakeModelScript,
  freePort,
  type ScriptedUpstream,
  splitBytes,
  sseEvent,
  sseReply,
  startScriptedUpstream,
} from '@weir/testing';
import { createOpenAICompatibleEngine, type OpenAICompatibleEngineOptions } from './openai-compatible-engine';
import { CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS } from './token-bound';

const specFor = (baseUrl: string, overrides: Partial<OpenAICompatibleEngineOptions> = {}): OpenAICompatibleEngineOptions => ({
  kind: 'openai-compatible',
  baseUrl,
  upstreamModel: 'up-model',
  api: 'chat',
  firstTokenTimeoutMs: 2000,
  idleTimeoutMs: 2000,
  maxConcurrency: 4,
  ...overrides,
});

const chat: GenerationInput = { kind: 'chat', messages: [{ role: 'user', content: 'Say hi' }] };
const textOf = (events: EngineEvent[]): string => events.map((e) => (e.type === 'delta' ? e.text : '')).join('');
const endOf = (events: EngineEvent[]): Extract<EngineEvent, { type: 'end' }> => {
  const end = events[events.length - 1];
  if (end?.type !== 'end') throw new Error('stream did not end with an end event');
  return end;
};

describe('createOpenAICompatibleEngine (scripted upstream)', () => {
  let upstream: ScriptedUpstream;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
  });
  afterAll(() => upstream.close());
  beforeEach(() => {
    upstream.requests.length = 0;
  });

  it('reports the stop sequence vLLM names in `stop_reason` (one of the request’s), and none for a stop token id or an unknown string', async () => {
    const stopChunk = (stopReason: unknown) =>
      sseReply([
        ...chatStreamEvents(['Once'], { finishReason: null }).slice(0, 2),
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'stop', stop_reason: stopReason }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } })}\n\n`,
        'data: [DONE]\n\n',
      ]);
    const engine = createOpenAICompatibleEngine(specFor(upstream.url), { env: {} });
    const request = () => engineRequest(chat, { maxOutputTokens: 12, sampling: { stop: ['END', '\n\n'] } });
    upstream.setScript(() => stopChunk('END'));
    expect(endOf((await collectEngineEvents(engine, request())).events)).toMatchObject({ reason: 'stop', stopSequence: 'END' });
    for (const other of [2, 'NOT-ASKED', null]) {
      upstream.setScript(() => stopChunk(other));
      expect(endOf((await collectEngineEvents(engine, request())).events)).not.toHaveProperty('stopSequence');
    }
  });

  it('streams deltas and takes usage from the usage chunk; sends the OpenAI request', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['Hello', ' world'], { usage: { prompt_tokens: 7, completion_tokens: 2 } })));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { apiKeyEnv: 'WEIR_UPSTREAM_UP_KEY' }), { env: { WEIR_UPSTREAM_UP_KEY: 'sk-test' } });
    const request = engineRequest(chat, { maxOutputTokens: 12, sampling: { temperature: 0.5, topP: 0.9, seed: 3, stop: ['\n'] } });
    const { events, error } = await collectEngineEvents(engine, request);
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'delta', text: 'Hello', tokens: 1 },
      { type: 'delta', text: ' world', tokens: 1 },
      { type: 'end', reason: 'stop', usage: { inputTokens: 7, outputTokens: 2 }, usageSource: 'reported' },
    ]);
    const sent = upstream.requests[0];
    expect(sent.path).toBe('/v1/chat/completions');
    expect(sent.headers.authorization).toBe('Bearer sk-test');
    expect(sent.headers['x-request-id']).toBe(request.generationId);
    expect(sent.body).toEqual({
      model: 'up-model',
      messages: [{ role: 'user', content: 'Say hi' }],
      max_completion_tokens: 12,
      temperature: 0.5,
      top_p: 0.9,
      seed: 3,
      stop: ['\n'],
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  const WEATHER = { type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };

  it('sends tools, tool_choice, parallel_tool_calls and tool-call history; parses streamed tool-call deltas and finish_reason tool_calls', async () => {
    upstream.setScript(() =>
      sseReply(
        chatToolCallStreamEvents(
          [
            { id: 'call_a', name: 'get_weather', argumentFragments: ['{"ci', 'ty":"Pa', 'ris"}'] },
            { id: 'call_b', name: 'get_weather', argumentFragments: ['{"city":"Rome"}'] },
          ],
          ['Checking.'],
          { usage: { prompt_tokens: 20, completion_tokens: 14 } },
        ),
      ),
    );
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const input: GenerationInput = {
      kind: 'chat',
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'call_0', name: 'get_weather', arguments: '{"city":"Lyon"}' }] },
        { role: 'tool', content: '{"temp":21}', toolCallId: 'call_0' },
      ],
    };
    const request = engineRequest(input, { tools: [WEATHER], toolChoice: { type: 'function', function: { name: 'get_weather' } }, parallelToolCalls: true });
    const { events, error } = await collectEngineEvents(engine, request);
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'delta', text: 'Checking.', tokens: 1 },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_a', name: 'get_weather', argumentsDelta: '' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '{"ci' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: 'ty":"Pa' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: 'ris"}' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 1, id: 'call_b', name: 'get_weather', argumentsDelta: '' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 1, argumentsDelta: '{"city":"Rome"}' }] },
      { type: 'end', reason: 'tool_calls', usage: { inputTokens: 20, outputTokens: 14 }, usageSource: 'reported' },
    ]);
    expect(upstream.requests[0].body).toMatchObject({
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Lyon"}' } }] },
        { role: 'tool', content: '{"temp":21}', tool_call_id: 'call_0' },
      ],
      tools: [WEATHER],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: true,
    });
  });

  it('passes reasoning_content / reasoning on as delta.reasoning (never as text), counts it as output, and never learns a reasoning chunk as a content template', async () => {
    const meta = { id: 'chatcmpl-r', object: 'chat.completion.chunk', created: 1, model: 'm' };
    const chunk = (delta: object) => sseEvent({ ...meta, choices: [{ index: 0, delta, logprobs: null, finish_reason: null }] });
    upstream.setScript(() =>
      sseReply([
        chunk({ role: 'assistant', content: '' }),
        chunk({ content: null, reasoning_content: 'Think' }),
        chunk({ content: null, reasoning_content: 'ing.' }),
        chunk({ reasoning: ' More.' }),
        chunk({ content: 'Hi', reasoning_content: null }),
        // The same shape as the content chunk before, with reasoning: read in full, not as content.
        chunk({ content: 'Hi', reasoning_content: 'late' }),
        chunk({ content: ' there', reasoning_content: null }),
        sseEvent({ ...meta, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] }),
        sseEvent('[DONE]'),
      ]),
    );
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    expect(events.slice(0, -1)).toEqual([
      { type: 'delta', text: '', tokens: 1, reasoning: 'Think' },
      { type: 'delta', text: '', tokens: 1, reasoning: 'ing.' },
      { type: 'delta', text: '', tokens: 1, reasoning: ' More.' },
      { type: 'delta', text: 'Hi', tokens: 1 },
      { type: 'delta', text: 'Hi', tokens: 1, reasoning: 'late' },
      { type: 'delta', text: ' there', tokens: 1 },
    ]);
    // No usage chunk: every delta that carried something is an output token, reasoning included.
    expect(endOf(events)).toMatchObject({ reason: 'stop', usage: { outputTokens: 6 }, usageSource: 'estimated' });
  });

  it('reads message.reasoning_content of a non-stream answer', async () => {
    const body = chatCompletionBody('Hi');
    (body.choices as Array<{ message: Record<string, unknown> }>)[0].message.reasoning_content = 'Because.';
    upstream.setScript(() => ({ kind: 'json', body }));
    const { events } = await collectEngineEvents(createOpenAICompatibleEngine(specFor(upstream.url)), engineRequest(chat));
    expect(events[0]).toEqual({ type: 'delta', text: 'Hi', tokens: 1, reasoning: 'Because.' });
  });

  it('parses message.tool_calls of a non-stream answer; sends no tool fields without tools', async () => {
    const body = chatCompletionBody('', { finishReason: 'tool_calls' });
    (body.choices as Array<{ message: Record<string, unknown> }>)[0].message = {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_x', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
    };
    upstream.setScript(() => ({ kind: 'json', body }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events } = await collectEngineEvents(engine, engineRequest(chat, { tools: [WEATHER] }));
    expect(events).toEqual([
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_x', name: 'get_weather', argumentsDelta: '{"city":"Oslo"}' }] },
      { type: 'end', reason: 'tool_calls', usage: { inputTokens: 5, outputTokens: 1 }, usageSource: 'reported' },
    ]);
    upstream.setScript(() => sseReply(chatStreamEvents(['Hi'])));
    await collectEngineEvents(engine, engineRequest(chat));
    const plain = upstream.requests[1].body as Record<string, unknown>;
    expect(plain).not.toHaveProperty('tools');
    expect(plain).not.toHaveProperty('tool_choice');
    expect(plain).not.toHaveProperty('parallel_tool_calls');
  });

  it('refuses tools on the completions API with invalid_request, calling nothing', async () => {
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { api: 'completions' }));
    const { error } = await collectEngineEvents(engine, engineRequest(chat, { tools: [WEATHER] }));
    expect(error).toMatchObject({ code: 'invalid_request', param: 'tools' });
    expect(upstream.requests).toHaveLength(0);
  });

  it('calls /completions with prompt and max_tokens when api is completions', async () => {
    upstream.setScript(() => sseReply(completionStreamEvents(['a', 'b'], { finishReason: 'length' })));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { api: 'completions' }));
    const { events } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'Once' }, { maxOutputTokens: 2 }));
    expect(textOf(events)).toBe('ab');
    expect(endOf(events).reason).toBe('length');
    const sent = upstream.requests[0];
    expect(sent.path).toBe('/v1/completions');
    expect(sent.headers.authorization).toBeUndefined();
    expect(sent.body).toMatchObject({ prompt: 'Once', max_tokens: 2, stream: true });
  });

  it.each(['chat', 'completions'] as const)('passes an outputSchema upstream as response_format json_schema (strict) on the %s API', async (api) => {
    upstream.setScript(() => sseReply((api === 'chat' ? chatStreamEvents : completionStreamEvents)(['{"a":', '1}'])));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { api }));
    const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false };
    const { events } = await collectEngineEvents(engine, engineRequest(chat, { outputSchema: schema }));
    expect(textOf(events)).toBe('{"a":1}');
    expect(upstream.requests[0].body).toMatchObject({ response_format: { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } } });
  });

  it('sends no response_format without an outputSchema', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['hi'])));
    await collectEngineEvents(createOpenAICompatibleEngine(specFor(upstream.url)), engineRequest(chat));
    expect(upstream.requests[0].body).not.toHaveProperty('response_format');
  });

  const pieces = ['héllo ', 'wörld 🌍', ' 日本語'];
  it.each([
    ['events split across reads every 7 bytes', 7],
    ['every byte in its own read (multi-byte characters split)', 1],
  ])('decodes %s', async (_name, step) => {
    const events = chatStreamEvents(pieces);
    const total = Buffer.byteLength(events.join(''));
    const offsets = Array.from({ length: Math.floor(total / step) }, (_, i) => (i + 1) * step);
    upstream.setScript(() => ({ kind: 'sse', steps: splitBytes(events, offsets).map((data) => ({ data })) }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const result = await collectEngineEvents(engine, engineRequest(chat));
    expect(result.error).toBeUndefined();
    expect(textOf(result.events)).toBe(pieces.join(''));
    expect(result.events.filter((e) => e.type === 'delta')).toHaveLength(3);
  });

  it('handles CRLF line ends and comment heartbeats', async () => {
    const events = chatStreamEvents(pieces, { eol: '\r\n' });
    const withPings = events.flatMap((e) => [': ping\r\n\r\n', e]);
    upstream.setScript(() => sseReply(withPings));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const result = await collectEngineEvents(engine, engineRequest(chat));
    expect(result.error).toBeUndefined();
    expect(textOf(result.events)).toBe(pieces.join(''));
    expect(endOf(result.events).reason).toBe('stop');
  });

  it('counts usage with countTokens when the upstream sends no usage chunk', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['one two', ' three'], { usage: false })));
    const countTokens = (text: string) => text.split(/\s+/).filter(Boolean).length;
    const engine = createOpenAICompatibleEngine(specFor(upstream.url), { countTokens });
    const { events } = await collectEngineEvents(engine, engineRequest(chat));
    expect(endOf(events)).toEqual({
      type: 'end',
      reason: 'stop',
      usage: { inputTokens: 2 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS, outputTokens: 3 },
      usageSource: 'counted',
    });
  });

  it('without a tokenizer, bounds the input by UTF-8 bytes and counts the content deltas (estimated)', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['日本', '語'], { usage: false })));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'héllo' }));
    // 'héllo' is 6 bytes, +1 for a dummy-prefix token. Text input goes to the chat API as one
    // user message, so it is bounded as one. The output is one token per content chunk, never
    // the byte bound of the text (7 + 4 here).
    expect(endOf(events).usage).toEqual({
      inputTokens: 7 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS,
      outputTokens: 2,
    });
    expect(endOf(events).usageSource).toBe('estimated');
    expect(
      await engine.countInputTokens({
        kind: 'chat',
        messages: [
          { role: 'system', content: 'ab' },
          { role: 'user', content: 'c', name: 'me' },
        ],
      }),
    ).toBe(3 + 2 + 3 + 2 * CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS);
  });

  it('accepts a non-stream JSON response', async () => {
    upstream.setScript(() => ({ kind: 'json', body: chatCompletionBody('whole answer', { usage: { prompt_tokens: 3, completion_tokens: 2 } }) }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events } = await collectEngineEvents(engine, engineRequest(chat));
    expect(textOf(events)).toBe('whole answer');
    expect(endOf(events)).toMatchObject({ reason: 'stop', usage: { inputTokens: 3, outputTokens: 2 }, usageSource: 'reported' });
  });

  // OpenAI's token classes sit inside the totals (openai-node CompletionUsage): cached tokens in
  // prompt_tokens, reasoning tokens in completion_tokens. They are mapped, never added.
  const classUsage = { prompt_tokens: 1_200, completion_tokens: 300, prompt_tokens_details: { cached_tokens: 1_024 }, completion_tokens_details: { reasoning_tokens: 256 } };
  it.each([
    ['streamed (the usage chunk)', () => sseReply(chatStreamEvents(['Hi'], { usage: classUsage }))],
    ['not streamed (a JSON body)', () => ({ kind: 'json' as const, body: chatCompletionBody('Hi', { usage: classUsage }) })],
  ])('maps prompt_tokens_details.cached_tokens and completion_tokens_details.reasoning_tokens, %s', async (_name, reply) => {
    upstream.setScript(reply);
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events } = await collectEngineEvents(engine, engineRequest(chat, { maxOutputTokens: 400 }));
    expect(endOf(events)).toEqual({
      type: 'end',
      reason: 'stop',
      usage: { inputTokens: 1_200, outputTokens: 300, cachedInputTokens: 1_024, reasoningTokens: 256 },
      usageSource: 'reported',
    });
  });

  it('caps class counts at their totals and ignores malformed details', async () => {
    upstream.setScript(() =>
      sseReply(chatStreamEvents(['Hi'], { usage: { prompt_tokens: 10, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 50 }, completion_tokens_details: { reasoning_tokens: 9 } } })),
    );
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    expect(endOf((await collectEngineEvents(engine, engineRequest(chat))).events).usage).toEqual({ inputTokens: 10, outputTokens: 4, cachedInputTokens: 10, reasoningTokens: 4 });
    upstream.setScript(() =>
      sseReply(
        chatStreamEvents(['Hi'], {
          usage: { prompt_tokens: 10, completion_tokens: 4, prompt_tokens_details: { cached_tokens: -3 }, completion_tokens_details: { reasoning_tokens: 1.5 } },
        }),
      ),
    );
    expect(endOf((await collectEngineEvents(engine, engineRequest(chat))).events).usage).toEqual({ inputTokens: 10, outputTokens: 4 });
  });

  it('maps an in-band error frame to upstream_error after delivering earlier deltas', async () => {
    const head = chatStreamEvents(['partial'], { finishReason: null, usage: false, done: false });
    upstream.setScript(() => sseReply([...head, sseEvent({ error: { message: 'boom', type: 'server_error', code: 'overloaded' } })]));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(textOf(events)).toBe('partial');
    expect(isWeirError(error) && error.code).toBe('upstream_error');
    expect(isWeirError(error) && error.message).not.toContain('boom');
  });

  it.each([
    ['without finish_reason and [DONE]', { finishReason: null, done: false }],
    ['with [DONE] but no finish_reason', { finishReason: null, done: true }],
  ] as const)('maps a stream that ends %s to upstream_error', async (_name, options) => {
    upstream.setScript(() => sseReply(chatStreamEvents(['cut'], { ...options, usage: false })));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(error) && error.code).toBe('upstream_error');
  });

  it('accepts a stream that sent finish_reason but ended without [DONE]', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['ok'], { done: false })));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    expect(endOf(events).reason).toBe('stop');
  });

  it.each([
    [400, 'upstream_bad_request', false],
    [404, 'upstream_bad_request', false],
    [422, 'upstream_bad_request', false],
    [401, 'upstream_error', false],
    [403, 'upstream_error', false],
    [408, 'upstream_unavailable', true],
    [429, 'upstream_unavailable', true],
    [500, 'upstream_unavailable', true],
    [503, 'upstream_unavailable', true],
    [418, 'upstream_error', false],
  ])('maps HTTP %i to %s (retryable %s)', async (status, code, retryable) => {
    upstream.setScript(() => ({
      kind: 'error',
      status,
      headers: { 'retry-after': '2' },
      body: { error: { message: 'secret prompt echo', type: 'invalid_request_error', param: null, code: null } },
    }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(events).toEqual([]);
    expect(error).toBeInstanceOf(WeirError);
    const e = error as WeirError;
    expect({ code: e.code, retryable: e.retryable }).toEqual({ code, retryable });
    expect(e.message).not.toContain('secret');
    if (retryable) expect(e.retryAfterMs).toBe(2000);
  });

  it('maps an upstream context_length_exceeded to context_length_exceeded (param input)', async () => {
    upstream.setScript(fakeModelScript({ contextBytes: 10 }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { error } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'x'.repeat(50) }));
    expect(isWeirError(error) && [error.code, error.param]).toEqual(['context_length_exceeded', 'input']);
  });

  it('maps connection refused to upstream_unavailable (retryable)', async () => {
    const port = await freePort();
    const engine = createOpenAICompatibleEngine(specFor(`http://127.0.0.1:${port}/v1`));
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(error) && [error.code, error.retryable]).toEqual(['upstream_unavailable', true]);
  });

  it('maps a socket destroyed mid-stream to upstream_error after output, upstream_unavailable before', async () => {
    const head = chatStreamEvents(['some'], { finishReason: null, usage: false, done: false });
    upstream.setScript(() => ({ kind: 'sse', steps: [...head.map((data) => ({ data })), { destroy: true, delayMs: 10 }] }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const after = await collectEngineEvents(engine, engineRequest(chat));
    expect(textOf(after.events)).toBe('some');
    expect(isWeirError(after.error) && after.error.code).toBe('upstream_error');

    upstream.setScript(() => ({ kind: 'sse', steps: [{ data: ': hello\n\n' }, { destroy: true, delayMs: 10 }] }));
    const before = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(before.error) && [before.error.code, before.error.retryable]).toEqual(['upstream_unavailable', true]);
  });

  it('cuts an upstream that sends no first token (only pings) with upstream_timeout', async () => {
    const role = chatStreamEvents([], { finishReason: null, usage: false, done: false });
    upstream.setScript(() => ({
      kind: 'sse',
      steps: [...role.map((data) => ({ data })), ...Array.from({ length: 20 }, () => ({ data: ': ping\n\n', delayMs: 40 }))],
      hang: true,
    }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { firstTokenTimeoutMs: 150 }));
    const started = performance.now();
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(error) && [error.code, error.retryable]).toEqual(['upstream_timeout', true]);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('cuts an upstream that stalls mid-stream (pings do not reset the idle clock) with upstream_timeout', async () => {
    const head = chatStreamEvents(['a', 'b'], { finishReason: null, usage: false, done: false });
    upstream.setScript(() => ({
      kind: 'sse',
      steps: [...head.map((data) => ({ data })), ...Array.from({ length: 20 }, () => ({ data: ': ping\n\n', delayMs: 40 }))],
      hang: true,
    }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { idleTimeoutMs: 150 }));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(textOf(events)).toBe('ab');
    expect(isWeirError(error) && error.code).toBe('upstream_timeout');
  });

  it('aborts the HTTP call on the request signal and ends with aborted and counted usage', async () => {
    const events = chatStreamEvents(
      Array.from({ length: 100 }, (_, i) => `p${i} `),
      { usage: { prompt_tokens: 3, completion_tokens: 100 } },
    );
    upstream.setScript(() => sseReply(events, { delayMs: 10 }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const controller = new AbortController();
    const abortsBefore = upstream.clientAborts();
    const result = await collectEngineEvents(engine, engineRequest(chat, { signal: controller.signal }), (e, i) => {
      if (e.type === 'delta' && i === 2) controller.abort();
    });
    const end = endOf(result.events);
    expect(end.reason).toBe('aborted');
    // No tokenizer declared and no usage from the upstream: the content deltas received are counted.
    expect(end.usageSource).toBe('estimated');
    expect(result.events.filter((e) => e.type === 'delta')).toHaveLength(3);
    // Counted on everything received (≥ what was delivered), far below the 100 pieces.
    expect(end.usage.outputTokens).toBeGreaterThanOrEqual(3);
    expect(end.usage.outputTokens).toBeLessThan(10);
    await new Promise((r) => setTimeout(r, 50));
    expect(upstream.requests[0].clientAborted).toBe(true);
    expect(upstream.clientAborts()).toBeGreaterThan(abortsBefore);
  });

  it('with continuous usage stats, meters deltas and bills a cut stream by the upstream’s own running count', async () => {
    // vLLM-style: every content chunk carries cumulative usage; a chunk may stand for 2 tokens.
    const meta = { id: 'chatcmpl-c', object: 'chat.completion.chunk', created: 1, model: 'm' };
    const chunk = (content: string, completion: number) =>
      sseEvent({ ...meta, choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }], usage: { prompt_tokens: 4, completion_tokens: completion, total_tokens: 4 + completion } });
    const events = Array.from({ length: 50 }, (_, i) => chunk(`w${i} `, 2 * (i + 1)));
    upstream.setScript(() => sseReply(events, { delayMs: 10 }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { continuousUsageStats: true }));
    const controller = new AbortController();
    const result = await collectEngineEvents(engine, engineRequest(chat, { signal: controller.signal }), (e, i) => {
      if (e.type === 'delta' && i === 3) controller.abort();
    });
    const deltas = result.events.filter((e) => e.type === 'delta');
    expect(deltas.every((d) => d.type === 'delta' && d.tokens === 2)).toBe(true);
    const end = endOf(result.events);
    expect(end).toMatchObject({ reason: 'aborted', usageSource: 'reported', usage: { inputTokens: 4 } });
    // Billed by the upstream's count of what it produced (≥ what was delivered), not by bytes.
    expect(end.usage.outputTokens).toBeGreaterThanOrEqual(2 * deltas.length);
    expect(end.usage.outputTokens % 2).toBe(0);
    expect(upstream.requests.at(-1)?.body).toMatchObject({ stream_options: { include_usage: true, continuous_usage_stats: true } });
  });

  it('bills nothing for a stream stopped before anything arrived (a deadline or cancel before the upstream answered)', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['late', ' answer'], { usage: { prompt_tokens: 7, completion_tokens: 2 } }), { delayMs: 300 }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    const result = await collectEngineEvents(engine, engineRequest(chat, { signal: controller.signal }));
    expect(result.events.filter((e) => e.type === 'delta')).toHaveLength(0);
    expect(endOf(result.events)).toMatchObject({ reason: 'aborted', usage: { inputTokens: 0, outputTokens: 0 }, usageSource: 'counted' });
  });

  it.each([
    ['negative', { prompt_tokens: -5, completion_tokens: -3 }],
    ['fractional', { prompt_tokens: 2.5, completion_tokens: 2 }],
    ['non-numeric', { prompt_tokens: '7', completion_tokens: 2 }],
  ])('ignores a %s usage report (never billed or priced as sent) and counts the stream itself', async (_kind, usage) => {
    upstream.setScript(() => sseReply(chatStreamEvents(['Hello', ' world'], { usage: usage as { prompt_tokens: number; completion_tokens: number } })));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    const end = endOf(events);
    expect(end.usageSource).toBe('estimated');
    expect(end.usage.outputTokens).toBe(2);
    expect(Number.isSafeInteger(end.usage.inputTokens) && end.usage.inputTokens > 0).toBe(true);
  });

  it('declares capacity from maxConcurrency and the context default', () => {
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { maxConcurrency: 7 }));
    expect(engine.capacity).toEqual({ slots: 7, contextTokens: 8192 });
    expect(createOpenAICompatibleEngine(specFor(upstream.url, { contextTokens: 512 })).capacity.contextTokens).toBe(512);
  });
});

describeEngineContract('openai-compatible (scripted upstream)', async () => {
  const normal = await startScriptedUpstream({ script: fakeModelScript({ contextBytes: 200 }) });
  const slow = await startScriptedUpstream({ script: fakeModelScript({ pieceDelayMs: 5, naturalPieces: 300 }) });
  const failing = await startScriptedUpstream({ script: () => ({ kind: 'error', status: 503 }) });
  const unauthorized = await startScriptedUpstream({ script: () => ({ kind: 'error', status: 401 }) });
  const refusedPort = await freePort();
  return {
    adapter: createOpenAICompatibleEngine(specFor(normal.url)),
    slowAdapter: createOpenAICompatibleEngine(specFor(slow.url)),
    input: chat,
    oversizedInput: { kind: 'chat', messages: [{ role: 'user', content: 'word '.repeat(100) }] },
    faults: [
      { name: 'HTTP 503', adapter: createOpenAICompatibleEngine(specFor(failing.url)), code: 'upstream_unavailable' },
      { name: 'HTTP 401', adapter: createOpenAICompatibleEngine(specFor(unauthorized.url)), code: 'upstream_error' },
      {
        name: 'connection refused',
        adapter: createOpenAICompatibleEngine(specFor(`http://127.0.0.1:${refusedPort}/v1`)),
        code: 'upstream_unavailable',
      },
    ],
    close: async () => {
      await Promise.all([normal.close(), slow.close(), failing.close(), unauthorized.close()]);
    },
  };
});

/**
 * Tools on `POST /v1/chat/completions`: the checks of `tools.ts`, and the test gateway (real
 * router, admission, scheduler and relay) over a hand-written engine that calls the first
 * tool it is given — through the official `openai` SDK, streamed and not.
 */
import { createInMemoryAdmission } from '@weir/admission';
import { type AdmissionService, type EngineAdapter, type EngineEvent, type EngineRequest, type RevisionSpec } from '@weir/core';
import OpenAI from 'openai';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';
import { chatCompletionsBody, parseBody } from './schemas';
import { chatToolsOf } from './tools';

const ARGS = '{"city":"Paris","unit":"celsius"}';

/**
 * With tools: says `Checking.` when the last message asks for it, then calls the first tool
 * (id `call_1`) with {@link ARGS} in 5-character fragments, ending with `tool_calls`.
 * Without: answers `Sunny.`. Records requests.
 */
function toolEngine(): EngineAdapter & { requests: Omit<EngineRequest, 'signal'>[] } {
  const requests: Omit<EngineRequest, 'signal'>[] = [];
  return {
    kind: 'tooly',
    capacity: { slots: 4, contextTokens: 4096 },
    requests,
    async countInputTokens() {
      return 9;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      const { signal, ...rest } = request;
      requests.push(structuredClone(rest));
      const tool = request.tools?.[0];
      if (!tool || request.toolChoice === 'none') {
        yield { type: 'delta', text: 'Sunny.', tokens: 2 };
        yield { type: 'end', reason: 'stop', usage: { inputTokens: 9, outputTokens: 2 }, usageSource: 'reported' };
        return;
      }
      let n = 0;
      const last = request.input.kind === 'chat' ? request.input.messages.at(-1)?.content : '';
      if (last?.includes('talk first')) {
        n++;
        yield { type: 'delta', text: 'Checking.', tokens: 1 };
      }
      n++;
      yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_1', name: tool.function.name, argumentsDelta: '' }] };
      for (let at = 0; at < ARGS.length && !signal.aborted; at += 5) {
        n++;
        yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: ARGS.slice(at, at + 5) }] };
      }
      yield { type: 'end', reason: signal.aborted ? 'aborted' : 'tool_calls', usage: { inputTokens: 9, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
}

const WEATHER = {
  type: 'function' as const,
  function: { name: 'get_weather', description: 'Current weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string' } }, required: ['city'] } },
};
const TIME = { type: 'function' as const, function: { name: 'get_time' } };

interface Harness {
  gw: TestGateway;
  engine: ReturnType<typeof toolEngine>;
  reserves: () => number;
}

async function start(revision: RevisionSpec): Promise<Harness> {
  const config = twoTenantConfig(revision);
  const engine = toolEngine();
  const admission = createInMemoryAdmission({ tenants: config.tenants });
  let reserves = 0;
  const counting: AdmissionService = {
    ...admission,
    reserve: (r) => {
      reserves++;
      return admission.reserve(r);
    },
    settle: (id, s) => admission.settle(id, s),
    release: (id) => admission.release(id),
  };
  const gw = await startTestGateway({ config, engine, admission: counting });
  return { gw, engine, reserves: () => reserves };
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
}

describe('chatToolsOf', () => {
  it('is undefined without tools, dropping a harmless tool_choice and parallel_tool_calls', () => {
    expect(chatToolsOf({})).toBeUndefined();
    expect(chatToolsOf({ tools: [], tool_choice: 'auto', parallel_tool_calls: true })).toBeUndefined();
    expect(chatToolsOf({ tools: null, tool_choice: 'none' })).toBeUndefined();
  });

  it('keeps tools, tool_choice and parallel_tool_calls as given', () => {
    expect(chatToolsOf({ tools: [WEATHER, TIME], tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false })).toEqual({
      tools: [WEATHER, TIME],
      toolChoice: { type: 'function', function: { name: 'get_time' } },
      parallelToolCalls: false,
    });
    expect(chatToolsOf({ tools: [WEATHER] })).toEqual({ tools: [WEATHER] });
  });

  it.each([
    ['a choice naming no tool', { tools: [WEATHER], tool_choice: { type: 'function' as const, function: { name: 'launch' } } }, 'tool_choice', /'launch', which is not one of `tools` \('get_weather'\)/],
    ['required without tools', { tool_choice: 'required' as const }, 'tool_choice', /has no `tools`/],
    ['a named function without tools', { tools: [], tool_choice: { type: 'function' as const, function: { name: 'get_time' } } }, 'tool_choice', /has no `tools`/],
    ['a name used twice', { tools: [WEATHER, TIME, WEATHER] }, 'tools[2].function.name', /used twice/],
  ])('refuses %s', (_what, body, param, message) => {
    expect(() => chatToolsOf(body)).toThrow(expect.objectContaining({ code: 'invalid_request', param, message: expect.stringMatching(message) }));
  });
});

describe('the chat completions body', () => {
  it('takes at most 128 tools (the test gateway body limit is too small to send 129)', () => {
    const tools = (n: number) => Array.from({ length: n }, (_, i) => ({ type: 'function', function: { name: `f${i}` } }));
    const body = (n: number) => ({ model: 'fake', messages: [{ role: 'user', content: 'x' }], tools: tools(n) });
    expect(parseBody(chatCompletionsBody, body(128)).tools).toHaveLength(128);
    expect(() => parseBody(chatCompletionsBody, body(129))).toThrow(expect.objectContaining({ code: 'invalid_request', param: 'tools', message: expect.stringMatching(/at most 128 tools/) }));
  });
});

describe('POST /v1/chat/completions with tools', () => {
  const toolsCapable: RevisionSpec = { ...fakeRevision(), contextWindow: 4096, capabilities: { streaming: true, tools: true, jsonOutput: false } };
  let h: Harness;
  let client: OpenAI;
  beforeAll(async () => {
    h = await start(toolsCapable);
    client = new OpenAI({ baseURL: `${h.gw.url}/v1`, apiKey: h.gw.key.plaintext, maxRetries: 0 });
  });
  afterAll(() => h.gw.close());
  beforeEach(() => {
    h.engine.requests.length = 0;
    h.gw.records.length = 0;
  });

  it('the SDK gets message.tool_calls (content null) and finish_reason tool_calls; the engine gets the tools as given', async () => {
    const completion = await client.chat.completions.create({
      model: 'fake',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [WEATHER, TIME],
      tool_choice: 'auto',
      parallel_tool_calls: false,
    });
    expect(completion.choices[0].finish_reason).toBe('tool_calls');
    expect(completion.choices[0].message.content).toBeNull();
    expect(completion.choices[0].message.tool_calls).toEqual([{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: ARGS } }]);
    expect(completion.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 });
    expect(h.engine.requests[0]).toMatchObject({ tools: [WEATHER, TIME], toolChoice: 'auto', parallelToolCalls: false });
    await until(() => h.gw.records.length === 1);
    expect(h.gw.records[0]).toMatchObject({ finishReason: 'tool_calls', status: 'completed', inputTokens: 9, outputTokens: 8 });
  });

  it('keeps text written before the calls, and sends the conversation with tool calls and tool results on', async () => {
    const completion = await client.chat.completions.create({
      model: 'fake',
      // 9 tokens: above the revision's default limit of 8, which Weir enforces whatever the engine does.
      max_tokens: 16,
      tools: [WEATHER],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Lyon"}' } }] },
        { role: 'tool', tool_call_id: 'call_0', content: '{"temp":21}' },
        { role: 'user', content: 'Now Paris; talk first.' },
      ],
    });
    expect(completion.choices[0].message).toMatchObject({ content: 'Checking.', tool_calls: [{ id: 'call_1', function: { arguments: ARGS } }] });
    expect(h.engine.requests[0].toolChoice).toEqual({ type: 'function', function: { name: 'get_weather' } });
    expect(h.engine.requests[0].input).toEqual({
      kind: 'chat',
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'call_0', name: 'get_weather', arguments: '{"city":"Lyon"}' }] },
        { role: 'tool', content: '{"temp":21}', toolCallId: 'call_0' },
        { role: 'user', content: 'Now Paris; talk first.' },
      ],
    });
  });

  it('streams delta.tool_calls fragments as OpenAI does, and the SDK accumulates the whole arguments', async () => {
    const stream = client.chat.completions.stream({ model: 'fake', messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER], stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    stream.on('chunk', (c) => chunks.push(c));
    const final = await stream.finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe('tool_calls');
    expect(final.choices[0].message.tool_calls).toEqual([expect.objectContaining({ id: 'call_1', type: 'function', function: expect.objectContaining({ name: 'get_weather', arguments: ARGS }) })]);
    const toolChunks = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
    expect(toolChunks[0]).toEqual({ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } });
    expect(toolChunks.slice(1).every((t) => t.id === undefined && t.function?.name === undefined)).toBe(true);
    expect(toolChunks.map((t) => t.function?.arguments ?? '').join('')).toBe(ARGS);
    const withToolCalls = chunks.filter((c) => c.choices[0]?.delta.tool_calls);
    expect(withToolCalls.every((c) => c.choices[0].delta.content === undefined)).toBe(true);
    expect(chunks.at(-1)?.usage).toMatchObject({ completion_tokens: 8 });
  });

  it('replays the tool calls of an idempotent request', async () => {
    const body = { model: 'fake', messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER] };
    const first = await h.gw.post('/v1/chat/completions', body, { 'Idempotency-Key': 'tools-replay-1' });
    const firstBody = (await first.json()) as { choices: { message: unknown }[] };
    await until(() => h.gw.records.length === 1);
    await new Promise((r) => setTimeout(r, 20));
    const again = await h.gw.post('/v1/chat/completions', body, { 'Idempotency-Key': 'tools-replay-1' });
    const againBody = (await again.json()) as { choices: { message: unknown; finish_reason: string }[] };
    expect(againBody.choices[0]).toMatchObject({ finish_reason: 'tool_calls', message: firstBody.choices[0].message });
    expect(h.engine.requests).toHaveLength(1);
  });

  it.each([
    ['tool_choice naming an unknown tool', { tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'launch' } } }, 'tool_choice'],
    ['a tool name with spaces', { tools: [{ type: 'function', function: { name: 'get weather' } }] }, 'tools[0].function.name'],
    ['a non-function tool', { tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    ['parameters that are not an object', { tools: [{ type: 'function', function: { name: 'f', parameters: [1] } }] }, 'tools[0].function.parameters'],
    ['an unknown tool_choice', { tools: [WEATHER], tool_choice: 'sometimes' }, 'tool_choice'],
    ['parallel_tool_calls not a boolean', { tools: [WEATHER], parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
    ['a tool message without tool_call_id', { messages: [{ role: 'user', content: 'x' }, { role: 'tool', content: '{}' }] }, 'messages[1].tool_call_id'],
    ['tool_calls on a user message', { messages: [{ role: 'user', content: 'x', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }] }, 'messages[0].tool_calls'],
  ])('refuses %s with a 400 naming the field, holding nothing', async (_what, extra, param) => {
    const before = h.reserves();
    const res = await h.gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'x' }], ...extra });
    const body = (await res.json()) as { error: { param: string | null; type: string } };
    expect(res.status).toBe(400);
    expect(body.error).toMatchObject({ type: 'invalid_request_error', param });
    expect(h.reserves()).toBe(before);
  });
});

describe('POST /v1/chat/completions with tools on a revision that cannot call them', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await start(fakeRevision());
  });
  afterAll(() => h.gw.close());

  it('refuses with 400 param tools naming the revision, before anything is reserved; without tools it answers', async () => {
    const client = new OpenAI({ baseURL: `${h.gw.url}/v1`, apiKey: h.gw.key.plaintext, maxRetries: 0 });
    const err = await client.chat.completions.create({ model: 'fake', messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, param: 'tools', type: 'invalid_request_error' });
    expect((err as Error).message).toMatch(/revision fake@1 \(engine openai-compatible\) does not declare `capabilities.tools`/);
    expect(h.reserves()).toBe(0);
    expect(h.engine.requests).toHaveLength(0);
    const ok = await client.chat.completions.create({ model: 'fake', messages: [{ role: 'user', content: 'Weather?' }] });
    expect(ok.choices[0].message.content).toBe('Sunny.');
  });
});

describe('tool definitions are input: admission reserves for them, so the upstream’s count is billed', () => {
  /** Counts a text as one token per 4 characters (messages: 5); reports the messages plus the tools’ JSON as input, as providers do. */
  function countingEngine(): EngineAdapter & { reported: number[] } {
    const reported: number[] = [];
    return {
      kind: 'counting',
      capacity: { slots: 4, contextTokens: 8192 },
      reported,
      async countInputTokens(input) {
        return input.kind === 'text' ? Math.ceil(input.text.length / 4) : 5;
      },
      async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
        const inputTokens = 5 + Math.ceil(JSON.stringify(request.tools ?? []).length / 4);
        reported.push(inputTokens);
        yield { type: 'delta', text: 'Sunny.', tokens: 2 };
        yield { type: 'end', reason: 'stop', usage: { inputTokens, outputTokens: 2, cachedInputTokens: 0 }, usageSource: 'reported' };
      },
      async close() {},
    };
  }

  it('bills every input token the upstream reports for a request with a long tool definition (none capped, none turned into cache reads)', async () => {
    const revision: RevisionSpec = { ...fakeRevision(), contextWindow: 8192, capabilities: { streaming: true, tools: true, jsonOutput: false } };
    const config = twoTenantConfig(revision);
    const engine = countingEngine();
    const gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }) });
    try {
      const tool = { type: 'function', function: { name: 'lookup', description: 'word '.repeat(400), parameters: { type: 'object', properties: {} } } };
      const res = await gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'x' }], tools: [tool], max_tokens: 8 });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { prompt_tokens: number } };
      await until(() => gw.records.length === 1);
      expect(engine.reported[0]).toBeGreaterThan(500);
      expect(body.usage.prompt_tokens).toBe(engine.reported[0]);
      expect(gw.records[0]).toMatchObject({ inputTokens: engine.reported[0], cachedInputTokens: 0 });
    } finally {
      await gw.close();
    }
  });
});

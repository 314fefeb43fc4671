/**
 * Anthropic's Messages API on the test gateway (real router, admission, scheduler and relay)
 * over a scripted engine: what reaches the engine (system, turns, tools, stop sequences), the
 * `message` answer and the event stream (read raw, and through the official `@anthropic-ai/sdk`),
 * errors in Anthropic's shape, count_tokens, and a client that leaves mid-stream.
 */
import Anthropic from '@anthropic-ai/sdk';
import { createInMemoryAdmission } from '@weir/admission';
import { type AdmissionService, type EngineAdapter, type EngineEvent, type EngineRequest, type RevisionSpec, WeirError } from '@weir/core';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

type Script = (request: EngineRequest) => AsyncIterable<EngineEvent>;

/** An engine whose answer each test scripts; it records every request (without its signal) and whether it was aborted. */
function scriptedEngine(): EngineAdapter & { requests: Omit<EngineRequest, 'signal'>[]; script: Script; aborted: number } {
  const engine = {
    kind: 'scripted',
    capacity: { slots: 4, contextTokens: 4096 },
    requests: [] as Omit<EngineRequest, 'signal'>[],
    aborted: 0,
    script: (async function* () {
      yield { type: 'delta', text: 'Hello', tokens: 1 };
      yield { type: 'delta', text: ' there.', tokens: 2 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 11, outputTokens: 3 }, usageSource: 'reported' };
    }) as Script,
    async countInputTokens(input: EngineRequest['input']) {
      // One token per whitespace-separated word of every message: easy to predict in a test.
      const text = input.kind === 'chat' ? input.messages.map((m) => m.content).join(' ') : input.kind === 'text' ? input.text : '';
      return text.split(/\s+/).filter(Boolean).length;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      const { signal, ...rest } = request;
      engine.requests.push(structuredClone(rest));
      signal.addEventListener('abort', () => engine.aborted++);
      yield* engine.script(request);
    },
    async close() {},
  };
  return engine;
}

const ARGS = '{"city":"Paris"}';

/** Says `Let me check.` then calls `get_weather` with {@link ARGS} in fragments, ending `tool_calls`. */
const toolScript: Script = async function* () {
  yield { type: 'delta', text: 'Let me check.', tokens: 3 };
  yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'toolu_01', name: 'get_weather', argumentsDelta: '' }] };
  for (let at = 0; at < ARGS.length; at += 6) yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: ARGS.slice(at, at + 6) }] };
  yield { type: 'end', reason: 'tool_calls', usage: { inputTokens: 20, outputTokens: 7 }, usageSource: 'reported' };
};

const WEATHER = { name: 'get_weather', description: 'Current weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

/** Parses an SSE body into its named events (the event name and the JSON data). */
function sseEvents(raw: string): { event: string | undefined; data: Record<string, unknown> }[] {
  const out: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => out.push(e) });
  parser.feed(raw);
  return out.map((e) => ({ event: e.event, data: JSON.parse(e.data) as Record<string, unknown> }));
}

describe('POST /v1/messages (Anthropic Messages API inbound)', () => {
  let gw: TestGateway;
  let engine: ReturnType<typeof scriptedEngine>;
  let refuseReserve: { reason: 'budget_exhausted'; message: string } | undefined;
  let client: Anthropic;
  const revision: RevisionSpec = { ...fakeRevision(), contextWindow: 4096, maxOutputTokens: 256, capabilities: { streaming: true, tools: true, jsonOutput: false } };

  beforeEach(async () => {
    const config = twoTenantConfig(revision);
    engine = scriptedEngine();
    refuseReserve = undefined;
    const admission = createInMemoryAdmission({ tenants: config.tenants });
    const refusing: AdmissionService = {
      ...admission,
      reserve: async (r) => (refuseReserve ? { ok: false, ...refuseReserve } : admission.reserve(r)),
      settle: (id, s) => admission.settle(id, s),
      release: (id) => admission.release(id),
    };
    gw = await startTestGateway({ config, engine, admission: refusing });
    client = new Anthropic({ apiKey: gw.key.plaintext, baseURL: gw.url, maxRetries: 0 });
  });
  afterEach(async () => {
    await gw.close();
  });

  /** POSTs with `x-api-key` (as Anthropic's clients authenticate) and `anthropic-version`. */
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${gw.url}${path}`, { method: 'POST', headers: { 'x-api-key': gw.key.plaintext, 'anthropic-version': '2023-06-01', 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

  it('answers a message: system prompt (string), multi-turn, stop sequences and sampling reach the engine; the message shape and usage come back', async () => {
    const res = await post('/v1/messages', {
      model: 'fake',
      max_tokens: 50,
      system: 'Be brief.',
      temperature: 0.5,
      top_p: 0.9,
      stop_sequences: ['\n\nHuman:'],
      metadata: { user_id: 'user-7' },
      messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello!' }] },
        { role: 'user', content: [{ type: 'text', text: 'How ' }, { type: 'text', text: 'are you?' }] },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('request-id')).toBeTruthy();
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'fake',
      content: [{ type: 'text', text: 'Hello there.' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      // Billed input is Weir's own count with the revision's tokenizer (7 words here), as on every route.
      usage: { input_tokens: 7, output_tokens: 3, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
    });
    expect(body.id).toMatch(/^msg_/);
    const sent = engine.requests[0];
    expect(sent.input).toEqual({
      kind: 'chat',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello!' },
        { role: 'user', content: 'How are you?' },
      ],
    });
    expect(sent.maxOutputTokens).toBe(50);
    expect(sent.sampling).toEqual({ temperature: 0.5, topP: 0.9, stop: ['\n\nHuman:'] });
    expect(gw.records).toHaveLength(1);
    expect(gw.records[0]).toMatchObject({ status: 'completed', inputTokens: 7, outputTokens: 3 });
  });

  it('takes the system prompt as text blocks, and Authorization: Bearer as well as x-api-key', async () => {
    const res = await gw.post('/v1/messages', { model: 'fake', max_tokens: 10, system: [{ type: 'text', text: 'Rule one.', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'Rule two.' }], messages: [{ role: 'user', content: 'Go' }] });
    expect(res.status).toBe(200);
    expect(engine.requests[0].input).toEqual({ kind: 'chat', messages: [{ role: 'system', content: 'Rule one.\n\nRule two.' }, { role: 'user', content: 'Go' }] });
  });

  it('accepts what a coding agent sends (cache_control, thinking and earlier thinking blocks, output_config.effort, speed, context_management, tool runtime hints) and ignores what changes nothing here', async () => {
    const res = await post(
      '/v1/messages',
      {
        model: 'fake',
        max_tokens: 64,
        stream: true,
        cache_control: { type: 'ephemeral' },
        system: [{ type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral', ttl: '1h' } }],
        metadata: { user_id: 'session-1' },
        thinking: { type: 'adaptive' },
        output_config: { effort: 'high' },
        speed: 'standard',
        tools: [{ ...WEATHER, strict: true, eager_input_streaming: true, defer_loading: false, input_examples: [{ city: 'Oslo' }] }],
        context_management: { edits: [{ type: 'clear_tool_uses_20250919' }] },
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'Hi', cache_control: { type: 'ephemeral' } }] },
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'Greet back.', signature: 'sig' }, { type: 'redacted_thinking', data: 'opaque' }, { type: 'text', text: 'Hello!' }] },
          { role: 'user', content: 'Weather?' },
        ],
      },
      { 'anthropic-beta': 'interleaved-thinking-2025-05-14' },
    );
    expect(res.status).toBe(200);
    expect(sseEvents(await res.text()).at(-1)?.event).toBe('message_stop');
    // An earlier turn's thinking is left out of what the model is sent.
    expect(engine.requests[0].input).toEqual({
      kind: 'chat',
      messages: [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello!' },
        { role: 'user', content: 'Weather?' },
      ],
    });
    expect(engine.requests[0].tools?.[0].function).toEqual({ name: 'get_weather', description: WEATHER.description, parameters: WEATHER.input_schema, strict: true });
    // `anthropic-beta` reaches the engine (only the Anthropic engine sends it upstream).
    expect(engine.requests[0].anthropicBeta).toEqual(['interleaved-thinking-2025-05-14']);
    const badBeta = await post('/v1/messages', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, { 'anthropic-beta': 'ok-1, bad flag' });
    expect(badBeta.status).toBe(400);
    expect(((await badBeta.json()) as { error: { message: string } }).error.message).toMatch(/anthropic-beta/);
    const format = await post('/v1/messages', { model: 'fake', max_tokens: 5, output_config: { format: { type: 'json_schema', schema: {} } }, messages: [{ role: 'user', content: 'x' }] });
    expect(format.status).toBe(400);
    expect(((await format.json()) as { error: { message: string } }).error.message).toMatch(/output_config.format/);
  });

  it.each([
    ['length', 'max_tokens'],
    ['tool_calls', 'tool_use'],
    ['content_filter', 'refusal'],
  ] as const)('maps the end reason %s to stop_reason %s', async (reason, stopReason) => {
    engine.script = async function* () {
      yield { type: 'delta', text: 'cut', tokens: 1 };
      yield { type: 'end', reason, usage: { inputTokens: 2, outputTokens: 1 }, usageSource: 'reported' };
    };
    const res = await post('/v1/messages', { model: 'fake', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
    expect(((await res.json()) as { stop_reason: string }).stop_reason).toBe(stopReason);
  });

  it('reports stop_reason stop_sequence and the sequence when the engine says one matched, streamed and not', async () => {
    engine.script = async function* () {
      yield { type: 'delta', text: 'Once upon', tokens: 2 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: 2 }, usageSource: 'reported', stopSequence: ' a time' };
    };
    const body = { model: 'fake', max_tokens: 20, stop_sequences: [' a time'], messages: [{ role: 'user', content: 'x' }] };
    const whole = (await (await post('/v1/messages', body)).json()) as { stop_reason: string; stop_sequence: string | null };
    expect(whole).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: ' a time' });
    const events = sseEvents(await (await post('/v1/messages', { ...body, stream: true })).text());
    expect(events.find((e) => e.event === 'message_delta')?.data).toMatchObject({ delta: { stop_reason: 'stop_sequence', stop_sequence: ' a time' } });
  });

  it('round-trips tools: input_schema and tool_choice reach the engine, tool_use comes back parsed, and tool_use/tool_result go back in', async () => {
    engine.script = toolScript;
    const first = await post('/v1/messages', { model: 'fake', max_tokens: 100, tools: [WEATHER], tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    expect(first.status).toBe(200);
    const message = (await first.json()) as { content: unknown[]; stop_reason: string };
    expect(message.stop_reason).toBe('tool_use');
    expect(message.content).toEqual([
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
    ]);
    expect(engine.requests[0].tools).toEqual([{ type: 'function', function: { name: 'get_weather', description: 'Current weather of a city', parameters: WEATHER.input_schema } }]);
    expect(engine.requests[0].toolChoice).toBe('required');
    expect(engine.requests[0].parallelToolCalls).toBe(false);

    engine.script = async function* () {
      yield { type: 'delta', text: 'Sunny, 21°C.', tokens: 4 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 30, outputTokens: 4 }, usageSource: 'reported' };
    };
    const second = await post('/v1/messages', {
      model: 'fake',
      max_tokens: 100,
      tools: [WEATHER],
      tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: message.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: '21°C, sunny' }] }, { type: 'text', text: 'Thanks' }] },
      ],
    });
    expect(second.status).toBe(200);
    expect(((await second.json()) as { content: unknown[] }).content).toEqual([{ type: 'text', text: 'Sunny, 21°C.' }]);
    expect(engine.requests[1].toolChoice).toEqual({ type: 'function', function: { name: 'get_weather' } });
    expect(engine.requests[1].input).toEqual({
      kind: 'chat',
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: 'Let me check.', toolCalls: [{ id: 'toolu_01', name: 'get_weather', arguments: ARGS }] },
        { role: 'tool', content: '21°C, sunny', toolCallId: 'toolu_01' },
        { role: 'user', content: 'Thanks' },
      ],
    });
  });

  it('streams Anthropic’s event sequence: message_start, ping, a text block, a tool_use block with input_json_delta, message_delta with usage, message_stop', async () => {
    engine.script = toolScript;
    const res = await post('/v1/messages', { model: 'fake', max_tokens: 100, stream: true, tools: [WEATHER], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = sseEvents(await res.text());
    // Every event is named after its data's type (the SDK skips unnamed events).
    for (const e of events) expect(e.event).toBe(e.data.type);
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      'ping',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    // Input: the messages (3) and the tool definition (5, as its JSON): tools are prompt text too.
    expect(events[0].data).toMatchObject({ message: { type: 'message', role: 'assistant', model: 'fake', content: [], stop_reason: null, usage: { input_tokens: 8, output_tokens: 0 } } });
    expect(events[2].data).toEqual({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    expect(events[3].data).toEqual({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Let me check.' } });
    expect(events[4].data).toEqual({ type: 'content_block_stop', index: 0 });
    expect(events[5].data).toEqual({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: {} } });
    expect(events.slice(6, 9).map((e) => (e.data.delta as { partial_json: string }).partial_json).join('')).toBe(ARGS);
    expect(events[6].data).toMatchObject({ index: 1, delta: { type: 'input_json_delta' } });
    expect(events[9].data).toEqual({ type: 'content_block_stop', index: 1 });
    expect(events[10].data).toMatchObject({ type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { input_tokens: 8, output_tokens: 7 } });
    // Cost you can read: the stream's last usage carries what the ledger bills and Weir's own time.
    const weir = events[10].data.weir as { cost_usd: number; overhead_ms: number };
    for (let i = 0; i < 100 && gw.records.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(gw.records).toHaveLength(1);
    expect(weir.cost_usd).toBe(gw.records[0].costNanoUsd / 1e9);
    expect(weir.cost_usd).toBeGreaterThan(0);
    expect(weir.overhead_ms).toBeGreaterThanOrEqual(0);
  });

  it('works with the official SDK: messages.create, messages.stream().finalMessage() with a tool call, and countTokens', async () => {
    const created = await client.messages.create({ model: 'fake', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] });
    expect(created.content).toEqual([{ type: 'text', text: 'Hello there.' }]);
    expect(created.usage.output_tokens).toBe(3);

    engine.script = toolScript;
    const stream = client.messages.stream({ model: 'fake', max_tokens: 100, tools: [WEATHER as Anthropic.Tool], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    const texts: string[] = [];
    stream.on('text', (t) => texts.push(t));
    const final = await stream.finalMessage();
    expect(texts.join('')).toBe('Let me check.');
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content[1]).toMatchObject({ type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } });
    expect(final.usage).toMatchObject({ input_tokens: 8, output_tokens: 7 });

    const counted = await client.messages.countTokens({ model: 'fake', system: 'Be brief.', messages: [{ role: 'user', content: 'one two three' }] });
    expect(counted).toEqual({ input_tokens: 5 });
  });

  it('counts tokens with the revision’s tokenizer, tool definitions included, without running the model or writing usage', async () => {
    const plain = await post('/v1/messages/count_tokens', { model: 'fake', messages: [{ role: 'user', content: 'a b c d' }] });
    expect(await plain.json()).toEqual({ input_tokens: 4 });
    const withTools = await post('/v1/messages/count_tokens', { model: 'fake', tools: [WEATHER], messages: [{ role: 'user', content: 'a b c d' }] });
    expect(((await withTools.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(4);
    expect(engine.requests).toHaveLength(0);
    expect(gw.records).toHaveLength(0);
    // Held to the caller's limits like /v1/moderations: refused by admission, it is a 429 in Anthropic's shape.
    refuseReserve = { reason: 'budget_exhausted', message: 'monthly budget spent' };
    const refused = await post('/v1/messages/count_tokens', { model: 'fake', messages: [{ role: 'user', content: 'a' }] });
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
    refuseReserve = undefined;
    const unknown = await post('/v1/messages/count_tokens', { model: 'nope', messages: [{ role: 'user', content: 'x' }] });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
  });

  it.each([
    ['missing max_tokens', { model: 'fake', messages: [{ role: 'user', content: 'x' }] }, /`max_tokens`: is required/],
    ['a first turn that is not user', { model: 'fake', max_tokens: 5, messages: [{ role: 'assistant', content: 'x' }] }, /first message must use the "user" role/],
    ['a system role in messages', { model: 'fake', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }, /top-level `system`/],
    ['an image block', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }, /image blocks are not supported/],
    ['a tool_result answering no tool_use', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] }, /answers no tool_use block/],
    ['top_k (said once)', { model: 'fake', max_tokens: 5, top_k: 5, messages: [{ role: 'user', content: 'x' }] }, /^Invalid request: `top_k` is not supported: Weir’s revisions sample with `temperature` and `top_p` only; remove `top_k`\.$/],
    ['an unknown field (pointing at the Messages page)', { model: 'fake', max_tokens: 5, frobnicate: 1, messages: [{ role: 'user', content: 'x' }] }, /unknown field `frobnicate`: POST \/v1\/messages does not take it \(docs\/api-anthropic\.md lists/],
    ['a server tool', { model: 'fake', max_tokens: 5, tools: [{ type: 'web_search_20250305', name: 'web_search' }], messages: [{ role: 'user', content: 'x' }] }, /server tools/],
    ['tool_choice naming no tool', { model: 'fake', max_tokens: 5, tools: [WEATHER], tool_choice: { type: 'tool', name: 'other' }, messages: [{ role: 'user', content: 'x' }] }, /'other' is not one of `tools`/],
  ])('refuses %s with a 400 invalid_request_error that says what to fix, before anything reaches the engine', async (_name, body, message) => {
    const res = await post('/v1/messages', body);
    expect(res.status).toBe(400);
    const err = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(err.type).toBe('error');
    expect(err.error.type).toBe('invalid_request_error');
    expect(err.error.message).toMatch(message);
    expect(engine.requests).toHaveLength(0);
    expect(gw.records).toHaveLength(0);
  });

  it('answers a bad key with 401 authentication_error (x-api-key and Bearer), and the SDK raises AuthenticationError', async () => {
    const bad = await post('/v1/messages', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, { 'x-api-key': 'wk_nope_nope' });
    expect(bad.status).toBe(401);
    expect(await bad.json()).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
    const bearer = await post('/v1/messages', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, { 'x-api-key': '', authorization: 'Bearer wk_nope_nope' });
    expect(bearer.status).toBe(401);
    expect(await bearer.json()).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
    const sdk = new Anthropic({ apiKey: 'wk_nope_nope', baseURL: gw.url, maxRetries: 0 });
    await expect(sdk.messages.create({ model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    const missing = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(missing.status).toBe(401);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toMatch(/x-api-key/);
  });

  it('answers a refusal made before the route runs (a stale configuration snapshot) in Anthropic’s shape too', async () => {
    await gw.close();
    const config = twoTenantConfig(revision);
    gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }), configState: () => ({ ageMs: 120_000, stale: true, maxAgeMs: 60_000 }) });
    const res = await post('/v1/messages', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(await res.json()).toMatchObject({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('configuration snapshot') } });
  });

  it('answers a spent budget with 429 rate_limit_error and x-should-retry: false; the SDK raises RateLimitError without retrying', async () => {
    refuseReserve = { reason: 'budget_exhausted', message: 'monthly budget spent' };
    const res = await post('/v1/messages', { model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    expect(res.status).toBe(429);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(await res.json()).toMatchObject({ type: 'error', error: { type: 'rate_limit_error', message: expect.stringContaining('monthly budget spent') } });
    const retrying = new Anthropic({ apiKey: gw.key.plaintext, baseURL: gw.url, maxRetries: 2 });
    await expect(retrying.messages.create({ model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(Anthropic.RateLimitError);
    expect(engine.requests).toHaveLength(0);
  });

  it('tells a failure before any output as an HTTP error, and one mid-stream as an in-band error event the SDK throws', async () => {
    engine.script = async function* () {
      yield* [];
      throw new WeirError('upstream_unavailable', 'the upstream is overloaded', { retryable: true });
    };
    const before = await post('/v1/messages', { model: 'fake', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] });
    expect(before.status).toBe(529);
    expect(before.statusText).toBe('Overloaded');
    expect(before.headers.get('retry-after')).toBeTruthy();
    expect(await before.json()).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });

    engine.script = async function* () {
      yield { type: 'delta', text: 'partial', tokens: 1 };
      throw new WeirError('upstream_error', 'the upstream closed mid-stream');
    };
    const mid = await post('/v1/messages', { model: 'fake', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] });
    expect(mid.status).toBe(200);
    const events = sseEvents(await mid.text());
    expect(events.at(-1)).toEqual({ event: 'error', data: { type: 'error', error: { type: 'api_error', message: expect.stringContaining('closed mid-stream') } } });
    expect(events.map((e) => e.event)).not.toContain('message_stop');

    const stream = client.messages.stream({ model: 'fake', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    await expect(stream.finalMessage()).rejects.toBeInstanceOf(Anthropic.APIError);
  });

  it('stops the upstream when the client disconnects mid-stream, and bills what was produced as cancelled', async () => {
    engine.script = async function* (request) {
      let n = 0;
      for (; n < 1000 && !request.signal.aborted; n++) {
        await new Promise((r) => setTimeout(r, 5));
        yield { type: 'delta', text: `w${n} `, tokens: 1 };
      }
      yield { type: 'end', reason: request.signal.aborted ? 'aborted' : 'length', usage: { inputTokens: 1, outputTokens: n }, usageSource: 'reported' };
    };
    const abort = new AbortController();
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': gw.key.plaintext, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake', max_tokens: 200, stream: true, messages: [{ role: 'user', content: 'x' }] }),
      signal: abort.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    abort.abort();
    for (let i = 0; i < 100 && gw.records.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(engine.aborted).toBe(1);
    expect(gw.records).toHaveLength(1);
    expect(gw.records[0].status).toBe('cancelled');
    expect(gw.records[0].outputTokens).toBeLessThan(200);
  });
});

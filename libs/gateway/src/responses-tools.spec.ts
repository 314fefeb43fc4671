/**
 * Function calling on `POST /v1/responses` (OpenAI's shape), through the whole request path over
 * HTTP: the test gateway (real router, admission, scheduler, relay) and the real
 * OpenAI-compatible adapter on a scripted upstream that streams chat-completions tool calls.
 * Raw HTTP for the exact items, events and refusals; the official `openai` SDK
 * (`responses.create`, `responses.stream` + `finalResponse()`) for what clients assemble; and
 * an upstream's `reasoning_content` as reasoning items, in-process and across the split's relay gRPC.
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { AdmissionService, EngineSpec, RevisionSpec } from '@weir/core';
import { createOpenAICompatibleEngine } from '@weir/engines';
import type { Relay } from '@weir/streaming';
import { chatStreamEvents, chatToolCallStreamEvents, type RecordedRequest, type ScriptedUpstream, sseEvent, sseReply, startScriptedUpstream } from '@weir/testing';
import { createRelayGrpcClient, createRelayGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import OpenAI from 'openai';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const WEATHER = { type: 'function', name: 'get_weather', description: 'Current weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: true };
const TIME = { type: 'function', name: 'get_time', description: null, parameters: null, strict: false };
const WEATHER_CALL = { id: 'call_w', name: 'get_weather', argumentFragments: ['{"ci', 'ty":"Pa', 'ris"}'] };
const TIME_CALL = { id: 'call_t', name: 'get_time', argumentFragments: ['{}'] };

function revision(url: string, tools: boolean): RevisionSpec {
  const engine: EngineSpec = { kind: 'openai-compatible', baseUrl: url, upstreamModel: 'm', api: 'chat', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 8 };
  return { id: tools ? 'tooly@1' : 'plain@1', model: tools ? 'tooly' : 'plain', engine, contextWindow: 4_096, maxOutputTokens: 256, defaultOutputTokens: 64, pricing: { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 }, capabilities: { streaming: true, tools, jsonOutput: false } };
}

/** Parses an SSE body into events (name and parsed data). */
async function sseEvents(res: Response): Promise<{ event: string | undefined; data: Record<string, unknown> }[]> {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => events.push(e) });
  parser.feed(await res.text());
  return events.filter((e) => e.data !== '[DONE]').map((e) => ({ event: e.event, data: JSON.parse(e.data) as Record<string, unknown> }));
}

let upstream: ScriptedUpstream;
let gw: TestGateway;
let reserves = 0;

beforeAll(async () => {
  upstream = await startScriptedUpstream();
  const tooly = revision(upstream.url, true);
  const plain = revision(upstream.url, false);
  const base = twoTenantConfig(tooly);
  const config = { ...base, defaults: { ...base.defaults, maxBodyBytes: 65_536 }, revisions: [tooly, plain], aliases: [{ name: 'tooly', targets: [{ revision: tooly.id, weight: 1 }] }, { name: 'plain', targets: [{ revision: plain.id, weight: 1 }] }] };
  const admission = createInMemoryAdmission({ tenants: config.tenants });
  const counting: AdmissionService = {
    ...admission,
    reserve: (r) => {
      reserves++;
      return admission.reserve(r);
    },
    settle: (id, s) => admission.settle(id, s),
    release: (id) => admission.release(id),
  };
  const engine = createOpenAICompatibleEngine(tooly.engine as Extract<EngineSpec, { kind: 'openai-compatible' }>, { env: {} });
  gw = await startTestGateway({ config, engine, admission: counting });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  upstream.setScript(() => sseReply(chatToolCallStreamEvents([WEATHER_CALL])));
});

const respond = (body: Record<string, unknown>) => gw.post('/v1/responses', { model: 'tooly', input: 'Weather in Paris?', tools: [WEATHER], ...body });
/** The chat completions body the upstream got. */
const sent = (i = 0) => upstream.requests[i].body as { messages: unknown[]; tools?: unknown; tool_choice?: unknown; parallel_tool_calls?: unknown };

describe('POST /v1/responses with function tools (raw HTTP)', () => {
  it('answers a function_call item (call_id, name, whole arguments) and passes the tools to the upstream in chat shape', async () => {
    const res = await respond({ parallel_tool_calls: false });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      object: 'response',
      status: 'completed',
      output: [{ id: expect.stringMatching(/^fc_/), type: 'function_call', status: 'completed', call_id: 'call_w', name: 'get_weather', arguments: '{"city":"Paris"}' }],
      tools: [WEATHER],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      weir: { finish_reason: 'tool_calls' },
    });
    expect(body.output).toHaveLength(1);
    expect(sent().tools).toEqual([{ type: 'function', function: { name: 'get_weather', description: 'Current weather of a city', parameters: WEATHER.parameters, strict: true } }]);
    expect(sent().parallel_tool_calls).toBe(false);
    expect(sent()).not.toHaveProperty('tool_choice');
  });

  it('streams the call: output_item.added, one arguments delta per fragment, arguments done, item done, completed — numbered from 0', async () => {
    const events = await sseEvents(await respond({ stream: true }));
    expect(events.map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.every((e) => e.data.type === e.event)).toBe(true);
    const itemId = (events[2].data.item as { id: string }).id;
    expect(events[2].data).toMatchObject({ output_index: 0, item: { type: 'function_call', status: 'in_progress', call_id: 'call_w', name: 'get_weather', arguments: '' } });
    expect(events.slice(3, 6).map((e) => e.data)).toEqual(WEATHER_CALL.argumentFragments.map((delta, i) => ({ type: 'response.function_call_arguments.delta', item_id: itemId, output_index: 0, delta, sequence_number: 3 + i })));
    expect(events[6].data).toMatchObject({ item_id: itemId, output_index: 0, name: 'get_weather', arguments: '{"city":"Paris"}' });
    expect(events[7].data).toMatchObject({ output_index: 0, item: { id: itemId, status: 'completed', arguments: '{"city":"Paris"}' } });
    expect(events[8].data.response).toMatchObject({ status: 'completed', output: [{ id: itemId, type: 'function_call', arguments: '{"city":"Paris"}' }], usage: { input_tokens: 5, output_tokens: 4 } });
  });

  it('parallel calls after some text: a message item, then one function_call item per call, in order (streamed and not)', async () => {
    upstream.setScript(() => sseReply(chatToolCallStreamEvents([WEATHER_CALL, TIME_CALL], ['Let me ', 'check.'])));
    const body = (await (await respond({ tools: [WEATHER, TIME] })).json()) as { output: Record<string, unknown>[] };
    expect(body.output.map((i) => [i.type, i.call_id ?? null, i.arguments ?? null])).toEqual([
      ['message', null, null],
      ['function_call', 'call_w', '{"city":"Paris"}'],
      ['function_call', 'call_t', '{}'],
    ]);
    expect(body.output[0]).toMatchObject({ role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Let me check.' }] });
    expect(new Set(body.output.map((i) => i.id)).size).toBe(3);

    const events = await sseEvents(await respond({ stream: true, tools: [WEATHER, TIME] }));
    const shape = events.map((e) => `${e.event?.replace('response.', '')}${typeof e.data.output_index === 'number' ? `@${e.data.output_index}` : ''}`);
    expect(shape).toEqual([
      'created',
      'in_progress',
      'output_item.added@0',
      'content_part.added@0',
      'output_text.delta@0',
      'output_text.delta@0',
      'output_text.done@0',
      'content_part.done@0',
      'output_item.done@0',
      'output_item.added@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.done@1',
      'output_item.done@1',
      'output_item.added@2',
      'function_call_arguments.delta@2',
      'function_call_arguments.done@2',
      'output_item.done@2',
      'completed',
    ]);
    expect((events.at(-1)?.data.response as { output: unknown[] }).output).toEqual(body.output.map((i) => ({ ...i, id: expect.any(String) })));
  });

  it.each<[string, unknown, unknown]>([
    ['a named function', { type: 'function', name: 'get_time' }, { type: 'function', function: { name: 'get_time' } }],
    ['required', 'required', 'required'],
    ['none', 'none', 'none'],
  ])('tool_choice %s reaches the upstream in chat shape and is echoed', async (_what, choice, upstreamChoice) => {
    const body = (await (await respond({ tools: [WEATHER, TIME], tool_choice: choice })).json()) as Record<string, unknown>;
    expect(sent().tool_choice).toEqual(upstreamChoice);
    expect(body.tool_choice).toEqual(choice);
  });

  it('a function_call_output round trip: the calls and their outputs reach the upstream as assistant tool_calls and tool messages', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['It is ', 'sunny.'])));
    const res = await respond({
      instructions: 'Be brief.',
      input: [
        { role: 'user', content: 'Weather in Paris? And the time?' },
        { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'opaque' },
        { type: 'message', role: 'assistant', id: 'msg_1', status: 'completed', content: [{ type: 'output_text', text: 'Let me check.', annotations: [], logprobs: [] }] },
        { type: 'function_call', id: 'fc_1', call_id: 'call_w', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' },
        { type: 'function_call', id: 'fc_2', call_id: 'call_t', name: 'get_time', arguments: '{}', status: 'completed' },
        { type: 'function_call_output', call_id: 'call_w', output: '{"sky":"clear"}' },
        { type: 'function_call_output', call_id: 'call_t', output: [{ type: 'input_text', text: '12:00' }] },
      ],
      tools: [WEATHER, TIME],
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { output: unknown[]; status: string };
    expect(body.status).toBe('completed');
    expect(body.output).toEqual([expect.objectContaining({ type: 'message', content: [expect.objectContaining({ text: 'It is sunny.' })] })]);
    expect(sent().messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris? And the time?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'call_w', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_t', type: 'function', function: { name: 'get_time', arguments: '{}' } },
        ],
      },
      { role: 'tool', content: '{"sky":"clear"}', tool_call_id: 'call_w' },
      { role: 'tool', content: '12:00', tool_call_id: 'call_t' },
    ]);
  });

  it('without tools the answer is text as before, and nothing about tools is sent upstream', async () => {
    upstream.setScript(() => sseReply(chatStreamEvents(['Hi'])));
    const body = (await (await respond({ tools: undefined })).json()) as Record<string, unknown>;
    expect(body).toMatchObject({ tools: [], tool_choice: 'none', parallel_tool_calls: false, output: [{ type: 'message', content: [{ text: 'Hi' }] }] });
    expect(sent()).not.toHaveProperty('tools');
  });

  it.each<[string, Record<string, unknown>, string, RegExp]>([
    ['store: true', { store: true }, 'store', /does not store responses: send `store: false`, or omit it/],
    ['previous_response_id', { previous_response_id: 'resp_1' }, 'previous_response_id', /cannot continue one: send the whole conversation .* in `input`/],
    ['an item reference', { input: [{ type: 'item_reference', id: 'fc_1' }] }, 'input[0].type', /`item_reference` items cannot be resolved: send the item itself/],
    ['a built-in tool', { tools: [{ type: 'web_search' }] }, 'tools[0].type', /only function tools are supported/],
    ['a tool name with spaces', { tools: [{ ...WEATHER, name: 'get weather' }] }, 'tools[0].name', /1-64 letters, digits, _ and -/],
    ['a tool without a name', { tools: [{ type: 'function', parameters: {} }] }, 'tools[0].name', /is required/],
    ['parameters that are not an object', { tools: [{ ...WEATHER, parameters: 'city' }] }, 'tools[0].parameters', /expected a JSON Schema object/],
    ['a tool in chat shape', { tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools[0].name', /is required/],
    ['a tool name used twice', { tools: [WEATHER, TIME, WEATHER] }, 'tools[2].name', /used twice/],
    ['a tool_choice naming no tool', { tool_choice: { type: 'function', name: 'launch' } }, 'tool_choice', /'launch', which is not one of `tools`/],
    ['tool_choice required without tools', { tools: undefined, tool_choice: 'required' }, 'tool_choice', /has no `tools`/],
    ['a tool_choice of a built-in tool', { tool_choice: { type: 'web_search' } }, 'tool_choice', /built-in tools and allowed_tools are not supported/],
    ['a function_call item without call_id', { input: [{ type: 'function_call', name: 'get_weather', arguments: '{}' }] }, 'input[0].call_id', /is required/],
    ['an output for a call not in the input', { input: [{ role: 'user', content: 'x' }, { type: 'function_call_output', call_id: 'call_x', output: 'y' }] }, 'input[1].call_id', /no earlier `function_call` item has the call_id 'call_x'/],
    ['tools on a revision that cannot call them', { model: 'plain' }, 'tools', /Model 'plain' cannot call tools: revision plain@1/],
  ])('refuses %s with a 400 naming the field, before any reservation or upstream call', async (_what, patch, param, message) => {
    const before = reserves;
    const res = await respond(patch);
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { param: string | null; message: string; type: string } };
    expect(error).toMatchObject({ type: 'invalid_request_error', param });
    expect(error.message).toMatch(message);
    expect(reserves).toBe(before);
    expect(upstream.requests).toEqual([]);
  });
});

describe('POST /v1/responses with function tools through the official openai SDK', () => {
  let client: OpenAI;
  beforeAll(() => {
    client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key.plaintext, maxRetries: 0 });
  });
  const tools: OpenAI.Responses.Tool[] = [
    { type: 'function', name: 'get_weather', description: 'Current weather of a city', parameters: WEATHER.parameters, strict: true },
    { type: 'function', name: 'get_time', parameters: null, strict: false },
  ];

  it('responses.create returns the function_call items; sending them back with their outputs gets the final answer', async () => {
    upstream.setScript((_req: RecordedRequest, i: number) => (i === 0 ? sseReply(chatToolCallStreamEvents([WEATHER_CALL, TIME_CALL])) : sseReply(chatStreamEvents(['Sunny ', 'at noon.']))));
    const input: OpenAI.Responses.ResponseInput = [{ role: 'user', content: 'Weather in Paris? And the time?' }];
    const first = await client.responses.create({ model: 'tooly', input, tools, tool_choice: 'auto' });
    expect(first.status).toBe('completed');
    expect(first.output_text).toBe('');
    const calls = first.output.filter((i): i is OpenAI.Responses.ResponseFunctionToolCall => i.type === 'function_call');
    expect(calls.map((c) => [c.call_id, c.name, JSON.parse(c.arguments)])).toEqual([
      ['call_w', 'get_weather', { city: 'Paris' }],
      ['call_t', 'get_time', {}],
    ]);

    // As the SDK's docs show: the output items go back as input, with the calls' outputs.
    input.push(...(first.output as OpenAI.Responses.ResponseInputItem[]), ...calls.map((c) => ({ type: 'function_call_output' as const, call_id: c.call_id, output: c.name === 'get_weather' ? 'sunny' : '12:00' })));
    const second = await client.responses.create({ model: 'tooly', input, tools });
    expect(second.output_text).toBe('Sunny at noon.');
    expect(sent(1).messages).toEqual([
      { role: 'user', content: 'Weather in Paris? And the time?' },
      // The adapter sends an assistant turn of calls only with content null, as OpenAI does.
      { role: 'assistant', content: null, tool_calls: calls.map((c) => ({ id: c.call_id, type: 'function', function: { name: c.name, arguments: c.arguments } })) },
      { role: 'tool', content: 'sunny', tool_call_id: 'call_w' },
      { role: 'tool', content: '12:00', tool_call_id: 'call_t' },
    ]);
  });

  it('responses.stream + finalResponse() assembles the same items, with argument snapshots along the way', async () => {
    upstream.setScript(() => sseReply(chatToolCallStreamEvents([WEATHER_CALL, TIME_CALL], ['Checking.'])));
    const stream = client.responses.stream({ model: 'tooly', input: 'Weather in Paris?', tools, parallel_tool_calls: true });
    const snapshots: string[] = [];
    const done: string[] = [];
    stream.on('response.function_call_arguments.delta', (e) => snapshots.push(e.snapshot));
    stream.on('response.function_call_arguments.done', (e) => done.push(`${e.name}:${e.arguments}`));
    const final = await stream.finalResponse();
    expect(snapshots).toEqual(['{"ci', '{"city":"Pa', '{"city":"Paris"}', '{}']);
    expect(done).toEqual(['get_weather:{"city":"Paris"}', 'get_time:{}']);
    expect(final.status).toBe('completed');
    expect(final.output_text).toBe('Checking.');
    expect(final.output.map((i) => i.type)).toEqual(['message', 'function_call', 'function_call']);
    expect(final.output.slice(1)).toEqual([
      expect.objectContaining({ type: 'function_call', call_id: 'call_w', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' }),
      expect.objectContaining({ type: 'function_call', call_id: 'call_t', name: 'get_time', arguments: '{}', status: 'completed' }),
    ]);
    // A strict tool's arguments are parsed by the helper (openai-node's ResponsesParser).
    expect((final.output[1] as { parsed_arguments?: unknown }).parsed_arguments).toEqual({ city: 'Paris' });
    expect(final.usage).toMatchObject({ input_tokens: 5, output_tokens: 7 });
  });

  it('a call cut by max_output_tokens ends incomplete, the call item incomplete too', async () => {
    upstream.setScript(() => sseReply(chatToolCallStreamEvents([{ ...WEATHER_CALL, argumentFragments: ['{"ci'] }], [], { finishReason: 'length' })));
    const final = await client.responses.stream({ model: 'tooly', input: 'Weather?', tools, max_output_tokens: 2 }).finalResponse();
    expect(final.status).toBe('incomplete');
    expect(final.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(final.output).toEqual([expect.objectContaining({ type: 'function_call', status: 'incomplete', arguments: '{"ci' })]);
  });
});

/** A chat stream whose model reasons (`reasoning_content`), answers and calls `get_weather`, as DeepSeek/vLLM stream it. */
function reasoningStream(): string[] {
  const meta = { id: 'chatcmpl-r', object: 'chat.completion.chunk', created: 1, model: 'm' };
  const chunk = (delta: object, finish: string | null = null) => sseEvent({ ...meta, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
  return [
    chunk({ role: 'assistant', content: null, reasoning_content: 'The user ' }),
    chunk({ content: null, reasoning_content: 'wants weather.' }),
    chunk({ content: 'Checking.', reasoning_content: null }),
    chunk({ tool_calls: [{ index: 0, id: 'call_w', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }),
    chunk({}, 'tool_calls'),
    sseEvent({ ...meta, choices: [], usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 } }),
    sseEvent('[DONE]'),
  ];
}

describe('POST /v1/responses passes an upstream’s reasoning on as a reasoning item', () => {
  beforeEach(() => upstream.setScript(() => sseReply(reasoningStream())));

  it('not streamed: a reasoning item (its text as a reasoning_text part) before the message and the call; output_text is the answer only', async () => {
    const body = (await (await respond({})).json()) as { output: Record<string, unknown>[] };
    expect(body.output).toEqual([
      { id: expect.stringMatching(/^rs_/), type: 'reasoning', status: 'completed', summary: [], content: [{ type: 'reasoning_text', text: 'The user wants weather.' }] },
      expect.objectContaining({ type: 'message', content: [expect.objectContaining({ text: 'Checking.' })] }),
      expect.objectContaining({ type: 'function_call', call_id: 'call_w', arguments: '{"city":"Paris"}' }),
    ]);
  });

  it('streamed: reasoning_text deltas inside their own item, then the message and the call', async () => {
    const events = await sseEvents(await respond({ stream: true }));
    expect(events.map((e) => `${e.event?.replace('response.', '')}${typeof e.data.output_index === 'number' ? `@${e.data.output_index}` : ''}`)).toEqual([
      'created',
      'in_progress',
      'output_item.added@0',
      'content_part.added@0',
      'reasoning_text.delta@0',
      'reasoning_text.delta@0',
      'reasoning_text.done@0',
      'content_part.done@0',
      'output_item.done@0',
      'output_item.added@1',
      'content_part.added@1',
      'output_text.delta@1',
      'output_text.done@1',
      'content_part.done@1',
      'output_item.done@1',
      'output_item.added@2',
      'function_call_arguments.delta@2',
      'function_call_arguments.done@2',
      'output_item.done@2',
      'completed',
    ]);
    expect(events[3].data.part).toEqual({ type: 'reasoning_text', text: '' });
    expect(events[6].data).toMatchObject({ content_index: 0, text: 'The user wants weather.' });
  });

  it('the SDK’s stream helper assembles the reasoning item; output_text leaves it out', async () => {
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key.plaintext, maxRetries: 0 });
    const deltas: string[] = [];
    const stream = client.responses.stream({ model: 'tooly', input: 'Weather?', tools: [{ type: 'function', name: 'get_weather', parameters: WEATHER.parameters, strict: true }] });
    stream.on('response.reasoning_text.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    expect(deltas).toEqual(['The user ', 'wants weather.']);
    expect(final.output_text).toBe('Checking.');
    expect(final.output[0]).toMatchObject({ type: 'reasoning', content: [{ type: 'reasoning_text', text: 'The user wants weather.' }] });
    expect(final.output.map((i) => i.type)).toEqual(['reasoning', 'message', 'function_call']);
  });

  it('crosses the split’s relay gRPC service (Delta.reasoning) the same', async () => {
    const parts: Array<() => Promise<void> | void> = [];
    const tooly = revision(upstream.url, true);
    const config = twoTenantConfig(tooly);
    const split = await startTestGateway({
      config: { ...config, aliases: [{ name: 'tooly', targets: [{ revision: tooly.id, weight: 1 }] }], defaults: { ...config.defaults, maxBodyBytes: 65_536 } },
      engine: createOpenAICompatibleEngine(tooly.engine as Extract<EngineSpec, { kind: 'openai-compatible' }>, { env: {} }),
      admission: createInMemoryAdmission({ tenants: config.tenants }),
      relayVia: async (relay: Relay) => {
        const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
        const client = createRelayGrpcClient({ address: server.address });
        parts.push(() => client.close(), () => server.close());
        return client;
      },
    });
    try {
      const res = await split.post('/v1/responses', { model: 'tooly', input: 'Weather?', tools: [WEATHER], stream: true });
      const events = await sseEvents(res);
      const completed = events.at(-1)?.data.response as { output: Record<string, unknown>[] };
      expect(completed.output[0]).toMatchObject({ type: 'reasoning', content: [{ type: 'reasoning_text', text: 'The user wants weather.' }] });
      expect(events.filter((e) => e.event === 'response.reasoning_text.delta').map((e) => e.data.delta)).toEqual(['The user ', 'wants weather.']);
    } finally {
      await split.close();
      for (const stop of parts) await stop();
    }
  });
});

describe('POST /v1/chat/completions passes an upstream’s reasoning on as reasoning_content', () => {
  beforeEach(() => upstream.setScript(() => sseReply(reasoningStream())));
  const chat = (stream: boolean) => gw.post('/v1/chat/completions', { model: 'tooly', messages: [{ role: 'user', content: 'Weather?' }], tools: [{ type: 'function', function: { name: 'get_weather' } }], stream });

  it('streamed: chunks of reasoning_content (no content) before the answer and the call', async () => {
    const chunks = (await sseEvents(await chat(true))).map((e) => (e.data as { choices?: { delta?: Record<string, unknown> }[] }).choices?.[0]?.delta);
    expect(chunks.filter((d) => d?.reasoning_content !== undefined)).toEqual([{ reasoning_content: 'The user ' }, { reasoning_content: 'wants weather.' }]);
    expect(chunks.some((d) => d?.content === 'Checking.')).toBe(true);
  });

  it('not streamed: the message carries reasoning_content beside content and tool_calls', async () => {
    const body = (await (await chat(false)).json()) as { choices: { message: Record<string, unknown> }[] };
    expect(body.choices[0].message).toMatchObject({ content: 'Checking.', reasoning_content: 'The user wants weather.', tool_calls: [expect.objectContaining({ id: 'call_w' })] });
  });
});

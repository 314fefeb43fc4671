/**
 * `POST /v1/messages` to a revision served by Anthropic's API (the real Anthropic engine against
 * a scripted Messages upstream), in both topologies (relay in-process, and over gRPC as the split
 * runs it): what the client sent — system, turns with tool_use/tool_result, tools, tool_choice,
 * stop sequences, `anthropic-beta` — reaches the upstream without loss, and what the upstream
 * answered — text, tool_use blocks with their ids and input, stop reason, output usage — reaches
 * the client, through the official SDK.
 */
import Anthropic from '@anthropic-ai/sdk';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineSpec, PlatformConfig, RevisionSpec } from '@weir/core';
import type { Relay } from '@weir/streaming';
import { createAnthropicEngine } from '@weir/engines';
import { anthropicSseEvent, type ScriptedUpstream, startScriptedUpstream } from '@weir/testing';
import { createRelayGrpcClient, createRelayGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const ARGS = { city: 'Paris', unit: 'celsius' };

/** An Anthropic stream: a text block, then a tool_use block whose input arrives in two pieces; `tool_use`, 9 output tokens. */
function toolUseStream(): string[] {
  const json = JSON.stringify(ARGS);
  return [
    anthropicSseEvent('message_start', { message: { id: 'msg_up', type: 'message', role: 'assistant', content: [], model: 'claude-up', stop_reason: null, stop_sequence: null, usage: { input_tokens: 40, output_tokens: 1 } } }),
    anthropicSseEvent('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    anthropicSseEvent('ping'),
    anthropicSseEvent('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Checking the weather.' } }),
    anthropicSseEvent('content_block_stop', { index: 0 }),
    anthropicSseEvent('content_block_start', { index: 1, content_block: { type: 'tool_use', id: 'toolu_up1', name: 'get_weather', input: {} } }),
    anthropicSseEvent('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: json.slice(0, 10) } }),
    anthropicSseEvent('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: json.slice(10) } }),
    anthropicSseEvent('content_block_stop', { index: 1 }),
    anthropicSseEvent('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 9 } }),
    anthropicSseEvent('message_stop'),
  ];
}

const WEATHER: Anthropic.Tool = { name: 'get_weather', description: 'Current weather', input_schema: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string' } }, required: ['city'] } };

describe.each(['all-in-one', 'split'] as const)('POST /v1/messages to an Anthropic upstream (%s)', (topology) => {
  let upstream: ScriptedUpstream;
  let gw: TestGateway;
  const stops: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    upstream = await startScriptedUpstream({ script: () => ({ kind: 'sse', steps: toolUseStream().map((data) => ({ data })) }) });
    const engine: Extract<EngineSpec, { kind: 'anthropic' }> = { kind: 'anthropic', baseUrl: upstream.url, upstreamModel: 'claude-up', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 4 };
    const revision: RevisionSpec = { id: 'claude@1', model: 'claude', engine, contextWindow: 100_000, maxOutputTokens: 1_024, defaultOutputTokens: 256, pricing: { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3 }, capabilities: { streaming: true, tools: true, jsonOutput: false } };
    const base = twoTenantConfig(revision);
    const config: PlatformConfig = { ...base, aliases: [{ name: 'claude', targets: [{ revision: 'claude@1', weight: 1 }] }], defaults: { ...base.defaults, maxBodyBytes: 65_536 } };
    const overGrpc = async (relay: Relay): Promise<Relay> => {
      const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
      const client = createRelayGrpcClient({ address: server.address });
      stops.push(() => client.close(), () => server.close());
      return client;
    };
    gw = await startTestGateway({
      config,
      engine: createAnthropicEngine(engine, { env: {} }),
      admission: createInMemoryAdmission({ tenants: config.tenants }),
      ...(topology === 'split' ? { relayVia: overGrpc } : {}),
    });
  });
  afterAll(async () => {
    await gw.close();
    for (const stop of stops.splice(0)) await stop();
    await upstream.close();
  });

  it('passes the conversation, tools, tool_choice, stop sequences and anthropic-beta to the upstream, and its tool_use back to the SDK', async () => {
    const client = new Anthropic({ apiKey: gw.key.plaintext, baseURL: gw.url, maxRetries: 0, defaultHeaders: { 'anthropic-beta': 'context-1m-2025-08-07,fine-grained-tool-streaming-2025-05-14' } });
    const before = upstream.requests.length;
    const final = await client.messages
      .stream({
        model: 'claude',
        max_tokens: 300,
        system: [{ type: 'text', text: 'You are terse.' }],
        stop_sequences: ['END'],
        tools: [WEATHER],
        tool_choice: { type: 'any' },
        messages: [
          { role: 'user', content: 'Weather in Oslo?' },
          { role: 'assistant', content: [{ type: 'text', text: 'Looking.' }, { type: 'tool_use', id: 'toolu_old', name: 'get_weather', input: { city: 'Oslo' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_old', content: '3°C' }, { type: 'text', text: 'And Paris?' }] },
        ],
      })
      .finalMessage();

    expect(final.content).toEqual([
      expect.objectContaining({ type: 'text', text: 'Checking the weather.' }),
      expect.objectContaining({ type: 'tool_use', id: 'toolu_up1', name: 'get_weather', input: ARGS }),
    ]);
    expect(final.stop_reason).toBe('tool_use');
    expect(final.usage.output_tokens).toBe(9);

    const sent = upstream.requests[before];
    expect(sent.path).toBe('/v1/messages');
    expect(sent.headers['anthropic-beta']).toBe('context-1m-2025-08-07,fine-grained-tool-streaming-2025-05-14');
    // Weir's own credentials only: the client's key never goes upstream.
    expect(sent.headers['x-api-key']).toBeUndefined();
    expect(sent.body).toMatchObject({
      model: 'claude-up',
      max_tokens: 300,
      system: 'You are terse.',
      stop_sequences: ['END'],
      tools: [{ name: 'get_weather', description: 'Current weather', input_schema: WEATHER.input_schema }],
      tool_choice: { type: 'any' },
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: [{ type: 'text', text: 'Looking.' }, { type: 'tool_use', id: 'toolu_old', name: 'get_weather', input: { city: 'Oslo' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_old', content: '3°C' }, { type: 'text', text: 'And Paris?' }] },
      ],
    });
  });

  it('passes the upstream’s stop_sequence stop back (over the relay wire too)', async () => {
    upstream.setScript(() => ({
      kind: 'sse',
      steps: [
        anthropicSseEvent('message_start', { message: { id: 'msg_up2', type: 'message', role: 'assistant', content: [], model: 'claude-up', stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
        anthropicSseEvent('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        anthropicSseEvent('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'one two' } }),
        anthropicSseEvent('content_block_stop', { index: 0 }),
        anthropicSseEvent('message_delta', { delta: { stop_reason: 'stop_sequence', stop_sequence: 'three' }, usage: { output_tokens: 2 } }),
        anthropicSseEvent('message_stop'),
      ].map((data) => ({ data })),
    }));
    try {
      const client = new Anthropic({ apiKey: gw.key.plaintext, baseURL: gw.url, maxRetries: 0 });
      const message = await client.messages.create({ model: 'claude', max_tokens: 20, stop_sequences: ['three'], messages: [{ role: 'user', content: 'count' }] });
      expect(message).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'three', content: [{ type: 'text', text: 'one two' }] });
    } finally {
      upstream.setScript(() => ({ kind: 'sse', steps: toolUseStream().map((data) => ({ data })) }));
    }
  });

  it('answers a non-streamed message with the same blocks, and sends no anthropic-beta when the client sent none', async () => {
    const before = upstream.requests.length;
    const res = await gw.post('/v1/messages', { model: 'claude', max_tokens: 50, tools: [WEATHER], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    expect(res.status).toBe(200);
    const message = (await res.json()) as Anthropic.Message;
    expect(message.content).toEqual([
      { type: 'text', text: 'Checking the weather.' },
      { type: 'tool_use', id: 'toolu_up1', name: 'get_weather', input: ARGS },
    ]);
    expect(message.stop_reason).toBe('tool_use');
    expect(upstream.requests[before].headers['anthropic-beta']).toBeUndefined();
  });
});

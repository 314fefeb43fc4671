import type { EngineEvent, GenerationInput } from '@weir/core';
import { isWeirError } from '@weir/core';
import {
  anthropicErrorBody,
  anthropicErrorEvent,
  anthropicErrorReply,
  anthropicModelScript,
  anthropicStreamEvents,
  collectEngineEvents,
  describeEngineContract,
  engineRequest,
  freePort,
  type ScriptedUpstream,
  sseReply,
  startScriptedUpstream,
} from '@weir/testing';
import type { EngineLogger } from '../logger';
import { CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS } from '../openai-compatible/token-bound';
import { ANTHROPIC_DEFAULT_CONTEXT_TOKENS, type AnthropicEngineOptions, createAnthropicEngine } from './anthropic-engine';

const optionsFor = (baseUrl: string, overrides: Partial<AnthropicEngineOptions> = {}): AnthropicEngineOptions => ({
  kind: 'anthropic',
  baseUrl,
  upstreamModel: 'claude-up',
  firstTokenTimeoutMs: 2000,
  idleTimeoutMs: 2000,
  maxConcurrency: 4,
  ...overrides,
});

/** The scripted upstream's origin (its `url` ends in `/v1`; Anthropic's base URL is the origin). */
const originOf = (upstream: ScriptedUpstream): string => upstream.url.replace(/\/v1$/, '');

const chat: GenerationInput = { kind: 'chat', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hi' }] };
const textOf = (events: EngineEvent[]): string => events.map((e) => (e.type === 'delta' ? e.text : '')).join('');
const endOf = (events: EngineEvent[]): Extract<EngineEvent, { type: 'end' }> => {
  const end = events[events.length - 1];
  if (end?.type !== 'end') throw new Error('stream did not end with an end event');
  return end;
};

function recordingLogger(): EngineLogger & { lines: Array<{ level: string; obj: object; msg?: string }> } {
  const lines: Array<{ level: string; obj: object; msg?: string }> = [];
  const at = (level: string) => (obj: object, msg?: string) => {
    lines.push({ level, obj, msg });
  };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

describe('createAnthropicEngine (scripted upstream)', () => {
  let upstream: ScriptedUpstream;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
  });
  afterAll(() => upstream.close());
  beforeEach(() => {
    upstream.requests.length = 0;
  });

  it('calls POST {base}/v1/messages with the key named by apiKeyEnv, the version header and the mapped body', async () => {
    upstream.setScript(() => sseReply(anthropicStreamEvents(['Hi', ' there'], { usage: { input_tokens: 11, output_tokens: 2 } })));
    const engine = createAnthropicEngine(optionsFor(originOf(upstream), { apiKeyEnv: 'WEIR_UPSTREAM_ANTHROPIC' }), {
      env: { WEIR_UPSTREAM_ANTHROPIC: 'sk-ant-test' },
    });
    const request = engineRequest(chat, { maxOutputTokens: 32, sampling: { temperature: 0.2, topP: 0.8, seed: 1, stop: ['\n'] } });
    const { events, error } = await collectEngineEvents(engine, request);
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'delta', text: 'Hi', tokens: 1 },
      { type: 'delta', text: ' there', tokens: 1 },
      { type: 'end', reason: 'stop', usage: { inputTokens: 11, outputTokens: 2 }, usageSource: 'reported' },
    ]);
    const sent = upstream.requests[0];
    expect(sent.method).toBe('POST');
    expect(sent.path).toBe('/v1/messages');
    expect(sent.headers['x-api-key']).toBe('sk-ant-test');
    expect(sent.headers['anthropic-version']).toBe('2023-06-01');
    expect(sent.headers.authorization).toBeUndefined();
    expect(sent.body).toEqual({
      model: 'claude-up',
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'Say hi' }],
      max_tokens: 32,
      temperature: 0.2,
      top_p: 0.8,
      stop_sequences: ['\n'],
      stream: true,
    });
  });

  it('accepts a base URL with a trailing /v1 (and slash) without doubling it', async () => {
    upstream.setScript(() => sseReply(anthropicStreamEvents(['ok'])));
    const engine = createAnthropicEngine(optionsFor(`${upstream.url}/`));
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    expect(upstream.requests[0].path).toBe('/v1/messages');
  });

  it('sends no x-api-key without apiKeyEnv; warns by variable name when the variable is unset', async () => {
    upstream.setScript(() => sseReply(anthropicStreamEvents(['ok'])));
    const logger = recordingLogger();
    const engine = createAnthropicEngine(optionsFor(originOf(upstream), { apiKeyEnv: 'WEIR_UPSTREAM_MISSING' }), { env: {}, logger });
    await collectEngineEvents(engine, engineRequest(chat));
    expect(upstream.requests[0].headers['x-api-key']).toBeUndefined();
    expect(logger.lines).toEqual([expect.objectContaining({ level: 'warn', obj: { apiKeyEnv: 'WEIR_UPSTREAM_MISSING' } })]);
  });

  it('never logs the key, the prompt or the output', async () => {
    const logger = recordingLogger();
    const engine = createAnthropicEngine(optionsFor(originOf(upstream), { apiKeyEnv: 'WEIR_UPSTREAM_K' }), { env: { WEIR_UPSTREAM_K: 'sk-ant-secret' }, logger });
    const prompt: GenerationInput = { kind: 'text', text: 'my private prompt' };
    upstream.setScript(() => sseReply(anthropicStreamEvents(['private output'])));
    await collectEngineEvents(engine, engineRequest(prompt));
    upstream.setScript(() => anthropicErrorReply(401, { message: 'invalid x-api-key sk-ant-secret for my private prompt' }));
    const { error } = await collectEngineEvents(engine, engineRequest(prompt));
    upstream.setScript(() => sseReply([...anthropicStreamEvents(['private output'], { stopReason: null }), anthropicErrorEvent('api_error', 'my private prompt')]));
    await collectEngineEvents(engine, engineRequest(prompt));
    expect(logger.lines.length).toBeGreaterThan(0);
    const logged = JSON.stringify(logger.lines);
    for (const secret of ['sk-ant-secret', 'private prompt', 'private output']) expect(logged).not.toContain(secret);
    expect(isWeirError(error) && error.message).not.toContain('sk-ant-secret');
  });

  it('maps 400 "prompt is too long" to context_length_exceeded', async () => {
    upstream.setScript(() => ({
      kind: 'error',
      status: 400,
      body: anthropicErrorBody('invalid_request_error', 'prompt is too long: 207791 tokens > 200000 maximum'),
    }));
    const { error } = await collectEngineEvents(createAnthropicEngine(optionsFor(originOf(upstream))), engineRequest(chat));
    expect(isWeirError(error) && { code: error.code, param: error.param }).toEqual({ code: 'context_length_exceeded', param: 'input' });
  });

  it.each([
    [400, 'upstream_bad_request', false],
    [402, 'upstream_error', false],
    [403, 'upstream_error', false],
    [404, 'upstream_bad_request', false],
    [413, 'upstream_bad_request', false],
    [429, 'upstream_unavailable', true],
    [500, 'upstream_unavailable', true],
    [504, 'upstream_unavailable', true],
    [529, 'upstream_unavailable', true],
  ])('maps HTTP %i to %s (retryable %s), naming the error type', async (status, code, retryable) => {
    upstream.setScript(() => anthropicErrorReply(status, { headers: { 'retry-after': '3' } }));
    const { error } = await collectEngineEvents(createAnthropicEngine(optionsFor(originOf(upstream))), engineRequest(chat));
    expect(isWeirError(error) && { code: error.code, retryable: error.retryable }).toEqual({ code, retryable });
    expect(isWeirError(error) && error.message).toContain(`HTTP ${status}`);
    if (retryable) expect(isWeirError(error) && error.retryAfterMs).toBe(3000);
  });

  it('cuts a silent upstream with upstream_timeout: retryable before the first text, not after', async () => {
    const engine = createAnthropicEngine(optionsFor(originOf(upstream), { firstTokenTimeoutMs: 150, idleTimeoutMs: 150 }));
    // Before the first text: message_start and pings do not stop the first-token clock.
    upstream.setScript(() => ({ kind: 'sse', steps: anthropicStreamEvents([], { stopReason: null }).map((data) => ({ data })), hang: true }));
    const first = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(first.error) && { code: first.error.code, retryable: first.error.retryable }).toEqual({ code: 'upstream_timeout', retryable: true });
    // After it: silence longer than the idle timeout.
    upstream.setScript(() => sseReply(anthropicStreamEvents(['a'], { stopReason: null }), { hang: true }));
    const idle = await collectEngineEvents(engine, engineRequest(chat));
    expect(textOf(idle.events)).toBe('a');
    expect(isWeirError(idle.error) && { code: idle.error.code, retryable: idle.error.retryable }).toEqual({ code: 'upstream_timeout', retryable: false });
  });

  it('keeps the idle clock reset by pings between text deltas', async () => {
    const [head, ...rest] = anthropicStreamEvents(['a', 'b']);
    const ping = 'event: ping\ndata: {"type": "ping"}\n\n';
    upstream.setScript(() => ({
      kind: 'sse',
      steps: [{ data: head }, { data: rest[0] }, { data: rest[1] }, { data: rest[2] }, ...[1, 2, 3, 4].map(() => ({ data: ping, delayMs: 100 })), ...rest.slice(3).map((data) => ({ data }))],
    }));
    const engine = createAnthropicEngine(optionsFor(originOf(upstream), { idleTimeoutMs: 300 }));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe('ab');
  });

  it('maps a stream that ends before message_delta to upstream_error', async () => {
    upstream.setScript(() => sseReply(anthropicStreamEvents(['cut'], { stopReason: null })));
    const { events, error } = await collectEngineEvents(createAnthropicEngine(optionsFor(originOf(upstream))), engineRequest(chat));
    expect(textOf(events)).toBe('cut');
    expect(isWeirError(error) && error.code).toBe('upstream_error');
  });

  it('accepts a stream that sent its stop_reason but ended without message_stop', async () => {
    upstream.setScript(() => sseReply(anthropicStreamEvents(['ok'], { stopReason: 'max_tokens' }).slice(0, -1)));
    const { events, error } = await collectEngineEvents(createAnthropicEngine(optionsFor(originOf(upstream))), engineRequest(chat));
    expect(error).toBeUndefined();
    expect(endOf(events)).toMatchObject({ reason: 'length', usageSource: 'reported' });
  });

  it('accepts a non-stream JSON message', async () => {
    // The scripted model answers one JSON message when `stream` is not true, as a proxy that
    // drops `stream` would make the API do.
    upstream.setScript((req, i) => anthropicModelScript()({ ...req, body: { ...(req.body as object), stream: false } }, i));
    const engine = createAnthropicEngine(optionsFor(originOf(upstream)));
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat, { maxOutputTokens: 3 }));
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'delta', text: 'w0 w1 w2 ', tokens: 1 },
      { type: 'end', reason: 'length', usage: { inputTokens: 4, outputTokens: 3 }, usageSource: 'reported' },
    ]);
  });

  it('bills an aborted stream with the upstream input count and the text received', async () => {
    upstream.setScript(() =>
      sseReply(anthropicStreamEvents(['héllo', ' world', ' again', ' and', ' more'], { stopReason: null, usage: { input_tokens: 40, cache_read_input_tokens: 60, output_tokens: 0 } }), {
        delayMs: 30,
        hang: true,
      }),
    );
    const engine = createAnthropicEngine(optionsFor(originOf(upstream)), { countTokens: (t) => t.split(/\s+/).filter(Boolean).length });
    const controller = new AbortController();
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat, { signal: controller.signal }), (event) => {
      if (event.type === 'delta') controller.abort();
    });
    expect(error).toBeUndefined();
    expect(endOf(events)).toEqual({
      type: 'end',
      reason: 'aborted',
      usage: { inputTokens: 100, cachedInputTokens: 60, outputTokens: 1 },
      usageSource: 'counted',
    });
  });

  it('bounds input tokens with the UTF-8 upper bound, without a network call', async () => {
    const engine = createAnthropicEngine(optionsFor(`http://127.0.0.1:${await freePort()}`));
    expect(await engine.countInputTokens({ kind: 'text', text: 'héllo' })).toBe(7 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS);
    expect(await engine.countInputTokens(chat)).toBe(10 + 7 + 2 * CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS);
    expect(engine.kind).toBe('anthropic');
    expect(engine.capacity).toEqual({ slots: 4, contextTokens: ANTHROPIC_DEFAULT_CONTEXT_TOKENS });
  });

  it('close() aborts generations in flight', async () => {
    upstream.setScript(() => sseReply(anthropicStreamEvents(['a'], { stopReason: null }), { hang: true }));
    const engine = createAnthropicEngine(optionsFor(originOf(upstream)));
    const pending = collectEngineEvents(engine, engineRequest(chat), () => void engine.close());
    const { events, error } = await pending;
    expect(textOf(events)).toBe('a');
    expect(isWeirError(error)).toBe(true);
  });
});

describeEngineContract('anthropic (scripted Anthropic upstream)', async () => {
  const normal = await startScriptedUpstream({ script: anthropicModelScript({ contextBytes: 200 }) });
  const slow = await startScriptedUpstream({ script: anthropicModelScript({ pieceDelayMs: 5, naturalPieces: 300 }) });
  const overloaded = await startScriptedUpstream({ script: () => anthropicErrorReply(529) });
  const unauthorized = await startScriptedUpstream({ script: () => anthropicErrorReply(401) });
  const midStream = await startScriptedUpstream({
    script: () => sseReply([...anthropicStreamEvents(['partial'], { stopReason: null }), anthropicErrorEvent()]),
  });
  const refusedPort = await freePort();
  return {
    adapter: createAnthropicEngine(optionsFor(originOf(normal))),
    slowAdapter: createAnthropicEngine(optionsFor(originOf(slow))),
    input: chat,
    oversizedInput: { kind: 'chat', messages: [{ role: 'user', content: 'word '.repeat(100) }] },
    oversizedCodes: ['context_length_exceeded'],
    faults: [
      { name: 'HTTP 529 overloaded', adapter: createAnthropicEngine(optionsFor(originOf(overloaded))), code: 'upstream_unavailable' },
      { name: 'HTTP 401', adapter: createAnthropicEngine(optionsFor(originOf(unauthorized))), code: 'upstream_error' },
      { name: 'overloaded error event mid-stream', adapter: createAnthropicEngine(optionsFor(originOf(midStream))), code: 'upstream_error' },
      { name: 'connection refused', adapter: createAnthropicEngine(optionsFor(`http://127.0.0.1:${refusedPort}`)), code: 'upstream_unavailable' },
    ],
    close: async () => {
      await Promise.all([normal.close(), slow.close(), overloaded.close(), unauthorized.close(), midStream.close()]);
    },
  };
});

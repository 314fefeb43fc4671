import { Writable } from 'node:stream';
import type { EngineAdapter, GenerationInput } from '@weir/core';
import { isWeirError, toWeirError } from '@weir/core';
import { createLogger, type WeirLogger } from '@weir/telemetry';
import {
  anthropicErrorReply,
  anthropicErrorEvent,
  anthropicStreamEvents,
  chatStreamEvents,
  collectEngineEvents,
  engineRequest,
  type ScriptedUpstream,
  sseEvent,
  sseReply,
  startScriptedUpstream,
  type UpstreamReply,
} from '@weir/testing';
import { createAnthropicEngine } from './anthropic/anthropic-engine';
import { createOpenAICompatibleEngine } from './openai-compatible/openai-compatible-engine';

/** Stands for what an upstream may echo back: a fragment of the tenant's prompt. */
const SENTINEL = 'SENTINEL_upstream_echo_91c2';
const chat: GenerationInput = { kind: 'chat', messages: [{ role: 'user', content: `Tell me about ${SENTINEL}` }] };

function capture(): { text: () => string; logger: WeirLogger } {
  let raw = '';
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      raw += chunk.toString('utf8');
      done();
    },
  });
  return { text: () => raw, logger: createLogger({ name: 'test', level: 'debug', destination }) };
}

const engines: Record<string, (url: string, logger: WeirLogger) => EngineAdapter> = {
  'openai-compatible': (url, logger) =>
    createOpenAICompatibleEngine({ kind: 'openai-compatible', baseUrl: url, upstreamModel: 'm', api: 'chat', firstTokenTimeoutMs: 2000, idleTimeoutMs: 2000, maxConcurrency: 4 }, { logger }),
  anthropic: (url, logger) =>
    createAnthropicEngine({ kind: 'anthropic', baseUrl: url.replace(/\/v1$/, ''), upstreamModel: 'm', firstTokenTimeoutMs: 2000, idleTimeoutMs: 2000, maxConcurrency: 4 }, { logger }),
};

const replies: Record<string, Record<string, () => UpstreamReply>> = {
  'openai-compatible': {
    'HTTP 500 whose body echoes the prompt': () => ({ kind: 'error', status: 500, body: { error: { message: `failed on: ${SENTINEL}`, type: 'server_error' } } }),
    'HTTP 400 whose body is a bare string': () => ({ kind: 'error', status: 400, body: `bad request near ${SENTINEL}` }),
    'an in-band error frame after output': () =>
      sseReply([...chatStreamEvents(['partial'], { finishReason: null, usage: false, done: false }), sseEvent({ error: { message: `mid-stream: ${SENTINEL}`, type: 'server_error' } })]),
  },
  anthropic: {
    'HTTP 529 whose body echoes the prompt': () => anthropicErrorReply(529, { message: `overloaded while reading ${SENTINEL}` }),
    'HTTP 400 prompt too long': () => anthropicErrorReply(400, { message: `prompt is too long: 9 tokens > 1 maximum (${SENTINEL})` }),
    'an error event after output': () => sseReply([...anthropicStreamEvents(['partial'], { stopReason: null }).slice(0, -2), anthropicErrorEvent('api_error', `mid-stream: ${SENTINEL}`)]),
  },
};

describe('upstream failures reach the logs as metadata only (issue 14, part 10)', () => {
  let upstream: ScriptedUpstream;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
  });
  afterAll(() => upstream.close());

  const cases = Object.entries(replies).flatMap(([kind, byName]) => Object.entries(byName).map(([name, reply]) => [kind, name, reply] as const));

  it.each(cases)('%s: %s', async (kind, _name, reply) => {
    upstream.setScript(reply);
    const { text, logger } = capture();
    const { error } = await collectEngineEvents(engines[kind]!(upstream.url, logger), engineRequest(chat));
    expect(isWeirError(error)).toBe(true);
    // What the services do with such an error: the gateway's fault log (its cause), the relay's
    // and the engine server's (the error itself), and a plain `logger.error(err)`.
    const weir = toWeirError(error);
    logger.error({ err: weir.cause ?? weir, requestId: 'req_1' }, 'request failed');
    logger.warn({ err: weir, generationId: 'gen_1' }, 'generation failed');
    logger.error(weir);
    const logged = text();
    expect(logged).toContain('upstream');
    expect(logged).not.toContain(SENTINEL);
  });
});

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { egressPolicyFromEnv, type LookupFunction } from '@weir/config';
import type { GenerationInput } from '@weir/core';
import { isWeirError } from '@weir/core';
import { chatStreamEvents, collectEngineEvents, engineRequest } from '@weir/testing';
import { createAnthropicEngine } from './anthropic/anthropic-engine';
import { egressDispatcher } from './egress-dispatcher';
import { createOpenAICompatibleEngine, type OpenAICompatibleEngineOptions } from './openai-compatible/openai-compatible-engine';

/** A local HTTP server that records every request's path and headers and answers with `reply`. */
interface Recorder {
  server: Server;
  port: number;
  seen: Array<{ path: string; authorization?: string; apiKey?: string }>;
}
async function recorder(reply: (req: IncomingMessage, res: ServerResponse) => void): Promise<Recorder> {
  const seen: Recorder['seen'] = [];
  const server = createServer((req, res) => {
    seen.push({ path: req.url ?? '', authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] as string | undefined });
    req.resume();
    req.on('end', () => reply(req, res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, seen };
}
const close = (r: Recorder) => new Promise<void>((resolve) => r.server.close(() => resolve()));

const sse = (res: ServerResponse) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const e of chatStreamEvents(['ok'], { usage: { prompt_tokens: 1, completion_tokens: 1 } })) res.write(e);
  res.end();
};

const spec = (baseUrl: string, apiKeyEnv?: string): OpenAICompatibleEngineOptions => ({
  kind: 'openai-compatible',
  baseUrl,
  upstreamModel: 'm',
  api: 'chat',
  firstTokenTimeoutMs: 5_000,
  idleTimeoutMs: 5_000,
  maxConcurrency: 2,
  ...(apiKeyEnv ? { apiKeyEnv } : {}),
});
const chat: GenerationInput = { kind: 'chat', messages: [{ role: 'user', content: 'hi' }] };

/** Every message along an error's cause chain. */
const causes = (err: unknown): string => {
  const out: string[] = [];
  for (let e: unknown = err; e instanceof Error; e = e.cause) out.push(e.message);
  return out.join(' <- ');
};

describe('egress at request time (adapters over real sockets)', () => {
  let upstream: Recorder;
  let other: Recorder;
  beforeAll(async () => {
    other = await recorder((_req, res) => sse(res));
    upstream = await recorder((req, res) => {
      if (req.url?.includes('redirect')) {
        // A redirect to another host (another origin: the second local server).
        res.writeHead(307, { location: `http://localhost:${other.port}/v1/chat/completions` });
        res.end();
        return;
      }
      sse(res);
    });
  });
  afterAll(async () => {
    await close(upstream);
    await close(other);
  });
  beforeEach(() => {
    upstream.seen.length = 0;
    other.seen.length = 0;
  });

  it('sends an allowed, bound credential to its host', async () => {
    const engine = createOpenAICompatibleEngine(spec(`http://127.0.0.1:${upstream.port}/v1`, 'WEIR_UPSTREAM_K'), { env: { WEIR_UPSTREAM_K: 'sk-up' }, egress: egressPolicyFromEnv({}) });
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    expect(upstream.seen).toEqual([{ path: '/v1/chat/completions', authorization: 'Bearer sk-up' }]);
  });

  it.each([
    ['DATABASE_URL', {}],
    ['WEIR_SIGNING_KEY', {}],
    ['OPENAI_API_KEY', {}], // allowed, but bound to api.openai.com
    ['WEIR_UPSTREAM_K', { WEIR_CREDENTIAL_HOSTS: 'WEIR_UPSTREAM_K=api.example.com' }],
  ])('makes no call at all with the credential %s it may not send here', async (name, policyEnv) => {
    const env = { [name]: 'secret-value' };
    const engine = createOpenAICompatibleEngine(spec(`http://127.0.0.1:${upstream.port}/v1`, name), { env, egress: egressPolicyFromEnv(policyEnv) });
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(error) && error.code).toBe('engine_unavailable');
    expect(upstream.seen).toEqual([]);

    const claude = createAnthropicEngine(
      { kind: 'anthropic', baseUrl: `http://127.0.0.1:${upstream.port}`, upstreamModel: 'c', apiKeyEnv: name, firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 2 },
      { env, egress: egressPolicyFromEnv(policyEnv) },
    );
    const second = await collectEngineEvents(claude, engineRequest(chat));
    expect(isWeirError(second.error) && second.error.code).toBe('engine_unavailable');
    expect(upstream.seen).toEqual([]);
  });

  it('refuses a base URL on a host outside WEIR_UPSTREAM_HOSTS before connecting', async () => {
    const engine = createOpenAICompatibleEngine(spec(`http://127.0.0.1:${upstream.port}/v1`), { egress: egressPolicyFromEnv({ WEIR_UPSTREAM_HOSTS: 'api.openai.com' }) });
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(isWeirError(error) && error.code).toBe('engine_unavailable');
    expect(causes(error)).toContain('127.0.0.1 is not an allowed upstream host');
    expect(upstream.seen).toEqual([]);
  });

  it('does not follow a redirect to another host: the credential never reaches it', async () => {
    const egress = egressPolicyFromEnv({});
    const env = { WEIR_UPSTREAM_K: 'sk-must-stay' };
    const engine = createOpenAICompatibleEngine(spec(`http://127.0.0.1:${upstream.port}/redirect/v1`, 'WEIR_UPSTREAM_K'), { env, egress });
    const { events, error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(events).toEqual([]);
    expect(isWeirError(error)).toBe(true);
    expect(upstream.seen).toEqual([{ path: '/redirect/v1/chat/completions', authorization: 'Bearer sk-must-stay' }]);
    expect(other.seen).toEqual([]);

    const claude = createAnthropicEngine(
      { kind: 'anthropic', baseUrl: `http://127.0.0.1:${upstream.port}/redirect`, upstreamModel: 'c', apiKeyEnv: 'WEIR_UPSTREAM_K', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 2 },
      { env, egress },
    );
    const second = await collectEngineEvents(claude, engineRequest(chat));
    expect(isWeirError(second.error)).toBe(true);
    expect(other.seen).toEqual([]);
  });

  it('refuses at connect a name that resolves to a link-local / metadata address; the same name on loopback connects', async () => {
    const egress = egressPolicyFromEnv({ WEIR_UPSTREAM_HOSTS: 'loopback,*.weir-test.example' });
    const resolvingTo =
      (address: string): LookupFunction =>
      (_host, _options, callback) =>
        callback(null, [{ address, family: address.includes(':') ? 6 : 4 }]);
    const env = { WEIR_UPSTREAM_K: 'sk-up' };
    const url = `http://llm.weir-test.example:${upstream.port}/v1`;

    for (const address of ['169.254.169.254', 'fe80::1']) {
      const engine = createOpenAICompatibleEngine(spec(url, 'WEIR_UPSTREAM_K'), { env, egress, dispatcher: egressDispatcher(egress, resolvingTo(address)) });
      const { error } = await collectEngineEvents(engine, engineRequest(chat));
      expect(isWeirError(error) && { code: error.code, retryable: error.retryable }).toEqual({ code: 'engine_unavailable', retryable: false });
      expect(causes(error)).toContain(`refused to connect to llm.weir-test.example: it resolves to ${address}`);
    }
    expect(upstream.seen).toEqual([]);

    const engine = createOpenAICompatibleEngine(spec(url, 'WEIR_UPSTREAM_K'), { env, egress, dispatcher: egressDispatcher(egress, resolvingTo('127.0.0.1')) });
    const { error } = await collectEngineEvents(engine, engineRequest(chat));
    expect(error).toBeUndefined();
    expect(upstream.seen).toEqual([{ path: '/v1/chat/completions', authorization: 'Bearer sk-up' }]);
  });
});

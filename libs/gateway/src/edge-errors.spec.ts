/**
 * The gateway's answers at its HTTP edge (before any generation): the order of checks
 * (authentication before the body), body faults as OpenAI-shaped 4xx errors, 404/405,
 * x-request-id on every answer, health and readiness, routes matched as express matched them,
 * and the access log's level. Over the real gateway with the in-memory admission.
 */
import { gzipSync } from 'node:zlib';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent } from '@weir/core';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const engine: EngineAdapter = {
  kind: 'fake',
  capacity: { slots: 4, contextTokens: 64 },
  async countInputTokens() {
    return 2;
  },
  async *generate(): AsyncIterable<EngineEvent> {
    yield { type: 'delta', text: 'hi', tokens: 1 };
    yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: 1 }, usageSource: 'reported' };
  },
  async close() {},
};

describe('gateway edge', () => {
  let gw: TestGateway;
  const lines: { level: string; obj: Json; msg?: string }[] = [];
  let debugEnabled = false;
  beforeAll(async () => {
    gw = await startTestGateway({
      config: twoTenantConfig(),
      engine,
      admission: createInMemoryAdmission({ tenants: twoTenantConfig().tenants }),
      logger: {
        info: (obj, msg) => void lines.push({ level: 'info', obj, msg }),
        warn: () => {},
        error: () => {},
        debug: (obj, msg) => void lines.push({ level: 'debug', obj, msg }),
        isLevelEnabled: (level) => level !== 'debug' || debugEnabled,
      },
    });
  });
  afterAll(() => gw.close());

  const auth = () => ({ Authorization: `Bearer ${gw.key.plaintext}` });
  const raw = (path: string, init: RequestInit) => fetch(`${gw.url}${path}`, init);
  const chat = { model: 'fake', messages: [{ role: 'user', content: 'hi' }] };

  it.each<[string, () => Promise<Response>, number, string]>([
    ['no key, even with a bad body: 401 first', () => raw('/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' }), 401, 'authentication_failed'],
    ['a non-JSON content type: 415', () => raw('/v1/chat/completions', { method: 'POST', headers: { ...auth(), 'content-type': 'text/plain' }, body: 'hello' }), 415, 'unsupported_media_type'],
    ['no content type and a body: 415', () => raw('/v1/chat/completions', { method: 'POST', headers: auth(), body: new Uint8Array([123, 125]) }), 415, 'unsupported_media_type'],
    ['invalid JSON: 400', () => raw('/v1/chat/completions', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json' }, body: '{"model":' }), 400, 'invalid_json'],
    ['a JSON null: 400 must be an object', () => raw('/v1/chat/completions', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json' }, body: 'null' }), 400, 'invalid_request'],
    ['a body over maxBodyBytes: 413', () => raw('/v1/generations', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json' }, body: JSON.stringify({ model_alias: 'fake', input: 'x'.repeat(5000) }) }), 413, 'payload_too_large'],
    ['a body whose Content-Encoding lies: 400', () => raw('/v1/generations', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: '{}' }), 400, 'invalid_request'],
    ['an unknown Content-Encoding: 415', () => raw('/v1/generations', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json', 'content-encoding': 'zstd-x' }, body: '{}' }), 415, 'unsupported_media_type'],
    ['a GET on a POST route: 405', () => raw('/v1/chat/completions', { headers: auth() }), 405, 'method_not_allowed'],
    ['/v1/usage without a usage reader, POST: 405', () => raw('/v1/usage', { method: 'POST', headers: auth() }), 405, 'method_not_allowed'],
    ['an unknown path: 404', () => raw('/v1/nothing', { headers: auth() }), 404, 'not_found'],
  ])('%s', async (_name, send, status, code) => {
    const res = await send();
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    const body: Json = await res.json();
    expect(body.error).toMatchObject({ code });
    expect(body.error.message.length).toBeGreaterThan(10);
  });

  it('names the allowed method in Allow on a 405', async () => {
    const res = await raw('/v1/models', { method: 'POST', headers: auth() });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET');
  });

  it('takes a gzip body, and routes case-insensitively with a trailing slash', async () => {
    const res = await raw('/V1/Chat/Completions/', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: gzipSync(JSON.stringify(chat)) });
    expect(res.status).toBe(200);
    const body: Json = await res.json();
    expect(body.choices[0].message.content).toBe('hi');
  });

  it('echoes a well-formed x-request-id on success and on errors', async () => {
    const ok = await raw('/v1/chat/completions', { method: 'POST', headers: { ...auth(), 'content-type': 'application/json', 'x-request-id': 'client.id:1' }, body: JSON.stringify(chat) });
    expect(ok.headers.get('x-request-id')).toBe('client.id:1');
    await ok.arrayBuffer();
    const bad = await raw('/v1/nothing', { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(bad.headers.get('x-request-id')).toMatch(/^req_/);
    await bad.arrayBuffer();
  });

  it('answers /healthz and /readyz without a key, and HEAD with no body', async () => {
    expect(await (await raw('/healthz', {})).json()).toEqual({ status: 'ok' });
    expect(await (await raw('/readyz', {})).json()).toMatchObject({ status: 'ready' });
    const head = await raw('/healthz', { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  it('writes the access log at debug by default: nothing at info, one line per request with debug on', async () => {
    lines.length = 0;
    await (await raw('/v1/models', { headers: auth() })).arrayBuffer();
    expect(lines.filter((l) => l.msg === 'request')).toEqual([]);
    debugEnabled = true;
    try {
      await (await raw('/v1/models', { headers: auth() })).arrayBuffer();
      await new Promise((r) => setTimeout(r, 20));
      const access = lines.filter((l) => l.msg === 'request');
      expect(access).toHaveLength(1);
      expect(access[0]).toMatchObject({ level: 'debug', obj: { method: 'GET', path: '/v1/models', status: 200, tenant: 't', app: 'a' } });
      expect(JSON.stringify(access[0].obj)).not.toContain(gw.key.plaintext);
    } finally {
      debugEnabled = false;
    }
  });

  it('logs the route pattern, never the raw path the client sent (issue 14, part 10)', async () => {
    lines.length = 0;
    debugEnabled = true;
    try {
      const sentinel = 'SENTINEL_path_prompt_5b1e';
      await (await raw(`/v1/${sentinel}?q=${sentinel}`, { headers: auth() })).arrayBuffer();
      await (await raw(`/v1/models/${sentinel}`, { headers: auth() })).arrayBuffer();
      await new Promise((r) => setTimeout(r, 20));
      const access = lines.filter((l) => l.msg === 'request');
      expect(access.map((l) => (l.obj as { path?: string }).path)).toEqual(['(unmatched)', '/v1/models/:id']);
      expect(JSON.stringify(lines)).not.toContain(sentinel);
    } finally {
      debugEnabled = false;
    }
  });
});

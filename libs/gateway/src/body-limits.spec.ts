/**
 * Bodies a parser chokes on (issue 14, part 3; docs/security.md §3), sent over HTTP to a running
 * gateway: 100,000-deep arrays and objects, a body over the size limit (plain and as a gzip
 * bomb), duplicate keys at the top and nested, unknown fields on the OpenAI routes, and the
 * fields clients send that Weir ignores — each with and without an `Idempotency-Key`. Every
 * refusal is a 4xx naming the limit, key or field; nothing is logged as a fault; the key of a
 * refused request stays free; and the process answers a normal request after each.
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

const DEEP = 100_000;
const deepArrays = '['.repeat(DEEP) + ']'.repeat(DEEP);
const deepObjects = '{"a":'.repeat(DEEP) + '1' + '}'.repeat(DEEP);
const chat = { model: 'fake', messages: [{ role: 'user', content: 'hi' }] };
const chatText = JSON.stringify(chat);
/** A valid chat body with `deep` spliced in as the value of `field` (inside the JSON text: no JS object that deep exists). */
const chatWith = (field: string, deep: string) => `${chatText.slice(0, -1)},${JSON.stringify(field)}:${deep}}`;

describe('bodies a parser chokes on', () => {
  let gw: TestGateway;
  const faults: unknown[] = [];
  let n = 0;
  const newKey = () => `body-limits-${++n}`;

  beforeAll(async () => {
    const config = twoTenantConfig();
    config.defaults.maxBodyBytes = 1 << 20; // the default 1 MiB (the test config's 4 KiB would stop the deep bodies by size)
    gw = await startTestGateway({
      config,
      engine,
      admission: createInMemoryAdmission({ tenants: config.tenants }),
      logger: { info() {}, warn() {}, error: (obj) => void faults.push(obj) },
    });
  });
  afterAll(() => gw.close());

  const send = (path: string, body: string | Uint8Array, headers: Record<string, string> = {}) =>
    fetch(`${gw.url}${path}`, { method: 'POST', headers: { Authorization: `Bearer ${gw.key.plaintext}`, 'content-type': 'application/json', ...headers }, body });

  /** A normal request (with a fresh key or none) and /healthz still answer: the process is healthy. */
  const stillHealthy = async () => {
    const ok = await send('/v1/chat/completions', chatText);
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as Json).choices[0].message.content).toBe('hi');
    const health = await fetch(`${gw.url}/healthz`);
    expect(health.status).toBe(200);
    await health.arrayBuffer();
  };

  const ROUTES = ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/generations'];
  const KEYED = [
    ['without an Idempotency-Key', false],
    ['with an Idempotency-Key', true],
  ] as const;

  describe.each(KEYED)('%s', (_label, keyed) => {
    /**
     * Sends `body`, expects `status` and `code` with a message matching `message`, then checks
     * that nothing was logged as a fault, that the same key (if any) still serves a normal
     * request, and that the process is healthy.
     */
    const refused = async (path: string, body: string | Uint8Array, status: number, code: string, message: RegExp, param?: string, headers: Record<string, string> = {}) => {
      const key = keyed ? newKey() : undefined;
      const res = await send(path, body, { ...headers, ...(key ? { 'idempotency-key': key } : {}) });
      expect(res.status).toBe(status);
      const { error }: Json = await res.json();
      expect(error.code).toBe(code);
      expect(error.message).toMatch(message);
      if (param !== undefined) expect(error.param).toBe(param);
      expect(faults).toEqual([]);
      if (key) {
        // The refused body never claimed the key: the same key runs a normal request.
        const again = await send('/v1/chat/completions', chatText, { 'idempotency-key': key });
        expect(again.status).toBe(200);
        expect(again.headers.get('idempotent-replayed')).toBeNull();
        await again.arrayBuffer();
      }
      await stillHealthy();
    };

    it.each(ROUTES)('refuses 100,000 nested arrays on %s with a 400 naming the depth limit', async (path) => {
      await refused(path, deepArrays, 400, 'invalid_request', /nests deeper than 64 levels/);
    });

    it.each(ROUTES)('refuses 100,000 nested objects on %s with a 400 naming the depth limit', async (path) => {
      await refused(path, deepObjects, 400, 'invalid_request', /nests deeper than 64 levels/);
    });

    it('refuses a valid chat body hiding 100,000 levels in an ignored field (metadata)', async () => {
      await refused('/v1/chat/completions', chatWith('metadata', deepObjects), 400, 'invalid_request', /nests deeper than 64 levels/);
    });

    it('refuses 65 levels in a tool’s parameters schema, and lets 64 through the edge', async () => {
      // body (1) → tools (2) → tool (3) → function (4) → parameters (5) → …: the deepest object at `deepest`.
      const tool = (deepest: number) => ({ type: 'function', function: { name: 'f', parameters: JSON.parse('{"a":'.repeat(deepest - 5) + '{}' + '}'.repeat(deepest - 5)) } });
      await refused('/v1/chat/completions', JSON.stringify({ ...chat, tools: [tool(65)] }), 400, 'invalid_request', /nests deeper than 64 levels of arrays and objects \(at \$\.tools\[0\]\.function\.parameters\.a/);
      // 64 levels pass the edge (this revision then refuses tools: a 400 about tools, not depth).
      const ok = await send('/v1/chat/completions', JSON.stringify({ ...chat, tools: [tool(64)] }));
      expect(ok.status).toBe(400);
      expect(((await ok.json()) as Json).error.message).toMatch(/cannot call tools/);
    });

    it.each(ROUTES)('refuses a body over the size limit on %s with a 413 naming it', async (path) => {
      const big = JSON.stringify({ ...chat, messages: [{ role: 'user', content: 'x'.repeat((1 << 20) + 10) }] });
      await refused(path, big, 413, 'payload_too_large', /exceeds 1 MiB/);
    });

    it('refuses a gzip body that inflates past the size limit (a small upload) with a 413', async () => {
      const bomb = gzipSync(JSON.stringify({ ...chat, messages: [{ role: 'user', content: ' '.repeat(8 << 20) }] }));
      expect(bomb.length).toBeLessThan(64 << 10);
      await refused('/v1/chat/completions', bomb, 413, 'payload_too_large', /exceeds 1 MiB/, undefined, { 'content-encoding': 'gzip' });
    });

    it.each(ROUTES)('refuses a duplicate top-level key on %s, naming it', async (path) => {
      await refused(path, '{"model":"fake","model":"other","messages":[]}', 400, 'invalid_request', /Duplicate key "model" in the request body/, 'model');
    });

    it('refuses a duplicate key nested in a message, naming it and where', async () => {
      await refused('/v1/chat/completions', '{"model":"fake","messages":[{"role":"user","content":"hi","role":"system"}]}', 400, 'invalid_request', /Duplicate key "role" in `messages\[0\]`/, 'messages[0].role');
    });

    it('refuses a duplicate key spelled with an escape (what a second reader would see differently)', async () => {
      await refused('/v1/chat/completions', '{"model":"fake","\\u006dodel":"other","messages":[{"role":"user","content":"hi"}]}', 400, 'invalid_request', /Duplicate key "model"/, 'model');
    });

    it.each([
      ['/v1/chat/completions', chat],
      ['/v1/completions', { model: 'fake', prompt: 'hi' }],
      ['/v1/responses', { model: 'fake', input: 'hi' }],
    ])('refuses an unknown top-level field on %s, naming it', async (path, body) => {
      await refused(path, JSON.stringify({ ...body, frobnicate: true }), 400, 'invalid_request', /unknown field `frobnicate`/, 'frobnicate');
    });

    it('refuses an unknown field in a chat message, naming it', async () => {
      await refused('/v1/chat/completions', JSON.stringify({ ...chat, messages: [{ role: 'user', content: 'hi', frobnicate: 1 }] }), 400, 'invalid_request', /unknown field\(s\) `frobnicate`/, 'messages[0].frobnicate');
    });

    it.each([
      ['functions', { functions: [{ name: 'f', parameters: {} }] }, /deprecated: send `tools`/],
      ['audio', { audio: { voice: 'alloy', format: 'wav' } }, /audio output is not supported/],
      ['reasoning_effort', { reasoning_effort: 'low' }, /reasoning options are not supported/],
    ])('refuses %s, a known OpenAI field Weir does not implement, saying why', async (field, extra, message) => {
      await refused('/v1/chat/completions', JSON.stringify({ ...chat, ...extra }), 400, 'invalid_request', message, field);
    });

    it.each([
      ['frequency_penalty 0.5', { frequency_penalty: 0.5 }, 'frequency_penalty', /frequency_penalty is not supported; send 0/],
      ['logit_bias with entries', { logit_bias: { '50256': -100 } }, 'logit_bias', /logit_bias is not supported/],
      ['audio output in modalities', { modalities: ['text', 'audio'] }, 'modalities[1]', /only text output is supported/],
    ])('refuses %s (an ignored field only at its neutral value)', async (_name, extra, param, message) => {
      await refused('/v1/chat/completions', JSON.stringify({ ...chat, ...extra }), 400, 'invalid_request', message, param);
    });

    const accepted = async (path: string, body: unknown) => {
      const key = keyed ? newKey() : undefined;
      const res = await send(path, JSON.stringify(body), key ? { 'idempotency-key': key } : {});
      const answer: Json = await res.json();
      expect({ status: res.status, error: answer.error ?? undefined }).toEqual({ status: 200, error: undefined });
      return answer;
    };

    it('accepts and ignores the fields OpenAI clients send that change nothing here (chat completions)', async () => {
      const answer = await accepted('/v1/chat/completions', {
        model: 'fake',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
          // A previous answer sent back as the SDKs return it.
          { role: 'assistant', content: 'hello', refusal: null, annotations: [], audio: null, function_call: null },
          { role: 'user', content: 'again' },
        ],
        user: 'end-user-1',
        store: false,
        metadata: { team: 'search' },
        service_tier: 'auto',
        parallel_tool_calls: true,
        prediction: { type: 'content', content: 'hi' },
        modalities: ['text'],
        prompt_cache_key: 'k1',
        prompt_cache_retention: 'in-memory',
        safety_identifier: 'hash-of-user',
        frequency_penalty: 0,
        presence_penalty: 0,
        logit_bias: {},
        n: 1,
        logprobs: false,
        stream: false,
        stream_options: null,
      });
      expect(answer.choices[0].message.content).toBe('hi');
    });

    it('accepts and ignores them on the legacy completions and the Responses API too', async () => {
      expect((await accepted('/v1/completions', { model: 'fake', prompt: 'hi', max_tokens: 4, user: 'u', frequency_penalty: 0, presence_penalty: 0, logit_bias: {}, n: 1 })).choices[0].text).toBe('hi');
      const response = await accepted('/v1/responses', { model: 'fake', input: 'hi', user: 'u', store: false, metadata: { a: 'b' }, service_tier: 'auto', prompt_cache_key: 'k', safety_identifier: 's' });
      expect(response.output[0].content[0].text).toBe('hi');
    });
  });

  it('takes a streamed chat with the ignored stream option include_obfuscation', async () => {
    const res = await send('/v1/chat/completions', JSON.stringify({ ...chat, stream: true, stream_options: { include_usage: true, include_obfuscation: false } }));
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('[DONE]');
  });
});

describe('a configured depth limit (defaults.max_body_depth)', () => {
  it('refuses one level beyond it, naming it, and takes a body at it', async () => {
    const config = twoTenantConfig();
    config.defaults.maxBodyDepth = 4;
    const gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }) });
    try {
      // body (1) → metadata (2) → a (3) → b (4) → c (5): one level too deep.
      const deep = await gw.post('/v1/chat/completions', { ...chat, metadata: { a: { b: { c: { d: 'x' } } } } });
      expect(deep.status).toBe(400);
      expect(((await deep.json()) as Json).error.message).toMatch(/nests deeper than 4 levels of arrays and objects \(at \$\.metadata\.a\.b\.c\)/);
      // body (1) → response_format (2) → json_schema (3) → schema (4): at the limit, it passes the edge (and this revision then refuses structured output).
      const atLimit = await gw.post('/v1/chat/completions', { ...chat, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object' } } } });
      expect(atLimit.status).toBe(400);
      expect(((await atLimit.json()) as Json).error.message).toMatch(/cannot constrain its output/);
      const ok = await gw.post('/v1/chat/completions', chat);
      expect(ok.status).toBe(200);
      await ok.arrayBuffer();
    } finally {
      await gw.close();
    }
  });
});

/**
 * Issue 14 part 1, attacked on the running gateway: a tenant sends the worst schemas it can
 * (patterns that backtrack exponentially on a backtracking engine, patternProperties likewise,
 * a 60 KiB schema of patterned properties that takes ajv most of a second to compile) and an
 * output that triggers them, while `/healthz` and another tenant's generation must keep
 * answering. Bounds are generous (seconds): on the engine before the fix the event loop was
 * held for minutes.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, EngineRequest, RevisionSpec } from '@weir/core';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** An output that backtracking engines take exponential time to refuse against `^(a+)+$` and `(a|a)*b`. */
const EVIL_TEXT = 'a'.repeat(5_000) + '!';

/** An engine that answers the text its last message names (`reply:<text>` is `{"s": text}`; `key:<text>` is `{text: 1}`), else "hello". */
function echoEngine(): EngineAdapter {
  return {
    kind: 'echo',
    capacity: { slots: 8, contextTokens: 64 },
    async countInputTokens() {
      return 3;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      const last = request.input.kind === 'text' ? request.input.text : request.input.kind === 'chat' ? (request.input.messages.at(-1)?.content ?? '') : '';
      const text = last === 'evil-value' ? JSON.stringify({ s: EVIL_TEXT }) : last === 'evil-key' ? JSON.stringify({ [EVIL_TEXT]: 1 }) : 'hello';
      yield { type: 'delta', text, tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: 1 }, usageSource: 'reported' };
    },
    async close() {},
  };
}

const jsonCapable: RevisionSpec = { ...fakeRevision(), capabilities: { streaming: true, tools: false, jsonOutput: true } };

/** 60 KiB of properties with patterns: ajv compiles it in about 0.6 s (on the main thread before issue 14). */
function hugeSchema(salt: string): object {
  const properties = Object.fromEntries(Array.from({ length: 1_100 }, (_, i) => [`${salt}${i}`, { type: 'string', pattern: `^[a-z]{1,${(i % 50) + 1}}$` }]));
  return { type: 'object', properties };
}

describe('untrusted patterns never block the event loop (issue 14)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    const config = twoTenantConfig(jsonCapable);
    config.defaults = { ...config.defaults, maxBodyBytes: 256 * 1024 };
    gw = await startTestGateway({ config, engine: echoEngine(), admission: createInMemoryAdmission({ tenants: config.tenants }) });
  });
  afterAll(() => gw.close());

  /** Polls `/healthz` and runs tenant `u`'s generations until `attack` settles; returns what they saw. */
  async function whileAttacking(attack: Promise<Response>) {
    let done = false;
    const healthz: number[] = [];
    const others: { status: number; ms: number }[] = [];
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const poll = (async () => {
      while (!done) {
        const started = performance.now();
        const res = await fetch(`${gw.url}/healthz`, { signal: AbortSignal.timeout(20_000) });
        if (res.status === 200) healthz.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const other = (async () => {
      while (!done) {
        const started = performance.now();
        const res = await gw.post('/v1/chat/completions', { model: 'fake', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }, {}, gw.otherKey.plaintext);
        await res.text();
        others.push({ status: res.status, ms: performance.now() - started });
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const res = await attack;
    const body = (await res.json()) as { error?: { code: string; message: string } };
    // Let the watchers see the loop after the attack too.
    await new Promise((r) => setTimeout(r, 100));
    done = true;
    await Promise.all([poll, other]);
    delay.disable();
    return { res, body, healthz, others, maxStallMs: delay.max / 1e6 };
  }

  it.each<[string, string, object, string]>([
    ['pattern ^(a+)+$ on /v1/responses', '/v1/responses', { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } }, 'evil-value'],
    ['pattern (a|a)*b on /v1/responses', '/v1/responses', { type: 'object', properties: { s: { type: 'string', pattern: '(a|a)*b' } } }, 'evil-value'],
    ['patternProperties ^(a+)+$ on /v1/responses', '/v1/responses', { type: 'object', patternProperties: { '^(a+)+$': { type: 'integer' } }, additionalProperties: false }, 'evil-key'],
    ['pattern ^(a|aa)*$ in response_format on /v1/chat/completions', '/v1/chat/completions', { type: 'object', properties: { s: { type: 'string', pattern: '^(a|aa)*$' } } }, 'evil-value'],
  ])('%s: the output is judged (output_invalid) while /healthz and tenant u keep answering', async (_name, path, schema, prompt) => {
    const body =
      path === '/v1/responses'
        ? { model: 'fake', use_case: 'x', max_tokens: 8, output_schema: schema, messages: [{ role: 'user', content: prompt }] }
        : { model: 'fake', max_tokens: 8, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } }, messages: [{ role: 'user', content: prompt }] };
    const seen = await whileAttacking(gw.post(path, body));
    expect(seen.res.status).toBe(502);
    expect(seen.body.error).toMatchObject({ code: 'output_invalid', message: expect.stringMatching(/must match pattern|must NOT have additional properties/) });
    expect(seen.body.error?.message).not.toContain('aaaa');
    expect(seen.healthz.length).toBeGreaterThan(0);
    expect(Math.max(...seen.healthz)).toBeLessThan(5_000);
    expect(seen.others.length).toBeGreaterThan(0);
    expect(seen.others.every((o) => o.status === 200 && o.ms < 5_000)).toBe(true);
    expect(seen.maxStallMs).toBeLessThan(2_000);
  });

  it('a 60 KiB schema of patterned properties compiles off the loop: /healthz and tenant u keep answering', async () => {
    const seen = await whileAttacking(gw.post('/v1/responses', { model: 'fake', use_case: 'x', max_tokens: 8, output_schema: hugeSchema('p'), messages: [{ role: 'user', content: 'hi' }] }));
    // "hello" is not JSON: the schema compiled, the generation ran and its output was judged.
    expect(seen.res.status).toBe(502);
    expect(seen.body.error).toMatchObject({ code: 'output_invalid' });
    expect(seen.healthz.length).toBeGreaterThan(0);
    expect(seen.others.every((o) => o.status === 200)).toBe(true);
    expect(seen.maxStallMs).toBeLessThan(2_000);
  });

  it('refuses a pattern RE2 cannot run in linear time with a 400 saying why', async () => {
    const res = await gw.post('/v1/responses', { model: 'fake', use_case: 'x', max_tokens: 8, output_schema: { type: 'string', pattern: '^(a)\\1$' }, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { param: string; message: string } };
    expect(error.param).toBe('output_schema');
    expect(error.message).toMatch(/the pattern "\^\(a\)\\\\1\$" is not supported: .*RE2, which has no lookaround or backreferences/);
  });
});

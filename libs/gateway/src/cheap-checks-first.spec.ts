/**
 * Issue 14 part 2, on the running gateway: cheap checks come before expensive work. A caller
 * that is refused (a bad key, or a tenant admission just refused for its requests window) never
 * reaches the tokenizer or the schema compiler, however big its body or evil its schema; and a
 * megabyte of prompt on a revision whose tokenizer runs in-process (js-tiktoken) leaves
 * `/healthz` answering (generous bounds: before the fix a megabyte of one "word" held the event
 * loop for minutes).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, RevisionSpec } from '@weir/core';
import { createOpenAICompatibleEngine, tiktokenTokenizer } from '@weir/engines';
import { createMemoryIdempotencyStore } from './idempotency';
import { createRevocations } from './revocations';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** An engine that answers "hello" and counts its token counts. */
function countingEngine(): EngineAdapter & { counts: number } {
  const engine = {
    kind: 'counting',
    counts: 0,
    capacity: { slots: 8, contextTokens: 64 },
    async countInputTokens() {
      engine.counts++;
      return 3;
    },
    async *generate(): AsyncIterable<EngineEvent> {
      yield { type: 'delta', text: 'hello', tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: 1 }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

/** A schema whose compilation fails (RE2 has no backreferences): a 400 tells that the compiler ran. */
const UNCOMPILABLE = { type: 'object', properties: { s: { type: 'string', pattern: '^(a)\\1$' } } };
const BIG_PROMPT = 'word '.repeat(50_000);

describe('cheap checks before expensive work (issue 14)', () => {
  describe('a refused caller never reaches the tokenizer or the schema compiler', () => {
    let gw: TestGateway;
    let engine: ReturnType<typeof countingEngine>;
    const revocations = createRevocations();
    const memory = createMemoryIdempotencyStore();
    let claims = 0;
    const idempotency = {
      ...memory,
      claim: (c: Parameters<typeof memory.claim>[0]) => {
        claims++;
        return memory.claim(c);
      },
    };
    beforeAll(async () => {
      const revision: RevisionSpec = { ...fakeRevision(), capabilities: { streaming: true, tools: false, jsonOutput: true } };
      const config = twoTenantConfig(revision);
      config.tenants = config.tenants.map((t) => (t.id === 't' ? { ...t, limits: { ...t.limits, requestsPerMinute: 1 } } : t));
      config.defaults = { ...config.defaults, maxBodyBytes: 512 * 1024 };
      engine = countingEngine();
      gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }), revocations, idempotency });
    });
    afterAll(() => gw.close());

    const chat = (content: string, extra: object = {}, key?: string) => gw.post('/v1/chat/completions', { model: 'fake', max_tokens: 4, messages: [{ role: 'user', content }], ...extra }, {}, key);

    it('a bad key with a big body and an uncompilable schema: 401, nothing counted or compiled', async () => {
      const before = engine.counts;
      const res = await chat(BIG_PROMPT, { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: UNCOMPILABLE } } }, 'wk_nope_' + 'x'.repeat(43));
      expect(res.status).toBe(401);
      expect(engine.counts).toBe(before);
    });

    it('a kill-switched tenant with a big body and an uncompilable schema: 503 kill_switch, nothing counted or compiled', async () => {
      const before = engine.counts;
      revocations.setKillSwitch('u', true);
      try {
        const res = await chat(BIG_PROMPT, { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: UNCOMPILABLE } } }, gw.otherKey.plaintext);
        expect(res.status).toBe(503);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe('kill_switch');
      } finally {
        revocations.setKillSwitch('u', false);
      }
      expect(engine.counts).toBe(before);
    });

    it('a tenant whose requests window admission just found empty is refused before counting and compiling', async () => {
      expect((await chat('hi')).status).toBe(200);
      // Admission refuses the second request of the minute (after counting it: it had no memory yet).
      const second = await chat('hi');
      expect(second.status).toBe(429);
      const counted = engine.counts;
      // Now a big prompt with a schema the compiler would refuse with a 400: the 429 comes first.
      for (const res of [
        await chat(BIG_PROMPT, { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: UNCOMPILABLE } } }),
        await gw.post('/v1/responses', { model: 'fake', use_case: 'x', max_tokens: 4, output_schema: UNCOMPILABLE, messages: [{ role: 'user', content: BIG_PROMPT }] }),
        await gw.post('/v1/responses', { model: 'fake', max_output_tokens: 4, input: BIG_PROMPT, text: { format: { type: 'json_schema', name: 'x', schema: UNCOMPILABLE } } }),
        // With an idempotency key: refused before the body is hashed and the key claimed.
        await gw.post('/v1/chat/completions', { model: 'fake', max_tokens: 4, messages: [{ role: 'user', content: BIG_PROMPT }] }, { 'Idempotency-Key': 'retry-me-1' }),
      ]) {
        expect(res.status).toBe(429);
        const { error } = (await res.json()) as { error: { code: string; message: string } };
        expect(error.code).toBe('rate_limited');
        expect(error.message).toMatch(/^recently refused: Rate limit reached/);
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      }
      expect(engine.counts).toBe(counted);
      // The idempotency key was never claimed (nor the body hashed for it).
      expect(claims).toBe(0);
      // Another tenant is not held back.
      expect((await chat('hi', {}, gw.otherKey.plaintext)).status).toBe(200);
    });
  });

  describe('a megabyte of prompt does not stall the event loop', () => {
    let gw: TestGateway;
    beforeAll(async () => {
      // A hosted revision counted with js-tiktoken in this process (its upstream is never reached:
      // the input is refused as longer than the context window first).
      const revision = fakeRevision();
      const spec = { ...(revision.engine as Extract<RevisionSpec['engine'], { kind: 'openai-compatible' }>), tokenizer: 'cl100k_base' as const };
      const config = twoTenantConfig({ ...revision, engine: spec });
      config.defaults = { ...config.defaults, maxBodyBytes: 2 * 1024 * 1024 };
      await tiktokenTokenizer('cl100k_base').load();
      gw = await startTestGateway({ config, engine: createOpenAICompatibleEngine(spec), admission: createInMemoryAdmission({ tenants: config.tenants }) });
    });
    afterAll(() => gw.close());

    it.each<[string, string]>([
      ['one 1 MiB word', 'a'.repeat(1024 * 1024)],
      ['1 MiB of prose', 'the quick brown fox jumps over the lazy dog '.repeat(24_000)],
      ['1 MiB of random letters in 40-letter words', Array.from({ length: 25_000 }, (_, i) => String.fromCharCode(...Array.from({ length: 40 }, (_, j) => 97 + ((i * 31 + j * 17 + ((i * j) % 7)) % 26)))).join(' ')],
    ])('%s: refused as too long while /healthz keeps answering', async (_name, prompt) => {
      const delay = monitorEventLoopDelay({ resolution: 10 });
      delay.enable();
      let done = false;
      const healthz: number[] = [];
      const poll = (async () => {
        while (!done) {
          const started = performance.now();
          const res = await fetch(`${gw.url}/healthz`, { signal: AbortSignal.timeout(20_000) });
          if (res.status === 200) healthz.push(performance.now() - started);
          await new Promise((r) => setTimeout(r, 10));
        }
      })();
      const res = await gw.post('/v1/chat/completions', { model: 'fake', max_tokens: 4, messages: [{ role: 'user', content: prompt }] });
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      done = true;
      await poll;
      delay.disable();
      expect(res.status).toBe(400);
      expect(error.code).toBe('context_length_exceeded');
      expect(error.message).toMatch(/^The input is \d+ tokens or more; model 'fake' accepts at most 63 input tokens/);
      expect(healthz.length).toBeGreaterThan(0);
      expect(Math.max(...healthz)).toBeLessThan(2_000);
      expect(delay.max / 1e6).toBeLessThan(1_000);
    });
  });
});

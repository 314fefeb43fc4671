/**
 * Use cases as the gateway seed defines them (issue 16 item 7), through the running gateway:
 * a request naming only its use case is routed by that use case's chain (primary, pinned
 * version, fallback on a failing upstream) on `/v1/responses` (`{use_case, messages,
 * max_tokens}`) and `/v1/chat/completions` (`use_case` or `x-weir-use-case`); naming a model
 * works as before; an undefined use case without a model is a 400 that reaches nothing; a use
 * case's budget and tokens per minute refuse it (429) while the tenant's other use cases run.
 */
import { createInMemoryAdmission } from '@weir/admission';
import { type EngineAdapter, type PlatformConfig, type RevisionSpec, type UseCasePolicy, WeirError } from '@weir/core';
import { createScriptedEngine, type ScriptedEngine } from '@weir/testing';
import { createContentPolicies } from './content-policy';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const MAIN: RevisionSpec = { ...fakeRevision(), id: 'main@1' };
const BACKUP: RevisionSpec = { ...fakeRevision(), id: 'backup@1' };

/** Alias `chat` → main@1 (no fallbacks of its own); tenant `t` with `useCases`. */
function config(useCases: UseCasePolicy[]): PlatformConfig {
  const base = twoTenantConfig(MAIN);
  return {
    ...base,
    revisions: [MAIN, BACKUP],
    aliases: [{ name: 'chat', targets: [{ revision: 'main@1', weight: 1 }] }],
    tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, useCases } : t)),
  };
}

const USE_CASES: UseCasePolicy[] = [
  { name: 'summaries', model: 'chat', fallbacks: ['backup@1'], limits: {} },
  { name: 'drafts', model: 'chat', pin: 'backup@1', limits: {} },
  // Worst case of one request: 7 input + 8 output tokens at $1/Mtok = $0.000015; settled at 7 + 4.
  { name: 'capped', model: 'chat', limits: { monthlyBudgetUsd: 0.00002 } },
  { name: 'tpm', model: 'chat', limits: { tokensPerMinute: 20 } },
];

/** An upstream that is down: every generation fails before its first token (retryable). */
function downEngine(): EngineAdapter & { calls: number } {
  const engine = {
    kind: 'down',
    capacity: { slots: 4, contextTokens: 4096 },
    calls: 0,
    async countInputTokens() {
      return 7;
    },
    async *generate() {
      engine.calls++;
      throw new WeirError('upstream_unavailable', 'the scripted upstream is down', { retryable: true });
    },
    async close() {},
  };
  return engine;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies are read loosely
const json = async (res: Response): Promise<any> => res.json();
const MESSAGES = [{ role: 'user', content: 'Summarise the ticket.' }];

let gw: TestGateway | undefined;
let engine: ScriptedEngine;
async function start(engines: Record<string, EngineAdapter> = {}, useCases = USE_CASES, tune: (c: PlatformConfig) => PlatformConfig = (c) => c): Promise<TestGateway> {
  const c = tune(config(useCases));
  engine = createScriptedEngine();
  gw = await startTestGateway({ config: c, engine, engines, admission: createInMemoryAdmission({ tenants: c.tenants }), contentPolicies: createContentPolicies(c) });
  return gw;
}
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe('POST /v1/responses with {use_case, messages, max_tokens} and no model', () => {
  it('is routed by the use case’s primary model and says which revision answered', async () => {
    const g = await start();
    const res = await g.post('/v1/responses', { use_case: 'summaries', messages: MESSAGES, max_tokens: 8 });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({ object: 'weir.response', model_used: 'main@1', fallback: false, finish_reason: 'stop' });
    expect(body.output_text).toBe('t0 t1 t2 t3 ');
    expect(g.records.at(-1)).toMatchObject({ modelAlias: 'chat', modelRevision: 'main@1', useCase: 'summaries' });
  });

  it('a pinned use case goes to its pinned revision, not the alias’s', async () => {
    const g = await start();
    const body = await json(await g.post('/v1/responses', { use_case: 'drafts', messages: MESSAGES, max_tokens: 8 }));
    expect(body.model_used).toBe('backup@1');
  });

  it('falls back along the use case’s chain when its primary’s upstream fails before the first token', async () => {
    const down = downEngine();
    const g = await start({ 'main@1': down });
    const res = await g.post('/v1/responses', { use_case: 'summaries', messages: MESSAGES, max_tokens: 8 });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({ model_used: 'backup@1', fallback: true });
    expect(down.calls).toBeGreaterThan(0);
    // The alias alone has no chain: the same request by model fails.
    const plain = await g.post('/v1/responses', { model: 'chat', use_case: 'other', messages: MESSAGES, max_tokens: 8 });
    expect(plain.status).toBe(503);
  });

  it('streams Weir’s events, the end naming the model used', async () => {
    const g = await start();
    const res = await g.post('/v1/responses', { use_case: 'summaries', messages: MESSAGES, max_tokens: 8, stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/event: start/);
    expect(text).toMatch(/event: end\ndata: .*"model_used":"main@1"/);
  });

  it('a use case the tenant does not define, without a model, is a 400 listing the ones it does; nothing reaches the upstream', async () => {
    const g = await start();
    const res = await g.post('/v1/responses', { use_case: 'nope', messages: MESSAGES, max_tokens: 8 });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.error.param).toBe('use_case');
    expect(body.error.message).toMatch(/Use case 'nope' is not defined in your tenant's policy \(it defines 'summaries', 'drafts', 'capped', 'tpm'\)/);
    expect(body.error.message).toMatch(/send `model`/);
    // Tenant `u` defines none.
    const other = await json(await g.post('/v1/responses', { use_case: 'summaries', messages: MESSAGES, max_tokens: 8 }, {}, g.otherKey.plaintext));
    expect(other.error.message).toMatch(/it defines none/);
    expect(engine.requests).toHaveLength(0);
    expect(g.records).toHaveLength(0);
  });

  it('naming a model keeps working, with any use case label', async () => {
    const g = await start();
    const body = await json(await g.post('/v1/responses', { model: 'chat', use_case: 'anything', messages: MESSAGES, max_tokens: 8 }));
    expect(body.model_used).toBe('main@1');
    expect(g.records.at(-1)?.useCase).toBe('anything');
  });
});

describe('POST /v1/chat/completions by use case', () => {
  it('takes `use_case` in the body or `x-weir-use-case`, without a model, and answers with the alias as model', async () => {
    const g = await start();
    const a = await g.post('/v1/chat/completions', { use_case: 'drafts', messages: MESSAGES, max_tokens: 8 });
    expect(a.status).toBe(200);
    expect(a.headers.get('x-weir-model-revision')).toBe('backup@1');
    expect((await json(a)).model).toBe('chat');
    const b = await g.post('/v1/chat/completions', { messages: MESSAGES, max_tokens: 8 }, { 'x-weir-use-case': 'summaries' });
    expect(b.status).toBe(200);
    expect(b.headers.get('x-weir-model-revision')).toBe('main@1');
    expect(g.records.map((r) => r.useCase)).toEqual(['drafts', 'summaries']);
  });

  it('without a model or a use case is a 400 saying to send either', async () => {
    const g = await start();
    const res = await g.post('/v1/chat/completions', { messages: MESSAGES });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.error.param).toBe('model');
    expect(body.error.message).toMatch(/`model` is required.*or send `use_case`/);
  });
});

describe('POST /v1/responses in OpenAI’s shape ({input}) by use case', () => {
  it('takes `use_case` in the body or `x-weir-use-case` without a model, routes by its chain and records it', async () => {
    const g = await start();
    const a = await g.post('/v1/responses', { use_case: 'drafts', input: 'Summarise the ticket.', max_output_tokens: 8 });
    expect(a.status).toBe(200);
    expect(a.headers.get('x-weir-model-revision')).toBe('backup@1');
    const body = await json(a);
    expect(body).toMatchObject({ object: 'response', model: 'chat', status: 'completed' });
    const b = await g.post('/v1/responses', { input: 'Summarise the ticket.', max_output_tokens: 8 }, { 'x-weir-use-case': 'summaries' });
    expect(b.status).toBe(200);
    expect(b.headers.get('x-weir-model-revision')).toBe('main@1');
    expect(g.records.map((r) => r.useCase)).toEqual(['drafts', 'summaries']);
  });

  it('without a model or a defined use case is a 400 naming the field; nothing reaches the upstream', async () => {
    const g = await start();
    const none = await g.post('/v1/responses', { input: 'hi' });
    expect(none.status).toBe(400);
    expect((await json(none)).error.param).toBe('model');
    const unknown = await g.post('/v1/responses', { input: 'hi', use_case: 'nope' });
    expect(unknown.status).toBe(400);
    expect((await json(unknown)).error.param).toBe('use_case');
    expect(engine.requests).toHaveLength(0);
  });
});

describe('a use case’s limits', () => {
  it('a spent monthly budget refuses the use case with a 429 naming it, while the tenant’s other use cases still run', async () => {
    const g = await start();
    expect((await g.post('/v1/responses', { use_case: 'capped', messages: MESSAGES, max_tokens: 8 })).status).toBe(200);
    const refused = await g.post('/v1/responses', { use_case: 'capped', messages: MESSAGES, max_tokens: 8 });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-should-retry')).toBe('false');
    const body = await json(refused);
    expect(body.error.code).toBe('budget_exhausted');
    expect(body.error.message).toMatch(/'capped' use case's monthly budget of \$0\.00002 is exhausted/);
    expect((await g.post('/v1/responses', { use_case: 'summaries', messages: MESSAGES, max_tokens: 8 })).status).toBe(200);
    expect((await g.post('/v1/chat/completions', { model: 'chat', messages: MESSAGES, max_tokens: 8 })).status).toBe(200);
    // The refused request reached no upstream: three generations ran.
    expect(engine.requests).toHaveLength(3);
  });

  it('tokens per minute per use case: the second request in the minute is refused with a retry hint, other use cases run', async () => {
    const g = await start();
    expect((await g.post('/v1/chat/completions', { use_case: 'tpm', messages: MESSAGES, max_tokens: 8 })).status).toBe(200);
    const refused = await g.post('/v1/chat/completions', { use_case: 'tpm', messages: MESSAGES, max_tokens: 8 });
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const body = await json(refused);
    expect(body.error.code).toBe('rate_limited');
    expect(body.error.message).toMatch(/'tpm' use case's limit of 20 tokens per minute/);
    expect((await g.post('/v1/chat/completions', { use_case: 'summaries', messages: MESSAGES, max_tokens: 8 })).status).toBe(200);
  });
});

describe('a use case’s redaction profile', () => {
  it('redacts that use case’s prompts with its own profile, the tenant’s other traffic with the tenant’s', async () => {
    const g = await start({}, [{ name: 'mail', model: 'chat', limits: {}, redactionProfile: 'emails-only' }], (c) => ({
      ...c,
      redactionProfiles: [{ name: 'emails-only', recognizers: ['email'], replacement: 'tag' }],
      tenants: c.tenants.map((t) => (t.id === 't' ? { ...t, redactionProfile: 'default', redactUpstream: true } : t)),
    }));
    const prompt = 'mail jane.roe@example.org card 4111 1111 1111 1111';
    expect((await g.post('/v1/chat/completions', { use_case: 'mail', messages: [{ role: 'user', content: prompt }], max_tokens: 4 })).status).toBe(200);
    expect((await g.post('/v1/chat/completions', { model: 'chat', messages: [{ role: 'user', content: prompt }], max_tokens: 4 })).status).toBe(200);
    const sent = engine.requests.map((r) => (r.input.kind === 'chat' ? r.input.messages.at(-1)?.content : undefined));
    expect(sent).toEqual(['mail [REDACTED:EMAIL] card 4111 1111 1111 1111', 'mail [REDACTED:EMAIL] card [REDACTED:CARD]']);
  });
});

describe('a pinned use case’s version countdown', () => {
  const NOW = Date.UTC(2026, 11, 1);
  const deprecated = (retiresOn: string) => (c: PlatformConfig): PlatformConfig => ({
    ...c,
    revisions: c.revisions.map((r) => (r.id === 'backup@1' ? { ...r, deprecation: { retiresOn, replacement: 'main@1' } } : r)),
  });

  it('carries the pinned revision’s countdown while it is deprecated', async () => {
    const c = deprecated('2026-12-11')(config(USE_CASES));
    engine = createScriptedEngine();
    gw = await startTestGateway({ config: c, engine, admission: createInMemoryAdmission({ tenants: c.tenants }), wallClock: () => NOW });
    const res = await gw.post('/v1/responses', { use_case: 'drafts', messages: MESSAGES, max_tokens: 8 });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-retires-in-days')).toBe('10');
    expect(res.headers.get('sunset')).toBe(new Date(Date.UTC(2026, 11, 11)).toUTCString());
  });

  it('once retired, refuses the pinned use case naming the pin and its replacement (no silent switch)', async () => {
    const c = deprecated('2026-11-30')(config(USE_CASES));
    engine = createScriptedEngine();
    gw = await startTestGateway({ config: c, engine, admission: createInMemoryAdmission({ tenants: c.tenants }), wallClock: () => NOW });
    const res = await gw.post('/v1/responses', { use_case: 'drafts', messages: MESSAGES, max_tokens: 8 });
    expect(res.status).toBe(404);
    const { error } = await json(res);
    expect(error.code).toBe('model_retired');
    expect(error.message).toMatch(/is pinned to revision 'backup@1' for your tenant, which was retired on 2026-11-30.*replacement is revision 'main@1'/);
    expect(engine.requests).toHaveLength(0);
  });
});

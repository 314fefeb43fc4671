/**
 * Issue 15, item 5, through the running gateway, by reading its log: tenant `t` logs content
 * with the `default` profile, tenant `u` names a profile but does not log content. Prompts carry
 * an e-mail address, a card number and an API key, and the engine echoes the prompt into its
 * answer. The log holds one `content` line per request of `t` with the redacted forms and never
 * the raw values; `u` has no content at all. A failing redactor fails closed (no content line,
 * an error line without content, a failure metric). A tenant with `redactUpstream` sends the
 * redacted prompt upstream and is billed for it.
 */
import { Writable } from 'node:stream';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput, PlatformConfig } from '@weir/core';
import { createLogger } from '@weir/telemetry';
import { createContentPolicies, type ContentPolicies, type TenantContentPolicy } from './content-policy';
import { contentPolicyOptionsFromEnv, redactionMetricsObserver, type RedactionObserver } from './content-log';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const EMAIL = 'jane.roe@example.org';
const CARD = '4111 1111 1111 1111';
const KEY = 'sk-proj-Zx9Qp2Lm7Rt4Vb8Nc1Kd6Hs3';
const RAW = [EMAIL, CARD, KEY, '4111'];
const PROMPT = `mail ${EMAIL} card ${CARD} key ${KEY}`;

const textOf = (input: GenerationInput): string => (input.kind === 'text' ? input.text : input.kind === 'embedding' ? input.items.join(' ') : input.messages.map((m) => m.content).join(' '));
const words = (input: GenerationInput) => textOf(input).split(/\s+/).filter(Boolean).length;

/** An engine that answers with the prompt (so the output carries the PII too) and records what it was sent. */
function echoEngine(): EngineAdapter & { seen: string[]; counted: string[] } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    seen: [] as string[],
    counted: [] as string[],
    async countInputTokens(input: GenerationInput) {
      engine.counted.push(textOf(input));
      return words(input);
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.seen.push(textOf(request.input));
      yield { type: 'delta', text: `you said: ${textOf(request.input)}`, tokens: 3 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: words(request.input), outputTokens: 3 }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

function config(tenants: { t?: object; u?: object }): PlatformConfig {
  const base = twoTenantConfig();
  return { ...base, tenants: base.tenants.map((x) => ({ ...x, ...((x.id === 't' ? tenants.t : tenants.u) ?? {}) })) };
}

/** A gateway whose log is captured in `log.text`. */
async function start(cfg: PlatformConfig, policies: ContentPolicies, observer?: RedactionObserver) {
  const log = { text: '' };
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      log.text += chunk.toString('utf8');
      done();
    },
  });
  const engine = echoEngine();
  const gw = await startTestGateway({
    config: cfg,
    engine,
    admission: createInMemoryAdmission({ tenants: cfg.tenants }),
    logger: createLogger({ name: 'gateway', level: 'debug', destination }),
    contentPolicies: policies,
    ...(observer ? { redaction: observer } : {}),
  });
  return { gw, log, engine };
}

const lines = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
/** Waits until `pred` holds on the log lines (the content log writes on a later turn). */
async function until(log: { text: string }, pred: (ls: Record<string, unknown>[]) => boolean): Promise<Record<string, unknown>[]> {
  for (let i = 0; i < 200; i++) {
    const ls = lines(log.text);
    if (pred(ls)) return ls;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out; log:\n${log.text}`);
}

function counter(): RedactionObserver & { counts: Record<string, number>; failures: string[] } {
  const o = {
    counts: {} as Record<string, number>,
    failures: [] as string[],
    onRedactions(c: Readonly<Record<string, number>>, surface: string) {
      for (const [k, v] of Object.entries(c)) o.counts[`${surface}:${k}`] = (o.counts[`${surface}:${k}`] ?? 0) + v;
    },
    onFailure(reason: string, surface: string) {
      o.failures.push(`${surface}:${reason}`);
    },
  };
  return o;
}

describe('content logging (issue 15, item 5)', () => {
  let gw: TestGateway;
  let log: { text: string };
  const metrics = counter();

  beforeAll(async () => {
    const cfg = config({ t: { contentLogging: true, redactionProfile: 'default' }, u: { redactionProfile: 'default' } });
    ({ gw, log } = await start(cfg, createContentPolicies(cfg), metrics));
  });
  afterAll(() => gw?.close());

  it('logs the redacted prompt and output of a tenant with content logging, and no content of one without', async () => {
    const chat = { model: 'fake', messages: [{ role: 'user', content: PROMPT }] };
    const answers = [
      await gw.post('/v1/chat/completions', chat),
      await gw.post('/v1/chat/completions', { ...chat, stream: true }),
      await gw.post('/v1/completions', { model: 'fake', prompt: PROMPT }),
      await gw.post('/v1/generations', { model_alias: 'fake', input: PROMPT, stream: false, request_id: 'idem-key-secret-7f3a' }),
      await gw.post('/v1/chat/completions', chat, {}, gw.otherKey.plaintext),
      await gw.post('/v1/completions', { model: 'fake', prompt: PROMPT }, {}, gw.otherKey.plaintext),
    ];
    for (const a of answers) {
      expect(a.status).toBe(200);
      // The client still gets its own text: redaction is for logs.
      expect(await a.text()).toContain(EMAIL);
    }
    const ls = await until(log, (l) => l.filter((x) => x.msg === 'content').length >= 4 && l.filter((x) => x.msg === 'request').length >= 6);
    const content = ls.filter((l) => l.msg === 'content');
    expect(content).toHaveLength(4);
    for (const line of content) {
      expect(line).toMatchObject({ tenant: 't', app: 'a', profile: 'default', finishReason: 'stop' });
      expect(line.prompt_redacted).toContain('mail [REDACTED:EMAIL] card [REDACTED:CARD] key [REDACTED:SECRET]');
      expect(line.output_redacted).toBe('you said: mail [REDACTED:EMAIL] card [REDACTED:CARD] key [REDACTED:SECRET]');
      expect(line.redactions).toEqual([
        { type: 'email', count: 2 },
        { type: 'card', count: 2 },
        { type: 'secret', count: 2 },
      ]);
    }
    expect(content.map((l) => l.route).sort()).toEqual(['chat.completions', 'chat.completions', 'completions', 'generations']);
    // Tenant u: its requests were logged (access lines) but no line of it has any content.
    const ofU = ls.filter((l) => l.tenant === 'u');
    expect(ofU.length).toBeGreaterThanOrEqual(2);
    for (const l of ofU) {
      expect(l.msg).not.toBe('content');
      expect(l).not.toHaveProperty('prompt_redacted');
      expect(l).not.toHaveProperty('output_redacted');
    }
    // No raw value anywhere in the whole log, nor the client's idempotency key.
    for (const raw of RAW) expect(log.text).not.toContain(raw);
    expect(log.text).not.toContain('idem-key-secret-7f3a');
    for (const line of content) expect(line).not.toHaveProperty('requestId');
    // Output text appears only in tenant t's four content lines.
    expect(log.text.split('you said').length - 1).toBe(4);
    expect(metrics.counts).toEqual({ 'content_log:email': 8, 'content_log:card': 8, 'content_log:secret': 8 });
    expect(metrics.failures).toEqual([]);
  });
});

describe('content logging of tool calls', () => {
  it('logs the calls the model made, redacted, after the text', async () => {
    const revision = { ...twoTenantConfig().revisions[0], contextWindow: 4096, capabilities: { streaming: true, tools: true, jsonOutput: false } };
    const base = twoTenantConfig(revision);
    const cfg: PlatformConfig = { ...base, tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, contentLogging: true, redactionProfile: 'default' } : t)) };
    const engine: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 4, contextTokens: 4096 },
      countInputTokens: async (input: GenerationInput) => words(input),
      async *generate(): AsyncIterable<EngineEvent> {
        yield { type: 'delta', text: 'Sending.', tokens: 1 };
        yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_1', name: 'send_mail', argumentsDelta: '{"to":"' }] };
        yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: `${EMAIL}"}` }] };
        yield { type: 'end', reason: 'tool_calls', usage: { inputTokens: 3, outputTokens: 3 }, usageSource: 'reported' };
      },
      async close() {},
    };
    const log = { text: '' };
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        log.text += chunk.toString('utf8');
        done();
      },
    });
    const gw = await startTestGateway({ config: cfg, engine, admission: createInMemoryAdmission({ tenants: cfg.tenants }), logger: createLogger({ name: 'gateway', level: 'info', destination }), contentPolicies: createContentPolicies(cfg) });
    try {
      const tools = [{ type: 'function', function: { name: 'send_mail', parameters: { type: 'object', properties: { to: { type: 'string' } } } } }];
      const r = await gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: `mail ${EMAIL}` }], tools });
      expect(r.status).toBe(200);
      await r.text();
      const ls = await until(log, (l) => l.some((x) => x.msg === 'content'));
      expect(ls.find((l) => l.msg === 'content')?.output_redacted).toBe('Sending.\n→ send_mail({"to":"[REDACTED:EMAIL]"})');
      expect(log.text).not.toContain(EMAIL);
    } finally {
      await gw.close();
    }
  });
});

describe('a failing redactor fails closed', () => {
  it('writes no content line, an error line without content, and counts the failure', async () => {
    const cfg = config({ t: { contentLogging: true, redactionProfile: 'default' } });
    const real = createContentPolicies(cfg);
    const broken: TenantContentPolicy = {
      ...(real.forTenant('t') as TenantContentPolicy),
      logRedactor: { profile: 'default', redact: () => ({ ok: false, reason: 'error', error: new Error(`fault quoting ${EMAIL}`) }), redactChunked: async () => ({ ok: false, reason: 'error' }) },
    };
    const policies: ContentPolicies = { active: true, forTenant: (id) => (id === 't' ? broken : undefined), forRequest: (id) => (id === 't' ? broken : undefined), update() {} };
    const metrics = counter();
    const { gw, log } = await start(cfg, policies, metrics);
    try {
      const r = await gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: PROMPT }] });
      expect(r.status).toBe(200);
      await r.text();
      const ls = await until(log, (l) => l.some((x) => x.msg === 'content redaction failed; content not logged'));
      expect(ls.filter((l) => l.msg === 'content')).toHaveLength(0);
      expect(ls.find((l) => l.msg === 'content redaction failed; content not logged')).toMatchObject({ tenant: 't', profile: 'default', reason: 'error' });
      for (const raw of RAW) expect(log.text).not.toContain(raw);
      expect(metrics.failures).toEqual(['content_log:error']);
    } finally {
      await gw.close();
    }
  });

  it('a timeout of the upstream redaction refuses the request before anything is sent or reserved', async () => {
    const cfg = config({ t: { redactionProfile: 'default', redactUpstream: true } });
    const real = createContentPolicies(cfg);
    const slow: TenantContentPolicy = { ...(real.forTenant('t') as TenantContentPolicy), upstreamRedactor: { profile: 'default', redact: () => ({ ok: true, text: '', counts: {}, truncatedChars: 0 }), redactChunked: async () => ({ ok: false, reason: 'timeout' }) } };
    const metrics = counter();
    const { gw, log, engine } = await start(cfg, { active: true, forTenant: (id) => (id === 't' ? slow : undefined), forRequest: (id) => (id === 't' ? slow : undefined), update() {} }, metrics);
    try {
      const r = await gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: PROMPT }] });
      expect(r.status).toBe(500);
      expect(((await r.json()) as { error: { message: string } }).error.message).toContain('could not be redacted');
      expect(engine.seen).toEqual([]);
      expect(engine.counted).toEqual([]);
      expect(gw.records).toEqual([]);
      expect(metrics.failures).toEqual(['upstream:timeout']);
      for (const raw of RAW) expect(log.text).not.toContain(raw);
    } finally {
      await gw.close();
    }
  });
});

describe('redact_upstream', () => {
  it('sends, counts and bills the redacted prompt; the other tenant is sent its prompt as is', async () => {
    const cfg = config({ t: { redactionProfile: 'default', redactUpstream: true } });
    const metrics = counter();
    const { gw, engine } = await start(cfg, createContentPolicies(cfg), metrics);
    try {
      const r = await gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: PROMPT }] });
      expect(r.status).toBe(200);
      const body = (await r.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
      const redacted = 'be brief mail [REDACTED:EMAIL] card [REDACTED:CARD] key [REDACTED:SECRET]';
      expect(engine.seen).toEqual([redacted]);
      expect(engine.counted).toEqual([redacted]);
      // The card was 4 words, now 1: billing counts what was sent.
      const sentTokens = redacted.split(' ').length;
      expect(body.usage.prompt_tokens).toBe(sentTokens);
      await new Promise((res) => setTimeout(res, 20));
      expect(gw.records.at(-1)?.inputTokens).toBe(sentTokens);
      expect(metrics.counts).toEqual({ 'upstream:email': 1, 'upstream:card': 1, 'upstream:secret': 1 });
      const other = await gw.post('/v1/completions', { model: 'fake', prompt: PROMPT }, {}, gw.otherKey.plaintext);
      expect(other.status).toBe(200);
      await other.text();
      expect(engine.seen.at(-1)).toBe(PROMPT);
    } finally {
      await gw.close();
    }
  });
});

describe('createContentPolicies', () => {
  it('builds policies only for tenants that log content or redact upstream with a profile, and follows updates', () => {
    const cfg = config({ t: { contentLogging: true, redactionProfile: 'strict' }, u: { contentLogging: true } });
    const p = createContentPolicies(cfg);
    expect(p.active).toBe(true);
    expect(p.forTenant('t')).toMatchObject({ profile: 'strict', logContent: true, redactUpstream: false });
    // Content logging without a profile logs nothing.
    expect(p.forTenant('u')).toBeUndefined();
    p.update(config({}));
    expect(p.active).toBe(false);
    expect(p.forTenant('t')).toBeUndefined();
    p.update({ ...config({ u: { redactionProfile: 'hr', redactUpstream: true } }), redactionProfiles: [{ name: 'hr', recognizers: ['email'], customPatterns: [{ name: 'emp', pattern: 'EMP-[0-9]{4}' }] }] });
    const hr = p.forTenant('u');
    expect(hr).toMatchObject({ profile: 'hr', logContent: false, redactUpstream: true });
    expect(hr?.upstreamRedactor.redact(`EMP-1234 ${EMAIL} ${CARD}`)).toMatchObject({ ok: true, text: `[REDACTED:EMP] [REDACTED:EMAIL] ${CARD}` });
  });

  it('hash replacements stay the same across snapshots and between the log and upstream redactors', () => {
    const cfg = config({ t: { contentLogging: true, redactionProfile: 'strict', redactUpstream: true } });
    const p = createContentPolicies(cfg);
    const first = p.forTenant('t')?.logRedactor.redact(EMAIL);
    p.update(cfg);
    const again = p.forTenant('t')?.logRedactor.redact(EMAIL);
    const upstream = p.forTenant('t')?.upstreamRedactor.redact(EMAIL);
    expect(first?.ok && first.text).toMatch(/^\[REDACTED:EMAIL:[0-9a-f]{12}\]$/);
    expect(again).toEqual(first);
    expect(upstream).toEqual(first);
    // Another process (another policies object) without WEIR_REDACTION_HASH_KEY: another key.
    expect(createContentPolicies(cfg).forTenant('t')?.logRedactor.redact(EMAIL)).not.toEqual(first);
  });
});

describe('wiring helpers', () => {
  it('contentPolicyOptionsFromEnv takes a key of 32+ characters, refuses a shorter one, and is empty when unset', () => {
    expect(contentPolicyOptionsFromEnv({})).toEqual({});
    expect(contentPolicyOptionsFromEnv({ WEIR_REDACTION_HASH_KEY: 'k'.repeat(32) })).toEqual({ log: { hashKey: 'k'.repeat(32) }, upstream: { hashKey: 'k'.repeat(32) } });
    expect(() => contentPolicyOptionsFromEnv({ WEIR_REDACTION_HASH_KEY: 'short' })).toThrow('at least 32 characters');
  });

  it('redactionMetricsObserver records one sample per type, and failures by reason', () => {
    const samples: unknown[] = [];
    const o = redactionMetricsObserver({ recordRedactions: (s) => samples.push(s), recordRedactionFailure: (f) => samples.push(f) });
    o.onRedactions?.({ email: 2, card: 1 }, 'content_log');
    o.onFailure?.('timeout', 'upstream');
    expect(samples).toEqual([
      { type: 'email', surface: 'content_log', count: 2 },
      { type: 'card', surface: 'content_log', count: 1 },
      { reason: 'timeout', surface: 'upstream' },
    ]);
  });
});

/**
 * `GET /v1/usage` and the use case on generation routes, over the real gateway app with real
 * domain parts, a hand-written engine, and a hand-written ledger reader that aggregates the
 * usage records the requests produced.
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, EngineRequest, UsageAggregate, UsageReader, UsageRecord, UsageSummary } from '@weir/core';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';
import { parseUsageQuery, usageBody } from './usage-route';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const engine: EngineAdapter = {
  kind: 'fake',
  capacity: { slots: 4, contextTokens: 64 },
  async countInputTokens() {
    return 2;
  },
  async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
    for (let n = 0; n < 3; n++) yield { type: 'delta', text: `w${n} `, tokens: 1 };
    yield { type: 'end', reason: request.maxOutputTokens <= 3 ? 'length' : 'stop', usage: { inputTokens: 2, outputTokens: 3 }, usageSource: 'reported' };
  },
  async close() {},
};

// 0.1 USD per token in, 0.2 USD per token out: 2 in + 3 out = 0.8 USD a request.
const config = twoTenantConfig(fakeRevision({ inputPerMTok: 100_000, outputPerMTok: 200_000, cachedInputPerMTok: 100_000 }));

/** A hand-written ledger reader: aggregates the records in memory, the way the SQL does. */
function memoryUsageReader(records: UsageRecord[]): UsageReader & { queries: { tenantId: string; since: Date; until: Date }[] } {
  const queries: { tenantId: string; since: Date; until: Date }[] = [];
  const sum = (rs: UsageRecord[]): UsageAggregate => ({
    inputTokens: rs.reduce((n, r) => n + r.inputTokens, 0),
    outputTokens: rs.reduce((n, r) => n + r.outputTokens, 0),
    cachedInputTokens: rs.reduce((n, r) => n + r.cachedInputTokens, 0),
    cacheWriteInputTokens: rs.reduce((n, r) => n + (r.cacheWriteInputTokens ?? 0), 0),
    reasoningTokens: rs.reduce((n, r) => n + (r.reasoningTokens ?? 0), 0),
    costNanoUsd: rs.reduce((n, r) => n + BigInt(r.costNanoUsd), 0n),
    requests: rs.length,
    cacheHits: rs.filter((r) => r.cacheHit !== undefined).length,
  });
  const groups = <K>(rs: UsageRecord[], key: (r: UsageRecord) => K) => {
    const m = new Map<string, { key: K; rs: UsageRecord[] }>();
    for (const r of rs) {
      const k = key(r);
      const id = JSON.stringify(k);
      m.set(id, { key: k, rs: [...(m.get(id)?.rs ?? []), r] });
    }
    return [...m.values()];
  };
  return {
    queries,
    async summarize(q) {
      queries.push(q);
      const rs = records.filter((r) => r.tenantId === q.tenantId && r.finishedAt >= q.since && r.finishedAt < q.until);
      const summary: UsageSummary = {
        ...sum(rs),
        byModel: groups(rs, (r) => [r.modelAlias, r.modelRevision] as const).map((g) => ({ modelAlias: g.key[0], modelRevision: g.key[1], ...sum(g.rs) })),
        byApp: groups(rs, (r) => r.appId).map((g) => ({ appId: g.key, ...sum(g.rs) })),
        byUseCase: groups(rs, (r) => r.useCase ?? null).map((g) => ({ useCase: g.key, ...sum(g.rs) })),
      };
      return summary;
    },
  };
}

let harness: TestGateway;
let url: string;
let key: TestGateway['key'];
let otherKey: TestGateway['otherKey'];
let records: UsageRecord[];
let reader: ReturnType<typeof memoryUsageReader>;

beforeEach(async () => {
  records = [];
  reader = memoryUsageReader(records);
  harness = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }), usage: reader, records });
  ({ url, key, otherKey } = harness);
});

afterEach(() => harness.close());

const auth = (k = key) => ({ Authorization: `Bearer ${k.plaintext}`, 'Content-Type': 'application/json' });
const post = (path: string, body: unknown, extra: Record<string, string> = {}) =>
  fetch(`${url}${path}`, { method: 'POST', headers: { ...auth(), ...extra }, body: JSON.stringify(body) });
const usage = (query = '', k = key) => fetch(`${url}/v1/usage${query}`, { headers: auth(k) });

describe('use case on generation routes', () => {
  it('records the body’s use_case, else the x-weir-use-case header, on every route', async () => {
    expect((await post('/v1/generations', { model_alias: 'fake', input: 'hi', use_case: 'support.summaries' })).status).toBe(200);
    expect((await post('/v1/generations', { model_alias: 'fake', input: 'hi', use_case: 'from-body' }, { 'x-weir-use-case': 'from-header' })).status).toBe(200);
    expect((await post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }] }, { 'x-weir-use-case': 'chat:triage' })).status).toBe(200);
    expect((await post('/v1/completions', { model: 'fake', prompt: 'hi' }, { 'x-weir-use-case': 'legacy_v1' })).status).toBe(200);
    expect((await post('/v1/completions', { model: 'fake', prompt: 'hi' })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 20)); // the relay records after the end event
    expect(records.map((r) => r.useCase)).toEqual(['support.summaries', 'from-body', 'chat:triage', 'legacy_v1', undefined]);
  });

  it.each<[string, () => Promise<Response>, string]>([
    ['a header with a space', () => post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }] }, { 'x-weir-use-case': 'has space' }), 'x-weir-use-case'],
    ['a header of 65 characters', () => post('/v1/completions', { model: 'fake', prompt: 'hi' }, { 'x-weir-use-case': 'x'.repeat(65) }), 'x-weir-use-case'],
    ['a body use_case with a slash', () => post('/v1/generations', { model_alias: 'fake', input: 'hi', use_case: 'a/b' }), 'use_case'],
    ['an empty body use_case', () => post('/v1/generations', { model_alias: 'fake', input: 'hi', use_case: '' }), 'use_case'],
    ['a numeric body use_case', () => post('/v1/generations', { model_alias: 'fake', input: 'hi', use_case: 7 }), 'use_case'],
  ])('refuses %s with a 400 naming the field, before any work', async (_name, send, param) => {
    const res = await send();
    expect(res.status).toBe(400);
    const body = (await res.json()) as Json;
    expect(body.error).toMatchObject({ type: 'invalid_request_error', param });
    expect(body.error.message).toContain(param === 'use_case' ? '`use_case`' : '`x-weir-use-case`');
    expect(records).toEqual([]);
  });
});

describe('GET /v1/usage', () => {
  it('answers the caller’s tenant’s month: totals and breakdowns, exact cost', async () => {
    for (const uc of ['chat', 'chat', undefined]) {
      expect((await post('/v1/generations', { model_alias: 'fake', input: 'hi', ...(uc ? { use_case: uc } : {}) })).status).toBe(200);
    }
    expect((await fetch(`${url}/v1/generations`, { method: 'POST', headers: auth(otherKey), body: JSON.stringify({ model_alias: 'fake', input: 'hi' }) })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 20));

    const res = await usage();
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBeTruthy();
    const body = (await res.json()) as Json;
    const now = new Date();
    const usd = ['0', '0.8', '1.6', '2.4'];
    const sums = (n: number) => ({ tokens: { input: 2 * n, output: 3 * n, cached_input: 0, cache_write_input: 0, uncached_input: 2 * n, reasoning: 0, total: 5 * n }, cost_usd: Number(usd[n]), cost_nano_usd: String(800_000_000 * n), requests: n, cache_hits: 0 });
    expect(body).toEqual({
      object: 'usage',
      tenant_id: 't',
      window: 'month',
      period_start: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString(),
      period_end: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString(),
      ...sums(3),
      by_model: [{ model_alias: 'fake', model_revision: 'fake@1', ...sums(3) }],
      by_app: [{ app_id: 'a', ...sums(3) }],
      by_use_case: [
        { use_case: 'chat', ...sums(2) },
        { use_case: null, ...sums(1) },
      ],
    });
    expect(reader.queries.at(-1)).toMatchObject({ tenantId: 't' });
  });

  it('answers the current UTC day with window=day', async () => {
    const body = (await (await usage('?window=day')).json()) as Json;
    expect(body).toMatchObject({ window: 'day', requests: 0, cost_usd: 0, cost_nano_usd: '0', by_model: [], by_app: [], by_use_case: [] });
    expect(Date.parse(body.period_end) - Date.parse(body.period_start)).toBe(86_400_000);
    expect(body.period_start).toMatch(/T00:00:00\.000Z$/);
  });

  it.each<[string, string, string]>([
    ['an unknown window', '?window=week', 'window'],
    ['a repeated window', '?window=day&window=month', 'window'],
    ['another tenant', '?tenant=u', 'tenant'],
    ['another tenant (tenant_id)', '?tenant_id=u', 'tenant_id'],
    ['an unknown parameter', '?since=2026-01-01', 'since'],
  ])('refuses %s with a 400 that says what to fix', async (_name, query, param) => {
    const res = await usage(query);
    expect(res.status).toBe(400);
    const body = (await res.json()) as Json;
    expect(body.error).toMatchObject({ type: 'invalid_request_error', param });
    expect(reader.queries).toEqual([]);
  });

  it('needs an API key', async () => {
    const res = await fetch(`${url}/v1/usage`);
    expect(res.status).toBe(401);
    expect(reader.queries).toEqual([]);
  });

  it('answers 405 with Allow for another method', async () => {
    const res = await fetch(`${url}/v1/usage`, { method: 'POST', headers: auth() });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET');
  });
});

describe('usage body', () => {
  it.each<[bigint, string]>([
    [1n, '0.000000001'],
    [100_000_000n, '0.100000000'],
    [300_000_000n, '0.300000000'],
    [2_400_000_000n, '2.400000000'],
    [123_456_789_012_345n, '123456.789012345'],
    [999_999_999_999_999n, '999999.999999999'],
  ])('serialises %s nano-USD exactly: cost_usd reads back as %s, cost_nano_usd as the integer', (nano, usd) => {
    const agg: UsageAggregate = { inputTokens: 1, outputTokens: 2, cachedInputTokens: 0, cacheWriteInputTokens: 0, reasoningTokens: 0, costNanoUsd: nano, requests: 1, cacheHits: 0 };
    const wire = JSON.parse(JSON.stringify(usageBody('t', 'month', { start: new Date(0), end: new Date(1) }, { ...agg, byModel: [], byApp: [], byUseCase: [] })));
    expect(wire.cost_usd.toFixed(9)).toBe(usd);
    expect(wire.cost_usd).toBe(Number(usd));
    expect(wire.cost_nano_usd).toBe(nano.toString());
  });

  it('defaults the window to month', () => {
    expect(parseUsageQuery({})).toBe('month');
    expect(parseUsageQuery({ window: 'day' })).toBe('day');
  });
});

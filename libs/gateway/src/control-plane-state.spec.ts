/**
 * What the control plane's state does at the gateway (issue 7, items 3–5), through the test
 * gateway (real router, admission, scheduler and relay): a stale snapshot fails closed and
 * recovers; the revocation fast path refuses a revoked key, a disabled tenant and a tenant
 * behind its kill switch at once; a deprecated revision counts down in headers and in
 * `/v1/models`, and once retired refuses pinned traffic naming the replacement, holding nothing.
 */
import { createInMemoryAdmission } from '@weir/admission';
import { type AdmissionService, type EngineAdapter, type EngineEvent, type PlatformConfig, type RevisionSpec } from '@weir/core';
import OpenAI from 'openai';
import type { ConfigState } from './app';
import { createRevocations, type Revocations } from './revocations';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** Answers `ok` (1 token) to everything; counts generations. */
function okEngine(): EngineAdapter & { started: number } {
  const engine = {
    kind: 'ok',
    capacity: { slots: 4, contextTokens: 64 },
    started: 0,
    async countInputTokens() {
      return 3;
    },
    async *generate(): AsyncIterable<EngineEvent> {
      engine.started++;
      yield { type: 'delta', text: 'ok', tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: 1 }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

/** Admission that counts reservations (a retired request must make none). */
function countingAdmission(config: PlatformConfig): AdmissionService & { reserved: number } {
  const inner = createInMemoryAdmission({ tenants: config.tenants });
  const counted = {
    reserved: 0,
    reserve: (r: Parameters<AdmissionService['reserve']>[0]) => {
      counted.reserved++;
      return inner.reserve(r);
    },
    settle: inner.settle.bind(inner),
    release: inner.release.bind(inner),
  };
  return counted;
}

const chatBody = (model = 'fake') => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe('bounded staleness (config_stale)', () => {
  it('refuses every API route with 503 config_stale while the snapshot is stale, says so in /readyz, and serves again once fresh', async () => {
    let state: ConfigState = { ageMs: 1_200, stale: false, version: 7, maxAgeMs: 60_000 };
    const config = twoTenantConfig();
    const engine = okEngine();
    gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }), configState: () => state });

    let ready = await fetch(`${gw.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', config_age_ms: 1_200, config_version: 7 });
    expect((await gw.post('/v1/chat/completions', chatBody())).status).toBe(200);

    // The control plane and NATS are gone: the age passes the maximum.
    state = { ageMs: 95_400, stale: true, version: 7, maxAgeMs: 60_000, reason: 'no heartbeat from the control plane' };
    for (const res of [await gw.post('/v1/chat/completions', chatBody()), await gw.post('/v1/generations', { model_alias: 'fake', input: 'hi' }), await gw.get('/v1/models'), await gw.get('/nowhere')]) {
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      const body = (await res.json()) as { error: { code: string; type: string; message: string } };
      expect(body.error.code).toBe('config_stale');
      expect(body.error.type).toBe('server_error');
      expect(body.error.message).toContain('is 95 s old, past the maximum staleness of 60 s');
      expect(body.error.message).toContain('control plane over NATS');
      // The operator detail stays in /readyz.
      expect(body.error.message).not.toContain('heartbeat');
    }
    expect(engine.started).toBe(1);
    ready = await fetch(`${gw.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ status: 'not_ready', reason: 'config_stale', config_age_ms: 95_400, config_version: 7, config_detail: 'no heartbeat from the control plane' });
    expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);

    // A fresh snapshot (or heartbeat) arrives.
    state = { ageMs: 300, stale: false, version: 8, maxAgeMs: 60_000 };
    expect((await gw.post('/v1/chat/completions', chatBody())).status).toBe(200);
    ready = await fetch(`${gw.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', config_version: 8 });
    expect(engine.started).toBe(2);
  });
});

/** Streams `n` one-token deltas 40 ms apart, stopping when the request is aborted (a long generation). */
function slowEngine(n = 30): EngineAdapter {
  return {
    kind: 'slow',
    capacity: { slots: 4, contextTokens: 64 },
    async countInputTokens() {
      return 3;
    },
    async *generate(request): AsyncIterable<EngineEvent> {
      let produced = 0;
      for (; produced < n && !request.signal?.aborted; produced++) {
        yield { type: 'delta', text: 'w ', tokens: 1 };
        await new Promise((r) => setTimeout(r, 40));
      }
      yield { type: 'end', reason: request.signal?.aborted ? 'aborted' : 'stop', usage: { inputTokens: 3, outputTokens: produced }, usageSource: 'reported' };
    },
    async close() {},
  };
}

/** Reads a Weir stream to its end; returns the end event's data and how many deltas came. */
async function readWeirStream(res: Response): Promise<{ deltas: number; end: { finish_reason: string; usage: { output_tokens: number }; error?: { code: string; message: string } } }> {
  const text = await res.text();
  const events = text.split('\n\n').filter((e) => e.includes('event:'));
  const end = events.find((e) => e.includes('event: end')) ?? '';
  return { deltas: events.filter((e) => e.includes('event: delta')).length, end: JSON.parse(end.split('\n').find((l) => l.startsWith('data:'))?.slice(5) ?? '{}') };
}

describe('revocations stop what is running', () => {
  it("a kill switch stops the tenant's streams in flight with an explicit kill_switch error (billed for what they produced); another tenant's run on; a revoked key stops its own", async () => {
    const config = twoTenantConfig();
    const revocations = createRevocations();
    gw = await startTestGateway({ config, engine: slowEngine(), admission: createInMemoryAdmission({ tenants: config.tenants }), revocations });
    const g = gw;
    // 30 tokens 40 ms apart: long enough to be stopped mid-way (the fake revision's limit is 32).
    const body = { model_alias: 'fake', input: 'hi', stream: true, max_output_tokens: 30 };
    const killed = g.post('/v1/generations', body).then(readWeirStream);
    const other = g.post('/v1/generations', body, {}, g.otherKey.plaintext).then(readWeirStream);
    await new Promise((r) => setTimeout(r, 250));
    revocations.setKillSwitch('t', true);
    const stopped = await killed;
    expect(stopped.end).toMatchObject({ finish_reason: 'error', error: { code: 'kill_switch', message: expect.stringContaining("kill switch of tenant 't' is engaged") } });
    expect(stopped.deltas).toBeGreaterThan(0);
    expect(stopped.deltas).toBeLessThan(30);
    expect(stopped.end.usage.output_tokens).toBe(stopped.deltas);
    // The ledger records it as cancelled, billed for the tokens produced.
    await waitFor(() => g.records.some((r) => r.tenantId === 't'));
    expect(g.records.find((r) => r.tenantId === 't')).toMatchObject({ status: 'cancelled', outputTokens: stopped.deltas });
    // The other tenant is untouched until its own key is revoked.
    await new Promise((r) => setTimeout(r, 250));
    revocations.revokeKey({ keyId: 'k2' });
    const second = await other;
    expect(second.end).toMatchObject({ finish_reason: 'error', error: { code: 'authentication_failed', message: expect.stringContaining('API key was revoked while this generation ran') } });
    expect(second.deltas).toBeGreaterThan(stopped.deltas);
    expect(second.deltas).toBeLessThan(30);
  });

  it('a non-streamed chat completion stopped by a kill switch is the kill_switch error, never a 200 with a cut answer', async () => {
    const config = twoTenantConfig();
    const revocations = createRevocations();
    gw = await startTestGateway({ config, engine: slowEngine(), admission: createInMemoryAdmission({ tenants: config.tenants }), revocations });
    const pending = gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 30 });
    await new Promise((r) => setTimeout(r, 250));
    revocations.setKillSwitch('t', true);
    const res = await pending;
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('kill_switch');
  });
});

/** Polls `check` every 10 ms for up to 2 s. */
async function waitFor(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
}

describe('revocation fast path', () => {
  let revocations: Revocations;
  let invalidated: string[];
  beforeEach(async () => {
    invalidated = [];
    revocations = createRevocations({ keyCache: { invalidate: (h) => invalidated.push(`sha:${h}`), invalidateKeyId: (id) => invalidated.push(`id:${id}`) } });
    const config = twoTenantConfig();
    // The test gateway's key store always finds both keys: like a cache that still holds them.
    gw = await startTestGateway({ config, engine: okEngine(), admission: createInMemoryAdmission({ tenants: config.tenants }), revocations });
  });

  it('refuses a revoked key at once (by hash or by id) although the key store still finds it, and drops it from the cache', async () => {
    const g = gw as TestGateway;
    expect((await g.post('/v1/chat/completions', chatBody())).status).toBe(200);
    revocations.revokeKey({ sha256: g.key.sha256 });
    const res = await g.post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'authentication_failed',
      message: `Incorrect API key provided: wk_${g.key.prefix}_… is unknown or revoked.`,
    });
    expect(invalidated).toEqual([`sha:${g.key.sha256}`]);
    // The other tenant's key is untouched; then it is revoked by id only.
    expect((await g.get('/v1/models', {}, g.otherKey.plaintext)).status).toBe(200);
    revocations.revokeKey({ keyId: 'k2' });
    expect((await g.get('/v1/models', {}, g.otherKey.plaintext)).status).toBe(401);
    expect(invalidated).toContain('id:k2');
    // A snapshot does not bring a revoked key back.
    revocations.applyConfig([{ id: 't' }, { id: 'u' }]);
    expect((await g.post('/v1/chat/completions', chatBody())).status).toBe(401);
  });

  it('refuses a disabled tenant with 403 tenant_disabled until a snapshot re-enables it; other tenants are served', async () => {
    const g = gw as TestGateway;
    revocations.setTenantDisabled('t', true);
    const res = await g.post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { code: string; type: string; message: string } }).error).toMatchObject({ code: 'tenant_disabled', type: 'permission_error', message: expect.stringContaining("Tenant 't' is disabled") });
    expect((await g.post('/v1/chat/completions', chatBody(), {}, g.otherKey.plaintext)).status).toBe(200);
    revocations.applyConfig([{ id: 't', disabled: false }, { id: 'u' }]);
    expect((await g.post('/v1/chat/completions', chatBody())).status).toBe(200);
  });

  it('refuses a tenant behind its kill switch with 503 kill_switch naming it (the SDK does not retry), and serves it once lifted', async () => {
    const g = gw as TestGateway;
    revocations.setKillSwitch('t', true);
    const res = await g.post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(503);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(((await res.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'kill_switch', message: expect.stringContaining("kill switch of tenant 't' is engaged") });
    // The official client surfaces it at once (no automatic retries).
    const client = new OpenAI({ apiKey: g.key.plaintext, baseURL: `${g.url}/v1`, maxRetries: 2 });
    await expect(client.chat.completions.create(chatBody() as never)).rejects.toMatchObject({ status: 503, code: 'kill_switch' });
    // A snapshot engages it too; a later revocation lifts it.
    revocations.setKillSwitch('t', false);
    revocations.applyConfig([{ id: 't', killSwitch: true }, { id: 'u' }]);
    expect((await g.post('/v1/chat/completions', chatBody())).status).toBe(503);
    revocations.setKillSwitch('t', false);
    expect((await g.post('/v1/chat/completions', chatBody())).status).toBe(200);
  });
});

describe('deprecation countdown and retirement', () => {
  const NOW = Date.parse('2026-03-10T15:30:00Z');
  const old: RevisionSpec = { ...fakeRevision(), id: 'old@1', deprecation: { retiresOn: '2026-03-20', replacement: 'new@2', announcedOn: '2026-03-01' } };
  const fresh: RevisionSpec = { ...fakeRevision(), id: 'new@2' };
  /** `fake` → old@1 only; `split` → old@1 and new@2; `other` → new@2; tenant `u` pins `other` to old@1. */
  function deprecationConfig(): PlatformConfig {
    const base = twoTenantConfig(old);
    return {
      ...base,
      revisions: [old, fresh],
      aliases: [
        { name: 'fake', targets: [{ revision: 'old@1', weight: 1 }] },
        { name: 'split', targets: [{ revision: 'old@1', weight: 1 }, { revision: 'new@2', weight: 1 }] },
        { name: 'other', targets: [{ revision: 'new@2', weight: 1 }] },
      ],
      tenants: base.tenants.map((t) => (t.id === 'u' ? { ...t, routes: [{ alias: 'other', pin: 'old@1' }] } : t)),
    };
  }
  let now = NOW;
  let warnings: object[];
  let admission: ReturnType<typeof countingAdmission>;
  beforeEach(async () => {
    now = NOW;
    warnings = [];
    const config = deprecationConfig();
    admission = countingAdmission(config);
    gw = await startTestGateway({ config, engine: okEngine(), admission, wallClock: () => now, logger: { info() {}, warn: (o) => void warnings.push(o), error() {} } });
  });

  it('sends Deprecation, Sunset and x-weir-retires-in-days on responses of a deprecated revision, and logs the announcement once a day', async () => {
    const g = gw as TestGateway;
    const res = await g.post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-model-revision')).toBe('old@1');
    expect(res.headers.get('deprecation')).toBe(`@${Date.parse('2026-03-01T00:00:00Z') / 1000}`);
    expect(res.headers.get('sunset')).toBe('Fri, 20 Mar 2026 00:00:00 GMT');
    expect(res.headers.get('x-weir-retires-in-days')).toBe('10');
    // Streams carry them too; a revision without a deprecation carries none.
    const streamed = await g.post('/v1/chat/completions', { ...chatBody(), stream: true });
    expect(streamed.headers.get('x-weir-retires-in-days')).toBe('10');
    await streamed.text();
    const plain = await g.post('/v1/chat/completions', chatBody('other'));
    expect(plain.headers.get('x-weir-model-revision')).toBe('new@2');
    expect(plain.headers.get('sunset')).toBeNull();
    expect(warnings).toEqual([{ event: 'revision_deprecation_announced', revision: 'old@1', retiresOn: '2026-03-20', replacement: 'new@2', announcedOn: '2026-03-01', daysLeft: 10 }]);
    now += 86_400_000;
    const tomorrow = await g.post('/v1/chat/completions', chatBody());
    expect(tomorrow.headers.get('x-weir-retires-in-days')).toBe('9');
    expect(warnings).toHaveLength(2);
  });

  it('shows no countdown before the announcement day', async () => {
    now = Date.parse('2026-02-28T23:59:00Z');
    const res = await (gw as TestGateway).post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(200);
    expect(res.headers.get('sunset')).toBeNull();
    expect(res.headers.get('deprecation')).toBeNull();
    expect(warnings).toEqual([]);
  });

  it('lists the deprecation on /v1/models entries whose every revision for the caller counts down (pins included)', async () => {
    const g = gw as TestGateway;
    const ofTenant = async (apiKey?: string) => ((await (await g.get('/v1/models', {}, apiKey)).json()) as { data: { id: string; deprecation?: unknown }[] }).data;
    const deprecation = { retires_on: '2026-03-20', replacement: 'new@2', days_left: 10 };
    expect(await ofTenant()).toEqual([
      expect.objectContaining({ id: 'fake', deprecation }),
      expect.not.objectContaining({ deprecation: expect.anything() }),
      expect.not.objectContaining({ deprecation: expect.anything() }),
    ]);
    // Tenant u pins `other` to old@1.
    const u = await ofTenant(g.otherKey.plaintext);
    expect(u.find((m) => m.id === 'other')).toEqual(expect.objectContaining({ deprecation }));
    const one = (await (await g.get('/v1/models/fake')).json()) as { deprecation?: unknown };
    expect(one.deprecation).toEqual(deprecation);
  });

  it('from the retirement day refuses requests aliased only (or pinned) to the revision with model_retired naming the replacement, before any reservation or charge', async () => {
    const g = gw as TestGateway;
    now = Date.parse('2026-03-20T00:00:00Z');
    const res = await g.post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(404);
    const error = ((await res.json()) as { error: { code: string; type: string; param: string; message: string } }).error;
    expect(error).toMatchObject({ code: 'model_retired', type: 'invalid_request_error', param: 'model' });
    expect(error.message).toContain("routes only to revision 'old@1', which was retired on 2026-03-20 (UTC); its replacement is revision 'new@2'");
    const pinned = await g.post('/v1/chat/completions', chatBody('other'), {}, g.otherKey.plaintext);
    expect(pinned.status).toBe(404);
    expect(((await pinned.json()) as { error: { message: string } }).error.message).toContain("is pinned to revision 'old@1' for your tenant");
    const weir = await g.post('/v1/generations', { model_alias: 'fake', input: 'hi' });
    expect(weir.status).toBe(404);
    expect(admission.reserved).toBe(0);
    expect(g.records).toEqual([]);
    // Not a silent upgrade for those; but the alias whose split has a serving arm routes there.
    const split = await g.post('/v1/chat/completions', chatBody('split'));
    expect(split.status).toBe(200);
    expect(split.headers.get('x-weir-model-revision')).toBe('new@2');
    // And the countdown is gone from /v1/models (retired, not counting down).
    const models = ((await (await g.get('/v1/models')).json()) as { data: { id: string; deprecation?: unknown }[] }).data;
    expect(models.find((m) => m.id === 'fake')?.deprecation).toBeUndefined();
  });

  it('serves on the last day before retirement (23:59 UTC) with one day left', async () => {
    now = Date.parse('2026-03-19T23:59:59Z');
    const res = await (gw as TestGateway).post('/v1/chat/completions', chatBody());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-weir-retires-in-days')).toBe('1');
  });
});

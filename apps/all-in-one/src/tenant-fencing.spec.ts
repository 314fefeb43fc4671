/**
 * Issue 14 §4, nothing of a tenant outlives it, on the all-in-one: tenant `acme` makes a keyed
 * request (a retained generation and an idempotency result) and spends its budget; it is
 * deleted through the admin API and created again with the same id and a new key. The new
 * `acme` runs the same Idempotency-Key afresh, cannot read the old generation, starts with
 * nothing spent and sees no old usage; the old rows stay in the ledger for invoices
 * (`GET /admin/v1/usage` by internal id, or with `include_deleted`).
 */
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const DEMO_KEY = 'wk_fencing_' + 'F'.repeat(43);

// Output at 1 USD a token, input free: a request with max_tokens 2 may cost 2 USD (and costs 1
// or 2), so a 4.50 USD monthly budget admits two requests at least and runs out by the fifth.
const CONFIG = `revisions:
  - id: chat@1
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1], [32, 2]], max_sequences: 32 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 2
    pricing: { input_per_mtok: 0, output_per_mtok: 1000000 }
aliases:
  - name: chat
    revision: chat@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

const ACME_POLICY = { limits: { monthly_budget_usd: 4.5 } };
const BODY = { model: 'chat', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 2 };

let running: TestPlatform | undefined;
let platform: Platform;
let adminToken: string;

async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${platform.url}/admin/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function chat(key: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Json; headers: Headers }> {
  const res = await fetch(`${platform.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(BODY),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

async function get(path: string, key: string): Promise<{ status: number; body: Json; text: string }> {
  const res = await fetch(`${platform.url}${path}`, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(30_000) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, text };
}

/** Polls `probe` every 50 ms until it returns a value, for at most `boundMs` (a generous bound). */
async function eventually<T>(probe: () => Promise<T | undefined>, what: string, boundMs = 15_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() - started > boundMs) throw new Error(`${what} did not happen within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Creates tenant acme with app web and one key; resolves the key once the gateway admits it. */
async function createAcme(): Promise<{ key: string; internalId: string }> {
  const tenant = await admin('POST', '/tenants', { id: 'acme', name: 'Acme', policy: ACME_POLICY });
  expect(tenant.status).toBe(201);
  expect((await admin('POST', '/tenants/acme/apps', { id: 'acme-web', name: 'Web' })).status).toBe(201);
  const key = await admin('POST', '/tenants/acme/apps/acme-web/keys', { label: 'fencing' });
  expect(key.status).toBe(201);
  return { key: key.body.key as string, internalId: tenant.body.internal_id as string };
}

beforeAll(async () => {
  running = await startTestPlatform('fence', CONFIG, DEMO_KEY);
  platform = running.platform;
  adminToken = platform.adminToken as string;
});

afterAll(async () => {
  await running?.stop();
});

/** A chat request once the configuration reached the gateway and admission (not 403 `tenant_disabled`, not "no policy yet"). */
async function settledChat(key: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Json; headers: Headers }> {
  return eventually(async () => {
    const r = await chat(key, headers);
    return r.status === 403 || r.body?.error?.code === 'concurrency_limited' ? undefined : r;
  }, 'the tenant reaching the data plane');
}

// One story, in order: each test builds on the state the ones before it left.
describe('deleting a tenant fences everything keyed by it (all-in-one)', () => {
  let old: { key: string; internalId: string };
  let successor: { key: string; internalId: string };
  let oldGeneration: string;
  let oldText: string;
  let oldRequests: number;
  let deleted: { status: number; body: Json };

  it('the first acme makes a keyed request (retained), reads its generation and spends its budget', async () => {
    old = await createAcme();
    const first = await settledChat(old.key, { 'Idempotency-Key': 'order-42' });
    expect(first.status).toBe(200);
    oldGeneration = first.headers.get('x-weir-generation-id') as string;
    oldText = first.body.choices[0].message.content as string;
    expect(oldGeneration).toMatch(/^gen_/);
    const replay = await chat(old.key, { 'Idempotency-Key': 'order-42' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('x-weir-generation-id')).toBe(oldGeneration);
    expect((await get(`/v1/generations/${oldGeneration}`, old.key)).status).toBe(200);
    // Spend the budget until a request (worst case 2 USD) no longer fits.
    let refused = await chat(old.key);
    for (let i = 0; i < 5 && refused.status === 200; i++) refused = await chat(old.key);
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('budget_exhausted');
    const usage = await eventually(async () => {
      const u = await get('/v1/usage?window=month', old.key);
      return u.status === 200 && u.body.requests >= 1 ? u.body : undefined;
    }, 'the old usage in the ledger');
    expect(usage.cost_usd).toBeGreaterThan(0);
    oldRequests = usage.requests;
  });

  it('is deleted (audited) and created again under the same id with a new key; the old key stays dead', async () => {
    deleted = await admin('DELETE', '/tenants/acme');
    expect(deleted.status).toBe(200);
    expect(deleted.body).toMatchObject({ id: 'acme', deleted: true });
    const audit = await admin('GET', '/audit?entity_type=tenant&entity_id=acme&action=tenant.delete');
    expect(audit.body.data).toHaveLength(1);
    const rightAfter = (await chat(old.key)).status;
    successor = await createAcme();
    // The old key is refused as unknown, before and after the id is live again.
    expect(rightAfter).toBe(401);
    expect((await settledChat(old.key)).status).toBe(401);
  });

  it('runs the same Idempotency-Key afresh for the successor: not replayed, a new generation', async () => {
    const fresh = await settledChat(successor.key, { 'Idempotency-Key': 'order-42' });
    expect(fresh.status).toBe(200);
    expect(fresh.headers.get('idempotent-replayed')).toBeNull();
    expect(fresh.headers.get('x-weir-generation-id')).not.toBe(oldGeneration);
  });

  it('answers 404 for the old generation and its events, echoing nothing of it', async () => {
    const gone = await get(`/v1/generations/${oldGeneration}`, successor.key);
    expect(gone.status).toBe(404);
    expect(gone.body.error.code).toBe('not_found');
    const events = await get(`/v1/generations/${oldGeneration}/events`, successor.key);
    expect(events.status).toBe(404);
    if (oldText.length > 0) expect(events.text).not.toContain(oldText);
    const cancel = await fetch(`${platform.url}/v1/generations/${oldGeneration}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${successor.key}` } });
    expect(cancel.status).toBe(404);
  });

  it('starts the successor’s budget at zero and shows it none of the old usage', async () => {
    // The old acme exhausted the budget; the successor's second request still fits its own.
    const second = await chat(successor.key);
    expect(second.status).toBe(200);
    const usage = await eventually(async () => {
      const u = await get('/v1/usage?window=month', successor.key);
      return u.status === 200 && u.body.requests >= 2 ? u.body : undefined;
    }, 'the successor usage in the ledger');
    expect(usage.requests).toBe(2);
    expect(usage.by_app.map((a: Json) => a.app_id)).toEqual(['acme-web']);
    expect(usage.cost_usd).toBeLessThanOrEqual(4);
  });

  it('keeps the old rows in the ledger for invoices: by the old internal id, or with include_deleted', async () => {
    expect(old.internalId).toMatch(/^acme~[0-9a-f]{16}$/);
    expect(successor.internalId).toMatch(/^acme~[0-9a-f]{16}$/);
    expect(successor.internalId).not.toBe(old.internalId);
    expect(deleted.body).toEqual({ id: 'acme', deleted: true, internal_id: old.internalId });
    const byOld = await admin('GET', `/usage?tenant=acme&internal_id=${encodeURIComponent(old.internalId)}&window=month`);
    expect(byOld.status).toBe(200);
    expect(byOld.body.data).toEqual([expect.objectContaining({ tenant_id: 'acme', internal_id: old.internalId, deleted: true, requests: oldRequests })]);
    const current = await admin('GET', '/usage?tenant=acme&window=month');
    expect(current.body.data).toEqual([expect.objectContaining({ internal_id: successor.internalId, deleted: false, requests: 2 })]);
    const all = await admin('GET', '/usage?tenant=acme&window=month&include_deleted=true');
    expect(all.body.data.map((r: Json) => r.internal_id).sort()).toEqual([old.internalId, successor.internalId].sort());
    expect((await admin('GET', '/usage?tenant=nobody')).status).toBe(404);
    expect((await admin('GET', '/usage?tenant=acme&tenant_id=acme')).status).toBe(400);
  });
});

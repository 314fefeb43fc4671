/**
 * The admin API end to end over HTTP against a throw-away Postgres database: seeded from a
 * configuration file, with an in-memory snapshot sink standing in for `@weir/config-sync`.
 * One topology for the whole file; tests build on each other's state only where named.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { hashApiKey } from '@weir/core';
import { parseConfig } from '@weir/config';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { sql } from 'kysely';
import { mintAdminToken } from './admin-token';
import { registerBootstrapAdminToken } from './admin-auth';
import { createControlPlane, type ControlPlane } from './control-plane';
import { createEvalRunStore } from './eval';
import { createControlPlaneHttpApp } from './http-app';
import { seedFromConfigFile } from './seed';
import { createInMemorySnapshotSink, type InMemorySnapshotSink } from './snapshot-sink';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const CONFIG = `
revisions:
  - id: tiny@1
    model: tiny
    engine: { kind: simulated }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
  - id: tiny@2
    model: tiny
    engine: { kind: simulated }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
aliases:
  - name: tiny
    revision: tiny@1
tenants:
  - id: demo
    name: Demo
    apps:
      - id: demo-app
        name: Demo app
    limits: { max_concurrent: 8 }
defaults:
  cancel_grace_ms: 250
`;

let database: TestDatabase;
let sink: InMemorySnapshotSink;
let cp: ControlPlane;
let server: Server;
let base: string;
let dir: string;
const adminToken = mintAdminToken().plaintext;
let viewerToken: string;

async function call(method: string, urlPath: string, body?: unknown, token: string | null = adminToken): Promise<{ status: number; body: Json; headers: Headers }> {
  const res = await fetch(`${base}/admin/v1${urlPath}`, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** Stores a finished, passing eval run of `candidate` on `alias` (what POST /admin/v1/evals leaves), as the canary gate reads it. */
async function storePassingEval(alias: string, candidate: string, stable: string): Promise<string> {
  const runs = createEvalRunStore(database.db);
  const run = await runs.start({ tenant_id: 'demo', use_case: 'support', alias, candidate_revision: candidate, stable_revision: stable, scorer: { kind: 'exact', threshold: 1 } });
  const latency = { ttft_p50_ms: 1, ttft_p95_ms: 1, total_p50_ms: 1, total_p95_ms: 1 };
  await runs.finish(run.id, {
    scorer: { kind: 'exact', threshold: 1 },
    allowed_errors: 0,
    prompts: [],
    totals: { prompts: 1, passed: 1, failed: 0, unscored: 0, candidate_errors: 0, stable_errors: 0, mean_score: 1, candidate: latency, stable: latency },
    pass: true,
    reasons: [],
  });
  return run.id;
}

const latestVersion = async () => Number((await database.db.selectFrom('config_snapshots').select(sql<string>`max(version)`.as('v')).executeTakeFirstOrThrow()).v);
const auditCount = async () => Number((await database.db.selectFrom('audit_log').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow()).n);

beforeAll(async () => {
  database = await createTestDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-cp-'));
  writeFileSync(path.join(dir, 'weir.yaml'), CONFIG);
  sink = createInMemorySnapshotSink();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink });
  expect(await registerBootstrapAdminToken(database.db, adminToken)).toBe('registered');
  const app = createControlPlaneHttpApp({
    controlPlane: cp,
    // An extension route, as the capacity and eval routes mount.
    extraRoutes: [(router) => router.get('/whoami', (req, res) => void res.json({ role: (req as unknown as { admin: { role: string } }).admin.role }))],
  });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await cp.close();
  await database.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the control plane admin API', () => {
  it('seeds an empty store from a config file once, as snapshot version 1, and republishes it', async () => {
    const seeded = await seedFromConfigFile(database.db, path.join(dir, 'weir.yaml'));
    expect(seeded).toEqual({ seeded: true, version: 1, revisions: 2, aliases: 1, tenants: 1 });
    expect(await seedFromConfigFile(database.db, path.join(dir, 'weir.yaml'))).toEqual({ seeded: false, reason: 'not_empty' });
    expect(await cp.republishLatest()).toBe(true);
    expect(sink.snapshots.map((s) => s.version)).toEqual([1]);
    const config = sink.snapshots[0].config as Json;
    expect(config.revisions.map((r: Json) => r.id)).toEqual(['tiny@1', 'tiny@2']);
    expect(config.tenants[0]).toEqual({
      id: 'demo',
      uid: expect.stringMatching(/^demo~[0-9a-f]{16}$/),
      name: 'Demo',
      apps: [{ id: 'demo-app', uid: expect.stringMatching(/^demo-app~[0-9a-f]{16}$/), name: 'Demo app' }],
      limits: { max_concurrent: 8 },
    });
    // What the data plane will do with it.
    expect(parseConfig(JSON.stringify(config), 'snapshot v1').tenants[0].limits.maxConcurrent).toBe(8);
    const one = await call('GET', '/snapshots/1');
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ version: 1, schema_version: 1, created_by: 'system:seed' });
    expect(one.body.config).toEqual(config);
  });

  it('refuses a missing, malformed, unknown or revoked token (401) and writes by a viewer (403)', async () => {
    const created = await call('POST', '/admin-tokens', { role: 'viewer', label: 'dashboards' });
    expect(created.status).toBe(201);
    expect(created.body.token).toMatch(/^wa_[a-z0-9]{8}_/);
    viewerToken = created.body.token;
    const listed = await call('GET', '/admin-tokens');
    expect(JSON.stringify(listed.body)).not.toContain(viewerToken);

    expect((await call('GET', '/tenants', undefined, null)).status).toBe(401);
    const bad = await call('GET', '/tenants', undefined, `${adminToken}x`);
    expect(bad.status).toBe(401);
    expect(bad.body.error).toMatchObject({ type: 'authentication_error', code: 'authentication_failed' });
    expect((await call('GET', '/tenants', undefined, viewerToken)).status).toBe(200);
    expect((await call('GET', '/whoami', undefined, viewerToken)).body).toEqual({ role: 'viewer' });
    expect((await call('GET', '/whoami', undefined, null)).status).toBe(401);
    expect((await call('GET', '/no-such-route')).body.error.code).toBe('not_found');
    const denied = await call('POST', '/tenants', { id: 'x', name: 'X' }, viewerToken);
    expect(denied.status).toBe(403);
    expect(denied.body.error.code).toBe('permission_denied');
    expect(await database.db.selectFrom('tenants').select('id').where('id', '=', 'x').executeTakeFirst()).toBeUndefined();

    const spare = await call('POST', '/admin-tokens', { role: 'admin', label: 'spare' });
    expect((await call('POST', `/admin-tokens/${spare.body.id}/revoke`, {})).status).toBe(200);
    expect((await call('GET', '/tenants', undefined, spare.body.token)).status).toBe(401);
  });

  it('creates, reads, patches and deletes tenants and apps, each change audited with before and after and a new snapshot', async () => {
    const v0 = await latestVersion();
    const created = await call('POST', '/tenants', { id: 'acme', name: 'Acme', policy: { limits: { requests_per_minute: 60, monthly_budget_usd: 100 } } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ id: 'acme', name: 'Acme', apps: [], policy: { limits: { requests_per_minute: 60, monthly_budget_usd: 100 } } });
    expect(Number(created.headers.get('x-weir-config-version'))).toBe(v0 + 1);
    expect((await call('POST', '/tenants', { id: 'acme', name: 'Again' })).status).toBe(409);

    const app = await call('POST', '/tenants/acme/apps', { id: 'acme-web', name: 'Web', limits: { max_concurrent: 2 } });
    expect(app.status).toBe(201);
    const patched = await call('PATCH', '/tenants/acme', { name: 'Acme Corp' });
    expect(patched.body.name).toBe('Acme Corp');
    expect((await call('PATCH', '/tenants/acme/apps/acme-web', { name: 'Website' })).body).toMatchObject({ name: 'Website', limits: { max_concurrent: 2 } });
    expect((await call('GET', '/tenants/acme')).body.apps.map((a: Json) => a.id)).toEqual(['acme-web']);
    expect((await call('GET', '/tenants/nope')).status).toBe(404);

    const audit = await call('GET', '/audit?entity_type=tenant&entity_id=acme');
    expect(audit.body.data.map((e: Json) => e.action)).toEqual(['tenant.update', 'tenant.create']);
    expect(audit.body.data[0]).toMatchObject({ actor: { label: 'bootstrap (WEIR_ADMIN_TOKEN)' }, before: { name: 'Acme' }, after: { name: 'Acme Corp' } });
    expect(audit.body.data[1].before).toBeNull();

    const snap = await call('GET', '/snapshots/latest');
    expect(snap.body.config.tenants.find((t: Json) => t.id === 'acme')).toEqual({
      id: 'acme',
      uid: expect.stringMatching(/^acme~[0-9a-f]{16}$/),
      name: 'Acme Corp',
      apps: [{ id: 'acme-web', uid: expect.stringMatching(/^acme-web~[0-9a-f]{16}$/), name: 'Website', limits: { max_concurrent: 2 } }],
      limits: { requests_per_minute: 60, monthly_budget_usd: 100 },
    });

    const deletedApp = await call('DELETE', '/tenants/acme/apps/acme-web');
    expect(deletedApp.body).toEqual({ id: 'acme-web', deleted: true });
    const deleted = await call('DELETE', '/tenants/acme');
    expect(deleted.status).toBe(200);
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'tenant', tenant_id: 'acme' });
    const deletions = await call('GET', '/audit?action=tenant.delete');
    expect(deletions.body.data[0]).toMatchObject({ entity_id: 'acme', before: { name: 'Acme Corp' }, after: null });
    // Every one of those changes produced its own snapshot, in order.
    const versions = (await call('GET', '/snapshots?limit=200')).body.data.map((s: Json) => s.version);
    // (create tenant, create app, patch tenant, patch app, delete app, delete tenant; the 409 made none)
    expect(versions.slice(0, 7)).toEqual([v0 + 6, v0 + 5, v0 + 4, v0 + 3, v0 + 2, v0 + 1, v0]);
    expect(sink.snapshots.at(-1)?.version).toBe(v0 + 6);
  });

  it('shows a new API key once, stores only its hash, and revoking it publishes a revocation and a new snapshot', async () => {
    const created = await call('POST', '/tenants/demo/apps/demo-app/keys', { label: 'ci' });
    expect(created.status).toBe(201);
    const plaintext: string = created.body.key;
    expect(plaintext).toMatch(/^wk_[a-z0-9]{8}_[A-Za-z0-9_-]{22,}$/);
    const row = await database.db.selectFrom('api_keys').selectAll().where('id', '=', created.body.id).executeTakeFirstOrThrow();
    expect(row.sha256).toBe(hashApiKey(plaintext));
    const secret = plaintext.split('_').slice(2).join('_');
    const everywhere = JSON.stringify([await database.db.selectFrom('api_keys').selectAll().execute(), await database.db.selectFrom('audit_log').selectAll().execute()]);
    expect(everywhere).not.toContain(secret);

    const listed = await call('GET', '/tenants/demo/apps/demo-app/keys');
    expect(listed.body.data).toEqual([expect.objectContaining({ id: created.body.id, prefix: row.prefix, label: 'ci', revoked_at: null })]);
    expect(JSON.stringify(listed.body)).not.toContain(secret);
    expect(listed.body.data[0].key).toBeUndefined();

    const before = await latestVersion();
    const revoked = await call('POST', `/tenants/demo/apps/demo-app/keys/${created.body.id}/revoke`, {});
    expect(revoked.status).toBe(200);
    expect(revoked.body.revoked_at).not.toBeNull();
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'api_key', tenant_id: 'demo', api_key_id: created.body.id, api_key_sha256: hashApiKey(plaintext) });
    expect(await latestVersion()).toBe(before + 1);
    const audit = await call('GET', `/audit?entity_type=api_key&entity_id=${created.body.id}`);
    expect(audit.body.data.map((e: Json) => e.action)).toEqual(['api_key.revoke', 'api_key.create']);
    expect(audit.body.data[0].before.revoked_at).toBeNull();
    expect(audit.body.data[0].after.revoked_at).not.toBeNull();
  });

  it('deletes an API key (revoked on the fast path, audited, gone from the list); 404 for an unknown one', async () => {
    const created = await call('POST', '/tenants/demo/apps/demo-app/keys', { label: 'to delete' });
    const before = await latestVersion();
    const deleted = await call('DELETE', `/tenants/demo/apps/demo-app/keys/${created.body.id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ id: created.body.id, deleted: true });
    expect(deleted.headers.get('x-weir-config-version')).toBe(String(before + 1));
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'api_key', tenant_id: 'demo', api_key_id: created.body.id, api_key_sha256: hashApiKey(created.body.key) });
    expect((await call('GET', '/tenants/demo/apps/demo-app/keys')).body.data.map((k: Json) => k.id)).not.toContain(created.body.id);
    const audit = await call('GET', `/audit?entity_type=api_key&entity_id=${created.body.id}`);
    expect(audit.body.data.map((e: Json) => e.action)).toEqual(['api_key.delete', 'api_key.create']);
    expect(audit.body.data[0]).toMatchObject({ before: { id: created.body.id, label: 'to delete' }, after: null });
    expect(JSON.stringify(audit.body)).not.toContain(created.body.key.split('_').slice(2).join('_'));
    const again = await call('DELETE', `/tenants/demo/apps/demo-app/keys/${created.body.id}`);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('not_found');
  });

  it('deleting a tenant revokes its active keys too and purges its idempotency keys, not another incarnation’s (issue 14 §4)', async () => {
    const tenant = await call('POST', '/tenants', { id: 'doomed', name: 'Doomed' });
    expect(tenant.body.internal_id).toMatch(/^doomed~[0-9a-f]{16}$/);
    await call('POST', '/tenants/doomed/apps', { id: 'doomed-web', name: 'Web' });
    const key = await call('POST', '/tenants/doomed/apps/doomed-web/keys', {});
    const key2 = await call('POST', '/tenants/doomed/apps/doomed-web/keys', {});
    await call('POST', `/tenants/doomed/apps/doomed-web/keys/${key2.body.id}/revoke`);
    const idem = (tenantId: string) => ({ tenant_id: tenantId, request_id: 'k1', body_sha256: 'a'.repeat(64), generation_id: 'gen_1', route: 'generations', state: 'done' as const, result: JSON.stringify({ deltas: ['secret output'] }), expires_at: new Date(Date.now() + 60_000) });
    await database.db.insertInto('idempotency_keys').values([idem(tenant.body.internal_id), idem('doomed-other-tenant')]).execute();
    const seq = sink.revocations.length;
    expect((await call('DELETE', '/tenants/doomed')).body).toEqual({ id: 'doomed', deleted: true, internal_id: tenant.body.internal_id });
    expect(sink.revocations.slice(seq).map((r) => ({ kind: r.kind, tenant: r.tenant_id, key: r.api_key_id }))).toEqual([
      { kind: 'tenant', tenant: 'doomed', key: undefined },
      { kind: 'api_key', tenant: 'doomed', key: key.body.id },
    ]);
    const left = await database.db.selectFrom('idempotency_keys').select('tenant_id').where('tenant_id', 'in', [tenant.body.internal_id, 'doomed-other-tenant']).execute();
    expect(left).toEqual([{ tenant_id: 'doomed-other-tenant' }]);
    const recreated = await call('POST', '/tenants', { id: 'doomed', name: 'Doomed again' });
    expect(recreated.body.internal_id).toMatch(/^doomed~[0-9a-f]{16}$/);
    expect(recreated.body.internal_id).not.toBe(tenant.body.internal_id);
    await call('DELETE', '/tenants/doomed');
  });

  it('flips the kill switch on the fast path and keeps policies in the store', async () => {
    const on = await call('POST', '/tenants/demo/kill-switch', { enabled: true });
    expect(on.status).toBe(200);
    expect(on.body.kill_switch).toBe(true);
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'kill_switch', tenant_id: 'demo', enabled: true });
    // The same state rides in the next full snapshot, and the data plane reads it.
    const config = sink.snapshots.at(-1)?.config as Json;
    expect(config.tenants[0].kill_switch).toBe(true);
    expect(parseConfig(JSON.stringify(config), 'snapshot').tenants[0]).toMatchObject({ id: 'demo' });
    const off = await call('POST', '/tenants/demo/kill-switch', { enabled: false });
    expect(off.body.kill_switch).toBe(false);
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'kill_switch', tenant_id: 'demo', enabled: false });
    // The snapshot that includes it names it (seq and content): data planes bind that seq to it (issue 14, part 11).
    expect(sink.snapshots.at(-1)?.lastRevocation).toEqual(sink.revocations.at(-1));
    const seqs = sink.revocations.map((r) => r.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));

    expect((await call('PUT', '/redaction-profiles/pii-basic', { recognizers: ['email', 'card'] })).status).toBe(200);
    const patched = await call('PATCH', '/tenants/demo/policy', { content_logging: true, redaction_profile: 'pii-basic', limits: { max_concurrent: 4 } });
    expect(patched.body).toMatchObject({ content_logging: true, redaction_profile: 'pii-basic', limits: { max_concurrent: 4 }, kill_switch: false });
    const removed = await call('PATCH', '/tenants/demo/policy', { redaction_profile: null });
    expect(removed.body.redaction_profile).toBeUndefined();
    const audit = await call('GET', '/audit?entity_type=tenant_policy&entity_id=demo&limit=1');
    expect(audit.body.data[0]).toMatchObject({ action: 'policy.update', before: { redaction_profile: 'pii-basic' }, after: { content_logging: true } });
    expect(audit.body.next_cursor).not.toBeNull();
    const page2 = await call('GET', `/audit?entity_type=tenant_policy&entity_id=demo&limit=1&cursor=${audit.body.next_cursor}`);
    expect(page2.body.data[0].action).toBe('policy.update');
    expect(page2.body.data[0].id).toBeLessThan(audit.body.data[0].id);
  });

  it('sets a tenant moderation policy that snapshots carry, and refuses one RE2 cannot compile with 400 naming the pattern (issue 15)', async () => {
    const published = sink.snapshots.length;
    const moderation = { input: { engine: 'rules', fail: 'closed' }, output: { engine: 'rules', window_chars: 120, overlap_chars: 24 }, rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }] } };
    const set = await call('PATCH', '/tenants/demo/policy', { moderation });
    expect(set.status).toBe(200);
    expect(set.body.moderation).toMatchObject(moderation);
    expect(sink.snapshots.length).toBe(published + 1);
    const parsed = parseConfig(JSON.stringify(sink.snapshots.at(-1)?.config), 'snapshot').tenants.find((t) => t.id === 'demo');
    expect(parsed?.moderation).toMatchObject({ input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, output: { windowChars: 120, overlapChars: 24 }, rules: moderation.rules });

    const bad = await call('PATCH', '/tenants/demo/policy', { moderation: { ...moderation, rules: { patterns: [{ category: 'custom', pattern: '(?<=x)y' }] } } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_config');
    expect(bad.body.error.message).toMatch(/moderation\.rules\.patterns\[0\]\.pattern: does not compile with RE2/);
    const everything = await call('PATCH', '/tenants/demo/policy', { moderation: { ...moderation, rules: { patterns: [{ category: 'violence', pattern: 'a*' }] } } });
    expect(everything.status).toBe(400);
    expect(everything.body.error.message).toMatch(/moderation\.rules\.patterns\[0\]\.pattern: matches the empty string/);
    const unknownEngine = await call('PATCH', '/tenants/demo/policy', { moderation: { input: { engine: 'nope' } } });
    expect(unknownEngine.status).toBe(400);
    expect(unknownEngine.body.error.message).toContain("moderation.input.engine: 'nope' is not a moderation engine");
    expect(sink.snapshots.length).toBe(published + 1);
    expect((await call('PATCH', '/tenants/demo/policy', { moderation: null })).body.moderation).toBeUndefined();
  });

  it('manages redaction profiles: RE2 checked on write, published in the snapshot, named by tenant policies, not deleted while in use', async () => {
    const list = await call('GET', '/redaction-profiles');
    expect(list.body.data.slice(0, 2).map((p: Json) => [p.name, p.builtin])).toEqual([
      ['default', true],
      ['strict', true],
    ]);
    const bad = await call('PUT', '/redaction-profiles/hr', { recognizers: ['email'], custom_patterns: [{ name: 'emp', pattern: '(a)\\1' }] });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain('redaction_profiles.hr.custom_patterns[0].pattern: not a valid RE2 pattern');
    const unknown = await call('PUT', '/redaction-profiles/hr', { recognizers: ['passport'] });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.message).toContain("unknown recognizer 'passport'");
    expect((await call('PUT', '/redaction-profiles/default', { recognizers: ['email'] })).status).toBe(400);
    const put = await call('PUT', '/redaction-profiles/hr', { recognizers: ['email', 'ssn'], custom_patterns: [{ name: 'emp', pattern: 'EMP-[0-9]{6}' }], replacement: 'hash' });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ name: 'hr', builtin: false, spec: { recognizers: ['email', 'ssn'], custom_patterns: [{ name: 'emp', pattern: 'EMP-[0-9]{6}' }], replacement: 'hash' } });
    expect((await call('GET', '/redaction-profiles/hr')).body.spec.replacement).toBe('hash');
    const policy = await call('PATCH', '/tenants/demo/policy', { redaction_profile: 'hr', content_logging: true, redact_upstream: true });
    expect(policy.status).toBe(200);
    const snapshot = parseConfig(JSON.stringify(sink.snapshots.at(-1)?.config), 'snapshot');
    expect(snapshot.redactionProfiles?.find((p) => p.name === 'hr')).toMatchObject({ recognizers: ['email', 'ssn'], replacement: 'hash' });
    expect(snapshot.tenants.find((t) => t.id === 'demo')).toMatchObject({ redactionProfile: 'hr', contentLogging: true, redactUpstream: true });
    const refused = await call('PATCH', '/tenants/demo/policy', { redaction_profile: 'missing' });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain('unknown redaction profile');
    const inUse = await call('DELETE', '/redaction-profiles/hr');
    expect(inUse.status).toBe(409);
    expect(inUse.body.error.message).toContain('"demo"');
    await call('PATCH', '/tenants/demo/policy', { redaction_profile: 'strict', redact_upstream: null });
    expect((await call('DELETE', '/redaction-profiles/hr')).body).toEqual({ name: 'hr', deleted: true });
    expect((await call('GET', '/redaction-profiles/hr')).status).toBe(404);
  });

  it('sets a tenant cache policy that reaches the snapshot, and refuses an invalid one with 400 naming the field', async () => {
    const set = await call('PATCH', '/tenants/demo/policy', { cache: { exact: { enabled: true, ttl_ms: 30_000 }, templates: ['faq'], hit_price_fraction: 0.2 } });
    expect(set.status).toBe(200);
    expect(set.body.cache).toEqual({ exact: { enabled: true, ttl_ms: 30_000 }, templates: ['faq'], hit_price_fraction: 0.2 });
    const config = sink.snapshots.at(-1)?.config as { tenants: { id: string }[] };
    const parsed = parseConfig(JSON.stringify(config), 'snapshot').tenants.find((t) => t.id === 'demo');
    expect(parsed?.cache).toEqual({ exact: { enabled: true, ttlMs: 30_000 }, deterministicOnly: true, allowOptIn: true, templates: ['faq'], hitPriceFraction: 0.2 });
    const bad = await call('PATCH', '/tenants/demo/policy', { cache: { exact: { enabled: true, ttl_ms: 5 } } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_config');
    expect(bad.body.error.problems).toEqual([expect.objectContaining({ path: expect.stringMatching(/^tenants\[\d+\]\.cache\.exact\.ttl_ms$/) })]);
    // The semantic tier obeys the semantic lib's rules: the threshold floor, an embedding revision.
    const semantic = await call('PATCH', '/tenants/demo/policy', { cache: { exact: { enabled: true }, semantic: { enabled: true, threshold: 0.9, embedding_revision: 'tiny@1' } } });
    expect(semantic.status).toBe(400);
    expect(semantic.body.error.problems).toEqual([
      expect.objectContaining({ path: 'tenants[0].cache.semantic.threshold', message: expect.stringContaining('below the floor of 0.95') }),
      expect.objectContaining({ path: 'tenants[0].cache.semantic.embedding_revision', message: expect.stringContaining('is a generation model') }),
    ]);
    const unnamed = await call('PATCH', '/tenants/demo/policy', { cache: { semantic: { enabled: true } } });
    expect(unnamed.body.error.problems).toEqual([expect.objectContaining({ path: 'tenants[0].cache.semantic.embedding_revision' })]);
    const notObject = await call('PATCH', '/tenants/demo/policy', { cache: 'on' });
    expect(notObject.status).toBe(400);
    expect(notObject.body.error.param).toBe('cache');
    const off = await call('PATCH', '/tenants/demo/policy', { cache: null });
    expect(off.body.cache).toBeUndefined();
  });

  it('refuses an invalid change with 400 listing the problems, committing nothing', async () => {
    const version = await latestVersion();
    const audits = await auditCount();
    const published = sink.snapshots.length;
    const res = await call('POST', '/aliases', { name: 'broken', targets: [{ revision: 'missing@1', weight: 1 }] });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_config' });
    expect(res.body.error.message).toContain('unknown revision "missing@1"');
    expect(res.body.error.problems).toEqual([expect.objectContaining({ path: expect.stringMatching(/^aliases\[\d+\]\.targets\[0\]\.revision$/) })]);
    expect(await database.db.selectFrom('model_aliases').select('id').where('id', '=', 'broken').executeTakeFirst()).toBeUndefined();
    expect(await latestVersion()).toBe(version);
    expect(await auditCount()).toBe(audits);
    expect(sink.snapshots.length).toBe(published);

    const unknownField = await call('POST', '/tenants', { id: 'y', name: 'Y', nmae: 'typo' });
    expect(unknownField.status).toBe(400);
    expect(unknownField.body.error).toMatchObject({ param: 'nmae', code: 'invalid_request' });
    const badJson = await fetch(`${base}/admin/v1/tenants`, { method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: '{"id":' });
    expect(badJson.status).toBe(400);
    expect(((await badJson.json()) as Json).error.code).toBe('invalid_json');
  });

  it('refuses a revision whose model_path lies outside the model directories (e.g. /etc/shadow) with 400 naming the field, committing nothing (issue 14)', async () => {
    const version = await latestVersion();
    const audits = await auditCount();
    const published = sink.snapshots.length;
    const spec = (await call('GET', '/revisions/tiny@2')).body.spec;
    for (const modelPath of ['/etc/shadow', '/proc/self/environ']) {
      const res = await call('POST', '/revisions', {
        ...spec,
        id: 'evil95@1',
        model: 'evil95',
        engine: { kind: 'llamacpp', model_path: modelPath, model_sha256: '0'.repeat(64) },
      });
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'invalid_config' });
      expect(res.body.error.problems).toEqual([expect.objectContaining({ path: expect.stringMatching(/^revisions\[\d+\]\.engine\.model_path$/) })]);
      expect(res.body.error.message).toMatch(/not under a directory the configuration already uses for models/);
    }
    expect(await database.db.selectFrom('model_revisions').select('id').where('id', '=', 'evil95@1').executeTakeFirst()).toBeUndefined();
    expect(await latestVersion()).toBe(version);
    expect(await auditCount()).toBe(audits);
    expect(sink.snapshots.length).toBe(published);
  });

  it('keeps revisions immutable except for deprecation', async () => {
    const changed = await call('PATCH', '/revisions/tiny@1', { pricing: { input_per_mtok: 9, output_per_mtok: 9 } });
    expect(changed.status).toBe(409);
    expect(changed.body.error.message).toContain('revisions are immutable; create a new revision');
    expect((await call('POST', '/revisions', { ...(await call('GET', '/revisions/tiny@2')).body.spec })).status).toBe(409);
    expect((await call('PATCH', '/revisions/tiny@1', { deprecation: { retires_on: '2030-01-31', replacement: 'nope@9' } })).status).toBe(400);

    const deprecated = await call('PATCH', '/revisions/tiny@1', { deprecation: { retires_on: '2030-01-31', replacement: 'tiny@2', announced_on: '2029-12-01' } });
    expect(deprecated.status).toBe(200);
    expect(deprecated.body.deprecation).toEqual({ retires_on: '2030-01-31', replacement: 'tiny@2', announced_on: '2029-12-01' });
    expect(deprecated.body.spec.pricing).toEqual({ input_per_mtok: 0.1, output_per_mtok: 0.2 });
    expect((await call('GET', '/snapshots/latest')).body.config.revisions[0].deprecation).toEqual({ retires_on: '2030-01-31', replacement: 'tiny@2', announced_on: '2029-12-01' });
    const backwards = await call('PATCH', '/revisions/tiny@2', { deprecation: { retires_on: '2030-01-01', replacement: 'tiny@1', announced_on: '2030-02-01' } });
    expect(backwards.status).toBe(400);
    expect(backwards.body.error.code).toBe('invalid_config');
    const audit = await call('GET', '/audit?entity_type=revision&entity_id=tiny@1');
    expect(audit.body.data[0]).toMatchObject({ action: 'revision.deprecate', before: { deprecation: null }, after: { deprecation: { replacement: 'tiny@2' } } });

    const created = await call('POST', '/revisions', {
      id: 'tiny@3',
      model: 'tiny',
      engine: { kind: 'simulated' },
      context_window: 1024,
      max_output_tokens: 256,
      default_output_tokens: 64,
      pricing: { input_per_mtok: 0.05, output_per_mtok: 0.1 },
      capabilities: { streaming: true },
    });
    expect(created.status).toBe(201);
    const invalid = await call('POST', '/revisions', { id: 'tiny@4', model: 'tiny', engine: { kind: 'simulated' }, context_window: 64, max_output_tokens: 256, default_output_tokens: 64, pricing: { input_per_mtok: 0, output_per_mtok: 0 } });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.message).toContain('must be < context_window');

    // Models are a read-only view over revisions: the model's revisions, deprecation included, and the aliases reaching them.
    const models = await call('GET', '/models');
    expect(models.body.data).toEqual([
      {
        id: 'tiny',
        revisions: [
          { id: 'tiny@1', deprecation: { retires_on: '2030-01-31', replacement: 'tiny@2', announced_on: '2029-12-01' } },
          { id: 'tiny@2', deprecation: null },
          { id: 'tiny@3', deprecation: null },
        ],
        aliases: expect.arrayContaining(['tiny']),
      },
    ]);
    expect((await call('GET', '/models/tiny')).body.id).toBe('tiny');
    const missing = await call('GET', '/models/nope');
    expect(missing.status).toBe(404);
    expect(missing.body.error.message).toContain('create one with POST /admin/v1/revisions');
  });

  it('gates raising a canary on a passing eval: 409 naming the missing eval, committing nothing; 200 with one, recorded in the audit entry', async () => {
    expect((await call('POST', '/aliases', { name: 'gated', revision: 'tiny@1' })).status).toBe(201);
    const version = await latestVersion();
    const audits = await auditCount();
    const refused = await call('PUT', '/aliases/gated', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }] });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: 'conflict', param: 'targets' });
    expect(refused.body.error.message).toMatch(/^Raising canary revision tiny@2 on alias gated to 10% of traffic \(from 0%\) needs a passing eval: there is no passing eval run of tiny@2 on gated since /);
    expect(refused.body.error.message).toContain('POST /admin/v1/evals');
    // A new alias with a canary arm is gated the same way.
    const created = await call('POST', '/aliases', { name: 'gated-new', targets: [{ revision: 'tiny@1', weight: 9 }, { revision: 'tiny@2', weight: 1 }] });
    expect(created.status).toBe(409);
    expect(created.body.error.message).toMatch(/canary revision tiny@2 on alias gated-new to 10% of traffic/);
    // A passing eval of the same revision on another alias does not count.
    await storePassingEval('elsewhere', 'tiny@2', 'tiny@1');
    expect((await call('PUT', '/aliases/gated', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }] })).status).toBe(409);
    expect(await latestVersion()).toBe(version);
    expect(await auditCount()).toBe(audits);
    expect((await call('GET', '/aliases/gated')).body.spec).toEqual({ name: 'gated', revision: 'tiny@1' });

    const evalId = await storePassingEval('gated', 'tiny@2', 'tiny@1');
    const raised = await call('PUT', '/aliases/gated', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }] });
    expect(raised.status).toBe(200);
    expect(raised.body.spec.targets).toEqual([{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }]);
    expect(Number(raised.headers.get('x-weir-config-version'))).toBe(version + 1);
    const updates = async () => (await call('GET', '/audit?entity_type=alias&entity_id=gated&action=alias.update')).body.data;
    expect((await updates())[0].after.canary_gate).toEqual([{ revision: 'tiny@2', share_before: 0, share_after: 0.1, eval_run_id: evalId }]);
    // Lowering the canary needs nothing and records no gate.
    expect((await call('PUT', '/aliases/gated', { targets: [{ revision: 'tiny@1', weight: 95 }, { revision: 'tiny@2', weight: 5 }] })).status).toBe(200);
    expect((await updates())[0].after.canary_gate).toBeUndefined();
    expect((await call('DELETE', '/aliases/gated')).status).toBe(200);
  });

  it('refuses huge or unknown alias targets with 400 before the canary gate can be fooled, committing nothing', async () => {
    expect((await call('POST', '/aliases', { name: 'huge', revision: 'tiny@1' })).status).toBe(201);
    const version = await latestVersion();
    const audits = await auditCount();
    // 1e308 + 1e308 = Infinity made every share 0, so the canary looked "not raised".
    const huge = await call('PUT', '/aliases/huge', { targets: [{ revision: 'tiny@1', weight: 1e308 }, { revision: 'tiny@2', weight: 1e308 }] });
    expect(huge.status).toBe(400);
    expect(huge.body.error).toMatchObject({ code: 'invalid_request', param: 'targets[0].weight' });
    expect(huge.body.error.message).toContain('must be a finite number from 0 to 1000000');
    expect((await call('PUT', '/aliases/huge', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 2_000_000 }] })).body.error.param).toBe('targets[1].weight');
    // An unknown revision is the configuration's 400 (as on POST), not the gate's 409.
    const unknown = await call('PUT', '/aliases/huge', { targets: [{ revision: 'nope@1', weight: 100 }] });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_config' });
    expect(unknown.body.error.message).toContain('unknown revision "nope@1"');
    expect(await latestVersion()).toBe(version);
    expect(await auditCount()).toBe(audits);
    expect((await call('GET', '/aliases/huge')).body.spec).toEqual({ name: 'huge', revision: 'tiny@1' });
    expect((await call('DELETE', '/aliases/huge')).status).toBe(200);
  });

  it('lets PUT restore a revision that was the stable arm of the alias before without an eval, recording why; others stay gated', async () => {
    expect((await call('POST', '/aliases', { name: 'swap', revision: 'tiny@1' })).status).toBe(201);
    const evalId = await storePassingEval('swap', 'tiny@2', 'tiny@1');
    const promoted = await call('PUT', '/aliases/swap', { targets: [{ revision: 'tiny@2', weight: 100 }] });
    expect(promoted.status).toBe(200);
    const updates = async () => (await call('GET', '/audit?entity_type=alias&entity_id=swap&action=alias.update')).body.data;
    expect((await updates())[0].after.canary_gate).toEqual([{ revision: 'tiny@2', share_before: 0, share_after: 1, eval_run_id: evalId }]);
    // Back to the known-good tiny@1 (no eval of it on swap exists): not gated.
    const restored = await call('PUT', '/aliases/swap', { revision: 'tiny@1' });
    expect(restored.status).toBe(200);
    expect(restored.body.spec).toEqual({ name: 'swap', revision: 'tiny@1' });
    expect((await updates())[0].after.canary_gate).toEqual([{ revision: 'tiny@1', share_before: 0, share_after: 1, eval_run_id: null, former_stable: true }]);
    // tiny@3 was never its stable arm: gated, and the 409 points at rollback too.
    const refused = await call('PUT', '/aliases/swap', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@3', weight: 10 }] });
    expect(refused.status).toBe(409);
    expect(refused.body.error.message).toContain('to undo the last change of the arms, use POST /admin/v1/aliases/swap/rollback');
    expect((await call('DELETE', '/aliases/swap')).status).toBe(200);
  });

  it('judges an alias created again under a deleted name against its arms before the deletion; a brand-new name is not compared with anything', async () => {
    const aliasAudits = async (action: string) => (await call('GET', `/audit?entity_type=alias&entity_id=recreate&action=${action}`)).body.data;
    // A brand-new name has nothing to compare with: its (only) arm is its stable arm.
    expect((await call('POST', '/aliases', { name: 'fresh-name', revision: 'tiny@3' })).status).toBe(201);
    expect((await call('DELETE', '/aliases/fresh-name')).status).toBe(200);

    expect((await call('POST', '/aliases', { name: 'recreate', revision: 'tiny@1' })).status).toBe(201);
    expect((await call('PUT', '/aliases/recreate', { revision: 'tiny@3' })).status).toBe(409);
    expect((await call('DELETE', '/aliases/recreate')).status).toBe(200);
    const version = await latestVersion();
    const audits = await auditCount();
    // Delete and create again with the never-evaluated revision: refused like the PUT.
    const sneaked = await call('POST', '/aliases', { name: 'recreate', revision: 'tiny@3' });
    expect(sneaked.status).toBe(409);
    expect(sneaked.body.error).toMatchObject({ code: 'conflict', param: 'targets' });
    expect(sneaked.body.error.message).toMatch(/^Raising canary revision tiny@3 on alias recreate to 100% of traffic \(from 0%\) needs a passing eval/);
    expect(sneaked.body.error.message).toContain('recreate existed before and is judged against its arms before it was deleted');
    expect(await latestVersion()).toBe(version);
    expect(await auditCount()).toBe(audits);
    expect((await call('GET', '/aliases/recreate')).status).toBe(404);
    // The arms it had: nothing is raised.
    const same = await call('POST', '/aliases', { name: 'recreate', revision: 'tiny@1' });
    expect(same.status).toBe(201);
    expect((await aliasAudits('alias.create'))[0].after.canary_gate).toBeUndefined();

    // A second life on tiny@2 (evaluated), deleted; the eval then goes stale.
    const evalId = await storePassingEval('recreate', 'tiny@2', 'tiny@1');
    expect((await call('PUT', '/aliases/recreate', { revision: 'tiny@2' })).status).toBe(200);
    expect((await call('DELETE', '/aliases/recreate')).status).toBe(200);
    await sql`update eval_runs set created_at = ${new Date(Date.now() - 30 * 24 * 3_600_000)} where id = ${evalId}`.execute(database.db);
    // tiny@1, the stable arm of its first life, comes back without an eval: the history spans deletions.
    const back = await call('POST', '/aliases', { name: 'recreate', revision: 'tiny@1' });
    expect(back.status).toBe(201);
    expect((await aliasAudits('alias.create'))[0].after.canary_gate).toEqual([{ revision: 'tiny@1', share_before: 0, share_after: 1, eval_run_id: null, former_stable: true }]);
    // Left for the next test (pins): alias recreate on tiny@1, tiny@2 a former stable arm without a fresh eval.
  });

  it('gates a tenant pin to a revision the alias never had as its stable arm on a passing eval (409 naming it); stable pins, unchanged pins and removals are free', async () => {
    const policy = async () => (await call('GET', '/tenants/demo/policy')).body;
    const policyAudits = async () => (await call('GET', '/audit?entity_type=tenant_policy&entity_id=demo')).body.data;
    const original = await policy();
    const version = await latestVersion();
    const audits = await auditCount();
    // The report's case: a PATCH pinning a never-evaluated revision.
    const patched = await call('PATCH', '/tenants/demo/policy', { routes: [{ alias: 'tiny', pin: 'tiny@3' }] });
    expect(patched.status).toBe(409);
    expect(patched.body.error).toMatchObject({ code: 'conflict', param: 'routes[0].pin' });
    expect(patched.body.error.message).toMatch(/^Pinning alias tiny to revision tiny@3 .* needs a passing eval: there is no passing eval run of tiny@3 on tiny since /);
    expect(patched.body.error.message).toContain('POST /admin/v1/evals');
    // PUT and tenant create likewise.
    const put = await call('PUT', '/tenants/demo/policy', { ...original, routes: [{ alias: 'tiny', use_case: 'support', pin: 'tiny@2' }] });
    expect(put.status).toBe(409);
    expect(put.body.error.message).toContain('Pinning alias tiny for use case support to revision tiny@2');
    const created = await call('POST', '/tenants', { id: 'pinned-co', name: 'Pinned', policy: { routes: [{ alias: 'tiny', pin: 'tiny@2' }] } });
    expect(created.status).toBe(409);
    expect(created.body.error.param).toBe('routes[0].pin');
    expect((await call('GET', '/tenants/pinned-co')).status).toBe(404);
    expect(await policy()).toEqual(original);
    expect(await latestVersion()).toBe(version);
    expect(await auditCount()).toBe(audits);

    // The stable arm: free, and no gate recorded.
    expect((await call('PATCH', '/tenants/demo/policy', { routes: [{ alias: 'tiny', pin: 'tiny@1' }] })).status).toBe(200);
    expect((await policyAudits())[0].after.pin_gate).toBeUndefined();
    // With a passing eval of that revision on that alias: let through, the run recorded.
    const evalId = await storePassingEval('tiny', 'tiny@2', 'tiny@1');
    const withEval = await call('PATCH', '/tenants/demo/policy', { routes: [{ alias: 'tiny', pin: 'tiny@1' }, { alias: 'tiny', use_case: 'support', pin: 'tiny@2' }] });
    expect(withEval.status).toBe(200);
    expect(withEval.body.pin_gate).toBeUndefined();
    expect((await policyAudits())[0].after.pin_gate).toEqual([{ alias: 'tiny', use_case: 'support', revision: 'tiny@2', eval_run_id: evalId }]);
    // A former stable arm of the alias needs none (recreate's tiny@2, its eval stale).
    expect((await call('PATCH', '/tenants/demo/policy', { routes: [{ alias: 'recreate', pin: 'tiny@2' }] })).status).toBe(200);
    expect((await policyAudits())[0].after.pin_gate).toEqual([{ alias: 'recreate', revision: 'tiny@2', eval_run_id: null, former_stable: true }]);
    // A pin already in place (here as a configuration seed left it) does not block other edits.
    await database.db.updateTable('tenant_policies').set({ policy: JSON.stringify({ ...(await policy()), routes: [{ alias: 'tiny', pin: 'tiny@3' }] }) }).where('tenant_id', '=', 'demo').execute();
    const other = await call('PATCH', '/tenants/demo/policy', { content_logging: false });
    expect(other.status).toBe(200);
    expect(other.body.routes).toEqual([{ alias: 'tiny', pin: 'tiny@3' }]);
    // Removing pins is never gated.
    const removed = await call('PATCH', '/tenants/demo/policy', { routes: null, content_logging: null });
    expect(removed.status).toBe(200);
    expect(removed.body.routes).toBeUndefined();
    expect((await call('DELETE', '/aliases/recreate')).status).toBe(200);
  });

  it('changes alias weights and rolls back to the previous arms from the audit log, step by step', async () => {
    const arms = async () => (await call('GET', '/aliases/tiny')).body.spec;
    await storePassingEval('tiny', 'tiny@2', 'tiny@1');
    expect((await call('PUT', '/aliases/tiny', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }] })).status).toBe(200);
    expect((await call('PUT', '/aliases/tiny', { targets: [{ revision: 'tiny@1', weight: 50 }, { revision: 'tiny@2', weight: 50 }], fallbacks: ['tiny@3'] })).status).toBe(200);

    const first = await call('POST', '/aliases/tiny/rollback');
    expect(first.status).toBe(200);
    expect(await arms()).toEqual({ name: 'tiny', targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }], fallbacks: ['tiny@3'] });
    const second = await call('POST', '/aliases/tiny/rollback');
    expect(second.status).toBe(200);
    expect(await arms()).toEqual({ name: 'tiny', revision: 'tiny@1', fallbacks: ['tiny@3'] });
    const third = await call('POST', '/aliases/tiny/rollback');
    expect(third.status).toBe(409);

    const snap = await call('GET', '/snapshots/latest');
    expect(snap.body.config.aliases).toEqual([{ name: 'tiny', revision: 'tiny@1', fallbacks: ['tiny@3'] }]);
    const audit = await call('GET', '/audit?entity_type=alias&entity_id=tiny&action=alias.rollback');
    expect(audit.body.data).toHaveLength(2);
    expect(audit.body.data[0]).toMatchObject({ before: { spec: { targets: [{ weight: 90 }, { weight: 10 }] } }, after: { spec: { revision: 'tiny@1' } } });
  });

  it('keeps the database the source of truth when publishing fails, and catches up on the next change', async () => {
    sink.failWith = new Error('nats down');
    const v = await latestVersion();
    const res = await call('POST', '/tenants/demo/apps', { id: 'demo-batch', name: 'Batch' });
    expect(res.status).toBe(201);
    const key = await call('POST', '/tenants/demo/apps/demo-batch/keys', {});
    await call('POST', `/tenants/demo/apps/demo-batch/keys/${key.body.id}/revoke`, {});
    expect(await latestVersion()).toBe(v + 3);
    expect(sink.snapshots.at(-1)?.version).toBe(v);
    sink.failWith = undefined;
    expect(await cp.flush()).toBe(true);
    expect(sink.snapshots.at(-1)?.version).toBe(v + 3);
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'api_key', api_key_id: key.body.id });
    expect(await cp.flush()).toBe(true);
    expect(sink.snapshots.at(-1)?.version).toBe(v + 3);
  });

  it('manages pools and defaults, validated against the whole configuration', async () => {
    expect((await call('POST', '/pools', { id: 'acme-dedicated', kind: 'dedicated', description: 'Acme only' })).status).toBe(201);
    expect((await call('GET', '/pools')).body.data).toEqual([expect.objectContaining({ id: 'acme-dedicated', kind: 'dedicated' })]);
    const bad = await call('PATCH', '/defaults', { cancel_grace_ms: 5_000 });
    expect(bad.status).toBe(400);
    expect(bad.body.error.problems[0].path).toBe('defaults.cancel_grace_ms');
    const good = await call('PATCH', '/defaults', { max_queue_per_replica: 128 });
    expect(good.body).toEqual({ cancel_grace_ms: 250, max_queue_per_replica: 128 });
    expect((await call('GET', '/snapshots/latest')).body.config.defaults).toEqual({ cancel_grace_ms: 250, max_queue_per_replica: 128 });
  });
  // Last: it revokes the bootstrap token every other test uses.
  it('refuses to revoke the last active admin token (409), so the control plane always keeps an admin', async () => {
    const tokens = async (token = adminToken) => (await call('GET', '/admin-tokens', undefined, token)).body.data as Json[];
    const own = (await tokens()).find((t) => t.label === 'bootstrap (WEIR_ADMIN_TOKEN)');
    expect((await tokens()).filter((t) => t.role === 'admin' && t.revoked_at === null).map((t) => t.id)).toEqual([own.id]);
    const refused = await call('POST', `/admin-tokens/${own.id}/revoke`, {});
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('conflict');
    expect(refused.body.error.message).toContain('is the last active admin token');
    expect(refused.body.error.message).toContain('Create another admin token first');
    expect((await call('GET', '/whoami')).body).toEqual({ role: 'admin' });
    // A viewer token does not count as an admin; with a second admin the bootstrap one may go.
    const second = await call('POST', '/admin-tokens', { role: 'admin', label: 'second' });
    expect((await call('POST', `/admin-tokens/${own.id}/revoke`, {}, second.body.token)).status).toBe(200);
    expect((await call('GET', '/tenants')).status).toBe(401);
    const last = await call('POST', `/admin-tokens/${second.body.id}/revoke`, {}, second.body.token);
    expect([last.status, last.body.error.code]).toEqual([409, 'conflict']);
    expect((await call('GET', '/tenants', undefined, second.body.token)).status).toBe(200);
    // Revoking a viewer is never refused.
    const viewer = (await tokens(second.body.token)).find((t) => t.role === 'viewer' && t.revoked_at === null);
    expect((await call('POST', `/admin-tokens/${viewer.id}/revoke`, {}, second.body.token)).status).toBe(200);
  });
});

describe('revision prices per token class (issue 16 §4)', () => {
  // The suite above ends by revoking its admin token: this one registers its own.
  const token = mintAdminToken().plaintext;
  beforeAll(async () => {
    expect(await registerBootstrapAdminToken(database.db, token)).toBe('registered');
  });
  const revision = (id: string, pricing: Json) => ({ id, model: 'tiny', engine: { kind: 'simulated' }, context_window: 1024, max_output_tokens: 256, default_output_tokens: 64, pricing });

  it('creates a revision with its class prices, and publishes them in the snapshot', async () => {
    const pricing = { input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3, cache_write_input_per_mtok: 3.75, reasoning_per_mtok: 20 };
    const created = await call('POST', '/revisions', revision('priced@1', pricing), token);
    expect(created.status).toBe(201);
    expect(created.body.spec.pricing).toEqual(pricing);
    expect((await call('GET', '/revisions/priced@1', undefined, token)).body.spec.pricing).toEqual(pricing);
    const published = sink.snapshots.at(-1)?.config as Json;
    expect(published.revisions.find((r: Json) => r.id === 'priced@1').pricing).toEqual(pricing);
  });

  it('refuses a negative class price with invalid_config naming it, and creates nothing', async () => {
    const refused = await call('POST', '/revisions', revision('priced@2', { input_per_mtok: 3, output_per_mtok: 15, reasoning_per_mtok: -1 }), token);
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('invalid_config');
    expect(refused.body.error.message).toContain('pricing.reasoning_per_mtok');
    expect((await call('GET', '/revisions/priced@2', undefined, token)).status).toBe(404);
  });
});

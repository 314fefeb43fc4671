/**
 * The eval routes as the control plane mounts them, on a throw-away Postgres database: a
 * golden prompt and an eval run through the admin API (audited by the caller's token), replays
 * on engines built from the stored configuration, the canary gate opened by the passing run,
 * and a llama.cpp revision whose model file is not on this host failing with a clear error.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createControlPlane, createControlPlaneHttpApp, createInMemorySnapshotSink, type ControlPlane, mintAdminToken, registerBootstrapAdminToken, seedFromConfigFile } from '@weir/control-plane';
import { isWeirError } from '@weir/core';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { createRevisionResolver, evalRoutes } from './evals';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const SIMULATED = (id: string) => `
  - id: ${id}
    model: tiny
    engine: { kind: simulated, decode_step_ms: [[1, 1]] }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }`;
const MISSING_SHA = 'ab'.repeat(32);
const CONFIG = `
revisions:${SIMULATED('tiny@1')}${SIMULATED('tiny@2')}
  - id: story@1
    model: story
    engine: { kind: llamacpp, model_path: /nonexistent/weir-eval-test.gguf, model_sha256: ${MISSING_SHA} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 16
    pricing: { input_per_mtok: 0, output_per_mtok: 0 }
aliases:
  - name: tiny
    revision: tiny@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

const token = mintAdminToken();
let database: TestDatabase;
let cp: ControlPlane;
let dir: string;
let server: Server;
let base: string;

async function call(method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${base}/admin/v1${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${token.plaintext}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

beforeAll(async () => {
  database = await createTestDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-cp-evals-'));
  writeFileSync(path.join(dir, 'weir.yaml'), CONFIG);
  await seedFromConfigFile(database.db, path.join(dir, 'weir.yaml'));
  cp = createControlPlane({}, { db: database.db, sink: createInMemorySnapshotSink() });
  await registerBootstrapAdminToken(database.db, token.plaintext);
  const app = createControlPlaneHttpApp({ controlPlane: cp, extraRoutes: [evalRoutes(cp, { modelCacheDir: path.join(dir, 'models') })] });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}, 30_000);

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await cp.close();
  await database.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the control plane eval routes', () => {
  it('resolves revisions from the stored configuration, camelCase; a llama.cpp model missing on this host is engine_unavailable', async () => {
    const resolve = createRevisionResolver(cp, { modelCacheDir: path.join(dir, 'models') });
    expect(await resolve('tiny@2')).toMatchObject({ id: 'tiny@2', maxOutputTokens: 256, engine: { kind: 'simulated' } });
    expect(await resolve('nope@1')).toBeUndefined();
    const err = await resolve('story@1').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isWeirError(err) && err.code).toBe('engine_unavailable');
    expect((err as Error).message).toMatch(/^revision story@1 cannot be replayed on the control plane: the model file \/nonexistent\/weir-eval-test.gguf does not exist/);
  });

  it('stores a golden prompt and runs an eval through the admin API, audited by the caller; the passing run opens the canary gate', async () => {
    const prompt = await call('POST', '/tenants/demo/golden-prompts', { use_case: 'support', messages: [{ role: 'user', content: 'say hello' }], max_tokens: 4 });
    expect(prompt.status).toBe(201);
    expect((await call('PUT', '/aliases/tiny', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }] })).status).toBe(409);

    const run = await call('POST', '/evals', { tenant: 'demo', use_case: 'support', alias: 'tiny', candidate_revision: 'tiny@2', scorer: { kind: 'exact' } });
    expect(run.status).toBe(201);
    expect(run.body).toMatchObject({ status: 'finished', pass: true, stable_revision: 'tiny@1', candidate_revision: 'tiny@2' });
    expect(run.body.report.prompts[0]).toMatchObject({ pass: true, score: 1, candidate: { error: null }, stable: { error: null } });
    expect(run.body.report.prompts[0].candidate.output).toBe(run.body.report.prompts[0].stable.output);

    const runAudit = (await call('GET', '/audit?entity_type=eval_run')).body.data;
    const promptAudit = (await call('GET', '/audit?entity_type=golden_prompt')).body.data;
    expect(runAudit).toEqual([expect.objectContaining({ action: 'eval_run.create', entity_id: run.body.id, snapshot_version: null, after: expect.objectContaining({ pass: true }) })]);
    expect(promptAudit).toEqual([expect.objectContaining({ action: 'golden_prompt.create', entity_id: prompt.body.id, before: null })]);
    // By the token that called, as every admin change.
    const tokens = (await call('GET', '/admin-tokens')).body.data;
    expect(tokens.map((t: Json) => t.id)).toContain(runAudit[0].actor.id);
    expect(promptAudit[0].actor.id).toBe(runAudit[0].actor.id);

    const raised = await call('PUT', '/aliases/tiny', { targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }] });
    expect(raised.status).toBe(200);
  });

  it('reports a candidate whose model file is missing here as a failed replay naming the cause', async () => {
    expect((await call('POST', '/aliases', { name: 'story', revision: 'tiny@1' })).status).toBe(201);
    const run = await call('POST', '/evals', { tenant: 'demo', use_case: 'support', alias: 'story', candidate_revision: 'story@1', scorer: { kind: 'exact' } });
    expect(run.status).toBe(201);
    expect(run.body).toMatchObject({ status: 'finished', pass: false });
    expect(run.body.report.prompts[0].candidate.error).toEqual({ code: 'engine_unavailable', message: expect.stringContaining('revision story@1 cannot be replayed on the control plane') });
  });
});

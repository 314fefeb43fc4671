/**
 * The all-in-one runs the control plane's path in-process (issue 7, item 2): admin changes on
 * `/admin/v1` (same port) become signed snapshots in the in-memory bucket, verified and applied
 * to routing, keys, kill switches; a forged entry written straight into the bucket is rejected;
 * a restart on the same data directory starts from the store's latest snapshot. One platform
 * (started twice: the restart) for the whole file; tests build on each other's state in order.
 */
import { encodeEnvelope, generateSigningKeyPair, loadSigningKey, signPayload, type SnapshotPayload } from '@weir/config-sync';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const DEMO_KEY = 'wk_cpinproc_' + 'P'.repeat(43);

const revisionYaml = (id: string) => `  - id: ${id}
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1], [32, 2]], max_sequences: 32 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 4
    pricing: { input_per_mtok: 1, output_per_mtok: 2 }`;

const CONFIG = `revisions:
${revisionYaml('chat@1')}
${revisionYaml('chat@2')}
aliases:
  - name: chat
    targets: [{ revision: chat@1, weight: 100 }, { revision: chat@2, weight: 0 }]
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 256 }
`;

let running: TestPlatform | undefined;
let platform: Platform;
let adminToken: string;

async function admin(method: string, path: string, body?: unknown, token: string | null = adminToken): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${platform.url}/admin/v1${path}`, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** One chat completion with `key`: its status, error code and the revision that answered. */
async function chat(key = DEMO_KEY): Promise<{ status: number; code?: string; revision: string | null }> {
  const res = await fetch(`${platform.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 2 }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = (await res.json()) as Json;
  return { status: res.status, code: body?.error?.code, revision: res.headers.get('x-weir-model-revision') };
}

/** Ms until a round of 10 fresh requests all answer from `revision`; throws after `boundMs`. */
async function until(revision: string, boundMs = 10_000): Promise<number> {
  const started = Date.now();
  for (;;) {
    const round = await Promise.all(Array.from({ length: 10 }, () => chat()));
    for (const r of round) expect(r.status).toBe(200);
    if (round.every((r) => r.revision === revision)) return Date.now() - started;
    if (Date.now() - started > boundMs) throw new Error(`routing did not reach ${revision} within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const setWeights = (stable: number, canary: number) =>
  admin('PUT', '/aliases/chat', { targets: [{ revision: 'chat@1', weight: stable }, { revision: 'chat@2', weight: canary }] });

beforeAll(async () => {
  running = await startTestPlatform('cp', CONFIG, DEMO_KEY, { keepDir: true });
  platform = running.platform;
});

afterAll(async () => {
  const dir = running?.dir;
  await running?.stop();
  if (dir) (await import('node:fs')).rmSync(dir, { recursive: true, force: true });
});

describe('the in-process control plane (all-in-one)', () => {
  it('mints an admin token on the first start and serves the admin API on the same port', async () => {
    expect(platform.adminToken).toMatch(/^wa_[a-z0-9]{8}_/);
    adminToken = platform.adminToken as string;
    const tenants = await admin('GET', '/tenants');
    expect(tenants.status).toBe(200);
    expect(tenants.body.data.map((t: Json) => t.id)).toEqual(['demo']);
    expect((await admin('GET', '/tenants', undefined, null)).status).toBe(401);
    // The seed is snapshot 1, applied through the verified path.
    const ready = await fetch(`${platform.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', config_version: 1 });
    expect(platform.configState()).toMatchObject({ version: 1, stale: false });
    expect((await chat()).revision).toBe('chat@1');
  });

  it('applies an admin change of canary weights to /v1/chat/completions (after a passing eval), and a rollback', async () => {
    // The canary gate holds here too: raising chat@2 needs a passing eval, which the all-in-one runs.
    const gated = await setWeights(0, 100);
    expect(gated.status).toBe(409);
    const prompt = await admin('POST', '/tenants/demo/golden-prompts', { use_case: 'smoke', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4 });
    expect(prompt.status).toBe(201);
    const run = await admin('POST', '/evals', { tenant: 'demo', use_case: 'smoke', alias: 'chat', candidate_revision: 'chat@2', scorer: { kind: 'exact' } });
    expect(run.status).toBe(201);
    expect(run.body).toMatchObject({ status: 'finished', pass: true, stable_revision: 'chat@1' });

    const shifted = await setWeights(0, 100);
    expect(shifted.status).toBe(200);
    const toCanaryMs = await until('chat@2');
    expect(toCanaryMs).toBeLessThan(5_000);
    // Back: a rollback restores the previous arms (never gated).
    expect((await admin('POST', '/aliases/chat/rollback')).status).toBe(200);
    const backMs = await until('chat@1');
    expect(backMs).toBeLessThan(5_000);
    expect(platform.configState().version).toBe(3);
    const audit = await admin('GET', '/audit?entity_type=alias&entity_id=chat');
    expect(audit.body.data.map((e: Json) => e.snapshot_version)).toEqual([3, 2]);
  });

  it('refuses a key revoked through the admin API at once (401)', async () => {
    const created = await admin('POST', '/tenants/demo/apps/demo-app/keys', { label: 'to revoke' });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    expect((await chat(key)).status).toBe(200);
    const revoked = await admin('POST', `/tenants/demo/apps/demo-app/keys/${created.body.id}/revoke`);
    expect(revoked.status).toBe(200);
    const after = await chat(key);
    expect(after.status).toBe(401);
    // The demo key is untouched.
    expect((await chat()).status).toBe(200);
  });

  it('engages a kill switch (503 kill_switch) and lifts it', async () => {
    expect((await admin('POST', '/tenants/demo/kill-switch', { enabled: true })).status).toBe(200);
    expect(await chat()).toMatchObject({ status: 503, code: 'kill_switch' });
    expect((await admin('POST', '/tenants/demo/kill-switch', { enabled: false })).status).toBe(200);
    expect(await chat()).toMatchObject({ status: 200, revision: 'chat@1' });
  });

  it('rejects a forged snapshot written straight into the bucket; the served version stays', async () => {
    const served = platform.configState().version as number;
    const current = JSON.parse(Buffer.from((await platform.configBucket.get('snapshot')) as Uint8Array).toString('utf8')) as { payload: string; key_id: string };
    const genuine = JSON.parse(current.payload) as SnapshotPayload;
    // The attacker's snapshot: every request to the canary, a version ahead.
    const config = structuredClone(genuine.body.config) as Json;
    config.aliases[0].targets = [{ revision: 'chat@1', weight: 0 }, { revision: 'chat@2', weight: 100 }];
    const forgedPayload: SnapshotPayload = { ...genuine, version: served + 1, issued_at: new Date().toISOString(), body: { config } };
    const attacker = loadSigningKey(generateSigningKeyPair().privateKeyPem);
    // Signed by another key under its own id, and under ours (the signature cannot match).
    const ownId = signPayload(forgedPayload, attacker);
    await platform.configBucket.put('snapshot', encodeEnvelope(ownId));
    await platform.configBucket.put('snapshot', encodeEnvelope({ ...ownId, key_id: current.key_id }));
    await new Promise((r) => setTimeout(r, 200));

    expect(platform.configState()).toMatchObject({ version: served, stale: false });
    const round = await Promise.all(Array.from({ length: 10 }, () => chat()));
    expect(new Set(round.map((r) => r.revision))).toEqual(new Set(['chat@1']));
    const metrics = await (await fetch(`${platform.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/weir_config_snapshot_rejections_total\{[^}]*reason="unknown_key"[^}]*\} 1/);
    expect(metrics).toMatch(/weir_config_snapshot_rejections_total\{[^}]*reason="bad_signature"[^}]*\} 1/);

    // A genuine change after the forgery still applies (its version is above the forged one's too).
    expect((await setWeights(0, 100)).status).toBe(200);
    await until('chat@2');
    expect(platform.configState().version).toBeGreaterThan(served);
  });

  it('restarts on the same data directory from the store latest snapshot (the admin change stays)', async () => {
    const version = platform.configState().version;
    const dir = (running as TestPlatform).dir;
    await (running as TestPlatform).stop();
    running = await startTestPlatform('cp', CONFIG, DEMO_KEY, { dir, keepDir: true });
    platform = running.platform;

    expect(platform.configState()).toMatchObject({ version, stale: false });
    // The file did not change, so it was not imported over the admin change.
    expect(await until('chat@2', 1_000)).toBeLessThan(1_000);
    // No second admin token; the first one still works.
    expect(platform.adminToken).toBeUndefined();
    expect((await admin('GET', '/aliases/chat')).body.spec.targets).toEqual([
      { revision: 'chat@1', weight: 0 },
      { revision: 'chat@2', weight: 100 },
    ]);
  });
});

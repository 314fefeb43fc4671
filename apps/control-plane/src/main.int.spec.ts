/**
 * `main.ts` as deployed: the service started as a process against a throw-away Postgres
 * database and the shared NATS server (a namespace of its own), seeding from a config file,
 * publishing signed snapshots, revocations and heartbeats to `<namespace>_config`; running the
 * capacity controller on published telemetry (NATS, admin API, `/metrics`), mounting the eval
 * routes, rolling a regressing canary back with an event; and stopping cleanly on SIGTERM.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { NatsConnection } from '@nats-io/transport-node';
import type { CapacityDecision } from '@weir/capacity';
import { parseConfig } from '@weir/config';
import { createNatsConfigBucket, loadVerifyKey, openEnvelope, type ConfigBucket, deleteConfigBucket } from '@weir/config-sync';
import { connectNats, createCapacityTelemetryPublisher, subscribeCapacityDecisions } from '@weir/messaging-nats';
import { createTemporaryPostgresDatabase, openDatabase, type TemporaryPostgresDatabase } from '@weir/store-pg';
import { uniqueTag } from '@weir/testing';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON in assertions
type Json = any;

const ROOT = path.resolve(__dirname, '../../..');
const NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';
const ADMIN = 'wa_testtest_0123456789abcdefghijklmnopqrstuv';
const HEADERS_TIMEOUT_MS = 1_000;
const AUTH_FAILURE_LIMIT = 3;
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
  - name: chat
    targets: [{ revision: tiny@1, weight: 90 }, { revision: tiny@2, weight: 10 }]
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

let temp: TemporaryPostgresDatabase;
let dir: string;
let child: ChildProcess;
let output = '';
let nc: NatsConnection;
let bucket: ConfigBucket;
const namespace = `cp-${uniqueTag()}`;
const { privateKey, publicKey } = generateKeyPairSync('ed25519');
const verifyKey = loadVerifyKey(publicKey.export({ type: 'spki', format: 'pem' }).toString());

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; output:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function payloadAt(key: string): Promise<Json | undefined> {
  const bytes = await bucket.get(key);
  if (!bytes) return undefined;
  const opened = openEnvelope(bytes, verifyKey);
  if (!opened.ok) throw new Error(`entry ${key} does not verify: ${opened.reason}`);
  return opened.payload;
}

beforeAll(async () => {
  temp = await createTemporaryPostgresDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-cp-main-'));
  writeFileSync(path.join(dir, 'weir.yaml'), CONFIG);
  writeFileSync(path.join(dir, 'signing.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  nc = await connectNats({ servers: NATS_URL, name: `weir-test-cp-${namespace}` });
  bucket = createNatsConfigBucket(nc, { namespace });
  child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'apps/control-plane/src/main.ts')], {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: path.join(ROOT, 'tsconfig.json'),
      WEIR_DATABASE_URL: temp.url,
      WEIR_CONTROL_PLANE_PORT: '0',
      OPS_PORT: '0',
      WEIR_ADMIN_TOKEN: ADMIN,
      WEIR_CONFIG: path.join(dir, 'weir.yaml'),
      WEIR_CONFIG_SIGNING_KEY_FILE: path.join(dir, 'signing.pem'),
      WEIR_NATS_URL: NATS_URL,
      WEIR_NATS_NAMESPACE: namespace,
      WEIR_CONFIG_HEARTBEAT_MS: '200',
      WEIR_CANARY_GUARD_INTERVAL_MS: '200',
      WEIR_DEPRECATION_CHECK_MS: '200',
      WEIR_CAPACITY_REPLICA_TPS_HINT: '500',
      // The admin listener's client limits, short for the slow-clients case.
      WEIR_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
      WEIR_AUTH_FAILURE_LIMIT: String(AUTH_FAILURE_LIMIT),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
}, 60_000);

afterAll(async () => {
  if (child.exitCode === null) child.kill('SIGKILL');
  await bucket.close();
  await deleteConfigBucket(nc, namespace);
  await nc.close();
  await temp.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** GET `url` from local address `from`: status and `Retry-After`. */
function getFrom(url: string, from: string, token: string): Promise<{ status: number; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { localAddress: from, agent: false, headers: { authorization: `Bearer ${token}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('apps/control-plane', () => {
  it('limits slow clients and admin token guessing on its listener (docs/security.md §7)', async () => {
    const port = await until('the listening line', () => /"port":(\d+)[^\n]*control plane listening/.exec(output)?.[1]);
    const base = `http://127.0.0.1:${port}`;

    // A slowloris trickling its headers is told 408 and closed; a normal request is served meanwhile.
    const since = performance.now();
    const slow = await new Promise<Socket>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: Number(port) }, () => resolve(s));
      s.once('error', reject);
    });
    let received = '';
    slow.on('data', (d: Buffer) => (received += d.toString('latin1')));
    slow.on('error', () => undefined);
    const closed = new Promise<number>((resolve) => slow.once('close', () => resolve(performance.now() - since)));
    slow.write('GET /admin/v1/tenants HTTP/1.1\r\nHost: cp\r\n');
    let n = 0;
    const trickle = setInterval(() => !slow.destroyed && slow.write(`X-Slow-${++n}: a\r\n`), 100);
    try {
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      let giveUp: NodeJS.Timeout | undefined;
      const afterMs = await Promise.race([closed, new Promise<number>((r) => (giveUp = setTimeout(() => r(Infinity), 20_000)))]);
      clearTimeout(giveUp);
      // Within the timeout plus Node's 1 s check interval and a generous margin.
      expect(afterMs).toBeLessThan(HEADERS_TIMEOUT_MS + 10_000);
      expect(received).toContain('408 Request Timeout');
    } finally {
      clearInterval(trickle);
      slow.destroy();
    }

    // Guessing admin tokens: past the limit, the address gets 429 whatever it sends; another is served.
    const wrong = 'wa_testtest_' + 'x'.repeat(32);
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++) expect((await getFrom(`${base}/admin/v1/tenants`, '127.0.0.2', wrong)).status).toBe(401);
    const refused = await getFrom(`${base}/admin/v1/tenants`, '127.0.0.2', ADMIN);
    expect(refused.status).toBe(429);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect((await getFrom(`${base}/admin/v1/tenants`, '127.0.0.1', ADMIN)).status).toBe(200);
  }, 40_000);

  it('seeds, publishes signed snapshots, revocations and heartbeats, runs the capacity controller, evals and the canary guard, and stops on SIGTERM', async () => {
    const port = await until('the listening line', () => /"port":(\d+)[^\n]*control plane listening/.exec(output)?.[1]);
    const base = `http://127.0.0.1:${port}`;
    const opsBase = `http://127.0.0.1:${/"opsPort":(\d+)[^\n]*control plane listening/.exec(output)?.[1]}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);

    const first = await until('snapshot 1', () => payloadAt('snapshot'));
    expect(first).toMatchObject({ type: 'snapshot', schema_version: 1, version: 1 });
    expect(parseConfig(JSON.stringify(first.body.config), 'snapshot v1').tenants.map((t) => t.id)).toEqual(['demo']);

    const res = await fetch(`${base}/admin/v1/tenants/demo/kill-switch`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ enabled: true }),
    });
    expect(res.status).toBe(200);
    expect(await until('revocation 1', () => payloadAt('revocations.1'))).toMatchObject({ type: 'revocation', seq: 1, kind: 'kill_switch', tenant_id: 'demo', enabled: true });
    const second = await until('snapshot 2', async () => {
      const p = await payloadAt('snapshot');
      return p?.version === 2 ? p : undefined;
    });
    expect(second.body.config.tenants[0].id).toBe('demo');
    expect(await until('a heartbeat for version 2', async () => ((await payloadAt('heartbeat'))?.version === 2 ? await payloadAt('heartbeat') : undefined))).toMatchObject({ type: 'heartbeat', version: 2 });
    expect(output).not.toContain(ADMIN);

    const admin = async (urlPath: string): Promise<{ status: number; body: Json }> => {
      const r = await fetch(`${base}/admin/v1${urlPath}`, { headers: { authorization: `Bearer ${ADMIN}` } });
      return { status: r.status, body: await r.json() };
    };

    // Capacity: a scheduler's sample → a decision on NATS, in the admin API and on /metrics.
    const decisions: CapacityDecision[] = [];
    const stopDecisions = subscribeCapacityDecisions(nc, namespace, (d) => void decisions.push(d));
    await nc.flush();
    const sample = { pool: 'interactive', source: 'scheduler-test', queuedRequests: 30, queuedOutputTokens: 15_000, runningRequests: 2, replicas: 2, healthyReplicas: 2 };
    const counters = { admittedRequestsTotal: 0, completedRequestsTotal: 0, outputTokensTotal: 0, inputTokensTotal: 0, busyReplicaSecondsTotal: 0 };
    createCapacityTelemetryPublisher(nc, namespace).publish({ ...sample, ...counters, at: Date.now() });
    // 15,000 queued tokens / 30 s = 500 tokens/s at the 500 tokens/s hint × 0.7 → 2, + 1 (N+1).
    const decision = await until('a capacity decision on NATS', () => decisions.find((d) => d.pool === 'interactive'));
    expect(decision).toMatchObject({ desiredReplicas: 3, basis: 'hint', replicaTokensPerSecond: 500 });
    stopDecisions();
    expect((await admin('/capacity/interactive')).body).toMatchObject({ pool: 'interactive', desired_replicas: 3, current_replicas: 2 });
    // Metrics on the ops listener only, never on the admin port.
    expect((await fetch(`${base}/metrics`)).status).toBe(404);
    const metrics = await (await fetch(`${opsBase}/metrics`)).text();
    expect(metrics).toMatch(/^weir_pool_desired_replicas\{pool="interactive"[^}]*\} 3$/m);
    expect(metrics).toMatch(/^weir_config_published_version\{[^}]*\} 2$/m);

    // Evals are mounted behind the admin API's authentication.
    expect(await admin('/tenants/demo/golden-prompts')).toEqual({ status: 200, body: { object: 'list', data: [] } });
    expect((await fetch(`${base}/admin/v1/tenants/demo/golden-prompts`)).status).toBe(401);

    // The canary guard: chat's canary tiny@2 fails 25% of its requests against 1% on tiny@1.
    const canaryEvents: Json[] = [];
    nc.subscribe(`${namespace}.events.canary`, { callback: (_e, msg) => void canaryEvents.push(msg.json()) });
    await nc.flush();
    const database = await openDatabase({ databaseUrl: temp.url });
    try {
      const finished = new Date(Date.now() - 10_000);
      const row = (i: number, revision: string, failed: boolean) => ({
        generation_id: `gen_${revision}_${i}`,
        request_id: `req_${revision}_${i}`,
        tenant_id: 'demo',
        app_id: 'demo-app',
        api_key_id: 'key',
        route: 'chat.completions',
        model_alias: 'chat',
        model_revision: revision,
        input_tokens: 5,
        output_tokens: failed ? 0 : 10,
        cached_input_tokens: 0,
        cost_usd: '0',
        status: failed ? 'failed' : 'completed',
        finish_reason: failed ? 'error' : 'stop',
        error_code: failed ? 'upstream_error' : null,
        queue_ms: 0,
        ttft_ms: failed ? null : 100,
        total_ms: 200,
        started_at: new Date(finished.getTime() - 200),
        finished_at: finished,
      });
      await database.db
        .insertInto('usage_ledger')
        .values([...Array.from({ length: 200 }, (_, i) => row(i, 'tiny@1', i < 2)), ...Array.from({ length: 60 }, (_, i) => row(i, 'tiny@2', i < 15))])
        .execute();
    } finally {
      await database.close();
    }
    const event = await until('a canary_rolled_back event', () => canaryEvents[0]);
    expect(event).toMatchObject({ type: 'canary_rolled_back', alias: 'chat', revision: 'tiny@2', stable_revision: 'tiny@1', trigger: 'error_rate' });
    expect((await admin('/aliases/chat')).body.spec.targets).toEqual([
      { revision: 'tiny@1', weight: 90 },
      { revision: 'tiny@2', weight: 0 },
    ]);
    expect((await admin('/audit?action=alias.auto_rollback')).body.data).toEqual([
      expect.objectContaining({ actor: { id: 'system:canary-guard', label: 'automatic canary rollback' }, entity_id: 'chat', snapshot_version: 3, after: expect.objectContaining({ auto_rollback: expect.objectContaining({ reason: event.reason }) }) }),
    ]);
    const third = await until('snapshot 3', async () => {
      const p = await payloadAt('snapshot');
      return p?.version === 3 ? p : undefined;
    });
    expect(third.body.config.aliases.find((a: Json) => a.name === 'chat').targets).toEqual([
      { revision: 'tiny@1', weight: 90 },
      { revision: 'tiny@2', weight: 0 },
    ]);
    expect(output).toMatch(/"event":"canary_rolled_back"/);

    // The deprecation event: announced today → one event on NATS, audited once.
    const deprecationEvents: Json[] = [];
    nc.subscribe(`${namespace}.events.deprecation`, { callback: (_e, msg) => void deprecationEvents.push(msg.json()) });
    await nc.flush();
    const today = new Date().toISOString().slice(0, 10);
    const patched = await fetch(`${base}/admin/v1/revisions/tiny@1`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ deprecation: { retires_on: '2099-12-31', replacement: 'tiny@2', announced_on: today } }),
    });
    expect(patched.status).toBe(200);
    const announced = await until('a revision_deprecation_announced event', () => deprecationEvents[0]);
    expect(announced).toMatchObject({ type: 'revision_deprecation_announced', revision: 'tiny@1', retires_on: '2099-12-31', replacement: 'tiny@2', announced_on: today, tenants: [{ id: 'demo', via: 'alias' }] });
    await new Promise((r) => setTimeout(r, 600));
    expect(deprecationEvents).toHaveLength(1);
    expect((await admin('/audit?action=revision.deprecation_announced')).body.data).toHaveLength(1);

    child.kill('SIGTERM');
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(code).toBe(0);
  }, 60_000);
});

/**
 * `main.ts` as deployed: the service started as a process against a throw-away Postgres
 * database and the shared NATS server (a namespace of its own), seeding from a config file,
 * publishing signed snapshots, revocations and heartbeats to `<namespace>_config`, and stopping
 * cleanly on SIGTERM.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { parseConfig } from '@weir/config';
import { createNatsConfigBucket, loadVerifyKey, openEnvelope, type ConfigBucket } from '@weir/config-sync';
import { connectNats } from '@weir/messaging-nats';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from '@weir/store-pg';
import { uniqueTag } from '@weir/testing';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON in assertions
type Json = any;

const ROOT = path.resolve(__dirname, '../../..');
const NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';
const ADMIN = 'wa_testtest_0123456789abcdefghijklmnopqrstuv';
const CONFIG = `
revisions:
  - id: tiny@1
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
  writeFileSync(path.join(dir, 'signing.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }));
  nc = await connectNats({ servers: NATS_URL, name: `weir-test-cp-${namespace}` });
  bucket = createNatsConfigBucket(nc, { namespace });
  child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'apps/control-plane/src/main.ts')], {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: path.join(ROOT, 'tsconfig.json'),
      WEIR_DATABASE_URL: temp.url,
      WEIR_CONTROL_PLANE_PORT: '0',
      WEIR_ADMIN_TOKEN: ADMIN,
      WEIR_CONFIG: path.join(dir, 'weir.yaml'),
      WEIR_CONFIG_SIGNING_KEY_FILE: path.join(dir, 'signing.pem'),
      WEIR_NATS_URL: NATS_URL,
      WEIR_NATS_NAMESPACE: namespace,
      WEIR_CONFIG_HEARTBEAT_MS: '200',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
}, 60_000);

afterAll(async () => {
  if (child.exitCode === null) child.kill('SIGKILL');
  await bucket.close();
  await jetstreamManager(nc)
    .then((jsm) => jsm.streams.delete(`KV_${namespace}_config`))
    .catch(() => undefined);
  await nc.close();
  await temp.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe('apps/control-plane', () => {
  it('seeds, publishes signed snapshots, revocations and heartbeats, and stops on SIGTERM', async () => {
    const port = await until('the listening line', () => /"port":(\d+)[^\n]*control plane listening/.exec(output)?.[1]);
    const base = `http://127.0.0.1:${port}`;
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

    child.kill('SIGTERM');
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(code).toBe(0);
  }, 60_000);
});

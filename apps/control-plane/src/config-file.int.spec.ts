/**
 * `WEIR_CONFIG_IMPORT` as the split launcher uses it: the service started as a process three
 * times against ONE throw-away Postgres database, each start with a configuration file whose
 * revision is served by a replica on another port (the launcher starts engines on fresh ports).
 * The published snapshot must name the new replica each time — a store that kept the first
 * start's addresses would route every generation to an engine that is gone.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { createNatsConfigBucket, loadVerifyKey, openEnvelope, type ConfigBucket, deleteConfigBucket } from '@weir/config-sync';
import { connectNats } from '@weir/messaging-nats';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from '@weir/store-pg';
import { uniqueTag } from '@weir/testing';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON in assertions
type Json = any;

const ROOT = path.resolve(__dirname, '../../..');
const NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';
const ADMIN = 'wa_testtest_0123456789abcdefghijklmnopqrstuv';
const configWithReplicaOn = (port: number) => `
revisions:
  - id: tiny@1
    model: tiny
    engine: { kind: simulated }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
    replicas: [{ id: tiny@1/0, base_url: "http://127.0.0.1:${port}/v1", slots: 2 }]
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
let nc: NatsConnection;
let bucket: ConfigBucket;
const children: ChildProcess[] = [];
const namespace = `cpimport-${uniqueTag()}`;
const { privateKey, publicKey } = generateKeyPairSync('ed25519');
const verifyKey = loadVerifyKey(publicKey.export({ type: 'spki', format: 'pem' }).toString());

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, output: () => string, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; output:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function snapshot(): Promise<Json | undefined> {
  const bytes = await bucket.get('snapshot');
  if (!bytes) return undefined;
  const opened = openEnvelope(bytes, verifyKey);
  if (!opened.ok) throw new Error(`the snapshot does not verify: ${opened.reason}`);
  return opened.payload;
}

/** Starts the service on `replicaPort`'s file, waits until it listens and has published `version`, stops it; returns its output. */
async function runOnce(replicaPort: number, mode: string, act?: (base: string) => Promise<void>): Promise<{ output: string; published: Json }> {
  writeFileSync(path.join(dir, 'weir.split.yaml'), configWithReplicaOn(replicaPort));
  let output = '';
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'apps/control-plane/src/main.ts')], {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: path.join(ROOT, 'tsconfig.json'),
      WEIR_DATABASE_URL: temp.url,
      WEIR_CONTROL_PLANE_PORT: '0',
      WEIR_ADMIN_TOKEN: ADMIN,
      WEIR_CONFIG: path.join(dir, 'weir.split.yaml'),
      WEIR_CONFIG_IMPORT: mode,
      WEIR_CONFIG_SIGNING_KEY_FILE: path.join(dir, 'signing.pem'),
      WEIR_NATS_URL: NATS_URL,
      WEIR_NATS_NAMESPACE: namespace,
      WEIR_CONFIG_HEARTBEAT_MS: '200',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const port = await until('the listening line', () => /"port":(\d+)[^\n]*control plane listening/.exec(output)?.[1], () => output);
  if (act) await act(`http://127.0.0.1:${port}`);
  // Published before listening (the start-up republication); `act` may have published more.
  const published = await snapshot();
  child.kill('SIGTERM');
  const code = await new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', (c) => resolve(c))));
  expect(code).toBe(0);
  return { output, published };
}

const replicaUrl = (s: Json) => s.body.config.revisions[0].replicas.map((r: Json) => r.base_url);
const tenantIds = (s: Json) => s.body.config.tenants.map((t: Json) => t.id);

beforeAll(async () => {
  temp = await createTemporaryPostgresDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-cp-import-'));
  writeFileSync(path.join(dir, 'signing.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  nc = await connectNats({ servers: NATS_URL, name: `weir-test-cp-${namespace}` });
  bucket = createNatsConfigBucket(nc, { namespace });
}, 60_000);

afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await bucket.close();
  await deleteConfigBucket(nc, namespace);
  await nc.close();
  await temp.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe('WEIR_CONFIG_IMPORT across restarts on one database', () => {
  it('placement: a restart with engines on new ports publishes the new replicas and keeps admin changes; always: the file replaces the store', async () => {
    // First start: the empty store is seeded. An admin adds a tenant the file does not list.
    const first = await runOnce(41101, 'placement', async (base) => {
      const res = await fetch(`${base}/admin/v1/tenants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id: 'acme', name: 'Acme' }),
      });
      expect(res.status).toBe(201);
    });
    expect(first.published).toMatchObject({ type: 'snapshot', version: 2 });
    expect(replicaUrl(first.published)).toEqual(['http://127.0.0.1:41101/v1']);

    // Second start, engines elsewhere: one placement change by config-file, published; the
    // republication of that same version on start is expected and logged at info, without a stack.
    const second = await runOnce(41102, 'placement');
    expect(second.published).toMatchObject({ type: 'snapshot', version: 3 });
    expect(replicaUrl(second.published)).toEqual(['http://127.0.0.1:41102/v1']);
    expect(tenantIds(second.published)).toEqual(['demo', 'acme']);
    expect(second.output).toMatch(/"level":30[^\n]*"mode":"placement","version":3[^\n]*WEIR_CONFIG imported over the stored configuration/);
    const republished = second.output.split('\n').find((l) => l.includes('snapshot already published'));
    expect(republished).toMatch(/"level":30/);
    expect(second.output).not.toContain('"stack"');

    // Third start in `always`: the file is the configuration; the tenant it does not list goes.
    const third = await runOnce(41103, 'always');
    expect(third.published).toMatchObject({ type: 'snapshot', version: 4 });
    expect(replicaUrl(third.published)).toEqual(['http://127.0.0.1:41103/v1']);
    expect(tenantIds(third.published)).toEqual(['demo']);
  }, 120_000);
});

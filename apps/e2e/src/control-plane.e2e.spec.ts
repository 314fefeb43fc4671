/**
 * The control plane over the split topology (issue 7): two gateways and the other data-plane
 * services take their configuration from the control plane's signed snapshots over NATS
 * JetStream KV. Measured here: a key revoked (and a kill switch flipped) through the admin API
 * is refused by BOTH gateways within 2 s; a full snapshot (a deprecation) reaches both; a forged
 * snapshot written straight into the bucket is rejected and counted; with the control plane
 * and NATS stopped, the gateways fail closed (503 `config_stale`) once the snapshot is older
 * than the maximum, and recover when both are back. The topology runs on a private nats-server
 * (stopping it never touches the machine's shared NATS) and a private Postgres database; every
 * process is stopped by pid.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Kvm } from '@nats-io/kv';
import { configBucketName, CONFIG_BUCKET_KEYS, encodeEnvelope, generateSigningKeyPair, loadSigningKey, signPayload } from '@weir/config-sync';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { connectNats } from '@weir/messaging-nats';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from '@weir/store-pg';
import { type PrivateNats, startPrivateNats, tinyModelPath } from '@weir/testing';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';

jest.setTimeout(240_000);

const ADMIN_TOKEN = 'wa_e2eadmin_' + 'A'.repeat(43);
/** Beyond this snapshot age the gateways refuse requests (ms); heartbeats come every second. */
const MAX_STALENESS_MS = 4_000;
/** The bound for a revocation to reach every gateway (ms). */
const REVOCATION_BOUND_MS = 2_000;

let nats: PrivateNats;
let pg: TemporaryPostgresDatabase;
let topology: SplitTopology;
let workDir: string;

beforeAll(async () => {
  nats = await startPrivateNats();
  pg = await createTemporaryPostgresDatabase();
  workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-control-plane-e2e-'));
  topology = await startSplitTopology({
    configText: E2E_CONFIG,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl: pg.url,
    natsUrl: nats.url,
    gateways: 2,
    admissionInstances: 1,
    enginesPerRevision: 1,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY },
    controlPlane: { adminToken: ADMIN_TOKEN, maxStalenessMs: MAX_STALENESS_MS, heartbeatMs: 1_000 },
  });
});

afterAll(async () => {
  try {
    await topology?.stop();
  } finally {
    await pg?.drop();
    await nats?.dispose();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }
});

const admin = async (method: string, route: string, body?: unknown) => {
  const res = await fetch(`${topology.controlPlaneUrl}/admin/v1${route}`, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status >= 300) throw new Error(`${method} ${route}: ${res.status} ${JSON.stringify(json)}`);
  return json;
};

/** `GET /v1/models` on gateway `i` with `key`: the cheapest authenticated call. */
const models = (i: number, key = DEMO_KEY) => fetch(`${topology.gateways[i].url}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });

const readyz = async (i: number) => (await (await fetch(`${topology.gateways[i].url}/readyz`)).json()) as { status: string; reason?: string; config_version?: number };

/** Polls every gateway until `done(status, code)` holds on each; returns the slowest gateway's delay (ms). */
async function untilEveryGateway(key: string, done: (status: number, code: string | undefined) => boolean, timeoutMs: number): Promise<number> {
  const start = Date.now();
  const delays = await Promise.all(
    topology.gateways.map(async (_g, i) => {
      for (;;) {
        const res = await models(i, key);
        const code = res.status >= 400 ? ((await res.json()) as { error?: { code?: string } }).error?.code : (await res.arrayBuffer(), undefined);
        if (done(res.status, code)) return Date.now() - start;
        if (Date.now() - start > timeoutMs) throw new Error(`gateway ${i} still answers ${res.status} ${code ?? ''} after ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 25));
      }
    }),
  );
  return Math.max(...delays);
}

describe('control plane → split data plane', () => {
  it('both gateways run on the signed snapshot and report its version', async () => {
    const latest = await admin('GET', '/snapshots/latest');
    for (const i of [0, 1]) {
      expect(await readyz(i)).toMatchObject({ status: 'ready', config_version: latest.version });
      expect((await models(i)).status).toBe(200);
    }
  });

  it('a key revoked through the admin API is refused by both gateways within 2 s', async () => {
    const created = await admin('POST', '/tenants/demo/apps/demo-app/keys', { label: 'e2e revocation' });
    const key = created.key as string;
    // The new key works on both gateways (and is now in their key caches).
    await untilEveryGateway(key, (status) => status === 200, 10_000);
    const started = Date.now();
    await admin('POST', `/tenants/demo/apps/demo-app/keys/${created.id as string}/revoke`);
    const slowest = await untilEveryGateway(key, (status) => status === 401, 10_000);
    const total = Date.now() - started;
    process.stdout.write(`revocation reached both gateways in ${slowest} ms after the admin call returned (${total} ms including it)\n`);
    expect(total).toBeLessThan(REVOCATION_BOUND_MS);
    // The demo key is untouched.
    expect((await models(0)).status).toBe(200);
  });

  it('a kill switch stops the tenant on both gateways within 2 s, and lifting it restores service', async () => {
    const started = Date.now();
    await admin('POST', '/tenants/demo/kill-switch', { enabled: true });
    await untilEveryGateway(DEMO_KEY, (status, code) => status === 503 && code === 'kill_switch', 10_000);
    expect(Date.now() - started).toBeLessThan(REVOCATION_BOUND_MS);
    await admin('POST', '/tenants/demo/kill-switch', { enabled: false });
    await untilEveryGateway(DEMO_KEY, (status) => status === 200, 10_000);
  });

  it('a full snapshot (a deprecation) reaches both gateways: /v1/models shows the countdown', async () => {
    await admin('PATCH', '/revisions/stories260k-slow@1', { deprecation: { retires_on: '2099-01-01', replacement: 'stories260k@1' } });
    for (const i of [0, 1]) {
      const until = Date.now() + 10_000;
      for (;;) {
        const body = (await (await models(i)).json()) as { data: { id: string; deprecation?: { replacement: string } }[] };
        const slow = body.data.find((m) => m.id === 'tiny-stories-slow');
        if (slow?.deprecation) {
          expect(slow.deprecation).toMatchObject({ replacement: 'stories260k@1' });
          break;
        }
        if (Date.now() > until) throw new Error(`gateway ${i} shows no deprecation: ${JSON.stringify(slow)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  });

  it('a forged snapshot written straight into the KV bucket is rejected by the gateways, and real changes still apply', async () => {
    const before = (await readyz(0)).config_version as number;
    const forger = loadSigningKey(generateSigningKeyPair().privateKeyPem);
    const forged = signPayload(
      { type: 'snapshot', schema_version: 1, version: before + 1000, issued_at: new Date().toISOString(), body: { config: { revisions: [], aliases: [], tenants: [] } } },
      forger,
    );
    const nc = await connectNats({ servers: nats.url, name: 'weir-e2e-forger' });
    try {
      const kv = await new Kvm(nc).open(configBucketName('weir'));
      await kv.put(CONFIG_BUCKET_KEYS.snapshot, encodeEnvelope(forged));
      // An unsigned one too.
      await kv.put(CONFIG_BUCKET_KEYS.snapshot, new TextEncoder().encode(JSON.stringify({ payload: JSON.stringify(forged.payload) })));
    } finally {
      await nc.close();
    }
    const until = Date.now() + 10_000;
    for (;;) {
      const metrics = await (await fetch(`${topology.opsUrls.get(topology.gateways[1].name)}/metrics`)).text();
      if (/weir_config_snapshot_rejections_total\{[^}]*reason="unknown_key"[^}]*\} [1-9]/.test(metrics) && /reason="unsigned"[^}]*\} [1-9]/.test(metrics)) break;
      if (Date.now() > until) throw new Error(`no rejection counted:\n${metrics.split('\n').filter((l) => l.includes('config_snapshot')).join('\n')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    for (const i of [0, 1]) {
      expect((await readyz(i)).config_version).toBe(before);
      expect((await models(i)).status).toBe(200);
    }
    // The control plane's next change is published over the forgery and applied.
    await admin('PATCH', '/revisions/stories260k-slow@1', { deprecation: null });
    const next = (await admin('GET', '/snapshots/latest')).version as number;
    expect(next).toBeGreaterThan(before);
    const deadline = Date.now() + 10_000;
    while ((await readyz(0)).config_version !== next || (await readyz(1)).config_version !== next) {
      if (Date.now() > deadline) throw new Error('the real snapshot after the forgery never applied');
      await new Promise((r) => setTimeout(r, 100));
    }
  });

  it('a tenant deleted and created again under the same id starts from nothing on every gateway (issue 14 §4)', async () => {
    const chat = (i: number, key: string, headers: Record<string, string> = {}) =>
      fetch(`${topology.gateways[i].url}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, temperature: 0 }),
      });
    /** A 200 from gateway `i` once the snapshot with the tenant reached it (403/429 until then). */
    const admitted = async (i: number, key: string, headers: Record<string, string> = {}) => {
      const start = Date.now();
      for (;;) {
        const res = await chat(i, key, headers);
        if (res.status === 200) return res;
        await res.arrayBuffer();
        if (Date.now() - start > 15_000) throw new Error(`gateway ${i} still answers ${res.status}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const createAcme = async () => {
      const t = await admin('POST', '/tenants', { id: 'fenced', name: 'Fenced' });
      await admin('POST', '/tenants/fenced/apps', { id: 'fenced-web', name: 'Web' });
      const k = await admin('POST', '/tenants/fenced/apps/fenced-web/keys', {});
      return { key: k.key as string, internalId: t.internal_id as string };
    };
    const usageRequests = async (i: number, key: string) => {
      const res = await fetch(`${topology.gateways[i].url}/v1/usage`, { headers: { Authorization: `Bearer ${key}` } });
      return ((await res.json()) as { requests: number }).requests;
    };
    const untilUsage = async (key: string, n: number) => {
      const start = Date.now();
      while ((await usageRequests(0, key)) < n) {
        if (Date.now() - start > 15_000) throw new Error(`usage never reached ${n}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };

    const old = await createAcme();
    const first = await admitted(0, old.key, { 'Idempotency-Key': 'split-order-1' });
    const oldGeneration = first.headers.get('x-weir-generation-id') as string;
    await first.arrayBuffer();
    await untilUsage(old.key, 1);
    // Replayed from the ledger's retained result on the other gateway.
    const replay = await chat(1, old.key, { 'Idempotency-Key': 'split-order-1' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    await replay.arrayBuffer();
    expect((await fetch(`${topology.gateways[0].url}/v1/generations/${oldGeneration}`, { headers: { Authorization: `Bearer ${old.key}` } })).status).toBe(200);

    await admin('DELETE', '/tenants/fenced');
    const successor = await createAcme();
    for (const i of [0, 1]) {
      const fresh = await admitted(i, successor.key, { 'Idempotency-Key': `split-order-1${i === 0 ? '' : '-b'}` });
      if (i === 0) {
        // The same key as the deleted tenant's: run afresh, not replayed.
        expect(fresh.headers.get('idempotent-replayed')).toBeNull();
        expect(fresh.headers.get('x-weir-generation-id')).not.toBe(oldGeneration);
      }
      await fresh.arrayBuffer();
      // The old generation: not in the serving gateway's registry for the successor, nor in the ledger.
      const gone = await fetch(`${topology.gateways[i].url}/v1/generations/${oldGeneration}`, { headers: { Authorization: `Bearer ${successor.key}` } });
      expect(gone.status).toBe(404);
      await gone.arrayBuffer();
    }
    await untilUsage(successor.key, 2);
    expect(await usageRequests(1, successor.key)).toBe(2);
    // The old key stays dead on both gateways.
    for (const i of [0, 1]) expect((await chat(i, old.key)).status).toBe(401);
    expect(successor.internalId).toMatch(/^fenced~[0-9a-f]{16}$/);
    expect(successor.internalId).not.toBe(old.internalId);
  });

  it('with the control plane and NATS stopped, the gateways fail closed past the maximum staleness and recover when both return', async () => {
    await topology.processes.get('control-plane')?.stop();
    await nats.stop();
    const stoppedAt = Date.now();
    // Still serving on the last snapshot for a while…
    expect((await models(0)).status).not.toBe(503);
    // …then refusing with config_stale, and not ready.
    const until = stoppedAt + MAX_STALENESS_MS + 10_000;
    for (;;) {
      const res = await models(0);
      if (res.status === 503 && ((await res.json()) as { error: { code: string } }).error.code === 'config_stale') break;
      if (Date.now() > until) throw new Error(`gateway 0 still answers ${res.status} long after the maximum staleness`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(MAX_STALENESS_MS - 1_500);
    expect(await readyz(1)).toMatchObject({ status: 'not_ready', reason: 'config_stale' });

    await nats.restart();
    await topology.restart('control-plane');
    await untilEveryGateway(DEMO_KEY, (status) => status === 200, 30_000);
    for (const i of [0, 1]) expect((await readyz(i)).status).toBe('ready');
  });
});

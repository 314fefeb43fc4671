import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '@weir/messaging-nats';
import { startPrivateNats, uniqueTag, waitUntil } from '@weir/testing';
import { configBucketName } from './bucket';
import type { RevocationPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey } from './keys';
import { createNatsConfigBucket, deleteConfigBucket } from './nats-config-bucket';
import { openDataPlaneConfig, type DataPlaneConfig } from './data-plane-config';
import { createSnapshotPublisher } from './publisher';
import { recordingLogger } from './test-support';

const SHARED_NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';

/** A minimal valid configuration file object with one tenant whose limit is `maxConcurrent`. */
function configWith(maxConcurrent: number): Record<string, unknown> {
  return {
    revisions: [{ id: 'm@1', model: 'm', context_window: 512, max_output_tokens: 64, default_output_tokens: 16, engine: { kind: 'simulated' }, pricing: { input_per_mtok: 1, output_per_mtok: 2 } }],
    aliases: [{ name: 'm', targets: [{ revision: 'm@1', weight: 100 }] }],
    tenants: [{ id: 't', name: 'T', limits: { max_concurrent: maxConcurrent }, apps: [{ id: 'a', name: 'A' }] }],
  };
}

// Against the shared NATS, in a namespace of its own (bucket destroyed after).
describe('openDataPlaneConfig', () => {
  const namespace = `dpctest-${uniqueTag()}`;
  const keys = generateSigningKeyPair();
  const dir = mkdtempSync(path.join(tmpdir(), 'weir-dpc-'));
  let nc: NatsConnection;
  const opened: DataPlaneConfig[] = [];

  beforeAll(async () => {
    nc = await connectNats({ servers: SHARED_NATS_URL, name: `weir-dpc-test-${namespace}` });
  });
  afterAll(async () => {
    for (const o of opened) await o.stop();
    await deleteConfigBucket(nc, namespace);
    await nc.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const env = (extra: Record<string, string> = {}) => ({
    WEIR_CONFIG_PUBLIC_KEY: keys.publicKeyPem,
    WEIR_NATS_NAMESPACE: namespace,
    WEIR_CONFIG_CACHE_DIR: dir,
    WEIR_CONFIG_WAIT_MS: '3000',
    ...extra,
  });

  it('without a verify key reads WEIR_CONFIG, always fresh; with neither it says what to set', async () => {
    const file = path.join(dir, 'weir.json');
    writeFileSync(file, JSON.stringify(configWith(3)));
    const fromFile = await openDataPlaneConfig({ env: { WEIR_CONFIG: file }, service: 'x', connectNats: async () => nc, logger: recordingLogger() });
    opened.push(fromFile);
    expect(fromFile.mode).toBe('file');
    expect(fromFile.initial.tenants[0].limits.maxConcurrent).toBe(3);
    expect(fromFile.state()).toEqual({ ageMs: 0, stale: false });
    await expect(openDataPlaneConfig({ env: {}, service: 'x', connectNats: async () => nc, logger: recordingLogger() })).rejects.toThrow(/WEIR_CONFIG_PUBLIC_KEY_FILE .* or WEIR_CONFIG/);
  });

  it('with no snapshot anywhere, refuses to start after WEIR_CONFIG_WAIT_MS, naming the bucket', async () => {
    await expect(
      openDataPlaneConfig({ env: env({ WEIR_CONFIG_WAIT_MS: '300' }), service: 'empty', connectNats: async () => nc, logger: recordingLogger() }),
    ).rejects.toThrow(new RegExp(`no configuration snapshot within 300 ms.*${configBucketName(namespace)}`));
  });

  it('starts from the signed snapshot, hands on later ones and revocations, refuses an invalid one, and cold-starts from the last good file', async () => {
    const publisher = createSnapshotPublisher({ bucket: createNatsConfigBucket(nc, { namespace }), signingKey: loadSigningKey(keys.privateKeyPem) });
    await publisher.publishSnapshot({ version: 1, config: configWith(4) });
    const logger = recordingLogger();
    const source = await openDataPlaneConfig({ env: env(), service: 'gateway', connectNats: async () => nc, logger });
    opened.push(source);
    expect(source.mode).toBe('snapshots');
    expect(source.initial.tenants[0].limits.maxConcurrent).toBe(4);
    expect(source.state()).toMatchObject({ stale: false, version: 1 });

    const changes: number[] = [];
    const revocations: RevocationPayload[] = [];
    source.onChange((c) => changes.push(c.tenants[0].limits.maxConcurrent ?? -1));
    source.onRevocation((r) => revocations.push(r));
    await publisher.publishSnapshot({ version: 2, config: configWith(7) });
    await waitUntil(() => changes.length === 1, 5_000);
    expect(changes).toEqual([7]);
    await publisher.publishRevocation({ seq: 1, kind: 'kill_switch', tenant_id: 't', enabled: true });
    await waitUntil(() => revocations.length === 1, 5_000);
    expect(revocations[0]).toMatchObject({ kind: 'kill_switch', tenant_id: 't', enabled: true });

    // Signed but not a valid configuration: rejected (apply_failed), version 2 stays.
    await publisher.publishSnapshot({ version: 3, config: { ...configWith(1), aliases: [{ name: 'm', targets: [{ revision: 'missing@1', weight: 100 }] }] } });
    await waitUntil(() => source.state().reason !== undefined, 5_000);
    expect(source.state()).toMatchObject({ version: 2, stale: false, reason: expect.stringContaining('apply_failed') });
    expect(changes).toEqual([7]);

    // A restart that finds nothing in the bucket (here: a namespace whose bucket is empty) serves
    // the last good snapshot from disk, still verified with the key.
    const cold = await openDataPlaneConfig({
      env: env({ WEIR_NATS_NAMESPACE: `${namespace}-empty` }),
      service: 'gateway',
      connectNats: async () => nc,
      logger: recordingLogger(),
    });
    expect(cold.initial.tenants[0].limits.maxConcurrent).toBe(7);
    expect(cold.state()).toMatchObject({ version: 2 });
    // Its watch creates the (empty) bucket in the background, possibly just after stop(): delete it once it exists.
    await cold.stop();
    for (let i = 0; i < 30 && !(await deleteConfigBucket(nc, `${namespace}-empty`)); i++) await new Promise((r) => setTimeout(r, 100));
  });

  it('a start from a last-good file waits for the newer snapshot the bucket holds, so `initial` is the newest', async () => {
    const ns = `${namespace}-newer`;
    const publisher = createSnapshotPublisher({ bucket: createNatsConfigBucket(nc, { namespace: ns }), signingKey: loadSigningKey(keys.privateKeyPem) });
    const mine: DataPlaneConfig[] = [];
    try {
      // First start: v1, kept as the scheduler's last-good file.
      await publisher.publishSnapshot({ version: 1, config: configWith(4) });
      const before = await openDataPlaneConfig({ env: env({ WEIR_NATS_NAMESPACE: ns }), service: 'scheduler', connectNats: async () => nc, logger: recordingLogger() });
      mine.push(before);
      expect(before.initial.tenants[0].limits.maxConcurrent).toBe(4);
      await waitUntil(() => existsSync(path.join(dir, 'scheduler.snapshot.json')), 5_000);
      await before.stop();

      // While it is down the control plane publishes v2 (a new placement); the restart starts on v2, not on the file's v1.
      await publisher.publishSnapshot({ version: 2, config: configWith(9) });
      const logger = recordingLogger();
      const restarted = await openDataPlaneConfig({ env: env({ WEIR_NATS_NAMESPACE: ns }), service: 'scheduler', connectNats: async () => nc, logger });
      mine.push(restarted);
      expect(restarted.initial.tenants[0].limits.maxConcurrent).toBe(9);
      expect(restarted.state()).toMatchObject({ version: 2, stale: false });
      expect(logger.lines).toContainEqual(expect.objectContaining({ level: 'info', fields: { applied: 1, bucket: 2 } }));
    } finally {
      for (const o of mine) await o.stop();
      await deleteConfigBucket(nc, ns);
    }
  });

  it('with NATS unreachable, a start from a last-good file serves it after the bounded check', async () => {
    // A private nats-server, stopped before the restart (the shared one is never stopped).
    const server = await startPrivateNats();
    const privateNc = await connectNats({ servers: server.url, name: 'weir-dpc-test-down', reconnectTimeWaitMs: 200, reconnectJitterMs: 50 });
    const mine: DataPlaneConfig[] = [];
    try {
      const publisher = createSnapshotPublisher({ bucket: createNatsConfigBucket(privateNc, { namespace }), signingKey: loadSigningKey(keys.privateKeyPem) });
      await publisher.publishSnapshot({ version: 5, config: configWith(6) });
      const first = await openDataPlaneConfig({ env: env(), service: 'offline', connectNats: async () => privateNc, logger: recordingLogger() });
      mine.push(first);
      await waitUntil(() => existsSync(path.join(dir, 'offline.snapshot.json')), 5_000);
      await first.stop();
      await server.stop();

      const logger = recordingLogger();
      const restarted = await openDataPlaneConfig({ env: env(), service: 'offline', connectNats: async () => privateNc, logger, freshnessCheckTimeoutMs: 300 });
      mine.push(restarted);
      expect(restarted.initial.tenants[0].limits.maxConcurrent).toBe(6);
      expect(restarted.state()).toMatchObject({ version: 5 });
      expect(logger.lines).toContainEqual(expect.objectContaining({ level: 'warn', fields: { timeoutMs: 300 } }));
    } finally {
      for (const o of mine) await o.stop();
      await privateNc.close();
      await server.dispose();
    }
  });
});

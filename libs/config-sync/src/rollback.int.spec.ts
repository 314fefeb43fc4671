// Issue 14, part 11, over a real NATS JetStream KV bucket: a data plane starting with nothing
// saved refuses a replayed old snapshot (the bucket's history and the heartbeat name a newer one).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '@weir/messaging-nats';
import { uniqueTag } from '@weir/testing';
import { CONFIG_BUCKET_KEYS } from './bucket';
import { openDataPlaneConfig, type DataPlaneConfig } from './data-plane-config';
import { generateSigningKeyPair, loadSigningKey } from './keys';
import { createNatsConfigBucket, deleteConfigBucket } from './nats-config-bucket';
import { createSnapshotPublisher } from './publisher';
import { recordingLogger } from './test-support';

const SHARED_NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';

function configWith(killSwitch: boolean): Record<string, unknown> {
  return {
    revisions: [{ id: 'm@1', model: 'm', context_window: 512, max_output_tokens: 64, default_output_tokens: 16, engine: { kind: 'simulated' }, pricing: { input_per_mtok: 1, output_per_mtok: 2 } }],
    aliases: [{ name: 'm', targets: [{ revision: 'm@1', weight: 100 }] }],
    tenants: [{ id: 't', name: 'T', kill_switch: killSwitch, apps: [{ id: 'a', name: 'A' }] }],
  };
}

describe('config rollback over NATS (fresh data plane)', () => {
  const keys = generateSigningKeyPair();
  const dir = mkdtempSync(path.join(tmpdir(), 'weir-rollback-'));
  let nc: NatsConnection;
  const namespaces: string[] = [];
  const opened: DataPlaneConfig[] = [];

  beforeAll(async () => {
    nc = await connectNats({ servers: SHARED_NATS_URL, name: `weir-rollback-test-${uniqueTag()}` });
  });
  afterAll(async () => {
    for (const o of opened) await o.stop();
    for (const ns of namespaces) await deleteConfigBucket(nc, ns);
    await nc.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['with the heartbeat naming v2', true],
    ['with the heartbeat deleted (the history still holds v2)', false],
  ])('refuses to start on a replayed v1 while v2 was published (%s), and starts once v3 is', async (_name, keepHeartbeat) => {
    const namespace = `rbtest-${uniqueTag()}`;
    namespaces.push(namespace);
    const bucket = createNatsConfigBucket(nc, { namespace });
    const publisher = createSnapshotPublisher({ bucket, signingKey: loadSigningKey(keys.privateKeyPem) });
    const v1 = await publisher.publishSnapshot({ version: 1, config: configWith(false) });
    const rev = await publisher.publishRevocation({ seq: 1, kind: 'kill_switch', tenant_id: 't', enabled: true });
    await publisher.publishSnapshot({ version: 2, config: configWith(true), lastRevocation: rev.payload });
    await publisher.publishHeartbeat(2);
    // Someone who can write to the bucket (but holds no signing key) puts v1 back.
    await bucket.put(CONFIG_BUCKET_KEYS.snapshot, v1.bytes);
    if (!keepHeartbeat) await bucket.delete(CONFIG_BUCKET_KEYS.heartbeat);

    const env = { WEIR_CONFIG_PUBLIC_KEY: keys.publicKeyPem, WEIR_NATS_NAMESPACE: namespace, WEIR_CONFIG_CACHE_DIR: path.join(dir, namespace), WEIR_CONFIG_WAIT_MS: '1500' };
    const logger = recordingLogger();
    await expect(openDataPlaneConfig({ env, service: 'gateway', connectNats: async () => nc, logger })).rejects.toThrow(/no configuration snapshot within 1500 ms/);
    expect(logger.errors().map((l) => l.message)).toContain('config message rejected: replayed');
    expect(JSON.stringify(logger.errors())).toContain('snapshot version 1 is below version 2');

    await publisher.publishSnapshot({ version: 3, config: configWith(true), lastRevocation: rev.payload });
    const source = await openDataPlaneConfig({ env, service: 'gateway', connectNats: async () => nc, logger: recordingLogger() });
    opened.push(source);
    expect(source.state()).toMatchObject({ stale: false, version: 3 });
    expect(source.initial.tenants[0]).toMatchObject({ id: 't', killSwitch: true });
    await bucket.close();
  }, 30_000);
});

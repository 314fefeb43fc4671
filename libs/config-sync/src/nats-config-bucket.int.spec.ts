import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '@weir/messaging-nats';
import { uniqueTag, waitUntil } from '@weir/testing';
import { CONFIG_BUCKET_KEYS, configBucketName, type ConfigBucket } from './bucket';
import { encodeEnvelope, signPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';
import { createNatsConfigBucket, deleteConfigBucket } from './nats-config-bucket';
import { createSnapshotPublisher } from './publisher';
import { createSnapshotSubscriber, type ConfigSnapshot } from './subscriber';
import { recordingLogger, recordingMetrics } from './test-support';

const SHARED_NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';
const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

// Against the shared NATS: a unique namespace per run (never `weir`), bucket destroyed after.
describe('NATS config bucket (shared NATS)', () => {
  const namespace = `cstest-${uniqueTag()}`;
  let nc: NatsConnection;
  let bucket: ConfigBucket;

  beforeAll(async () => {
    nc = await connectNats({ servers: SHARED_NATS_URL, name: `weir-config-sync-test-${namespace}` });
    bucket = createNatsConfigBucket(nc, { namespace, history: 3 });
  });
  afterAll(async () => {
    await bucket?.close();
    if (nc && !nc.isClosed()) {
      await deleteConfigBucket(nc, namespace);
      await nc.close();
    }
  });

  it('puts, gets, lists, deletes, and watches current values then updates', async () => {
    const r1 = await bucket.put('snapshot', bytes('s1'));
    const r2 = await bucket.put(CONFIG_BUCKET_KEYS.revocation(1), bytes('r1'));
    expect(r2).toBeGreaterThan(r1);
    expect(text(await bucket.get('snapshot'))).toBe('s1');
    expect(await bucket.get('heartbeat')).toBeUndefined();
    expect(await bucket.keys(CONFIG_BUCKET_KEYS.revocationPrefix)).toEqual(['revocations.1']);

    const seen: Array<[string, string | undefined, number]> = [];
    const w = await bucket.watch((k, v, rev) => seen.push([k, text(v), rev]));
    await waitUntil(() => seen.length >= 2, 5_000, 'current values');
    expect(seen).toEqual([
      ['snapshot', 's1', r1],
      ['revocations.1', 'r1', r2],
    ]);
    await bucket.put('heartbeat', bytes('h1'));
    await bucket.delete(CONFIG_BUCKET_KEYS.revocation(1));
    await waitUntil(() => seen.length >= 4, 5_000, 'updates');
    expect(seen.slice(2).map(([k, v]) => [k, v])).toEqual([
      ['heartbeat', 'h1'],
      ['revocations.1', undefined],
    ]);
    expect(await bucket.get(CONFIG_BUCKET_KEYS.revocation(1))).toBeUndefined();
    expect(await bucket.keys()).toEqual(['heartbeat', 'snapshot']);
    w.stop();
    await bucket.put('snapshot', bytes('s2'));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(seen).toHaveLength(4);
    // Clean slate for the next test.
    for (const k of await bucket.keys()) await bucket.delete(k);
  });

  it('publish → subscribe applies; forged, unsigned and replayed entries written straight into the KV are rejected and the good snapshot stays', async () => {
    const pair = generateSigningKeyPair();
    const signingKey = loadSigningKey(pair.privateKeyPem);
    const publisher = createSnapshotPublisher({ bucket, signingKey });
    const applied: ConfigSnapshot[] = [];
    const logger = recordingLogger();
    const metrics = recordingMetrics();
    const subBucket = createNatsConfigBucket(nc, { namespace });
    const sub = createSnapshotSubscriber({
      bucket: subBucket,
      verifyKey: loadVerifyKey(pair.publicKeyPem),
      onSnapshot: (s) => void applied.push(s),
      logger,
      metrics,
      initialWaitMs: 5_000,
    });
    const v1 = await publisher.publishSnapshot({ version: 1, config: { tenants: [{ id: 'acme' }] } });
    expect((await sub.start())?.version).toBe(1);
    await publisher.publishSnapshot({ version: 2, config: { tenants: [{ id: 'acme' }, { id: 'globex' }] } });
    await waitUntil(() => sub.version() === 2, 5_000, 'v2 applied');

    // Straight into the KV bucket with the raw client, bypassing the publisher.
    const kv = await new Kvm(nc).open(configBucketName(namespace));
    const forger = loadSigningKey(generateSigningKeyPair().privateKeyPem);
    const forgedPayload = { type: 'snapshot' as const, schema_version: 1 as const, version: 99, issued_at: new Date().toISOString(), body: { config: { tenants: [] } } };
    await kv.put('snapshot', encodeEnvelope(signPayload(forgedPayload, forger)));
    await kv.put('snapshot', encodeEnvelope({ ...signPayload(forgedPayload, forger), key_id: pair.keyId }));
    await kv.put('snapshot', JSON.stringify({ payload: JSON.stringify(forgedPayload), key_id: pair.keyId }));
    await kv.put('snapshot', v1.bytes);
    await waitUntil(() => metrics.rejections.length >= 4, 5_000, 'four rejections');
    expect(metrics.rejections).toEqual(['unknown_key', 'bad_signature', 'unsigned', 'replayed']);
    expect(logger.errors().map((l) => l.message)).toEqual([
      'config message rejected: unknown_key',
      'config message rejected: bad_signature',
      'config message rejected: unsigned',
      'config message rejected: replayed',
    ]);
    expect(sub.version()).toBe(2);
    expect(sub.current()?.config).toEqual({ tenants: [{ id: 'acme' }, { id: 'globex' }] });
    expect(applied.map((s) => s.version)).toEqual([1, 2]);

    // The control plane moves on past the junk: v3 still applies.
    await publisher.publishSnapshot({ version: 3, config: { tenants: [] } });
    await waitUntil(() => sub.version() === 3, 5_000, 'v3 applied');
    await sub.stop();
    await subBucket.close();
  });
});

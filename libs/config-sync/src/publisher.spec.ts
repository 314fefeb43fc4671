import { waitUntil } from '@weir/testing';
import { CONFIG_BUCKET_KEYS, createMemoryConfigBucket } from './bucket';
import { encodeEnvelope, openEnvelope, signPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';
import { createSnapshotPublisher } from './publisher';
import { recordingLogger } from './test-support';

const pair = generateSigningKeyPair();
const signingKey = loadSigningKey(pair.privateKeyPem);
const verifyKey = loadVerifyKey(pair.publicKeyPem);
const T0 = Date.parse('2025-03-01T12:00:00.000Z');

describe('snapshot publisher', () => {
  it('signs each kind under its contract key with issued_at from the clock', async () => {
    const bucket = createMemoryConfigBucket();
    const p = createSnapshotPublisher({ bucket, signingKey, clock: () => T0 });
    const s = await p.publishSnapshot({ version: 1, config: { tenants: [] } });
    await p.publishHeartbeat(1);
    await p.publishRevocation({ seq: 4, kind: 'api_key', api_key_sha256: 'a'.repeat(64) });
    expect(await bucket.keys()).toEqual(['heartbeat', 'revocations.4', 'snapshot']);
    const open = async (key: string) => {
      const r = openEnvelope(await bucket.get(key), verifyKey);
      if (!r.ok) throw new Error(r.reason);
      return r.payload;
    };
    const iso = new Date(T0).toISOString();
    expect(await open('snapshot')).toEqual({ type: 'snapshot', schema_version: 1, version: 1, issued_at: iso, body: { config: { tenants: [] } } });
    expect(await open('heartbeat')).toEqual({ type: 'heartbeat', version: 1, issued_at: iso });
    expect(await open('revocations.4')).toEqual({ type: 'revocation', seq: 4, kind: 'api_key', api_key_sha256: 'a'.repeat(64), issued_at: iso });
    expect(s.revision).toBe(1);
    expect(Buffer.from(s.bytes)).toEqual(Buffer.from((await bucket.get('snapshot'))!));
  });

  it('takes an explicit issuedAt as Date, epoch ms or ISO text', async () => {
    const p = createSnapshotPublisher({ bucket: createMemoryConfigBucket(), signingKey });
    expect((await p.publishSnapshot({ version: 1, config: {}, issuedAt: new Date(T0) })).payload.issued_at).toBe('2025-03-01T12:00:00.000Z');
    expect((await p.publishSnapshot({ version: 2, config: {}, issuedAt: T0 + 1 })).payload.issued_at).toBe('2025-03-01T12:00:00.001Z');
    expect((await p.publishSnapshot({ version: 3, config: {}, issuedAt: '2025-03-01T13:00:00Z' })).payload.issued_at).toBe('2025-03-01T13:00:00.000Z');
    await expect(p.publishSnapshot({ version: 4, config: {}, issuedAt: 'yesterday' })).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('refuses a version that does not move forward (conflict) and an invalid one, but overwrites a forged entry', async () => {
    const bucket = createMemoryConfigBucket();
    const p = createSnapshotPublisher({ bucket, signingKey });
    await p.publishSnapshot({ version: 5, config: {} });
    await expect(p.publishSnapshot({ version: 5, config: {} })).rejects.toMatchObject({ code: 'conflict' });
    await expect(p.publishSnapshot({ version: 4, config: {} })).rejects.toMatchObject({ code: 'conflict' });
    await expect(p.publishSnapshot({ version: 0, config: {} })).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(p.publishSnapshot({ version: 6, config: [] as unknown as Record<string, unknown> })).rejects.toMatchObject({ code: 'invalid_request' });
    const forger = loadSigningKey(generateSigningKeyPair().privateKeyPem);
    const forged = signPayload({ type: 'snapshot', schema_version: 1, version: 1_000, issued_at: new Date().toISOString(), body: { config: {} } }, forger);
    await bucket.put(CONFIG_BUCKET_KEYS.snapshot, encodeEnvelope(forged));
    expect((await p.publishSnapshot({ version: 6, config: {} })).payload.version).toBe(6);
  });

  it('refuses to republish a revocation seq and an invalid revocation', async () => {
    const p = createSnapshotPublisher({ bucket: createMemoryConfigBucket(), signingKey });
    await p.publishRevocation({ seq: 1, kind: 'tenant', tenant_id: 't' });
    await expect(p.publishRevocation({ seq: 1, kind: 'tenant', tenant_id: 't' })).rejects.toMatchObject({ code: 'conflict' });
    await expect(p.publishRevocation({ seq: 2, kind: 'kill_switch', tenant_id: 't' })).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('beats every everyMs for the current version, skips while there is none, and stops', async () => {
    const bucket = createMemoryConfigBucket();
    const versions: number[] = [];
    await bucket.watch((key, bytes) => {
      const r = openEnvelope(bytes, verifyKey);
      if (key === 'heartbeat' && r.ok && r.payload.type === 'heartbeat') versions.push(r.payload.version);
    });
    const p = createSnapshotPublisher({ bucket, signingKey });
    const state: { version?: number } = {};
    const stop = p.startHeartbeats(() => state.version, 10);
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(versions).toEqual([]);
    state.version = 3;
    await waitUntil(() => versions.length >= 3, 2_000, 'three heartbeats');
    stop();
    await new Promise((resolve) => setTimeout(resolve, 15));
    const n = versions.length;
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(versions.length).toBe(n);
    expect(new Set(versions)).toEqual(new Set([3]));
  });

  it('logs a failed heartbeat and keeps beating', async () => {
    const logger = recordingLogger();
    let fail = true;
    const inner = createMemoryConfigBucket();
    const bucket = { ...inner, put: (k: string, b: Uint8Array) => (fail ? Promise.reject(new Error('nats down')) : inner.put(k, b)) };
    const p = createSnapshotPublisher({ bucket, signingKey, logger });
    let stored = 0;
    await inner.watch(() => void stored++);
    const stop = p.startHeartbeats(() => 1, 10);
    await waitUntil(() => logger.lines.some((l) => l.level === 'warn'), 2_000, 'a warning');
    expect(stored).toBe(0);
    fail = false;
    await waitUntil(() => stored > 0, 2_000, 'a heartbeat after the failure');
    stop();
    expect(logger.lines[0]).toMatchObject({ level: 'warn', message: 'config heartbeat not published', fields: { version: 1 } });
  });
});

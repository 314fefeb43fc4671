import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { waitUntil } from '@weir/testing';
import { CONFIG_BUCKET_KEYS, createMemoryConfigBucket, type ConfigBucket } from './bucket';
import { encodeEnvelope, openEnvelope, signPayload, type RevocationPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';
import { createSnapshotPublisher, type SnapshotPublisher } from './publisher';
import { createSnapshotSubscriber, type ConfigSnapshot, type SnapshotSubscriber, type SnapshotSubscriberOptions } from './subscriber';
import { recordingLogger, recordingMetrics } from './test-support';

const pair = generateSigningKeyPair();
const signingKey = loadSigningKey(pair.privateKeyPem);
const verifyKey = loadVerifyKey(pair.publicKeyPem);
const otherKey = loadSigningKey(generateSigningKeyPair().privateKeyPem);
/** A marker inside every config: it must never show up in a log line. */
const MARKER = 'config-content-marker-7f3a';
const config = (n: number) => ({ tenants: [{ id: `t${n}`, note: MARKER }] });
const T0 = Date.parse('2025-03-01T12:00:00.000Z');

interface Rig {
  bucket: ConfigBucket;
  publisher: SnapshotPublisher;
  sub: SnapshotSubscriber;
  now: { ms: number };
  applied: ConfigSnapshot[];
  revoked: RevocationPayload[];
  rejects: Array<[string, string]>;
  logger: ReturnType<typeof recordingLogger>;
  metrics: ReturnType<typeof recordingMetrics>;
  /** Waits until the subscriber has handled everything queued so far. */
  settle(): Promise<void>;
}

function rig(options: Partial<SnapshotSubscriberOptions> = {}, bucket: ConfigBucket = createMemoryConfigBucket()): Rig {
  const now = { ms: T0 };
  const clock = () => now.ms;
  const applied: ConfigSnapshot[] = [];
  const revoked: RevocationPayload[] = [];
  const rejects: Array<[string, string]> = [];
  const logger = recordingLogger();
  const metrics = recordingMetrics();
  const sub = createSnapshotSubscriber({
    bucket,
    verifyKey,
    clock,
    logger,
    metrics,
    initialWaitMs: 50,
    onSnapshot: (s) => void applied.push(s),
    onRevocation: (r) => void revoked.push(r),
    onReject: (reason, detail) => void rejects.push([reason, detail]),
    ...options,
  });
  const publisher = createSnapshotPublisher({ bucket, signingKey, clock });
  // Memory deliveries ride microtasks and the subscriber handles them on a promise chain; a
  // macrotask turn (plus any file write) lets them all finish.
  const settle = async () => {
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  };
  return { bucket, publisher, sub, now, applied, revoked, rejects, logger, metrics, settle };
}

describe('snapshot subscriber', () => {
  let r: Rig;
  afterEach(async () => {
    await r?.sub.stop();
    // Whatever a test did, no log line may carry config contents.
    expect(r.logger.text()).not.toContain(MARKER);
  });

  it('applies a published snapshot and start() resolves with it', async () => {
    r = rig();
    await r.publisher.publishSnapshot({ version: 1, config: config(1) });
    const first = await r.sub.start();
    expect(first).toMatchObject({ version: 1, schemaVersion: 1, config: config(1), keyId: pair.keyId, issuedAtMs: T0 });
    expect(r.sub.version()).toBe(1);
    expect(r.applied.map((s) => s.version)).toEqual([1]);
    expect(r.metrics.appliedVersions).toEqual([1]);
    await r.publisher.publishSnapshot({ version: 2, config: config(2) });
    await r.settle();
    expect(r.sub.current()?.config).toEqual(config(2));
    expect(r.rejects).toEqual([]);
  });

  it('start() resolves undefined after initialWaitMs without a snapshot, reports stale, then applies one', async () => {
    r = rig({ initialWaitMs: 30 });
    const t = Date.now();
    expect(await r.sub.start()).toBeUndefined();
    expect(Date.now() - t).toBeGreaterThanOrEqual(25);
    expect(r.sub.status()).toEqual({ version: undefined, ageMs: undefined, stale: true, maxStalenessMs: 300_000 });
    await r.publisher.publishSnapshot({ version: 4, config: config(4) });
    await r.settle();
    expect(r.sub.status()).toEqual({ version: 4, ageMs: 0, stale: false, maxStalenessMs: 300_000 });
  });

  it('rejects an older snapshot put back into the bucket (replayed), with an alert and a metric, and keeps the newer', async () => {
    r = rig();
    const v1 = await r.publisher.publishSnapshot({ version: 1, config: config(1) });
    await r.sub.start();
    await r.publisher.publishSnapshot({ version: 2, config: config(2) });
    await r.bucket.put(CONFIG_BUCKET_KEYS.snapshot, v1.bytes);
    await r.settle();
    expect(r.sub.version()).toBe(2);
    expect(r.applied.map((s) => s.version)).toEqual([1, 2]);
    expect(r.rejects).toEqual([['replayed', 'snapshot version 1 is below the applied version 2']]);
    expect(r.metrics.rejections).toEqual(['replayed']);
    expect(r.logger.errors()).toEqual([expect.objectContaining({ message: 'config message rejected: replayed' })]);
    expect(r.sub.status().lastRejection).toMatchObject({ reason: 'replayed', source: 'snapshot', atMs: T0 });
  });

  it('treats the same version with identical bytes as a no-op, and with different content as a replay', async () => {
    r = rig();
    const v2 = await r.publisher.publishSnapshot({ version: 2, config: config(2) });
    await r.sub.start();
    await r.bucket.put(CONFIG_BUCKET_KEYS.snapshot, v2.bytes);
    await r.settle();
    expect(r.applied).toHaveLength(1);
    expect(r.rejects).toEqual([]);
    expect(r.logger.errors()).toEqual([]);

    const conflicting = signPayload({ type: 'snapshot', schema_version: 1, version: 2, issued_at: new Date(T0).toISOString(), body: { config: config(99) } }, signingKey);
    await r.bucket.put(CONFIG_BUCKET_KEYS.snapshot, encodeEnvelope(conflicting));
    await r.settle();
    expect(r.sub.current()?.config).toEqual(config(2));
    expect(r.rejects.map(([reason]) => reason)).toEqual(['replayed']);
  });

  it.each<[string, (good: Uint8Array) => Uint8Array, string]>([
    [
      'a payload byte changed',
      (good) => {
        const b = Uint8Array.from(good);
        // Inside the envelope the payload is a JSON string, so its quotes are escaped.
        const i = Buffer.from(b).indexOf('version\\":5');
        expect(i).toBeGreaterThan(0);
        b[i + 'version\\":'.length] = '6'.charCodeAt(0);
        return b;
      },
      'bad_signature',
    ],
    ['an envelope signed by another key', () => encodeEnvelope(signPayload(snapshotPayload(6), otherKey)), 'unknown_key'],
    ['another key claiming our key id', () => encodeEnvelope({ ...signPayload(snapshotPayload(6), otherKey), key_id: pair.keyId }), 'bad_signature'],
    ['an unsigned envelope', () => encodeEnvelope({ payload: JSON.stringify(snapshotPayload(6)), signature: '', key_id: pair.keyId }), 'unsigned'],
    ['a bare payload', () => new TextEncoder().encode(JSON.stringify(snapshotPayload(6))), 'unsigned'],
    ['garbage', () => new TextEncoder().encode('{"payload":'), 'malformed'],
    ['a heartbeat under the snapshot key', () => encodeEnvelope(signPayload({ type: 'heartbeat', version: 6, issued_at: new Date(T0).toISOString() }, signingKey)), 'invalid_payload'],
  ])('rejects %s and keeps serving the good snapshot', async (_name, make, reason) => {
    r = rig();
    const good = await r.publisher.publishSnapshot({ version: 5, config: config(5) });
    await r.sub.start();
    await r.bucket.put(CONFIG_BUCKET_KEYS.snapshot, make(good.bytes));
    await r.settle();
    expect(r.sub.version()).toBe(5);
    expect(r.sub.current()?.config).toEqual(config(5));
    expect(r.rejects.map(([x]) => x)).toEqual([reason]);
    expect(r.metrics.rejections).toEqual([reason]);
    const errors = r.logger.errors();
    expect(errors).toHaveLength(1);
    expect(errors[0].message).toBe(`config message rejected: ${reason}`);
  });

  it('keeps the previous snapshot when onSnapshot throws (apply_failed), and applies the next good one', async () => {
    let fail = false;
    const applied: number[] = [];
    r = rig({
      onSnapshot: (s) => {
        if (fail) throw new Error('tenant limits do not parse');
        applied.push(s.version);
      },
    });
    await r.publisher.publishSnapshot({ version: 1, config: config(1) });
    await r.sub.start();
    fail = true;
    await r.publisher.publishSnapshot({ version: 2, config: config(2) });
    await r.settle();
    expect(r.sub.version()).toBe(1);
    expect(r.rejects).toEqual([['apply_failed', 'snapshot version 2 was not applied: Error: tenant limits do not parse']]);
    fail = false;
    await r.publisher.publishSnapshot({ version: 3, config: config(3) });
    await r.settle();
    expect(r.sub.version()).toBe(3);
    expect(applied).toEqual([1, 3]);
  });

  it('applies an async onSnapshot before the next message (serialized)', async () => {
    const order: string[] = [];
    r = rig({
      onSnapshot: async (s) => {
        order.push(`begin ${s.version}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
        order.push(`end ${s.version}`);
      },
    });
    await r.sub.start();
    await r.publisher.publishSnapshot({ version: 1, config: config(1) });
    await r.publisher.publishSnapshot({ version: 2, config: config(2) });
    await waitUntil(() => r.sub.version() === 2, 2_000);
    expect(order).toEqual(['begin 1', 'end 1', 'begin 2', 'end 2']);
  });

  describe('revocations', () => {
    it('applies each seq once; an identical redelivery is a no-op and a lower seq with other content is a replay', async () => {
      r = rig();
      await r.publisher.publishSnapshot({ version: 1, config: config(1) });
      await r.sub.start();
      r.now.ms += 1_000;
      const one = await r.publisher.publishRevocation({ seq: 1, kind: 'api_key', api_key_id: 'key-1' });
      await r.publisher.publishRevocation({ seq: 2, kind: 'kill_switch', tenant_id: 't1', enabled: true });
      await r.settle();
      expect(r.revoked.map((x) => x.seq)).toEqual([1, 2]);
      expect(r.revoked[1]).toMatchObject({ kind: 'kill_switch', tenant_id: 't1', enabled: true });

      await r.bucket.put(CONFIG_BUCKET_KEYS.revocation(1), one.bytes);
      await r.settle();
      expect(r.rejects).toEqual([]);
      const other = signPayload({ type: 'revocation', seq: 1, issued_at: new Date(r.now.ms).toISOString(), kind: 'tenant', tenant_id: 't9' }, signingKey);
      await r.bucket.put(CONFIG_BUCKET_KEYS.revocation(1), encodeEnvelope(other));
      await r.settle();
      expect(r.revoked.map((x) => x.seq)).toEqual([1, 2]);
      expect(r.rejects.map(([x]) => x)).toEqual(['replayed']);
    });

    it('rejects a revocation stored under another seq key', async () => {
      r = rig();
      await r.sub.start();
      const rev = signPayload({ type: 'revocation', seq: 9, issued_at: new Date(T0).toISOString(), kind: 'tenant', tenant_id: 't1' }, signingKey);
      await r.bucket.put(CONFIG_BUCKET_KEYS.revocation(3), encodeEnvelope(rev));
      await r.settle();
      expect(r.revoked).toEqual([]);
      expect(r.rejects.map(([x]) => x)).toEqual(['invalid_payload']);
    });

    it('skips revocations the applied snapshot already includes and re-applies later ones over a new snapshot', async () => {
      r = rig();
      await r.publisher.publishSnapshot({ version: 1, config: config(1) });
      await r.sub.start();
      r.now.ms = T0 + 1_000;
      await r.publisher.publishRevocation({ seq: 1, kind: 'tenant', tenant_id: 't1' });
      r.now.ms = T0 + 2_000;
      // Snapshot 2 was built after revocation 1: it includes it.
      await r.publisher.publishSnapshot({ version: 2, config: config(2) });
      r.now.ms = T0 + 3_000;
      await r.publisher.publishRevocation({ seq: 2, kind: 'tenant', tenant_id: 't2' });
      // Snapshot 3 was built before revocation 2 (issued earlier), published after it.
      await r.publisher.publishSnapshot({ version: 3, config: config(3), issuedAt: T0 + 2_500 });
      await r.settle();
      expect(r.revoked.map((x) => x.seq)).toEqual([1, 2, 2]);

      // A fresh subscriber on the same bucket sees both revocations before the snapshot (revision
      // order); it holds them, then applies only revocation 2 (1 predates snapshot 3) on top.
      const again = rig({}, r.bucket);
      await again.sub.start();
      await again.settle();
      expect(again.sub.version()).toBe(3);
      expect(again.revoked.map((x) => x.seq)).toEqual([2]);
      await again.sub.stop();
    });

    it('does not count a revocation whose onRevocation threw as seen', async () => {
      let fail = true;
      const seen: number[] = [];
      r = rig({
        onRevocation: (rev) => {
          if (fail) throw new Error('cache unavailable');
          seen.push(rev.seq);
        },
      });
      await r.publisher.publishSnapshot({ version: 1, config: config(1) });
      await r.sub.start();
      const rev = await r.publisher.publishRevocation({ seq: 1, kind: 'tenant', tenant_id: 't1' });
      await r.settle();
      expect(r.rejects.map(([x]) => x)).toEqual(['apply_failed']);
      fail = false;
      await r.bucket.put(CONFIG_BUCKET_KEYS.revocation(1), rev.bytes);
      await r.settle();
      expect(seen).toEqual([1]);
    });
  });

  describe('staleness (fake clock)', () => {
    it('ages from issued_at, is refreshed by heartbeats for the applied version only, and goes stale past the maximum', async () => {
      r = rig({ maxStalenessMs: 1_000 });
      await r.publisher.publishSnapshot({ version: 1, config: config(1) });
      await r.sub.start();
      expect(r.sub.ageMs()).toBe(0);
      r.now.ms += 900;
      expect(r.sub.isStale()).toBe(false);
      await r.publisher.publishHeartbeat(1);
      await r.settle();
      expect(r.sub.ageMs()).toBe(0);
      r.now.ms += 1_000;
      expect(r.sub.status()).toMatchObject({ version: 1, ageMs: 1_000, stale: false });
      r.now.ms += 1;
      expect(r.sub.status()).toMatchObject({ ageMs: 1_001, stale: true });
      // A heartbeat for a version this service does not have does not make it fresh.
      await r.publisher.publishHeartbeat(2);
      await r.settle();
      expect(r.sub.isStale()).toBe(true);
      expect(r.logger.lines.some((l) => l.level === 'warn' && /newer config version/.test(l.message))).toBe(true);
      // An old heartbeat put back does not either: age comes from its issued_at.
      r.now.ms += 10;
      await r.publisher.publishHeartbeat(1);
      await r.settle();
      expect(r.sub.isStale()).toBe(false);
      const stale = signPayload({ type: 'heartbeat', version: 1, issued_at: new Date(T0).toISOString() }, signingKey);
      await r.bucket.put(CONFIG_BUCKET_KEYS.heartbeat, encodeEnvelope(stale));
      await r.settle();
      expect(r.sub.ageMs()).toBe(0);
      r.now.ms += 1_001;
      expect(r.sub.isStale()).toBe(true);
    });

    it('counts a heartbeat that arrived before its snapshot', async () => {
      r = rig({ maxStalenessMs: 1_000 });
      await r.publisher.publishHeartbeat(7);
      await r.publisher.publishSnapshot({ version: 7, config: config(7), issuedAt: T0 - 5_000 });
      await r.sub.start();
      await r.settle();
      expect(r.sub.version()).toBe(7);
      expect(r.sub.ageMs()).toBe(0);
    });
  });

  describe('last-good file', () => {
    let dir: string;
    beforeEach(() => {
      dir = mkdtempSync(path.join(tmpdir(), 'weir-lastgood-'));
    });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));

    it('writes the applied envelope atomically and cold-starts from it before the bucket has anything', async () => {
      const file = path.join(dir, 'state', 'config-snapshot.json');
      r = rig({ lastGoodPath: file });
      await r.publisher.publishSnapshot({ version: 1, config: config(1) });
      await r.sub.start();
      const v2 = await r.publisher.publishSnapshot({ version: 2, config: config(2) });
      await waitUntil(() => {
        try {
          return readFileSync(file).equals(Buffer.from(v2.bytes));
        } catch {
          return false;
        }
      }, 2_000, 'last-good file holds v2');
      expect(readdirSync(path.dirname(file))).toEqual(['config-snapshot.json']);
      const stored = openEnvelope(readFileSync(file), verifyKey);
      expect(stored.ok && stored.payload).toMatchObject({ type: 'snapshot', version: 2 });
      await r.sub.stop();

      // Cold start: an empty bucket (NATS not answering yet); start() returns at once with v2.
      const cold = rig({ lastGoodPath: file, initialWaitMs: 10_000 });
      r = cold;
      const t = Date.now();
      expect((await cold.sub.start())?.version).toBe(2);
      expect(Date.now() - t).toBeLessThan(1_000);
      expect(cold.applied.map((s) => s.version)).toEqual([2]);
      // Then the bucket's newer snapshot wins, and an older one is a replay.
      const v3 = await cold.publisher.publishSnapshot({ version: 3, config: config(3) });
      await cold.settle();
      expect(cold.sub.version()).toBe(3);
      // v3 reaches the last-good file too (and the write is over before the folder is removed).
      await waitUntil(() => {
        try {
          return readFileSync(file).equals(Buffer.from(v3.bytes));
        } catch {
          return false;
        }
      }, 2_000, 'last-good file holds v3');
      await cold.sub.stop();
    });

    it.each<[string, (text: string) => string, string]>([
      ['a changed byte', (t) => t.replace('"version\\":2', '"version\\":9'), 'bad_signature'],
      ['truncation', (t) => t.slice(0, t.length - 10), 'malformed'],
      ['a signature from another key', () => JSON.stringify(signPayload(snapshotPayload(2), otherKey)), 'unknown_key'],
    ])('rejects a last-good file with %s and waits for the bucket', async (_name, corrupt, reason) => {
      const file = path.join(dir, 'config-snapshot.json');
      const good = signPayload(snapshotPayload(2), signingKey);
      const text = JSON.stringify(good);
      const bad = corrupt(text);
      expect(bad).not.toBe(text);
      writeFileSync(file, bad);
      r = rig({ lastGoodPath: file, initialWaitMs: 30 });
      expect(await r.sub.start()).toBeUndefined();
      expect(r.rejects.map(([x]) => x)).toEqual([reason]);
      expect(r.sub.status().lastRejection).toMatchObject({ reason, source: 'last_good' });
      expect(r.sub.isStale()).toBe(true);
    });

    it('an old last-good snapshot is served but already stale (fail closed)', async () => {
      const file = path.join(dir, 'config-snapshot.json');
      writeFileSync(file, JSON.stringify(signPayload({ ...snapshotPayload(2), issued_at: new Date(T0 - 600_000).toISOString() }, signingKey)));
      r = rig({ lastGoodPath: file });
      expect((await r.sub.start())?.version).toBe(2);
      expect(r.sub.status()).toMatchObject({ version: 2, ageMs: 600_000, stale: true });
    });
  });
});

function snapshotPayload(version: number) {
  return { type: 'snapshot' as const, schema_version: 1 as const, version, issued_at: new Date(T0).toISOString(), body: { config: config(version) } };
}

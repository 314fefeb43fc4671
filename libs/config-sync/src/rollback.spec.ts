// Issue 14, part 11: a replayed old snapshot cannot undo a revocation, and a revocation re-sent
// under the latest seq with other content is a replay — even for a data plane that starts with
// nothing saved.
import { CONFIG_BUCKET_KEYS, createMemoryConfigBucket, type ConfigBucket } from './bucket';
import { encodeEnvelope, openEnvelope, revocationDigest, signPayload, type RevocationPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';
import { createSnapshotPublisher, type SnapshotPublisher } from './publisher';
import { createSnapshotSubscriber, type ConfigSnapshot, type SnapshotSubscriber } from './subscriber';
import { recordingLogger } from './test-support';

const pair = generateSigningKeyPair();
const signingKey = loadSigningKey(pair.privateKeyPem);
const verifyKey = loadVerifyKey(pair.publicKeyPem);
const T0 = Date.parse('2026-12-01T12:00:00.000Z');
const acme = (killSwitch: boolean) => ({ tenants: [{ id: 'acme', kill_switch: killSwitch }] });

interface DataPlane {
  sub: SnapshotSubscriber;
  applied: ConfigSnapshot[];
  revoked: RevocationPayload[];
  rejects: Array<[string, string]>;
  logger: ReturnType<typeof recordingLogger>;
}

/** A data plane starting fresh: no last-good file, nothing applied. */
function freshDataPlane(bucket: ConfigBucket, now: () => number): DataPlane {
  const applied: ConfigSnapshot[] = [];
  const revoked: RevocationPayload[] = [];
  const rejects: Array<[string, string]> = [];
  const logger = recordingLogger();
  const sub = createSnapshotSubscriber({
    bucket,
    verifyKey,
    clock: now,
    logger,
    initialWaitMs: 100,
    onSnapshot: (s) => void applied.push(s),
    onRevocation: (r) => void revoked.push(r),
    onReject: (reason, detail) => void rejects.push([reason, detail]),
  });
  return { sub, applied, revoked, rejects, logger };
}

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
};

describe('config rollback and replay (fresh data plane)', () => {
  let bucket: ConfigBucket;
  let publisher: SnapshotPublisher;
  let clock: { ms: number };
  let dp: DataPlane | undefined;
  const now = () => clock.ms;

  beforeEach(() => {
    bucket = createMemoryConfigBucket();
    clock = { ms: T0 };
    publisher = createSnapshotPublisher({ bucket, signingKey, clock: now });
  });
  afterEach(async () => {
    await dp?.sub.stop();
    dp = undefined;
  });

  /**
   * The control plane's history: v1 (acme running), then acme's kill switch (revocation 1) and
   * v2 that includes it. Returns v1's envelope, which an attacker on the bucket kept.
   */
  async function killSwitchHistory(): Promise<Uint8Array> {
    const v1 = await publisher.publishSnapshot({ version: 1, config: acme(false) });
    clock.ms += 60_000;
    const rev = await publisher.publishRevocation({ seq: 1, kind: 'kill_switch', tenant_id: 'acme', enabled: true });
    await publisher.publishSnapshot({ version: 2, config: acme(true), lastRevocation: rev.payload });
    clock.ms += 5_000;
    return v1.bytes;
  }

  it.each([
    ['the replay written after the latest heartbeat', async (old: Uint8Array) => {
      await publisher.publishHeartbeat(2);
      await bucket.put(CONFIG_BUCKET_KEYS.snapshot, old);
    }],
    ['the latest heartbeat written after the replay', async (old: Uint8Array) => {
      await bucket.put(CONFIG_BUCKET_KEYS.snapshot, old);
      await publisher.publishHeartbeat(2);
    }],
    ['no heartbeat at all: the snapshot key still retains v2 in its history', async (old: Uint8Array) => {
      await bucket.put(CONFIG_BUCKET_KEYS.snapshot, old);
      await bucket.delete(CONFIG_BUCKET_KEYS.heartbeat);
    }],
  ])('refuses an old, validly signed snapshot while a newer one exists (%s)', async (_name, replay) => {
    const old = await killSwitchHistory();
    await replay(old);
    dp = freshDataPlane(bucket, now);
    expect(await dp.sub.start()).toBeUndefined();
    expect(dp.applied).toEqual([]);
    expect(dp.rejects).toContainEqual(['replayed', expect.stringContaining('snapshot version 1 is below version 2')]);
    expect(dp.sub.status()).toMatchObject({ version: undefined, stale: true });
    // The control plane publishes again: the normal path applies it.
    clock.ms += 1_000;
    await publisher.publishSnapshot({ version: 3, config: acme(true) });
    await settle();
    expect(dp.applied.map((s) => [s.version, s.config])).toEqual([[3, acme(true)]]);
    expect(dp.sub.isStale()).toBe(false);
  });

  it('the normal path: a fresh data plane applies the current snapshot, its revocations and later snapshots', async () => {
    await killSwitchHistory();
    await publisher.publishHeartbeat(2);
    dp = freshDataPlane(bucket, now);
    expect((await dp.sub.start())?.version).toBe(2);
    await settle();
    expect(dp.applied.map((s) => s.version)).toEqual([2]);
    expect(dp.revoked.map((r) => [r.seq, r.enabled])).toEqual([[1, true]]);
    clock.ms += 1_000;
    const rev = await publisher.publishRevocation({ seq: 2, kind: 'api_key', api_key_id: 'key_1' });
    await publisher.publishSnapshot({ version: 3, config: acme(true), lastRevocation: rev.payload });
    await publisher.publishHeartbeat(3);
    await settle();
    expect(dp.applied.map((s) => s.version)).toEqual([2, 3]);
    expect(dp.revoked.map((r) => r.seq)).toEqual([1, 2, 2]);
    expect(dp.rejects).toEqual([]);
  });

  /**
   * A second, validly signed revocation under seq 1 lifting the kill switch: what a control plane
   * restored from an old backup could have signed, kept by whoever can write to the bucket.
   */
  const liftUnderSeq1 = (issuedAtMs: number) =>
    encodeEnvelope(signPayload({ type: 'revocation', seq: 1, issued_at: new Date(issuedAtMs).toISOString(), kind: 'kill_switch', tenant_id: 'acme', enabled: false }, signingKey));

  it.each([
    ['announced by the heartbeat', true],
    ['bound by the snapshot alone (no heartbeat)', false],
  ])('refuses a revocation re-sent under the latest seq with other content (%s)', async (_name, withHeartbeat) => {
    await killSwitchHistory();
    const issued = openEnvelope((await bucket.get(CONFIG_BUCKET_KEYS.revocation(1)))!, verifyKey);
    if (!issued.ok) throw new Error('revocation 1 does not open');
    if (withHeartbeat) await publisher.publishHeartbeat(2);
    await bucket.put(CONFIG_BUCKET_KEYS.revocation(1), liftUnderSeq1(Date.parse(issued.payload.issued_at)));
    dp = freshDataPlane(bucket, now);
    expect((await dp.sub.start())?.version).toBe(2);
    await settle();
    expect(dp.revoked).toEqual([]);
    expect(dp.rejects).toContainEqual(['replayed', 'revocation seq 1 is not the content the control plane announced for that seq']);
    // The genuine revocation 1, put back, is applied: the head named its content.
    await bucket.put(CONFIG_BUCKET_KEYS.revocation(1), encodeEnvelope(signPayload(issued.payload, signingKey)));
    await settle();
    expect(dp.revoked.map((r) => [r.seq, r.enabled])).toEqual([[1, true]]);
  });

  it('a running data plane refuses the same seq with other content after applying it', async () => {
    await killSwitchHistory();
    await publisher.publishHeartbeat(2);
    dp = freshDataPlane(bucket, now);
    await dp.sub.start();
    await settle();
    const issuedAt = Date.parse((dp.revoked[0] as RevocationPayload).issued_at);
    await bucket.put(CONFIG_BUCKET_KEYS.revocation(1), liftUnderSeq1(issuedAt));
    await settle();
    expect(dp.revoked.map((r) => r.enabled)).toEqual([true]);
    expect(dp.rejects.map(([reason]) => reason)).toEqual(['replayed']);
  });
});

describe('revocationDigest and the announced head', () => {
  const r: Omit<RevocationPayload, 'type'> = { seq: 7, issued_at: '2026-12-01T12:00:00.000Z', kind: 'kill_switch', tenant_id: 'acme', enabled: true };

  it('depends on every field and on nothing else (field order, time notation)', () => {
    const base = revocationDigest(r);
    expect(base).toMatch(/^[0-9a-f]{64}$/);
    expect(revocationDigest({ enabled: true, tenant_id: 'acme', kind: 'kill_switch', issued_at: '2026-12-01T12:00:00Z', seq: 7 })).toBe(base);
    for (const changed of [{ seq: 8 }, { enabled: false }, { tenant_id: 'acme2' }, { kind: 'tenant' as const }, { issued_at: '2026-12-01T12:00:00.001Z' }, { api_key_id: 'k' }]) {
      expect(revocationDigest({ ...r, ...changed })).not.toBe(base);
    }
  });

  it('heartbeats and snapshots carry the latest revocation\'s seq and digest', async () => {
    const bucket = createMemoryConfigBucket();
    const publisher = createSnapshotPublisher({ bucket, signingKey, clock: () => T0 });
    const beat0 = await publisher.publishHeartbeat(1);
    expect(beat0.payload).not.toHaveProperty('revocation_seq');
    const rev = await publisher.publishRevocation({ seq: 7, kind: 'kill_switch', tenant_id: 'acme', enabled: true });
    const head = { revocation_seq: 7, revocation_sha256: revocationDigest(rev.payload) };
    expect((await publisher.publishHeartbeat(1)).payload).toMatchObject(head);
    expect((await publisher.publishSnapshot({ version: 2, config: {}, lastRevocation: rev.payload })).payload).toMatchObject(head);
    // A restarted control plane learns the head from the snapshot it republishes.
    const restarted = createSnapshotPublisher({ bucket: createMemoryConfigBucket(), signingKey, clock: () => T0 });
    await restarted.publishSnapshot({ version: 2, config: {}, lastRevocation: { ...rev.payload, issued_at: '2026-12-01T12:00:00Z' } });
    expect((await restarted.publishHeartbeat(2)).payload).toMatchObject(head);
  });
});

/**
 * The control plane's side: signs snapshots, heartbeats and revocations and puts them in the
 * bucket under the contract's keys.
 */
import { WeirError } from '@weir/core';
import { CONFIG_BUCKET_KEYS, type ConfigBucket } from './bucket';
import {
  encodeEnvelope,
  openEnvelope,
  revocationDigest,
  signPayload,
  type HeartbeatPayload,
  type RevocationContent,
  type RevocationPayload,
  type SnapshotPayload,
} from './envelope';
import { verifyKeyOf, type SigningKey } from './keys';
import { silentConfigSyncLogger, type ConfigSyncLogger } from './logger';

/** Options for {@link createSnapshotPublisher}. */
export interface SnapshotPublisherOptions {
  bucket: ConfigBucket;
  signingKey: SigningKey;
  /** Epoch ms, for `issued_at`. Default `Date.now`. */
  clock?: () => number;
  /** Heartbeat failures go here (never payloads). Default: silent. */
  logger?: ConfigSyncLogger;
}

/** A time for `issued_at`: a `Date`, epoch ms, or an ISO-8601 UTC string. */
export type IssuedAt = Date | number | string;

/** A revocation to publish: the payload without `type` and `issued_at` (which the publisher sets unless given). */
export type RevocationInput = Omit<RevocationPayload, 'type' | 'issued_at'> & { issuedAt?: IssuedAt };

/** What a publish stored. */
export interface Published<P> {
  /** The bucket revision of the put. */
  revision: number;
  /** The signed payload. */
  payload: P;
  /** The envelope bytes as stored. */
  bytes: Uint8Array;
}

/** Publishes signed configuration messages. */
export interface SnapshotPublisher {
  /**
   * Signs and stores snapshot `version` under `snapshot`. `config` is the Weir configuration
   * object (snake_case, what `parseConfig` accepts); `issuedAt` defaults to the clock.
   * `lastRevocation` is the latest revocation the snapshot includes, as the control plane's store
   * holds it: the snapshot carries its `seq` and {@link revocationDigest}, and so do later
   * heartbeats (the announced revocation head), so a data plane refuses a different revocation
   * re-sent under that seq.
   * @throws WeirError `conflict` when the bucket already holds a snapshot (signed by this key)
   *   with a version ≥ `version` (versions only move forward); `invalid_request` for a version
   *   that is not an integer ≥ 1 or a config that is not an object; the bucket's error when it
   *   cannot be reached.
   */
  publishSnapshot(input: { version: number; config: Record<string, unknown>; issuedAt?: IssuedAt; lastRevocation?: RevocationContent }): Promise<Published<SnapshotPayload>>;
  /**
   * Signs and stores a heartbeat for snapshot `version` (issued now) under `heartbeat`, naming the
   * latest revocation this publisher published or was told of (`revocation_seq`/`revocation_sha256`).
   */
  publishHeartbeat(version: number): Promise<Published<HeartbeatPayload>>;
  /**
   * Signs and stores a revocation under `revocations.<seq>`. Publish revocations one at a time in
   * `seq` order: a subscriber ignores a `seq` at or below one it has applied.
   * @throws WeirError `conflict` when `revocations.<seq>` already exists; `invalid_request` for
   *   a revocation that breaks the contract (e.g. a kill_switch without `enabled`).
   */
  publishRevocation(input: RevocationInput): Promise<Published<RevocationPayload>>;
  /**
   * Publishes a heartbeat for `getVersion()` every `everyMs` (default 5,000), skipping a beat
   * while the previous one is still in flight or when `getVersion()` is undefined. Failures are
   * logged at warn and retried at the next beat. Returns a function that stops the beats.
   */
  startHeartbeats(getVersion: () => number | undefined, everyMs?: number): () => void;
}

/** Creates a {@link SnapshotPublisher} writing to `options.bucket`. */
export function createSnapshotPublisher(options: SnapshotPublisherOptions): SnapshotPublisher {
  const { bucket, signingKey } = options;
  const clock = options.clock ?? Date.now;
  const logger = options.logger ?? silentConfigSyncLogger;
  const ownKey = verifyKeyOf(signingKey);
  /** The latest revocation published or named by a snapshot: what heartbeats announce. */
  let revocationHead: { revocation_seq: number; revocation_sha256: string } | undefined;
  const noteRevocation = (r: RevocationContent): { revocation_seq: number; revocation_sha256: string } => {
    const head = { revocation_seq: r.seq, revocation_sha256: revocationDigest(r) };
    if (!revocationHead || head.revocation_seq >= revocationHead.revocation_seq) revocationHead = head;
    return head;
  };

  const iso = (at: IssuedAt | undefined): string => {
    const d = at === undefined ? new Date(clock()) : at instanceof Date ? at : new Date(at);
    if (Number.isNaN(d.getTime())) throw new WeirError('invalid_request', 'issuedAt is not a valid time');
    return d.toISOString();
  };

  // Signing validates, so a bad payload fails before the bucket is touched.
  const signed = <P extends SnapshotPayload | HeartbeatPayload | RevocationPayload>(payload: P) => ({
    payload,
    bytes: encodeEnvelope(signPayload(payload, signingKey)),
  });
  const store = async <P>(key: string, s: { payload: P; bytes: Uint8Array }): Promise<Published<P>> => {
    const revision = await bucket.put(key, s.bytes);
    return { revision, ...s };
  };

  const publisher: SnapshotPublisher = {
    async publishSnapshot({ version, config, issuedAt, lastRevocation }) {
      const head = lastRevocation ? noteRevocation({ ...lastRevocation, issued_at: iso(lastRevocation.issued_at) }) : undefined;
      const next = signed<SnapshotPayload>({ type: 'snapshot', schema_version: 1, version, issued_at: iso(issuedAt), body: { config }, ...head });
      const current = await bucket.get(CONFIG_BUCKET_KEYS.snapshot);
      if (current) {
        const opened = openEnvelope(current, ownKey);
        // Only our own, valid snapshot counts: a forged or broken entry is simply overwritten.
        if (opened.ok && opened.payload.type === 'snapshot' && opened.payload.version >= version) {
          throw new WeirError('conflict', `snapshot version ${version} is not above the published version ${opened.payload.version}`);
        }
      }
      return store(CONFIG_BUCKET_KEYS.snapshot, next);
    },
    async publishHeartbeat(version) {
      return store(CONFIG_BUCKET_KEYS.heartbeat, signed<HeartbeatPayload>({ type: 'heartbeat', version, issued_at: iso(undefined), ...revocationHead }));
    },
    async publishRevocation(input) {
      const { issuedAt, ...rest } = input;
      const next = signed<RevocationPayload>({ type: 'revocation', ...rest, issued_at: iso(issuedAt) });
      const key = CONFIG_BUCKET_KEYS.revocation(next.payload.seq);
      if ((await bucket.get(key)) !== undefined) throw new WeirError('conflict', `revocation ${next.payload.seq} is already published`);
      const published = await store(key, next);
      noteRevocation(next.payload);
      return published;
    },
    startHeartbeats(getVersion, everyMs = 5_000) {
      let inFlight = false;
      const beat = (): void => {
        const version = getVersion();
        if (inFlight || version === undefined) return;
        inFlight = true;
        publisher
          .publishHeartbeat(version)
          .catch((error: unknown) => logger.warn({ version, err: error }, 'config heartbeat not published'))
          .finally(() => {
            inFlight = false;
          });
      };
      beat();
      const timer = setInterval(beat, everyMs);
      timer.unref();
      return () => clearInterval(timer);
    },
  };
  return publisher;
}

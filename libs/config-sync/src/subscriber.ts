/**
 * A data plane's side: watches the bucket, verifies every envelope, applies snapshots whose
 * version moves forward, applies revocations, keeps the last good snapshot on disk for cold
 * starts, and tracks the snapshot's age for fail-closed staleness (docs/config-snapshots.md).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import path from 'node:path';
import { scrubErrorMessage } from '@weir/telemetry';
import { CONFIG_BUCKET_KEYS, type ConfigBucket, type ConfigBucketWatch } from './bucket';
import { openEnvelope, revocationDigest, type EnvelopeRejectionReason, type HeartbeatPayload, type RevocationPayload, type SnapshotPayload } from './envelope';
import type { VerifyKey } from './keys';
import { silentConfigSyncLogger, type ConfigSyncLogger } from './logger';
import type { ConfigSyncMetrics } from './metrics';

/**
 * Why a message was not applied: the envelope's reasons, plus `replayed` (a snapshot version
 * below the applied one or below the newest one announced; a revocation seq at or below the
 * applied one, or the announced head's seq with other content; either with different content at
 * the same number) and `apply_failed` (the service's `onSnapshot`/`onRevocation` threw).
 */
export type ConfigRejectionReason = EnvelopeRejectionReason | 'replayed' | 'apply_failed';

/** Every {@link ConfigRejectionReason}, for metrics and exhaustive tables. */
export const CONFIG_REJECTION_REASONS: readonly ConfigRejectionReason[] = [
  'malformed',
  'unsigned',
  'bad_signature',
  'unknown_key',
  'invalid_payload',
  'replayed',
  'apply_failed',
];

/** A verified snapshot, as handed to the service. */
export interface ConfigSnapshot {
  /** Integer ≥ 1. */
  version: number;
  schemaVersion: 1;
  /** ISO-8601 UTC, as signed. */
  issuedAt: string;
  /** `issuedAt` as epoch ms. */
  issuedAtMs: number;
  /** The Weir configuration object (snake_case) for `parseConfig(JSON.stringify(config), 'snapshot v<n>')`. */
  config: Record<string, unknown>;
  /** Id of the key that signed it. */
  keyId: string;
}

/** The latest rejection, for `/readyz` and logs. */
export interface ConfigRejection {
  reason: ConfigRejectionReason;
  /** Payload-free explanation. */
  detail: string;
  /** Bucket key, or `last_good` for the file. */
  source: string;
  /** Epoch ms (subscriber clock). */
  atMs: number;
}

/** What `/readyz` reports about configuration. */
export interface ConfigSyncStatus {
  /** Applied snapshot version; undefined before the first. */
  version: number | undefined;
  /** Snapshot age (ms): now − max(issued_at, the latest heartbeat for this version); undefined before the first. */
  ageMs: number | undefined;
  /** True without a snapshot or when `ageMs` > `maxStalenessMs`: refuse new requests (503 `config_stale`). */
  stale: boolean;
  maxStalenessMs: number;
  lastRejection?: ConfigRejection;
}

/** Options for {@link createSnapshotSubscriber}. */
export interface SnapshotSubscriberOptions {
  bucket: ConfigBucket;
  /** The key(s) snapshots must be signed with (several during a rotation). Never taken from the bucket. */
  verifyKey: VerifyKey | readonly VerifyKey[];
  /**
   * Applies a verified snapshot whose version is above the applied one (may be async; calls are
   * serialized). If it throws, the snapshot is rejected (`apply_failed`) and the previous one
   * stays applied.
   */
  onSnapshot(snapshot: ConfigSnapshot): void | Promise<void>;
  /**
   * Applies a verified revocation on top of the applied snapshot. `onSnapshot` replaces the whole
   * state, revocation effects included; after each applied snapshot the subscriber calls this
   * again, in `seq` order, for every revocation issued at or after that snapshot (so it must be
   * idempotent). Revocations issued before the applied snapshot are already part of it and are
   * not passed on; those that arrive before any snapshot is applied are held for it. Throwing
   * rejects it (`apply_failed`) and it is not counted as seen.
   */
  onRevocation?(revocation: RevocationPayload): void | Promise<void>;
  /** Told of each rejection (after the alert log and the metric). */
  onReject?(reason: ConfigRejectionReason, detail: string): void;
  /** Where the last applied snapshot's envelope is kept (written atomically, re-verified on load). Default: none. */
  lastGoodPath?: string;
  /** Beyond this age (ms) the subscriber reports stale. Default 300,000 (5 min). */
  maxStalenessMs?: number;
  /** How long `start()` waits for a first snapshot when there is no last-good file (ms). Default 10,000. */
  initialWaitMs?: number;
  /**
   * How long `start()`, without a last-good snapshot, reads the bucket's announced head (the
   * `heartbeat` entry and the `snapshot` key's retained history) before watching (ms). Default
   * 5,000. The head is the floor below which a snapshot is a rollback.
   */
  headReadTimeoutMs?: number;
  /** Epoch ms. Default `Date.now`. */
  clock?: () => number;
  /** Rejections are logged at error (the alert), applies at info. Never payloads. Default: silent. */
  logger?: ConfigSyncLogger;
  metrics?: ConfigSyncMetrics;
}

/** A running subscriber. */
export interface SnapshotSubscriber {
  /**
   * Loads and verifies the last-good file (if any), then watches the bucket. Resolves with the
   * applied snapshot as soon as there is one (at once after a valid last-good file: serving can
   * begin before NATS answers), or with undefined after `initialWaitMs`. Never rejects on bad
   * input; call once.
   */
  start(): Promise<ConfigSnapshot | undefined>;
  /** The applied snapshot, or undefined. */
  current(): ConfigSnapshot | undefined;
  /** The applied version, or undefined. */
  version(): number | undefined;
  /** The applied snapshot's age (ms, ≥ 0), or undefined. */
  ageMs(): number | undefined;
  /** True without a snapshot or when older than `maxStalenessMs`. */
  isStale(): boolean;
  status(): ConfigSyncStatus;
  /** Stops watching and waits for the message being handled. Idempotent. */
  stop(): Promise<void>;
}

interface Applied {
  snapshot: ConfigSnapshot;
  payloadText: string;
}

interface Source {
  source: string;
  revision?: number;
}

const DEFAULT_MAX_STALENESS_MS = 300_000;
const DEFAULT_INITIAL_WAIT_MS = 10_000;
const DEFAULT_HEAD_READ_TIMEOUT_MS = 5_000;
/** Revocations kept for re-application after a snapshot; older ones are part of some snapshot by then. */
const MAX_RETAINED_REVOCATIONS = 10_000;
/** Heartbeat times kept per version (only the applied version and newer ones matter). */
const MAX_HEARTBEAT_VERSIONS = 16;

/** Creates a {@link SnapshotSubscriber}; nothing happens until `start()`. */
export function createSnapshotSubscriber(options: SnapshotSubscriberOptions): SnapshotSubscriber {
  const { bucket, verifyKey, lastGoodPath, metrics } = options;
  const maxStalenessMs = options.maxStalenessMs ?? DEFAULT_MAX_STALENESS_MS;
  const initialWaitMs = options.initialWaitMs ?? DEFAULT_INITIAL_WAIT_MS;
  const clock = options.clock ?? Date.now;
  const logger = options.logger ?? silentConfigSyncLogger;

  let applied: Applied | undefined;
  let freshAtMs = 0;
  const heartbeats = new Map<number, number>();
  let lastRevocationSeq = 0;
  /**
   * The newest snapshot version this subscriber has seen signed: applied, announced by a
   * heartbeat, or retained in the `snapshot` key's history. A snapshot below it is a rollback
   * (a replayed old snapshot), refused even with nothing applied yet.
   */
  let headVersion = 0;
  /** The latest revocation the control plane announced (heartbeat, snapshot): its seq is bound to this content digest. */
  let headRevocation: { seq: number; sha256: string; atMs: number } | undefined;
  const revocations = new Map<number, { payload: RevocationPayload; payloadText: string; issuedAtMs: number }>();
  let lastRejection: ConfigRejection | undefined;
  let warnedAheadVersion = 0;
  let watch: ConfigBucketWatch | undefined;
  let chain: Promise<void> = Promise.resolve();
  let started: Promise<ConfigSnapshot | undefined> | undefined;
  let stopped = false;
  const waiters = new Set<() => void>();

  const ageMs = (): number | undefined => (applied ? Math.max(0, clock() - freshAtMs) : undefined);
  const isStale = (): boolean => {
    const age = ageMs();
    return age === undefined || age > maxStalenessMs;
  };
  const status = (): ConfigSyncStatus => {
    const age = ageMs();
    return {
      version: applied?.snapshot.version,
      ageMs: age,
      stale: age === undefined || age > maxStalenessMs,
      maxStalenessMs,
      ...(lastRejection ? { lastRejection } : {}),
    };
  };

  const reject = (reason: ConfigRejectionReason, detail: string, src: Source, err?: unknown): void => {
    lastRejection = { reason, detail, source: src.source, atMs: clock() };
    // The alert: reason and where, never the payload.
    logger.error(
      { reason, detail, source: src.source, ...(src.revision !== undefined ? { revision: src.revision } : {}), ...(err !== undefined ? { err } : {}) },
      `config message rejected: ${reason}`,
    );
    metrics?.rejected(reason);
    try {
      options.onReject?.(reason, detail);
    } catch (error) {
      logger.warn({ err: error }, 'config onReject callback threw');
    }
  };

  const noteRevocationHead = (p: { revocation_seq?: number; revocation_sha256?: string; issued_at: string }): void => {
    if (p.revocation_seq === undefined || p.revocation_sha256 === undefined) return;
    const atMs = Date.parse(p.issued_at);
    // A later seq, or the same seq announced later (the control plane stands behind that content now).
    if (!headRevocation || p.revocation_seq > headRevocation.seq || (p.revocation_seq === headRevocation.seq && atMs > headRevocation.atMs)) {
      headRevocation = { seq: p.revocation_seq, sha256: p.revocation_sha256, atMs };
    }
  };

  /** False when `r` sits at the announced head's seq with other content (a replay). */
  const matchesHead = (r: RevocationPayload): boolean => !headRevocation || r.seq !== headRevocation.seq || revocationDigest(r) === headRevocation.sha256;

  const refreshFromHeartbeat = (): void => {
    if (!applied) return;
    const at = heartbeats.get(applied.snapshot.version);
    if (at !== undefined && at > freshAtMs) freshAtMs = at;
  };

  const writeLastGood = async (bytes: Uint8Array): Promise<void> => {
    if (!lastGoodPath) return;
    const tmp = `${lastGoodPath}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      await mkdir(path.dirname(lastGoodPath), { recursive: true, mode: 0o700 });
      const fh = await open(tmp, 'w', 0o600);
      try {
        await fh.writeFile(bytes);
        await fh.sync();
      } finally {
        await fh.close();
      }
      // rename is atomic on one filesystem: a reader sees the old file or the new one, never half.
      await rename(tmp, lastGoodPath);
    } catch (error) {
      logger.error({ err: error }, 'last-good config snapshot not written');
      await unlink(tmp).catch(() => undefined);
    }
  };

  const applyRevocation = async (r: RevocationPayload): Promise<void> => {
    await options.onRevocation?.(r);
  };

  const handleSnapshot = async (p: SnapshotPayload, payloadText: string, keyId: string, bytes: Uint8Array, src: Source): Promise<void> => {
    if (applied) {
      const current = applied.snapshot.version;
      if (p.version < current) return reject('replayed', `snapshot version ${p.version} is below the applied version ${current}`, src);
      if (p.version === current) {
        if (payloadText === applied.payloadText) {
          logger.debug({ version: p.version, source: src.source }, 'config snapshot already applied');
          return;
        }
        return reject('replayed', `snapshot version ${p.version} is the applied version with different content`, src);
      }
    }
    if (p.version < headVersion) {
      return reject('replayed', `snapshot version ${p.version} is below version ${headVersion}, the newest the control plane published (a rollback)`, src);
    }
    const issuedAtMs = Date.parse(p.issued_at);
    const snapshot: ConfigSnapshot = { version: p.version, schemaVersion: 1, issuedAt: p.issued_at, issuedAtMs, config: p.body.config, keyId };
    try {
      await options.onSnapshot(snapshot);
    } catch (error) {
      return reject('apply_failed', `snapshot version ${p.version} was not applied: ${describe(error)}`, src, error);
    }
    const previous = applied?.snapshot.version;
    applied = { snapshot, payloadText };
    headVersion = Math.max(headVersion, p.version);
    noteRevocationHead(p);
    freshAtMs = issuedAtMs;
    for (const v of [...heartbeats.keys()]) if (v < p.version) heartbeats.delete(v);
    refreshFromHeartbeat();
    metrics?.applied(p.version, issuedAtMs);
    logger.info({ version: p.version, previous, keyId, source: src.source, ageMs: ageMs() }, 'config snapshot applied');
    for (const w of [...waiters]) w();
    if (src.source !== 'last_good') await writeLastGood(bytes);
    // The snapshot replaced the whole state: drop revocations it includes, re-apply later ones.
    for (const seq of [...revocations.keys()].sort((a, b) => a - b)) {
      const r = revocations.get(seq)!;
      if (r.issuedAtMs < issuedAtMs) {
        revocations.delete(seq);
        continue;
      }
      if (!matchesHead(r.payload)) {
        // Held before this snapshot told us what its seq stands for: not what the control plane published.
        revocations.delete(seq);
        reject('replayed', `revocation seq ${seq} is not the content the control plane announced for that seq`, { source: CONFIG_BUCKET_KEYS.revocation(seq) });
        continue;
      }
      try {
        await applyRevocation(r.payload);
      } catch (error) {
        reject('apply_failed', `revocation ${seq} was not re-applied over snapshot ${p.version}: ${describe(error)}`, { source: CONFIG_BUCKET_KEYS.revocation(seq) }, error);
      }
    }
  };

  const handleHeartbeat = (p: HeartbeatPayload): void => {
    const at = Date.parse(p.issued_at);
    headVersion = Math.max(headVersion, p.version);
    noteRevocationHead(p);
    const current = applied?.snapshot.version ?? 0;
    if (p.version < current) return;
    if ((heartbeats.get(p.version) ?? -Infinity) < at) heartbeats.set(p.version, at);
    while (heartbeats.size > MAX_HEARTBEAT_VERSIONS) heartbeats.delete(Math.min(...heartbeats.keys()));
    if (p.version === current) {
      refreshFromHeartbeat();
    } else if (applied && p.version > warnedAheadVersion) {
      warnedAheadVersion = p.version;
      // Heartbeats for a newer version do not refresh the applied one: a missed or rejected
      // snapshot must end in fail-closed staleness, not in serving old state forever.
      logger.warn({ applied: current, controlPlane: p.version }, 'control plane is at a newer config version than the applied one');
    }
  };

  const handleRevocation = async (p: RevocationPayload, payloadText: string, src: Source): Promise<void> => {
    if (!matchesHead(p)) {
      return reject('replayed', `revocation seq ${p.seq} is not the content the control plane announced for that seq`, src);
    }
    // The announced head's own content, not retained (a replay under its seq was refused first): apply it.
    const announcedAndMissing = headRevocation?.seq === p.seq && !revocations.has(p.seq);
    if (p.seq <= lastRevocationSeq && !announcedAndMissing) {
      if (revocations.get(p.seq)?.payloadText === payloadText) {
        logger.debug({ seq: p.seq }, 'config revocation already applied');
        return;
      }
      return reject('replayed', `revocation seq ${p.seq} is at or below the last applied seq ${lastRevocationSeq}`, src);
    }
    const issuedAtMs = Date.parse(p.issued_at);
    if (applied && issuedAtMs < applied.snapshot.issuedAtMs) {
      lastRevocationSeq = Math.max(lastRevocationSeq, p.seq);
      logger.debug({ seq: p.seq, version: applied.snapshot.version }, 'config revocation already part of the applied snapshot');
      return;
    }
    if (applied) {
      try {
        await applyRevocation(p);
      } catch (error) {
        return reject('apply_failed', `revocation ${p.seq} was not applied: ${describe(error)}`, src, error);
      }
    } else {
      // Nothing is served before the first snapshot; it is applied on top of that snapshot (if it is newer).
      logger.debug({ seq: p.seq }, 'config revocation held until the first snapshot');
    }
    lastRevocationSeq = Math.max(lastRevocationSeq, p.seq);
    revocations.set(p.seq, { payload: p, payloadText, issuedAtMs });
    if (revocations.size > MAX_RETAINED_REVOCATIONS) revocations.delete(Math.min(...revocations.keys()));
    logger.info({ seq: p.seq, kind: p.kind, tenant: p.tenant_id, apiKeyId: p.api_key_id }, 'config revocation applied');
  };

  const handleEntry = async (key: string, bytes: Uint8Array | undefined, src: Source): Promise<void> => {
    const known = key === CONFIG_BUCKET_KEYS.snapshot || key === CONFIG_BUCKET_KEYS.heartbeat || key.startsWith(CONFIG_BUCKET_KEYS.revocationPrefix);
    if (!known) {
      logger.warn({ key, revision: src.revision }, 'unknown key in the config bucket ignored');
      return;
    }
    if (bytes === undefined) {
      logger.warn({ key, revision: src.revision }, 'config bucket entry deleted; the applied state stays');
      return;
    }
    const opened = openEnvelope(bytes, verifyKey);
    if (!opened.ok) return reject(opened.reason, opened.detail, src);
    const p = opened.payload;
    if (key === CONFIG_BUCKET_KEYS.snapshot && p.type === 'snapshot') return handleSnapshot(p, opened.payloadText, opened.keyId, bytes, src);
    if (key === CONFIG_BUCKET_KEYS.heartbeat && p.type === 'heartbeat') return handleHeartbeat(p);
    if (p.type === 'revocation' && key === CONFIG_BUCKET_KEYS.revocation(p.seq)) return handleRevocation(p, opened.payloadText, src);
    // A valid signature on a message moved to another key (e.g. a heartbeat put under `snapshot`).
    return reject('invalid_payload', `a ${p.type} message under key ${key}`, src);
  };

  const enqueue = (key: string, bytes: Uint8Array | undefined, revision: number | undefined): void => {
    const src: Source = { source: key, revision };
    chain = chain
      .then(() => (stopped ? undefined : handleEntry(key, bytes, src)))
      .catch((error: unknown) => logger.error({ key, err: error }, 'config message handling failed'));
  };

  const loadLastGood = async (): Promise<void> => {
    if (!lastGoodPath) return;
    let bytes: Uint8Array;
    try {
      bytes = await readFile(lastGoodPath);
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ENOENT') logger.info({}, 'no last-good config snapshot yet');
      else logger.warn({ err: error }, 'last-good config snapshot unreadable');
      return;
    }
    const src: Source = { source: 'last_good' };
    const opened = openEnvelope(bytes, verifyKey);
    if (!opened.ok) return reject(opened.reason, `last-good file: ${opened.detail}`, src);
    if (opened.payload.type !== 'snapshot') return reject('invalid_payload', `last-good file holds a ${opened.payload.type}`, src);
    await handleSnapshot(opened.payload, opened.payloadText, opened.keyId, bytes, src);
  };

  /**
   * Without a saved snapshot, learns what the control plane published before watching: the
   * signed heartbeat (its version and revocation head) and the newest version retained in the
   * `snapshot` key's history. Whatever it cannot read in time it leaves unknown (the watch still
   * brings the heartbeat; staleness still fails closed).
   */
  const readHead = async (): Promise<void> => {
    const read = async (): Promise<void> => {
      const beat = await bucket.get(CONFIG_BUCKET_KEYS.heartbeat);
      if (beat) {
        const opened = openEnvelope(beat, verifyKey);
        if (opened.ok && opened.payload.type === 'heartbeat') handleHeartbeat(opened.payload);
      }
      for (const bytes of (await bucket.history?.(CONFIG_BUCKET_KEYS.snapshot)) ?? []) {
        const opened = openEnvelope(bytes, verifyKey);
        if (opened.ok && opened.payload.type === 'snapshot') headVersion = Math.max(headVersion, opened.payload.version);
      }
    };
    let timer: NodeJS.Timeout | undefined;
    const reading = read();
    reading.catch(() => undefined);
    try {
      const outcome = await Promise.race([reading.then(() => 'read' as const), new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), options.headReadTimeoutMs ?? DEFAULT_HEAD_READ_TIMEOUT_MS)))]);
      if (outcome === 'timeout') logger.warn({}, 'the config bucket did not answer in time: starting without the announced head');
    } catch (error) {
      logger.warn({ err: error }, 'the announced config head was not read; starting without it');
    } finally {
      clearTimeout(timer);
    }
    if (headVersion > 0) logger.info({ headVersion, revocationSeq: headRevocation?.seq }, 'config head announced by the control plane');
  };

  metrics?.observe?.(status);

  return {
    start() {
      started ??= (async () => {
        chain = chain.then(loadLastGood).catch((error: unknown) => logger.error({ err: error }, 'last-good config snapshot not loaded'));
        await chain;
        if (stopped) return applied?.snapshot;
        if (!applied) {
          chain = chain.then(readHead);
          await chain;
        }
        try {
          watch = await bucket.watch((key, bytes, revision) => enqueue(key, bytes, revision));
        } catch (error) {
          logger.error({ err: error }, 'config bucket watch not started');
        }
        if (stopped) watch?.stop();
        if (!applied && !stopped) {
          await new Promise<void>((resolve) => {
            const done = (): void => {
              clearTimeout(timer);
              waiters.delete(done);
              resolve();
            };
            const timer = setTimeout(done, initialWaitMs);
            waiters.add(done);
          });
        }
        return applied?.snapshot;
      })();
      return started;
    },
    current: () => applied?.snapshot,
    version: () => applied?.snapshot.version,
    ageMs,
    isStale,
    status,
    async stop() {
      if (stopped) return;
      stopped = true;
      watch?.stop();
      for (const w of [...waiters]) w();
      await chain;
    },
  };
}

/** The error's class and scrubbed message (quoted values removed, first line): never the payload's values. */
function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${scrubErrorMessage(error.message)}`;
  return 'non-error thrown';
}

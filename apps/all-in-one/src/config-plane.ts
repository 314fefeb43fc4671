/**
 * The all-in-one's control plane, in-process (issue 7: "the all-in-one runs the same path
 * in-process"): the control-plane store on the platform's own database, the signed-snapshot
 * publisher writing to an in-memory bucket, and the data plane's subscriber verifying every
 * envelope from that bucket with the verify key — exactly what the split topology does over
 * NATS, minus the network. Configuration reaches the services only through verified snapshots.
 *
 * - Signing key: `WEIR_CONFIG_SIGNING_KEY_FILE` if given, else `<WEIR_DATA_DIR>/config-signing-key.pem`,
 *   created on the first start with mode 0600. Never logged (its key id is).
 * - The store is seeded on the first start from `WEIR_CONFIG` (or the built-in default). Later
 *   starts run the store's latest snapshot, so admin changes survive restarts; a `WEIR_CONFIG`
 *   edited while Weir was stopped (its SHA-256 differs from the last one imported, kept in
 *   `<WEIR_DATA_DIR>/config-file.sha256`) is imported first, as a live edit would have been.
 * - While running, a change to the file is imported as one change by actor `config-file`.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, unwatchFile, watchFile, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Kysely } from 'kysely';
import { isConfigError, parseConfig } from '@weir/config';
import {
  configStateOf,
  createMemoryConfigBucket,
  createSnapshotPublisher,
  createSnapshotSubscriber,
  generateSigningKeyPair,
  loadSigningKey,
  readPrivateKeyFile,
  verifyKeyOf,
  type ConfigBucket,
  type ConfigSyncMetrics,
  type DataPlaneConfigState,
  type RevocationPayload,
  type SigningKey,
} from '@weir/config-sync';
import {
  CONFIG_FILE_ACTOR,
  createCanaryGuard,
  createControlPlane,
  createDeprecationAnnouncer,
  rollbackCanaryArm,
  importConfig,
  importConfigFile,
  mintFirstAdminToken,
  registerBootstrapAdminToken,
  SEED_ACTOR,
  seedFromConfigFile,
  type ControlPlane,
  type ImportResult,
  type SnapshotSink,
} from '@weir/control-plane';
import { isWeirError, type PlatformConfig } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import type { WeirLogger } from '@weir/telemetry';
import { defaultConfigFile } from './default-config-file';

/** Settings of {@link openConfigPlane}. */
export interface ConfigPlaneOptions {
  db: Kysely<WeirSchema>;
  /** How often the canary guard judges canaries against their stable arm (ms). Default 15,000. */
  canaryGuardIntervalMs?: number;
  /** `WEIR_DATA_DIR`: the signing key and the last imported file's hash live here. */
  dataDir: string;
  /** `WEIR_CONFIG`: seeds an empty store and is imported when it changes; unset = the built-in default seeds it. */
  configPath?: string;
  /** `WEIR_CONFIG_SIGNING_KEY_FILE`: an Ed25519 PKCS#8 PEM signing key; unset = the data dir's own. */
  signingKeyFile?: string;
  /** `WEIR_ADMIN_TOKEN`: registered (hashed) if new; unset = one is minted on a store that never had an admin token. */
  adminToken?: string;
  /** Heartbeat (and publication retry) interval, ms. Default 5,000. */
  heartbeatMs?: number;
  /** Beyond this snapshot age (ms) requests get 503 `config_stale`. Default 300,000. */
  maxStalenessMs?: number;
  /** How often the configuration file is polled, ms. Default 500. */
  filePollMs?: number;
  logger: WeirLogger;
  metrics?: ConfigSyncMetrics;
}

/** The configuration's freshness, in the shape `@weir/gateway`'s `configState` takes. */
export type ConfigPlaneState = DataPlaneConfigState;

/** The running in-process control plane and snapshot subscriber. */
export interface ConfigPlane {
  controlPlane: ControlPlane;
  /** The bucket envelopes travel through (tests put forged entries here). */
  bucket: ConfigBucket;
  /** The configuration of the first verified snapshot (what the platform is built from). */
  initial: PlatformConfig;
  /** Its version. */
  initialVersion: number;
  /** An admin token minted on this start (shown once; only its hash is stored), else undefined. */
  mintedAdminToken?: string;
  /**
   * Every later verified snapshot, parsed with `parseConfig`. A listener that throws rejects the
   * snapshot (`apply_failed`: alert log and metric) and the previous one stays applied.
   */
  onChange(listener: (config: PlatformConfig, version: number) => void): void;
  /** Every verified revocation (keys, tenants, kill switches) on the fast path. */
  onRevocation(listener: (revocation: RevocationPayload) => void): void;
  /** Applied version, age and staleness of the configuration. */
  state(): ConfigPlaneState;
  /** Starts polling `configPath` (when set): each change is imported as one change by `config-file`. */
  watchConfigFile(): void;
  /** Stops the file watch, heartbeats and subscriber, and waits for a publication in progress. */
  stop(): Promise<void>;
}

const SIGNING_KEY_FILE = 'config-signing-key.pem';
const CONFIG_HASH_FILE = 'config-file.sha256';

/**
 * Opens the in-process control plane (see the module comment) and returns once the first
 * snapshot is verified and parsed.
 * @throws WeirError `invalid_request` for an unreadable or non-Ed25519 signing key or a malformed
 *   `WEIR_ADMIN_TOKEN`; ConfigError when the store is empty and `WEIR_CONFIG` is invalid;
 *   WeirError `internal` when no snapshot could be verified (which would be a bug).
 */
export async function openConfigPlane(options: ConfigPlaneOptions): Promise<ConfigPlane> {
  const { db, logger } = options;
  const heartbeatMs = options.heartbeatMs ?? 5_000;
  const signingKey = loadOrCreateSigningKey(options, logger);

  let mintedAdminToken: string | undefined;
  if (options.adminToken) {
    const outcome = await registerBootstrapAdminToken(db, options.adminToken);
    if (outcome === 'revoked') logger.warn({}, 'WEIR_ADMIN_TOKEN was revoked; it stays revoked (use another admin token)');
    else logger.info({ outcome }, 'admin token from WEIR_ADMIN_TOKEN');
  } else {
    mintedAdminToken = await mintFirstAdminToken(db);
  }

  const bucket = createMemoryConfigBucket();
  const publisher = createSnapshotPublisher({ bucket, signingKey, logger });
  // A `conflict` means the bucket already holds that snapshot version (or a later one) or that
  // revocation — e.g. the start-up republication of a snapshot a seed just published: done.
  const alreadyThere = (err: unknown) => isWeirError(err) && err.code === 'conflict';
  const sink: SnapshotSink = {
    async publishSnapshot(s) {
      await publisher.publishSnapshot({ version: s.version, config: s.config as Record<string, unknown>, issuedAt: s.issuedAt, ...(s.lastRevocation ? { lastRevocation: s.lastRevocation } : {}) }).catch((err: unknown) => {
        if (!alreadyThere(err)) throw err;
      });
    },
    async publishRevocation(r) {
      const { issued_at, ...rest } = r;
      await publisher.publishRevocation({ ...rest, issuedAt: issued_at }).catch((err: unknown) => {
        if (!alreadyThere(err)) throw err;
      });
    },
  };
  const controlPlane = createControlPlane({}, { db, sink, logger });
  await seedOrImport(controlPlane, options);
  if (!(await controlPlane.republishLatest())) logger.error({}, 'the latest configuration snapshot could not be published in-process');
  const stopRetry = controlPlane.startPublishRetry(heartbeatMs);
  const stopHeartbeats = publisher.startHeartbeats(() => controlPlane.publishedVersion(), heartbeatMs);
  // The canary guard and the deprecation announcer run here as in the control-plane service;
  // with no NATS, their events are log lines (warn), and audit entries as always.
  const guard = createCanaryGuard({
    db,
    rollback: async (_alias, request) => {
      await rollbackCanaryArm(controlPlane, request);
    },
    onEvent: (event) => logger.warn({ ...event, event: 'canary_rolled_back' }, `canary ${event.revision} of alias ${event.alias} rolled back: ${event.reason}`),
    logger: { warn: (obj, msg) => logger.debug(obj, msg), error: (obj, msg) => logger.error(obj, msg) },
  });
  guard.start(options.canaryGuardIntervalMs ?? 15_000);
  const announcer = createDeprecationAnnouncer({
    db,
    publish: (event) => logger.warn({ ...event, event: event.type }, `revision ${event.revision} is deprecated: it retires on ${event.retires_on}; use ${event.replacement}`),
    logger: { info: (obj, msg) => logger.debug(obj, msg), warn: (obj, msg) => logger.warn(obj, msg) },
  });
  announcer.start(60_000);

  let current: { config: PlatformConfig; version: number } | undefined;
  const changeListeners: ((config: PlatformConfig, version: number) => void)[] = [];
  const revocationListeners: ((revocation: RevocationPayload) => void)[] = [];
  const subscriber = createSnapshotSubscriber({
    bucket,
    // Derived from the signing key here; the bucket never supplies it.
    verifyKey: verifyKeyOf(signingKey),
    maxStalenessMs: options.maxStalenessMs ?? 300_000,
    initialWaitMs: 5_000,
    logger,
    ...(options.metrics ? { metrics: options.metrics } : {}),
    onSnapshot(snapshot) {
      const config = parseConfig(JSON.stringify(snapshot.config), `snapshot v${snapshot.version}`, { format: 'json' });
      const first = current === undefined;
      if (!first) for (const l of changeListeners) l(config, snapshot.version);
      current = { config, version: snapshot.version };
    },
    onRevocation(revocation) {
      for (const l of revocationListeners) l(revocation);
    },
  });
  const first = await subscriber.start();
  if (!first || !current) {
    stopHeartbeats();
    stopRetry();
    await guard.stop();
    announcer.stop();
    await subscriber.stop();
    await controlPlane.close();
    throw new Error('no configuration snapshot was verified in-process (see the errors above)');
  }
  logger.info({ version: current.version, keyId: signingKey.keyId }, 'configuration snapshot applied (in-process control plane)');

  let watching: ((now: { mtimeMs: number; size: number }, before: { mtimeMs: number; size: number }) => void) | undefined;
  let imports: Promise<void> = Promise.resolve();
  const configPath = options.configPath;

  return {
    controlPlane,
    bucket,
    initial: current.config,
    initialVersion: current.version,
    ...(mintedAdminToken ? { mintedAdminToken } : {}),
    onChange: (l) => void changeListeners.push(l),
    onRevocation: (l) => void revocationListeners.push(l),
    state: () => configStateOf(subscriber.status()),
    watchConfigFile() {
      if (!configPath || watching) return;
      // Polling sees a file replaced by an editor or `mv` as well as one written in place.
      watching = (now, before) => {
        if (now.mtimeMs === before.mtimeMs && now.size === before.size) return;
        imports = imports.then(() => importChangedFile(controlPlane, configPath, options.dataDir, logger));
      };
      watchFile(configPath, { interval: options.filePollMs ?? 500, persistent: false }, watching);
    },
    async stop() {
      if (configPath && watching) unwatchFile(configPath, watching);
      await imports;
      stopHeartbeats();
      stopRetry();
      await guard.stop();
      announcer.stop();
      await controlPlane.close();
      await subscriber.stop();
      await bucket.close();
    },
  };
}

/** The signing key from `signingKeyFile`, else the data dir's (created with mode 0600 on first use). */
function loadOrCreateSigningKey(options: ConfigPlaneOptions, logger: WeirLogger): SigningKey {
  if (options.signingKeyFile) {
    // Refused when group or others can read it (the message says `chmod 600 <path>`).
    const key = loadSigningKey(readPrivateKeyFile(options.signingKeyFile, 'WEIR_CONFIG_SIGNING_KEY_FILE'));
    logger.info({ keyId: key.keyId }, 'configuration signing key from WEIR_CONFIG_SIGNING_KEY_FILE');
    return key;
  }
  const file = path.join(options.dataDir, SIGNING_KEY_FILE);
  if (!existsSync(file)) {
    const pair = generateSigningKeyPair();
    // `wx`: never overwrite a key another start wrote meanwhile.
    writeFileSync(file, pair.privateKeyPem, { mode: 0o600, flag: 'wx' });
    logger.info({ keyId: pair.keyId, file: SIGNING_KEY_FILE }, 'configuration signing key created in the data directory');
  }
  return loadSigningKey(readPrivateKeyFile(file, 'the data directory'));
}

/** SHA-256 (hex) of the file's bytes, or undefined when it cannot be read. */
function fileHash(file: string): string | undefined {
  try {
    return createHash('sha256').update(readFileSync(file)).digest('hex');
  } catch {
    return undefined;
  }
}

function recordedHash(dataDir: string): string | undefined {
  try {
    return readFileSync(path.join(dataDir, CONFIG_HASH_FILE), 'utf8').trim();
  } catch {
    return undefined;
  }
}

function recordHash(dataDir: string, hash: string | undefined): void {
  if (hash !== undefined) writeFileSync(path.join(dataDir, CONFIG_HASH_FILE), `${hash}\n`, { mode: 0o600 });
}

/**
 * First start: seed the store from the file or the built-in default. Later starts: import the
 * file only if it changed since it was last imported (else the store's latest snapshot stands).
 */
async function seedOrImport(controlPlane: ControlPlane, options: ConfigPlaneOptions): Promise<void> {
  const { db, configPath, dataDir, logger } = options;
  const hasSnapshot = await db.selectFrom('config_snapshots').select('version').limit(1).executeTakeFirst();
  if (!hasSnapshot) {
    if (configPath) {
      const hash = fileHash(configPath);
      const seeded = await seedFromConfigFile(db, configPath);
      if (seeded.seeded) logger.info({ version: seeded.version, revisions: seeded.revisions, aliases: seeded.aliases, tenants: seeded.tenants }, 'configuration store seeded from WEIR_CONFIG');
      recordHash(dataDir, hash);
    } else {
      const result = await importConfig(controlPlane, defaultConfigFile(), SEED_ACTOR, { source: 'built-in default' });
      logger.info({ ...result }, 'configuration store seeded from the built-in default');
    }
    return;
  }
  if (!configPath) return;
  const hash = fileHash(configPath);
  if (hash !== undefined && hash === recordedHash(dataDir)) return;
  logger.info({}, 'WEIR_CONFIG changed since it was last imported: importing it over the stored configuration');
  await importChangedFile(controlPlane, configPath, dataDir, logger, hash);
}

/** Imports the file as one change by `config-file`; a refused file is logged and the running configuration stays. */
async function importChangedFile(controlPlane: ControlPlane, configPath: string, dataDir: string, logger: WeirLogger, knownHash?: string): Promise<void> {
  const hash = knownHash ?? fileHash(configPath);
  let result: ImportResult;
  try {
    result = await importConfigFile(controlPlane, configPath, CONFIG_FILE_ACTOR);
  } catch (err) {
    const reason = isConfigError(err) || isWeirError(err) ? err.message : `cannot import the configuration: ${String(err)}`;
    logger.warn({ reason }, 'configuration file changed but was not applied; the running configuration stays');
    return;
  }
  recordHash(dataDir, hash);
  if (result.imported) logger.info({ version: result.version }, 'configuration file imported into the control plane');
  else logger.info({}, 'configuration file saved without changes');
}

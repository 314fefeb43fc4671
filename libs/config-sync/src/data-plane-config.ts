/**
 * Where a data-plane service gets its configuration: the signed snapshots of the control plane
 * (when a verify key is configured) or, without one, the configuration file of earlier
 * deployments. Either way the service is told of every new configuration through one callback,
 * and `state()` says how fresh it is, for the gateway's fail-closed check (`config_stale`) and
 * `/readyz`.
 *
 * Snapshot mode (`WEIR_CONFIG_PUBLIC_KEY` or `WEIR_CONFIG_PUBLIC_KEY_FILE` set): the service
 * watches the NATS KV bucket `<namespace>_config`, verifies every envelope with the key it was
 * given out of band, applies snapshots whose version moves forward, keeps the last good one in
 * `WEIR_CONFIG_CACHE_DIR` (so a restart serves before NATS answers), and reports stale beyond
 * `WEIR_CONFIG_MAX_STALENESS_MS`. Revocations (keys, tenants, kill switch) reach the
 * `onRevocation` callback as soon as they are published. A start from the last-good file still
 * asks the bucket for its current snapshot (bounded, {@link FRESHNESS_CHECK_TIMEOUT_MS}): when
 * NATS answers with a newer verified one, the service starts on that one (the scheduler and the
 * relay apply replica changes only at start); when NATS does not answer, it starts on the last good.
 */
import path from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { parseConfig, watchConfigFile, loadConfigFile, nonRoutingChanges, type ConfigWatcher } from '@weir/config';
import { type PlatformConfig, WeirError } from '@weir/core';
import { CONFIG_BUCKET_KEYS, configBucketName, type ConfigBucket } from './bucket';
import { createNatsConfigBucket } from './nats-config-bucket';
import { openEnvelope, type RevocationPayload } from './envelope';
import { verifyKeyFromEnv, type VerifyKey } from './keys';
import type { ConfigSyncLogger } from './logger';
import type { ConfigSyncMetrics } from './metrics';
import { createSnapshotSubscriber, type ConfigSyncStatus, type SnapshotSubscriber } from './subscriber';

/** The configuration's freshness, in the shape `@weir/gateway`'s `configState` takes. */
export interface DataPlaneConfigState {
  /** Age of the applied configuration (ms); 0 in file mode. */
  ageMs: number;
  /** True when requests must be refused (snapshot older than the maximum, or none yet). */
  stale: boolean;
  /** The applied snapshot version (snapshot mode). */
  version?: number;
  /** The maximum age (ms) before `stale` (snapshot mode). */
  maxAgeMs?: number;
  /** Why it is stale, or the latest rejection (payload-free), for `/readyz`. */
  reason?: string;
}

/** A subscriber's status as the gateway's `configState` reads it (the latest rejection, payload-free, as `reason`). */
export function configStateOf(s: ConfigSyncStatus): DataPlaneConfigState {
  return {
    ageMs: s.ageMs ?? 0,
    stale: s.stale,
    maxAgeMs: s.maxStalenessMs,
    ...(s.version !== undefined ? { version: s.version } : {}),
    ...(s.lastRejection ? { reason: `last rejected message: ${s.lastRejection.reason} (${s.lastRejection.detail})` } : {}),
  };
}

/** A service's configuration source. */
export interface DataPlaneConfig {
  /** `snapshots` (signed, from the control plane) or `file` (`WEIR_CONFIG`). */
  mode: 'snapshots' | 'file';
  /** The configuration the service starts with. */
  initial: PlatformConfig;
  /** Every later configuration, already validated (`parseConfig`); a listener that throws rejects a snapshot (`apply_failed`). */
  onChange(listener: (config: PlatformConfig, version?: number) => void): void;
  /** Revocations as they arrive (snapshot mode only; the file has none). */
  onRevocation(listener: (revocation: RevocationPayload) => void): void;
  state(): DataPlaneConfigState;
  stop(): Promise<void>;
}

/** Environment read by {@link openDataPlaneConfig}. */
export interface DataPlaneConfigEnv {
  /** The configuration file: the source in file mode. In snapshot mode it is not read. */
  WEIR_CONFIG?: string;
  WEIR_CONFIG_PUBLIC_KEY?: string;
  WEIR_CONFIG_PUBLIC_KEY_FILE?: string;
  /** Directory for the last-good snapshot (`<service>.snapshot.json`). Default: none (cold starts wait for NATS). */
  WEIR_CONFIG_CACHE_DIR?: string;
  /** Maximum snapshot age before requests are refused (ms). Default 300,000. */
  WEIR_CONFIG_MAX_STALENESS_MS?: string;
  /** How long a start without a last-good snapshot waits for one (ms). Default 60,000. */
  WEIR_CONFIG_WAIT_MS?: string;
  WEIR_NATS_NAMESPACE?: string;
  [name: string]: string | undefined;
}

/** Options of {@link openDataPlaneConfig}. */
export interface OpenDataPlaneConfigOptions {
  env: DataPlaneConfigEnv;
  /** The service's name (`gateway`, `router`, …): names its last-good file. */
  service: string;
  /** Connects to NATS (snapshot mode only; called once). */
  connectNats: () => Promise<NatsConnection>;
  logger: ConfigSyncLogger;
  metrics?: ConfigSyncMetrics;
  /** File mode: also watch the file and report valid changes (as `watchConfigFile` does). Default false. */
  watchFile?: boolean;
  /**
   * Snapshot mode: how long a start asks the bucket for a snapshot newer than the one it
   * starts with (ms) before starting on it anyway. Default {@link FRESHNESS_CHECK_TIMEOUT_MS}.
   */
  freshnessCheckTimeoutMs?: number;
}

/** Default bound (ms) on asking the bucket for a newer snapshot at start: NATS down must not hold a start up for long. */
export const FRESHNESS_CHECK_TIMEOUT_MS = 3_000;

function positiveInt(env: DataPlaneConfigEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new WeirError('invalid_request', `${name} must be a positive integer of milliseconds, got ${JSON.stringify(raw)}`);
  return n;
}

/**
 * Opens the service's configuration source (see the module comment) and returns once it has a
 * configuration to start with: in snapshot mode the bucket's snapshot when NATS answers within
 * `freshnessCheckTimeoutMs` with one newer than the last-good file (waiting up to
 * `WEIR_CONFIG_WAIT_MS` for it to apply), else the last-good file's.
 * @throws WeirError `invalid_request` when neither a verify key nor `WEIR_CONFIG` is set, or a
 *   setting is malformed; `upstream_unavailable` when snapshot mode finds no snapshot (no
 *   last-good file, nothing in the bucket) within `WEIR_CONFIG_WAIT_MS`; `ConfigError` from the
 *   file in file mode.
 */
export async function openDataPlaneConfig(options: OpenDataPlaneConfigOptions): Promise<DataPlaneConfig> {
  const { env, logger } = options;
  const verifyKey = verifyKeyFromEnv(env);
  const changeListeners: ((config: PlatformConfig, version?: number) => void)[] = [];
  const revocationListeners: ((revocation: RevocationPayload) => void)[] = [];

  if (!verifyKey) {
    if (!env.WEIR_CONFIG) {
      throw new WeirError('invalid_request', 'no configuration: set WEIR_CONFIG_PUBLIC_KEY_FILE (signed snapshots from the control plane) or WEIR_CONFIG (a configuration file)');
    }
    const initial = loadConfigFile(env.WEIR_CONFIG);
    let watcher: ConfigWatcher | undefined;
    if (options.watchFile) {
      watcher = watchConfigFile(env.WEIR_CONFIG, {
        current: initial,
        onUpdate: (config, needsRestart) => {
          for (const l of changeListeners) l(config);
          if (needsRestart.length > 0) logger.warn({ sections: needsRestart }, 'configuration file changed; these sections apply after a restart');
        },
        onRejected: (reason) => logger.error({ reason }, 'configuration file change rejected; still serving the previous configuration'),
      });
    }
    return {
      mode: 'file',
      initial,
      onChange: (l) => void changeListeners.push(l),
      onRevocation: (l) => void revocationListeners.push(l),
      state: () => ({ ageMs: 0, stale: false }),
      async stop() {
        watcher?.stop();
      },
    };
  }

  const maxStalenessMs = positiveInt(env, 'WEIR_CONFIG_MAX_STALENESS_MS', 300_000);
  const waitMs = positiveInt(env, 'WEIR_CONFIG_WAIT_MS', 60_000);
  const nc = await options.connectNats();
  const bucket = createNatsConfigBucket(nc, { namespace: env.WEIR_NATS_NAMESPACE || 'weir', logger });
  let current: PlatformConfig | undefined;
  /** The highest snapshot version whose configuration was refused (parseConfig threw): waiting for it is pointless. */
  let refusedVersion = 0;
  const subscriber: SnapshotSubscriber = createSnapshotSubscriber({
    bucket,
    verifyKey,
    maxStalenessMs,
    initialWaitMs: waitMs,
    logger,
    ...(options.metrics ? { metrics: options.metrics } : {}),
    ...(env.WEIR_CONFIG_CACHE_DIR ? { lastGoodPath: path.join(env.WEIR_CONFIG_CACHE_DIR, `${options.service}.snapshot.json`) } : {}),
    onSnapshot(snapshot) {
      // A snapshot that is not a valid configuration is rejected (apply_failed) and the previous one stays.
      let config: PlatformConfig;
      try {
        config = parseConfig(JSON.stringify(snapshot.config), `snapshot v${snapshot.version}`);
      } catch (error) {
        refusedVersion = Math.max(refusedVersion, snapshot.version);
        throw error;
      }
      const first = current === undefined;
      current = config;
      if (!first) for (const l of changeListeners) l(config, snapshot.version);
    },
    onRevocation(revocation) {
      for (const l of revocationListeners) l(revocation);
    },
  });
  let first = await subscriber.start();
  if (first && current) {
    // start() resolves at once with the last-good file; the control plane may have published a
    // newer snapshot since (e.g. a new placement seconds before this start). Start on that one.
    const newer = await newerSnapshotVersion(bucket, verifyKey, first.version, options.freshnessCheckTimeoutMs ?? FRESHNESS_CHECK_TIMEOUT_MS, logger);
    if (newer !== undefined) {
      logger.info({ applied: first.version, bucket: newer }, 'a newer configuration snapshot is in the bucket; waiting for it before starting');
      await waitForVersion(() => subscriber.version() ?? 0, () => refusedVersion, newer, waitMs);
      first = subscriber.current() ?? first;
      if (first.version < newer) logger.warn({ applied: first.version, bucket: newer }, 'the newer configuration snapshot was not applied; starting on the applied one');
    }
  }
  if (!first || !current) {
    await subscriber.stop();
    throw new WeirError(
      'upstream_unavailable',
      `no configuration snapshot within ${waitMs} ms: none in the last-good file and none in the NATS bucket ${configBucketName(env.WEIR_NATS_NAMESPACE || 'weir')}; start the control plane (it publishes one) or check WEIR_NATS_NAMESPACE and the verify key`,
      { retryable: true },
    );
  }
  logger.info({ version: first.version, issuedAt: first.issuedAt }, 'configuration snapshot applied');
  return {
    mode: 'snapshots',
    initial: current,
    onChange: (l) => void changeListeners.push(l),
    onRevocation: (l) => void revocationListeners.push(l),
    state: () => configStateOf(subscriber.status()),
    async stop() {
      await subscriber.stop();
      await bucket.close();
    },
  };
}

/**
 * The version of the bucket's current `snapshot` entry when it verifies with `verifyKey` and is
 * above `applied`; undefined when it is not newer, absent, invalid (the subscriber reports that
 * rejection), or NATS does not answer within `timeoutMs`.
 */
async function newerSnapshotVersion(bucket: ConfigBucket, verifyKey: VerifyKey | readonly VerifyKey[], applied: number, timeoutMs: number, logger: ConfigSyncLogger): Promise<number | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  const reading = bucket.get(CONFIG_BUCKET_KEYS.snapshot);
  // A read still pending after the timeout must not surface as an unhandled rejection.
  reading.catch(() => undefined);
  try {
    const bytes = await Promise.race([reading, timedOut]);
    if (bytes === 'timeout') {
      logger.warn({ timeoutMs }, 'config bucket did not answer at start; serving the last good snapshot');
      return undefined;
    }
    if (bytes === undefined) return undefined;
    const opened = openEnvelope(bytes, verifyKey);
    if (!opened.ok || opened.payload.type !== 'snapshot') return undefined;
    return opened.payload.version > applied ? opened.payload.version : undefined;
  } catch (error) {
    logger.warn({ err: error }, 'config bucket not readable at start; serving the last good snapshot');
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once `applied()` reaches `target`, `refused()` does, or after `timeoutMs`. */
async function waitForVersion(applied: () => number, refused: () => number, target: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (applied() < target && refused() < target && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, Math.min(25, Math.max(1, deadline - Date.now()))));
  }
}

/**
 * For a service that holds its configuration from the start (the scheduler's pools and
 * replicas, the relay's engines): logs, at warn, each later configuration's sections that differ
 * from the one it started with, since they apply only after a restart.
 */
export function warnChangesNeedingRestart(source: DataPlaneConfig, logger: ConfigSyncLogger): void {
  const started = source.initial;
  source.onChange((next, version) => {
    const changed = [...nonRoutingChanges(started, next), ...(JSON.stringify(next.revisions) !== JSON.stringify(started.revisions) ? ['revisions (engines, replicas, prices)'] : [])];
    if (changed.length > 0) logger.warn({ version, sections: changed }, 'configuration changed: this service applies these sections after a restart');
  });
}

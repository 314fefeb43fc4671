/**
 * Where the control plane's snapshot sink is built: {@link createSnapshotSinkFromEnv}. With
 * `WEIR_CONFIG_SIGNING_KEY_FILE` set it signs with `@weir/config-sync` and writes to the NATS
 * JetStream KV bucket `<WEIR_NATS_NAMESPACE>_config` over the process's NATS connection, with a
 * heartbeat every `WEIR_CONFIG_HEARTBEAT_MS`; without it nothing is published (a warning says so), and data
 * planes never receive configuration from this control plane.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { createNatsConfigBucket, createSnapshotPublisher, signingKeyFromEnv } from '@weir/config-sync';
import type { SnapshotSink } from '@weir/control-plane';
import { isWeirError } from '@weir/core';
import type { WeirLogger } from '@weir/telemetry';

/** The sink plus what it holds open. */
export interface BuiltSnapshotSink {
  sink: SnapshotSink;
  /** Starts heartbeats naming `getVersion()` (the published snapshot version). Returns their stop. */
  startHeartbeats(getVersion: () => number | undefined): () => void;
  /** Closes the bucket (the NATS connection is the caller's). */
  close(): Promise<void>;
}

/** Settings {@link createSnapshotSinkFromEnv} reads. */
export interface SnapshotSinkEnv {
  namespace: string;
  heartbeatMs: number;
}

/**
 * A snapshot the bucket already holds (signed by this key): on a restart, republishing the
 * latest snapshot finds it there, which is expected (info, no stack). A LATER version there
 * than the store's latest means the store went back (e.g. a restored or recreated database):
 * data planes keep the bucket's version until the store passes it, so that is a warning.
 */
function logAlreadyPublished(logger: WeirLogger, version: number, err: unknown): void {
  const reason = err instanceof Error ? err.message : String(err);
  // The publisher's message names the version it holds: "… is not above the published version N".
  const held = Number(/published version (\d+)/.exec(reason)?.[1] ?? Number.NaN);
  if (held > version) {
    logger.warn({ version, publishedVersion: held }, 'the bucket holds a later snapshot version than the store; data planes keep it until the store passes it');
  } else {
    logger.info({ version }, 'snapshot already published (the bucket holds this version); not republished');
  }
}

/**
 * Builds the control plane's {@link SnapshotSink} from the environment (see the file comment).
 * A `conflict` from the publisher means the bucket already holds that snapshot version (or a
 * later one) or that revocation: it is already published, so it counts as done.
 * @throws WeirError `invalid_request` when the signing key file cannot be read or is not an
 *   Ed25519 PKCS#8 key.
 */
export function createSnapshotSinkFromEnv(settings: SnapshotSinkEnv, nc: NatsConnection, logger: WeirLogger): BuiltSnapshotSink {
  const signingKey = signingKeyFromEnv();
  if (!signingKey) {
    logger.warn({}, 'WEIR_CONFIG_SIGNING_KEY_FILE is not set: configuration changes are stored and audited but NOT published to data planes');
    return {
      sink: { async publishSnapshot() {}, async publishRevocation() {} },
      startHeartbeats: () => () => undefined,
      close: async () => undefined,
    };
  }
  const bucket = createNatsConfigBucket(nc, { namespace: settings.namespace, logger });
  const publisher = createSnapshotPublisher({ bucket, signingKey, logger });
  logger.info({ keyId: signingKey.keyId, namespace: settings.namespace }, 'publishing signed configuration to NATS');
  const alreadyThere = (err: unknown) => isWeirError(err) && err.code === 'conflict';
  return {
    sink: {
      async publishSnapshot(s) {
        try {
          await publisher.publishSnapshot({ version: s.version, config: s.config as Record<string, unknown>, issuedAt: s.issuedAt, ...(s.lastRevocation ? { lastRevocation: s.lastRevocation } : {}) });
        } catch (err) {
          if (!alreadyThere(err)) throw err;
          logAlreadyPublished(logger, s.version, err);
        }
      },
      async publishRevocation(r) {
        const { issued_at, ...rest } = r;
        try {
          await publisher.publishRevocation({ ...rest, issuedAt: issued_at });
        } catch (err) {
          if (!alreadyThere(err)) throw err;
        }
      },
    },
    startHeartbeats: (getVersion) => publisher.startHeartbeats(getVersion, settings.heartbeatMs),
    async close() {
      await bucket.close();
    },
  };
}

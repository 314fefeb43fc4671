/**
 * The control plane service (issue 7): the admin API under `/admin/v1` over configuration kept
 * in Postgres, publishing every committed change as a signed snapshot (and revocations on the
 * fast path) to the NATS KV bucket data planes watch. Postgres is the source of truth: on start
 * it republishes the latest snapshot, and a failed publication is retried every heartbeat.
 *
 * Environment:
 * - WEIR_DATABASE_URL (or DATABASE_URL): the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir. Required.
 * - WEIR_CONTROL_PLANE_PORT (default 8090), HOST (default 127.0.0.1): the HTTP listener
 *   (admin API, /healthz, /readyz).
 * - WEIR_ADMIN_TOKEN: a bootstrap admin token (`wa_<prefix>_<secret>`, or 24+ visible
 *   characters), registered (hashed) on start if new; a revoked one stays revoked.
 * - WEIR_CONFIG: a configuration file imported when the store is empty (no revision, no snapshot).
 * - WEIR_CONFIG_SIGNING_KEY_FILE: the Ed25519 PKCS#8 PEM signing key; unset = nothing is published.
 * - WEIR_NATS_URL (or NATS_URL, default nats://127.0.0.1:4222), WEIR_NATS_NAMESPACE (default weir).
 * - WEIR_CONFIG_HEARTBEAT_MS (default 5,000): heartbeat and publication-retry interval.
 * - CONTROL_PLANE_DB_POOL (default 5), LOG_LEVEL (default info).
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createControlPlane, createControlPlaneHttpApp, registerBootstrapAdminToken, seedFromConfigFile } from '@weir/control-plane';
import { envInt, envString, EnvError, readEnv, runUntilSignal } from '@weir/service-runtime';
import { openDatabase } from '@weir/store-pg';
import { createLogger } from '@weir/telemetry';
import { createSnapshotSinkFromEnv } from './snapshot-sink';

const env = readEnv({
  WEIR_DATABASE_URL: envString(''),
  DATABASE_URL: envString(''),
  HOST: envString('127.0.0.1'),
  WEIR_CONTROL_PLANE_PORT: envInt(8090, 0, 65535),
  WEIR_ADMIN_TOKEN: envString(''),
  WEIR_CONFIG: envString(''),
  WEIR_NATS_URL: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  WEIR_CONFIG_HEARTBEAT_MS: envInt(5_000, 100, 60_000),
  CONTROL_PLANE_DB_POOL: envInt(5, 1, 100),
  LOG_LEVEL: envString('info'),
});
const databaseUrl = env.WEIR_DATABASE_URL || env.DATABASE_URL;
if (!databaseUrl) throw new EnvError(['WEIR_DATABASE_URL: required: the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir']);
const logger = createLogger({ name: 'control-plane', level: env.LOG_LEVEL as 'info' });

runUntilSignal('control-plane', logger, async () => {
  const database = await openDatabase({ databaseUrl, maxConnections: env.CONTROL_PLANE_DB_POOL, logger });
  if (env.WEIR_ADMIN_TOKEN) {
    const outcome = await registerBootstrapAdminToken(database.db, env.WEIR_ADMIN_TOKEN);
    if (outcome === 'revoked') logger.warn({}, 'WEIR_ADMIN_TOKEN was revoked; it stays revoked (use another admin token)');
    else logger.info({ outcome }, 'bootstrap admin token');
  }
  if (env.WEIR_CONFIG) {
    const seeded = await seedFromConfigFile(database.db, env.WEIR_CONFIG);
    logger.info(seeded.seeded ? { version: seeded.version, revisions: seeded.revisions, aliases: seeded.aliases, tenants: seeded.tenants } : { skipped: seeded.reason }, seeded.seeded ? 'store seeded from WEIR_CONFIG' : 'store not empty; WEIR_CONFIG not imported');
  }
  const built = await createSnapshotSinkFromEnv({ natsUrl: env.WEIR_NATS_URL || env.NATS_URL, namespace: env.WEIR_NATS_NAMESPACE, heartbeatMs: env.WEIR_CONFIG_HEARTBEAT_MS }, logger);
  const controlPlane = createControlPlane({}, { db: database.db, sink: built.sink, logger });
  await controlPlane.republishLatest();
  const stopRetry = controlPlane.startPublishRetry(env.WEIR_CONFIG_HEARTBEAT_MS);
  const stopHeartbeats = built.startHeartbeats(() => controlPlane.publishedVersion());

  let draining = false;
  const app = createControlPlaneHttpApp({
    controlPlane,
    logger,
    readiness: () => (draining ? { ready: false, reason: 'draining' } : built.connected() ? { ready: true } : { ready: false, reason: 'nats_disconnected' }),
  });
  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(env.WEIR_CONTROL_PLANE_PORT, env.HOST, () => resolve(s));
    s.once('error', reject);
  });
  logger.info({ port: (server.address() as AddressInfo).port, host: env.HOST }, 'control plane listening');
  return {
    async stop() {
      draining = true;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      stopHeartbeats();
      stopRetry();
      await controlPlane.close();
      await built.close();
      await database.close();
    },
  };
});

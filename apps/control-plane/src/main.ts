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
 * - WEIR_CONFIG: a configuration file seeding an empty store (no revision, no snapshot).
 * - WEIR_CONFIG_IMPORT (default empty): what WEIR_CONFIG does to a store that is not empty:
 *   `empty` nothing; `placement` its revisions' `replicas` are imported (where revisions are
 *   served; the split launcher's engines get new ports each start); `always` the whole file is
 *   imported over the store when it differs. Each import is one audited change by `config-file`.
 * - WEIR_CONFIG_SIGNING_KEY_FILE: the Ed25519 PKCS#8 PEM signing key; unset = nothing is published.
 * - WEIR_NATS_URL (or NATS_URL, default nats://127.0.0.1:4222), WEIR_NATS_NAMESPACE (default weir):
 *   NATS is required (snapshots, capacity telemetry and decisions, canary events); the first
 *   connection is retried until a server answers.
 * - WEIR_CONFIG_HEARTBEAT_MS (default 5,000): heartbeat and publication-retry interval.
 * - WEIR_CANARY_GUARD_INTERVAL_MS (default 15,000): how often the canary guard judges canaries.
 * - WEIR_DEPRECATION_CHECK_MS (default 60,000): how often deprecations due for announcement are
 *   looked for (the event is published on `<ns>.events.deprecation`, once, and audited).
 * - WEIR_CAPACITY_REPLICA_TPS_HINT (default 2,500): output tokens/s one replica is assumed to
 *   sustain until a pool's telemetry has measured it.
 * - WEIR_MODEL_CACHE_DIR (default .data/models): where eval replays look for llama.cpp model
 *   files by sha256 when a revision's model_path is not on this host (nothing is downloaded).
 * - CONTROL_PLANE_DB_POOL (default 5), LOG_LEVEL (default info).
 * - OPS_PORT (default 9466, 0 = any free port, off = none), OPS_HOST (default 127.0.0.1),
 *   WEIR_OPS_TOKEN: the ops listener, whose `GET /metrics` serves Prometheus text
 *   (`weir_pool_desired_replicas{pool}`, the published/stored snapshot versions); the admin
 *   port does not serve `/metrics` (docs/security.md §9).
 * - The admin listener's client limits, as the gateway's (`clientLimitsFromEnv`, docs/security.md
 *   §7): WEIR_HEADERS_TIMEOUT_MS, WEIR_REQUEST_TIMEOUT_MS, WEIR_KEEP_ALIVE_TIMEOUT_MS,
 *   WEIR_MAX_CONNECTIONS, WEIR_MAX_CONNECTIONS_PER_ADDRESS, WEIR_TRUSTED_PROXIES, and
 *   WEIR_AUTH_FAILURE_LIMIT / WEIR_AUTH_FAILURE_WINDOW_MS for failed admin tokens.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { sql } from 'kysely';
import { createControlPlane, createControlPlaneHttpApp, registerBootstrapAdminToken, registerCapacityRoutes } from '@weir/control-plane';
import { connectNats, natsAuthFromEnv } from '@weir/messaging-nats';
import { clientLimitsFromEnv, createClientGuard, envInt, envString, EnvError, opsSettingsFromEnv, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { openDatabase } from '@weir/store-pg';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { startCanaryGuard } from './canary';
import { startCapacityController } from './capacity';
import { applyConfigFileAtStart, parseConfigImportMode } from './config-file';
import { evalRoutes } from './evals';
import { startDeprecationAnnouncer } from './deprecations';
import { createSnapshotSinkFromEnv } from './snapshot-sink';

const env = readEnv({
  WEIR_DATABASE_URL: envString(''),
  DATABASE_URL: envString(''),
  HOST: envString('127.0.0.1'),
  WEIR_CONTROL_PLANE_PORT: envInt(8090, 0, 65535),
  WEIR_ADMIN_TOKEN: envString(''),
  WEIR_CONFIG: envString(''),
  WEIR_CONFIG_IMPORT: envString('empty'),
  WEIR_NATS_URL: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  WEIR_CONFIG_HEARTBEAT_MS: envInt(5_000, 100, 60_000),
  WEIR_CANARY_GUARD_INTERVAL_MS: envInt(15_000, 100, 3_600_000),
  WEIR_DEPRECATION_CHECK_MS: envInt(60_000, 100, 86_400_000),
  WEIR_CAPACITY_REPLICA_TPS_HINT: envInt(2_500, 1, 10_000_000),
  WEIR_MODEL_CACHE_DIR: envString('.data/models'),
  CONTROL_PLANE_DB_POOL: envInt(5, 1, 100),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const databaseUrl = env.WEIR_DATABASE_URL || env.DATABASE_URL;
if (!databaseUrl) throw new EnvError(['WEIR_DATABASE_URL: required: the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir']);
const configImport = parseConfigImportMode(env.WEIR_CONFIG_IMPORT);
const opsSettings = opsSettingsFromEnv(process.env, { port: 'OPS_PORT', host: 'OPS_HOST', defaultPort: 9466 });
const clientLimits = clientLimitsFromEnv(process.env);
const logger = createLogger({ name: 'control-plane', level: env.LOG_LEVEL as 'info' });

runUntilSignal('control-plane', logger, async () => {
  const database = await openDatabase({ databaseUrl, maxConnections: env.CONTROL_PLANE_DB_POOL, logger });
  if (env.WEIR_ADMIN_TOKEN) {
    const outcome = await registerBootstrapAdminToken(database.db, env.WEIR_ADMIN_TOKEN);
    if (outcome === 'revoked') logger.warn({}, 'WEIR_ADMIN_TOKEN was revoked; it stays revoked (use another admin token)');
    else logger.info({ outcome }, 'bootstrap admin token');
  }
  const nc = await connectNats({ servers: env.WEIR_NATS_URL || env.NATS_URL, name: 'weir-control-plane', auth: natsAuth, logger, waitOnFirstConnect: true });
  const built = createSnapshotSinkFromEnv({ namespace: env.WEIR_NATS_NAMESPACE, heartbeatMs: env.WEIR_CONFIG_HEARTBEAT_MS }, nc, logger);
  const controlPlane = createControlPlane({}, { db: database.db, sink: built.sink, logger });
  if (env.WEIR_CONFIG) await applyConfigFileAtStart(controlPlane, env.WEIR_CONFIG, configImport, logger);
  await controlPlane.republishLatest();
  const stopRetry = controlPlane.startPublishRetry(env.WEIR_CONFIG_HEARTBEAT_MS);
  const stopHeartbeats = built.startHeartbeats(() => controlPlane.publishedVersion());

  const telemetry = createTelemetry({ serviceName: 'weir-control-plane' });
  let storedVersion: number | undefined;
  const readStoredVersion = () =>
    database.db
      .selectFrom('config_snapshots')
      .select(sql<string | null>`max(version)`.as('v'))
      .executeTakeFirst()
      .then(
        (row) => {
          storedVersion = row?.v === null || row?.v === undefined ? undefined : Number(row.v);
        },
        (err: unknown) => logger.warn({ err }, 'reading the stored snapshot version failed'),
      );
  await readStoredVersion();
  const versionTimer = setInterval(() => void readStoredVersion(), env.WEIR_CONFIG_HEARTBEAT_MS);
  versionTimer.unref();
  telemetry.observeConfigPublication(() => ({ publishedVersion: controlPlane.publishedVersion(), storedVersion }));

  const capacity = startCapacityController({ nc, namespace: env.WEIR_NATS_NAMESPACE, logger, telemetry }, env.WEIR_CAPACITY_REPLICA_TPS_HINT);
  const guard = startCanaryGuard({ cp: controlPlane, nc, namespace: env.WEIR_NATS_NAMESPACE, logger }, env.WEIR_CANARY_GUARD_INTERVAL_MS);
  const announcer = startDeprecationAnnouncer({ db: database.db, nc, namespace: env.WEIR_NATS_NAMESPACE, logger }, env.WEIR_DEPRECATION_CHECK_MS);

  let draining = false;
  const readiness = () => (draining ? { ready: false, reason: 'draining' } : nc.isClosed() ? { ready: false, reason: 'nats_disconnected' } : { ready: true });
  // Slow and greedy clients of the admin listener (docs/security.md §7): timeouts, connection
  // caps, and the failed-authentication throttle of the admin API, keyed by the same client.
  const clients = createClientGuard(clientLimits);
  const admin = createControlPlaneHttpApp({
    controlPlane,
    logger,
    authFailures: { throttle: clients.auth, clientKey: clients.clientKey },
    extraRoutes: [(router) => registerCapacityRoutes(router, { capacity: capacity.controller }), evalRoutes(controlPlane, { modelCacheDir: env.WEIR_MODEL_CACHE_DIR }, logger)],
    readiness,
  });
  const app = express();
  app.disable('x-powered-by');
  app.use(admin);
  // The header and request timeouts bound receiving a request only, not the answer.
  const server = createServer(clients.serverOptions, app);
  clients.attach(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(env.WEIR_CONTROL_PLANE_PORT, env.HOST, () => resolve());
  });
  const ops =
    opsSettings.port === 'off'
      ? undefined
      : await startOpsServer({ host: opsSettings.host, port: opsSettings.port, readiness, metricsHandler: telemetry.metricsHandler, ...(opsSettings.token ? { token: opsSettings.token } : {}) });
  logger.info({ port: (server.address() as AddressInfo).port, host: env.HOST, ...(ops ? { opsPort: ops.port } : {}) }, 'control plane listening');
  return {
    async stop() {
      draining = true;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      clients.close();
      await guard.stop();
      announcer.stop();
      capacity.stop();
      clearInterval(versionTimer);
      stopHeartbeats();
      stopRetry();
      await controlPlane.close();
      await built.close();
      await nc.drain();
      await ops?.close();
      await telemetry.shutdown();
      await database.close();
    },
  };
});

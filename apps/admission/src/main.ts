/**
 * The admission service (split topology): reserve → settle → release over gRPC
 * (`weir.admission.v1`), with its state in Postgres (ADR 0001: Postgres is the atomic
 * arbiter). Any number of instances may run against one database: each reserve is one
 * transaction on the tenant's and app's locked rows, so limits and budgets hold across all of
 * them and a restarted instance simply continues. Each instance also reconciles expired
 * reservations with the usage ledger every ADMISSION_RECONCILE_INTERVAL_MS (idempotent, so
 * instances may overlap).
 *
 * Configuration: the control plane's signed snapshots when WEIR_CONFIG_PUBLIC_KEY(_FILE) is set
 * (limits and budgets apply live), else the file WEIR_CONFIG.
 *
 * Environment: WEIR_CONFIG, WEIR_CONFIG_PUBLIC_KEY(_FILE), WEIR_CONFIG_CACHE_DIR, NATS_URL,
 * WEIR_NATS_NAMESPACE, DATABASE_URL, HOST, GRPC_PORT (default 50052), OPS_PORT (default
 * 9462), ADMISSION_RECONCILE_INTERVAL_MS (default 10,000), ADMISSION_DB_POOL (default 10),
 * LOG_LEVEL.
 */
import { createAdmission, startReconciler, withStoreFaultsAsUnavailable } from '@weir/admission';
import type { NatsConnection } from '@nats-io/transport-node';
import { createConfigSyncMetrics, openDataPlaneConfig } from '@weir/config-sync';
import { connectNats } from '@weir/messaging-nats';
import { envInt, envRequired, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { settleUncertainUsage } from '@weir/reconcile';
import { createPgAdmissionStore, createReconcileQueries, openDatabase } from '@weir/store-pg';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { createAdmissionGrpcServer, installTracing, startGrpcServer } from '@weir/transport-grpc';
import { admissionObserver } from './observer';

const env = readEnv({
  WEIR_CONFIG: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  DATABASE_URL: envRequired('the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50052, 0, 65535),
  OPS_PORT: envInt(9462, 0, 65535),
  ADMISSION_RECONCILE_INTERVAL_MS: envInt(10_000, 100),
  ADMISSION_DB_POOL: envInt(10, 1, 200),
  LOG_LEVEL: envString('info'),
});
const logger = createLogger({ name: 'admission', level: env.LOG_LEVEL as 'info' });

runUntilSignal('admission', logger, async () => {
  installTracing();
  const telemetry = createTelemetry({ serviceName: 'weir-admission' });
  let nc: NatsConnection | undefined;
  const source = await openDataPlaneConfig({
    env: process.env,
    service: 'admission',
    connectNats: async () => (nc = await connectNats({ servers: env.NATS_URL, name: 'weir-admission', logger })),
    logger,
    metrics: createConfigSyncMetrics(telemetry.meter),
  });
  const config = source.initial;
  const database = await openDatabase({ databaseUrl: env.DATABASE_URL, maxConnections: env.ADMISSION_DB_POOL, logger });
  const admission = createAdmission({ tenants: config.tenants }, { store: createPgAdmissionStore(database.db), observer: admissionObserver(telemetry.metrics, logger) });
  // Each pass first settles usage rows left uncertain by a lost relay from the engine
  // replicas' own counts (so the reservations held for them settle exactly), then reconciles
  // reservations with the ledger.
  const queries = createReconcileQueries(database.db);
  let pricing = new Map(config.revisions.map((r) => [r.id, r.pricing]));
  let enginesByRevision = new Map(config.revisions.map((r) => [r.id, (r.replicas ?? []).map((x) => ({ replicaId: x.id, baseUrl: x.baseUrl }))]));
  // A new snapshot's limits, budgets and prices apply to the next reservation.
  source.onChange((next, version) => {
    admission.updateTenants(next.tenants);
    pricing = new Map(next.revisions.map((r) => [r.id, r.pricing]));
    enginesByRevision = new Map(next.revisions.map((r) => [r.id, (r.replicas ?? []).map((x) => ({ replicaId: x.id, baseUrl: x.baseUrl }))]));
    logger.info({ version }, 'configuration applied: tenant limits and budgets updated');
  });
  const settleUncertain = async () => {
    const result = await settleUncertainUsage({ window: { since: new Date(Date.now() - 86_400_000) }, pricing, enginesByRevision, fix: true }, { queries });
    if (result.settled.length > 0) logger.info({ settled: result.settled.map((r) => r.generationId) }, 'uncertain usage settled from the engines\' counts');
  };
  const reconciler = startReconciler({
    async reconcileReservations() {
      await settleUncertain().catch((err: unknown) => logger.warn({ err }, 'settling uncertain usage failed; retrying next interval'));
      return admission.reconcileReservations();
    },
  }, {
    intervalMs: env.ADMISSION_RECONCILE_INTERVAL_MS,
    onReport: () => void admission.countHeld().then((n) => telemetry.metrics.recordReservationsHeld(n), () => undefined),
    onError: (err) => logger.warn({ err }, 'reservation reconciliation failed; retrying next interval'),
  });
  // A database fault is a retryable 503 (the gateway may fail over to another instance), not a 500.
  const served = withStoreFaultsAsUnavailable(admission, (err, call) => logger.warn({ err, call }, 'admission database call failed'));
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [createAdmissionGrpcServer(served)] });
  let draining = false;
  const ops = await startOpsServer({
    host: env.HOST,
    port: env.OPS_PORT,
    readiness: () => (draining ? { ready: false, reason: 'draining' } : { ready: true }),
    metricsHandler: telemetry.metricsHandler,
  });
  logger.info({ grpc: grpc.address, ops: ops.port }, 'admission listening');
  return {
    async stop() {
      draining = true;
      await grpc.close(5_000);
      await reconciler.stop();
      await source.stop();
      await nc?.drain().catch(() => undefined);
      await database.close();
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

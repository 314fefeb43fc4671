/**
 * The admission service (split topology): reserve → settle → release over gRPC
 * (`weir.admission.v1`), decided in memory on budget leases (ADR 0002 §1): this instance is a
 * `shared` holder drawing slices of each budget row, rate shares and concurrency slots from
 * Postgres in the background (`createPgLeaseStore`), so a reserve is a few µs with no database
 * round trip in steady state, and any number of instances keep the cap exact (settled + Σ
 * leases ≤ budget). A reservation lives in this process: the gateway settles or releases it
 * here; if this instance dies, its reservations die with it and its leases are reclaimed by
 * the other instances once their `hold_until` has passed (the ledger has settled what its
 * relays finished by then). Maintenance (heartbeat, refills, returns, reclaim of dead holders'
 * leases) runs every 2 s; reconciliation of the ledger is `apps/reconcile`'s.
 *
 * `Admit` (the gateway's one round trip, issue 13 item 6): reserve here, then acquire the slot
 * from the scheduler (SCHEDULER_ADDR) for the gateway, under the gateway's lease id.
 *
 * Configuration: the control plane's signed snapshots when WEIR_CONFIG_PUBLIC_KEY(_FILE) is set
 * (limits and budgets apply live), else the file WEIR_CONFIG.
 *
 * Environment: WEIR_CONFIG, WEIR_CONFIG_PUBLIC_KEY(_FILE), WEIR_CONFIG_CACHE_DIR, NATS_URL,
 * WEIR_NATS_NAMESPACE, DATABASE_URL, HOST, GRPC_PORT (default 50052), OPS_PORT (default
 * 9462), SCHEDULER_ADDR (default 127.0.0.1:50053), ADMISSION_DB_POOL (default 4: lease
 * transactions only), ADMISSION_HOLDER_ID (default a fresh id per start), ADMISSION_LEASE_HOLD_MS
 * (default 240,000: heartbeats move each lease's hold_until to now + this), ADMISSION_RECLAIM_EVERY_MS
 * (default 10,000) and ADMISSION_RECLAIM_GRACE_MS (default 5,000: clock skew between holders),
 * LOG_LEVEL, WEIR_TLS_CA / WEIR_TLS_CERT / WEIR_TLS_KEY (mutual TLS; callers: `gateway`, or
 * WEIR_TLS_ALLOWED_PEERS; docs/security.md §8).
 */
import { createLeasedAdmission, createSessionBudgets, withStoreFaultsAsUnavailable } from '@weir/admission';
import type { NatsConnection } from '@nats-io/transport-node';
import { createConfigSyncMetrics, openDataPlaneConfig } from '@weir/config-sync';
import { connectNats, natsAuthFromEnv } from '@weir/messaging-nats';
import { envInt, envRequired, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { createPgLeaseStore, openDatabase } from '@weir/store-pg';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { serviceTlsFromEnv } from '@weir/service-tls';
import { createAdmissionGrpcServer, createSchedulerGrpcClient, installTracing, startGrpcServer } from '@weir/transport-grpc';
import { admissionObserver } from './observer';

const env = readEnv({
  WEIR_CONFIG: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  DATABASE_URL: envRequired('the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50052, 0, 65535),
  OPS_PORT: envInt(9462, 0, 65535),
  SCHEDULER_ADDR: envString('127.0.0.1:50053'),
  ADMISSION_DB_POOL: envInt(4, 1, 200),
  ADMISSION_HOLDER_ID: envString(''),
  ADMISSION_LEASE_HOLD_MS: envInt(240_000, 1_000),
  ADMISSION_RECLAIM_EVERY_MS: envInt(10_000, 100),
  ADMISSION_RECLAIM_GRACE_MS: envInt(5_000, 0),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const logger = createLogger({ name: 'admission', level: env.LOG_LEVEL as 'info' });

runUntilSignal('admission', logger, async () => {
  installTracing();
  // Mutual TLS (docs/security.md §8): only gateways may call; the scheduler must be the scheduler.
  const tls = serviceTlsFromEnv('admission', { defaultPeers: ['gateway'], logger });
  const telemetry = createTelemetry({ serviceName: 'weir-admission' });
  let nc: NatsConnection | undefined;
  const source = await openDataPlaneConfig({
    env: process.env,
    service: 'admission',
    connectNats: async () => (nc = await connectNats({ servers: env.NATS_URL, name: 'weir-admission', auth: natsAuth, logger })),
    logger,
    metrics: createConfigSyncMetrics(telemetry.meter),
  });
  const config = source.initial;
  const database = await openDatabase({ databaseUrl: env.DATABASE_URL, maxConnections: env.ADMISSION_DB_POOL, logger });
  const admission = createLeasedAdmission(
    {
      tenants: config.tenants,
      mode: 'shared',
      holdMs: env.ADMISSION_LEASE_HOLD_MS,
      reclaimEveryMs: env.ADMISSION_RECLAIM_EVERY_MS,
      reclaimGraceMs: env.ADMISSION_RECLAIM_GRACE_MS,
      ...(env.ADMISSION_HOLDER_ID ? { holderId: env.ADMISSION_HOLDER_ID } : {}),
    },
    { store: createPgLeaseStore(database.db), observer: admissionObserver(telemetry.metrics, logger) },
  );
  // Registers the holder; leases are drawn on the first requests and kept filled from then on.
  await admission.start();
  // A new snapshot's limits and budgets apply to the next reservation.
  // Session budgets (`x-weir-session-id`, for apps that allow them): this instance's, in memory.
  const sessionBudgets = createSessionBudgets({ tenants: config.tenants });
  source.onChange((next, version) => {
    admission.updateTenants(next.tenants);
    sessionBudgets.updateTenants(next.tenants);
    logger.info({ version }, 'configuration applied: tenant limits and budgets updated');
  });
  const onBackgroundError = (error: Error, call: string) => logger.warn({ err: error, call }, 'background gRPC call failed');
  const scheduler = createSchedulerGrpcClient({ address: env.SCHEDULER_ADDR, onBackgroundError, ...(tls ? { tls } : {}) });
  // A database fault of a synchronous draw (the edge of a budget, a scope's first request) is a
  // retryable 503 (the gateway may fail over to another instance), not a 500.
  const served = withStoreFaultsAsUnavailable(sessionBudgets.wrap(admission), (err, call) => logger.warn({ err, call }, 'admission lease store call failed'));
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [createAdmissionGrpcServer(served, { scheduler })], ...(tls ? { tls } : {}) });
  let draining = false;
  const ops = await startOpsServer({
    host: env.HOST,
    port: env.OPS_PORT,
    readiness: () => (draining ? { ready: false, reason: 'draining' } : { ready: true }),
    metricsHandler: telemetry.metricsHandler,
  });
  // Reservations held here (the `weir_admission_reservations_held` gauge), sampled every second
  // (every 10 s it read 0 with 40 in flight, then 20 after they had finished).
  const sampler = setInterval(() => telemetry.metrics.recordReservationsHeld(admission.snapshot().held), 1_000);
  sampler.unref();
  logger.info({ grpc: grpc.address, ops: ops.port, holder: admission.holderId }, 'admission listening');
  return {
    async stop() {
      draining = true;
      clearInterval(sampler);
      // Settles and releases of requests still running keep arriving while the gateways drain.
      await grpc.close(5_000);
      // Unused lease money goes back now; what reservations in flight still hold lapses after them.
      await admission.stop();
      scheduler.close();
      await source.stop();
      await nc?.drain().catch(() => undefined);
      await database.close();
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

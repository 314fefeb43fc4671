/**
 * The router service (split topology): alias → pinned revision by canary weight, sticky per
 * request id, over gRPC (`weir.router.v1`). Routing changes apply live: from the control plane's
 * signed snapshots when WEIR_CONFIG_PUBLIC_KEY(_FILE) is set (over NATS_URL, namespace
 * WEIR_NATS_NAMESPACE; see docs/config-snapshots.md), else from edits of WEIR_CONFIG.
 * Environment: WEIR_CONFIG, WEIR_CONFIG_PUBLIC_KEY(_FILE), WEIR_CONFIG_CACHE_DIR, NATS_URL,
 * WEIR_NATS_NAMESPACE, HOST, GRPC_PORT (default 50051), OPS_PORT (healthz/readyz/metrics,
 * default 9461), LOG_LEVEL, WEIR_TLS_CA / WEIR_TLS_CERT / WEIR_TLS_KEY (mutual TLS; callers: `gateway`,
 * or WEIR_TLS_ALLOWED_PEERS; docs/security.md §8).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { createConfigSyncMetrics, openDataPlaneConfig } from '@weir/config-sync';
import { connectNats, natsAuthFromEnv } from '@weir/messaging-nats';
import { createRouter } from '@weir/routing';
import { envInt, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { serviceTlsFromEnv } from '@weir/service-tls';
import { createRouterGrpcServer, installTracing, startGrpcServer } from '@weir/transport-grpc';

const env = readEnv({
  WEIR_CONFIG: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50051, 0, 65535),
  OPS_PORT: envInt(9461, 0, 65535),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const logger = createLogger({ name: 'router', level: env.LOG_LEVEL as 'info' });

runUntilSignal('router', logger, async () => {
  installTracing();
  const tls = serviceTlsFromEnv('router', { defaultPeers: ['gateway'], logger });
  const telemetry = createTelemetry({ serviceName: 'weir-router' });
  let nc: NatsConnection | undefined;
  const source = await openDataPlaneConfig({
    env: process.env,
    service: 'router',
    connectNats: async () => (nc = await connectNats({ servers: env.NATS_URL, name: 'weir-router', auth: natsAuth, logger })),
    logger,
    metrics: createConfigSyncMetrics(telemetry.meter),
    watchFile: true,
  });
  const config = source.initial;
  const router = createRouter(config);
  // Routing changes (canary weights, pins, fallbacks, a rollback) apply live.
  source.onChange((next, version) => {
    router.update(next);
    logger.info({ version, aliases: next.aliases.map((a) => ({ alias: a.name, targets: a.targets })) }, 'configuration changed: routing updated');
  });
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [createRouterGrpcServer(router)], ...(tls ? { tls } : {}) });
  let draining = false;
  const ops = await startOpsServer({
    host: env.HOST,
    port: env.OPS_PORT,
    readiness: () => (draining ? { ready: false, reason: 'draining' } : { ready: true }),
    metricsHandler: telemetry.metricsHandler,
  });
  logger.info({ grpc: grpc.address, ops: ops.port, aliases: config.aliases.length }, 'router listening');
  return {
    async stop() {
      draining = true;
      await source.stop();
      await nc?.drain().catch(() => undefined);
      await grpc.close(5_000);
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

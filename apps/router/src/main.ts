/**
 * The router service (split topology): alias → pinned revision by canary weight, sticky per
 * request id, over gRPC (`weir.router.v1`); routing changes in WEIR_CONFIG apply live. Environment: WEIR_CONFIG, HOST, GRPC_PORT
 * (default 50051), OPS_PORT (healthz/readyz/metrics, default 9461), LOG_LEVEL.
 */
import { loadConfigFile, watchConfigFile } from '@weir/config';
import { createRouter } from '@weir/routing';
import { envInt, envRequired, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { createRouterGrpcServer, installTracing, startGrpcServer } from '@weir/transport-grpc';

const env = readEnv({
  WEIR_CONFIG: envRequired('the configuration file'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50051, 0, 65535),
  OPS_PORT: envInt(9461, 0, 65535),
  LOG_LEVEL: envString('info'),
});
const logger = createLogger({ name: 'router', level: env.LOG_LEVEL as 'info' });

runUntilSignal('router', logger, async () => {
  installTracing();
  const config = loadConfigFile(env.WEIR_CONFIG);
  const telemetry = createTelemetry({ serviceName: 'weir-router' });
  const router = createRouter(config);
  // Routing changes in the file (canary weights, pins, fallbacks, a rollback) apply live.
  const watch = watchConfigFile(env.WEIR_CONFIG, {
    current: config,
    onUpdate: (next, needsRestart) => {
      router.update(next);
      logger.info({ aliases: next.aliases.map((a) => ({ alias: a.name, targets: a.targets })) }, 'configuration file changed: routing updated');
      if (needsRestart.length > 0) logger.warn({ sections: needsRestart }, 'configuration file changed outside routing: those changes apply only after a restart');
    },
    onRejected: (reason) => logger.warn({ reason }, 'configuration file changed but was not applied'),
  });
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [createRouterGrpcServer(router)] });
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
      watch.stop();
      await grpc.close(5_000);
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

/**
 * The admission service (split topology): reserve → settle → release over gRPC
 * (`weir.admission.v1`). One instance is the arbiter for every gateway, so limits do not
 * multiply with gateway replicas. Environment: WEIR_CONFIG, HOST, GRPC_PORT (default 50052),
 * OPS_PORT (default 9462), LOG_LEVEL.
 */
import { createConcurrencyAdmission } from '@weir/admission';
import { loadConfigFile } from '@weir/config';
import { envInt, envRequired, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { createAdmissionGrpcServer, installTracing, startGrpcServer } from '@weir/transport-grpc';

const env = readEnv({
  WEIR_CONFIG: envRequired('the configuration file'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50052, 0, 65535),
  OPS_PORT: envInt(9462, 0, 65535),
  LOG_LEVEL: envString('info'),
});
const logger = createLogger({ name: 'admission', level: env.LOG_LEVEL as 'info' });

runUntilSignal('admission', logger, async () => {
  installTracing();
  const config = loadConfigFile(env.WEIR_CONFIG);
  const telemetry = createTelemetry({ serviceName: 'weir-admission' });
  const admission = createConcurrencyAdmission({ tenants: config.tenants });
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [createAdmissionGrpcServer(admission)] });
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
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

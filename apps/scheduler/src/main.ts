/**
 * The scheduler service (split topology): owns replica capacity (sequences and KV tokens, per
 * pool) and the tenant-fair, deadline-aware bounded queues in front of it, over gRPC
 * (`weir.scheduler.v1`); see `@weir/scheduling`'s `createPoolScheduler`. It probes every engine replica's
 * `/readyz` and takes one that stops answering or is draining (killed, hung: SIGSTOP, or shutting down) out of rotation,
 * and back when it answers again; relays report replicas they could not reach on the NATS
 * health topic, which ejects them at once. Every CAPACITY_TELEMETRY_INTERVAL_MS it publishes
 * each pool's capacity telemetry (queue, running work, replicas, tokens, busy time) on
 * `<ns>.capacity.telemetry.<pool>` for the capacity controller (docs/capacity.md).
 * Configuration: the control plane's signed snapshots when WEIR_CONFIG_PUBLIC_KEY(_FILE) is set
 * (the first one at start; later ones that change what this service holds apply after a
 * restart, as edits of the file do), else the file WEIR_CONFIG.
 *
 * Environment: WEIR_CONFIG, WEIR_CONFIG_PUBLIC_KEY(_FILE), WEIR_CONFIG_CACHE_DIR, NATS_URL, WEIR_NATS_NAMESPACE (default weir: deployments sharing a NATS server need different ones), HOST,
 * GRPC_PORT (default 50053), OPS_PORT (default 9463), PROBE_INTERVAL_MS (default 1000),
 * PROBE_TIMEOUT_MS (default 1000), PROBE_FAILURES (default 3), CAPACITY_TELEMETRY_INTERVAL_MS
 * (default 5000), LOG_LEVEL, WEIR_TLS_CA / WEIR_TLS_CERT / WEIR_TLS_KEY (mutual TLS; callers: `gateway`,
 * `admission`, or WEIR_TLS_ALLOWED_PEERS; the probes present the certificate: docs/security.md §8).
 */
import { hostname } from 'node:os';
import { createConfigSyncMetrics, openDataPlaneConfig, warnChangesNeedingRestart } from '@weir/config-sync';
import { type ReplicaHealthEvent, systemClock } from '@weir/core';
import { remoteReplicas, startReplicaHealthChecks } from '@weir/engines';
import { connectNats, natsAuthFromEnv, createCapacityTelemetryPublisher, createNatsTopic, natsNames, replicaHealthEventCodec } from '@weir/messaging-nats';
import { createCapacityTelemetry, createPoolScheduler, createSchedulerSampler, replicaSamples, schedulerMetricsObserver } from '@weir/scheduling';
import { envInt, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { createServiceTlsAgent, serviceTlsFromEnv } from '@weir/service-tls';
import { createSchedulerGrpcServer, installTracing, startGrpcServer } from '@weir/transport-grpc';

const env = readEnv({
  WEIR_CONFIG: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50053, 0, 65535),
  OPS_PORT: envInt(9463, 0, 65535),
  PROBE_INTERVAL_MS: envInt(1_000, 50),
  PROBE_TIMEOUT_MS: envInt(1_000, 10),
  PROBE_FAILURES: envInt(3, 1, 100),
  CAPACITY_TELEMETRY_INTERVAL_MS: envInt(5_000, 100, 600_000),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const logger = createLogger({ name: 'scheduler', level: env.LOG_LEVEL as 'info' });

runUntilSignal('scheduler', logger, async () => {
  installTracing();
  // Mutual TLS (docs/security.md §8): gateways and admission instances may call; probes present this certificate.
  const tls = serviceTlsFromEnv('scheduler', { defaultPeers: ['gateway', 'admission'], logger });
  const engineAgent = tls ? createServiceTlsAgent(tls, { expectedServer: 'engine' }) : undefined;
  const telemetry = createTelemetry({ serviceName: 'weir-scheduler' });
  const nc = await connectNats({ servers: env.NATS_URL, name: 'weir-scheduler', auth: natsAuth, logger });
  const source = await openDataPlaneConfig({ env: process.env, service: 'scheduler', connectNats: async () => nc, logger, metrics: createConfigSyncMetrics(telemetry.meter), watchFile: true });
  const config = source.initial;
  warnChangesNeedingRestart(source, logger);
  const replicas = remoteReplicas(config.revisions);
  const scheduler = createPoolScheduler({
    replicas: replicas.map(({ id, revisionId, slots, pool, kvTokens }) => ({ id, revisionId, slots, pool, kvTokens })),
    tenants: config.tenants,
    maxQueuePerReplica: config.defaults.maxQueuePerReplica,
    ...(config.defaults.scheduling ? { settings: config.defaults.scheduling } : {}),
    clock: systemClock,
    observer: schedulerMetricsObserver(telemetry.metrics, {
      onLeaseExpired: (replica) => logger.warn({ replica }, 'lease expired unreleased (its holder vanished)'),
      onBrownout: (e) => logger[e.active ? 'warn' : 'info']({ pool: e.pool, revision: e.revisionId, capacityRatio: e.capacityRatio }, e.active ? 'pool lost capacity: brownout (batch shed, queue bounds shrunk)' : 'pool capacity back: brownout over'),
      onSlotLimit: (e) => logger.info({ replica: e.replicaId, limit: e.limit, slots: e.slots, p95TpotMs: Math.round(e.p95Ms) }, `TPOT target: replica batch ${e.change} to ${e.limit} of ${e.slots} sequences`),
    }),
  });
  telemetry.observeQueues(() => scheduler.stats().queued);
  const sampleScheduler = createSchedulerSampler();
  telemetry.observeScheduler(() => sampleScheduler(scheduler.stats()));

  const health = createNatsTopic<ReplicaHealthEvent>(nc, natsNames(env.WEIR_NATS_NAMESPACE).healthSubject, replicaHealthEventCodec);
  // Configured replicas are probed on /readyz; any replica a relay reports is ejected at
  // once, and a probed one comes back when it answers again.
  const checks = startReplicaHealthChecks({
    scheduler,
    replicas,
    intervalMs: env.PROBE_INTERVAL_MS,
    timeoutMs: env.PROBE_TIMEOUT_MS,
    failuresToEject: env.PROBE_FAILURES,
    logger,
    ...(engineAgent ? { dispatcher: engineAgent } : {}),
    onChange: ({ replicaId, revisionId, healthy, reason }) =>
      health.publish({ replicaId, revisionId, state: healthy ? 'healthy' : 'unhealthy', reason, at: Date.now() }),
  });
  const unsubscribe = health.subscribe((event) => {
    // A relay could not reach it: eject now; the prober brings it back when it answers.
    if (event.state === 'unhealthy') checks.reportUnreachable(event.replicaId);
  });

  // Replicas that are not probed (hosted upstreams) count as up while in rotation.
  telemetry.observeReplicas(() => replicaSamples(scheduler, checks.up));
  // Requests go through the capacity wrapper, which counts grants, tokens and busy time; its
  // samples go to the capacity controller. A restart is a new source (counters from zero).
  const capacity = createCapacityTelemetry(scheduler, { source: `scheduler-${hostname()}-${process.pid}-${Date.now()}`, clock: { now: () => Date.now() } });
  const capacityTopic = createCapacityTelemetryPublisher(nc, env.WEIR_NATS_NAMESPACE, { logger });
  const capacityTimer = setInterval(() => {
    for (const sample of capacity.sample()) capacityTopic.publish(sample);
  }, env.CAPACITY_TELEMETRY_INTERVAL_MS);
  capacityTimer.unref();
  const binding = createSchedulerGrpcServer(capacity.scheduler);
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [binding], ...(tls ? { tls } : {}) });
  let draining = false;
  const ops = await startOpsServer({
    host: env.HOST,
    port: env.OPS_PORT,
    readiness: () => (draining ? { ready: false, reason: 'draining' } : { ready: true }),
    metricsHandler: telemetry.metricsHandler,
  });
  logger.info({ grpc: grpc.address, ops: ops.port, replicas: replicas.length }, 'scheduler listening');
  return {
    async stop() {
      draining = true;
      clearInterval(capacityTimer);
      checks.stop();
      await engineAgent?.close();
      unsubscribe();
      await grpc.close(5_000);
      await source.stop();
      await nc.drain().catch(() => undefined);
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

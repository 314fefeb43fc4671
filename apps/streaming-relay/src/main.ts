/**
 * The streaming relay service (split topology): runs generations on engine replicas over HTTP
 * (OpenAI-compatible: `apps/engine-llamacpp` or a hosted upstream; or Anthropic's Messages
 * API for an `anthropic` revision), streams deltas back
 * over gRPC (`weir.relay.v1`), meters tokens, cuts at deadlines, applies the cancellation grace
 * period, and publishes exactly one usage record per generation to NATS JetStream (buffered,
 * bounded, while NATS is away). Cancels fanned out on NATS (`weir.cancel`) stop the generation
 * it holds; a replica it cannot reach is reported on `weir.health`.
 *
 * Configuration: the control plane's signed snapshots when WEIR_CONFIG_PUBLIC_KEY(_FILE) is set
 * (the first one at start; later ones that change what this service holds apply after a
 * restart, as edits of the file do), else the file WEIR_CONFIG.
 *
 * Environment: WEIR_CONFIG, WEIR_CONFIG_PUBLIC_KEY(_FILE), WEIR_CONFIG_CACHE_DIR, NATS_URL, WEIR_NATS_NAMESPACE (default weir: deployments sharing a NATS server need different ones), HOST, GRPC_PORT (default 50054), OPS_PORT (default 9464),
 * RELAY_FIRST_TOKEN_TIMEOUT_MS (default 10000), RELAY_IDLE_TIMEOUT_MS (default 10000),
 * SHUTDOWN_GRACE_MS (default 10000), LOG_LEVEL, WEIR_TLS_CA / WEIR_TLS_CERT / WEIR_TLS_KEY (mutual TLS;
 * callers: `gateway`, or WEIR_TLS_ALLOWED_PEERS; engine replicas are reached with the certificate,
 * hosted upstreams without it: docs/security.md §8).
 */
import { createConfigSyncMetrics, openDataPlaneConfig, warnChangesNeedingRestart } from '@weir/config-sync';
import { type CancelMessage, type RelayHandle, type ReplicaHealthEvent, systemClock, tenantKeyOf } from '@weir/core';
import { createReplicaEngines, egressDispatcher, remoteReplicas, replicaUnreachable } from '@weir/engines';
import {
  cancelMessageCodec,
  connectNats,
  natsAuthFromEnv,
  createNatsTopic,
  createNatsSettlementJournal,
  ensureUsageStream,
  natsNames,
  replicaHealthEventCodec,
} from '@weir/messaging-nats';
import { envInt, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { createRelay } from '@weir/streaming';
import { createLogger, createModerationMetrics, createTelemetry } from '@weir/telemetry';
import { compileModerationPolicies, logEngineFailures, type ModerationPolicies } from '@weir/moderation';
import { createServiceTlsAgent, serviceTlsFromEnv } from '@weir/service-tls';
import { createRelayGrpcServer, installTracing, startGrpcServer } from '@weir/transport-grpc';

const env = readEnv({
  WEIR_CONFIG: envString(''),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  HOST: envString('127.0.0.1'),
  GRPC_PORT: envInt(50054, 0, 65535),
  OPS_PORT: envInt(9464, 0, 65535),
  RELAY_FIRST_TOKEN_TIMEOUT_MS: envInt(10_000, 1),
  RELAY_IDLE_TIMEOUT_MS: envInt(10_000, 1),
  SHUTDOWN_GRACE_MS: envInt(10_000, 0),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const logger = createLogger({ name: 'streaming-relay', level: env.LOG_LEVEL as 'info' });

runUntilSignal('streaming-relay', logger, async () => {
  installTracing();
  // Mutual TLS (docs/security.md §8): only gateways may call; engine replicas are reached with this certificate.
  const tls = serviceTlsFromEnv('relay', { defaultPeers: ['gateway'], logger });
  const engineAgent = tls ? createServiceTlsAgent(tls, { expectedServer: 'engine' }) : undefined;
  const telemetry = createTelemetry({ serviceName: 'weir-streaming-relay' });
  const nc = await connectNats({ servers: env.NATS_URL, name: 'weir-streaming-relay', auth: natsAuth, logger });
  const source = await openDataPlaneConfig({ env: process.env, service: 'relay', connectNats: async () => nc, logger, metrics: createConfigSyncMetrics(telemetry.meter), watchFile: true });
  const config = source.initial;
  warnChangesNeedingRestart(source, logger);

  // One adapter per replica (OpenAI-compatible, or Anthropic Messages for an anthropic
  // revision); the scheduler chose the replica.
  const replicas = remoteReplicas(config.revisions);
  const engines = createReplicaEngines(config.revisions, replicas, {
    firstTokenTimeoutMs: env.RELAY_FIRST_TOKEN_TIMEOUT_MS,
    idleTimeoutMs: env.RELAY_IDLE_TIMEOUT_MS,
    logger,
    ...(engineAgent ? { dispatcher: engineAgent } : {}),
  });
  const revisionOf = new Map(replicas.map((r) => [r.id, r.revisionId]));

  const names = natsNames(env.WEIR_NATS_NAMESPACE);
  await ensureUsageStream(nc, { stream: names.usageStream, subjects: [`${names.usageSubjectPrefix}.>`] });
  const settlements = createNatsSettlementJournal(nc, { logger, subjectPrefix: names.usageSubjectPrefix });
  const health = createNatsTopic<ReplicaHealthEvent>(nc, names.healthSubject, replicaHealthEventCodec);
  const cancels = createNatsTopic<CancelMessage>(nc, names.cancelSubject, cancelMessageCodec);

  // Output moderation: tenants' policies compiled when a snapshot is applied; a tenant without one costs a map lookup per generation.
  // Metrics of checks, plus a warn line per engine failure or timeout (engine, error class, status; never text).
  const moderationMetrics = logEngineFailures(createModerationMetrics(telemetry.meter), logger);
  const moderationDispatcher = egressDispatcher();
  let moderation: ModerationPolicies = compileModerationPolicies(config, { dispatcher: moderationDispatcher });
  source.onChange((next, version) => {
    try {
      moderation = compileModerationPolicies(next, { dispatcher: moderationDispatcher });
    } catch (err) {
      logger.error({ err, version }, 'moderation policies not applied; the previous ones stay');
    }
  });
  const relay = createRelay({
    engineFor: (id) => engines.get(id),
    settlements,
    clock: systemClock,
    cancelGraceMs: config.defaults.cancelGraceMs,
    moderation: {
      outputFor: (job) => (moderation.any ? moderation.of(tenantKeyOf(job.caller))?.output : undefined),
      observer: moderationMetrics,
      onCut: (_job, reason, categories) => moderationMetrics.onBlock('output', { reason, categories }),
    },
    onOutcome(job, outcome) {
      if (replicaUnreachable(outcome)) {
        health.publish({ replicaId: job.replicaId, revisionId: revisionOf.get(job.replicaId) ?? job.revision.id, state: 'unhealthy', reason: outcome.error.code, at: Date.now() });
      }
    },
  });
  // The generations this relay holds, for cancels fanned out from any gateway.
  const running = new Map<string, { tenantId: string; handle: RelayHandle }>();
  const tracked = {
    start(job: Parameters<typeof relay.start>[0]) {
      const handle = relay.start(job);
      running.set(job.generationId, { tenantId: tenantKeyOf(job.caller), handle });
      void handle.done.then(() => running.delete(job.generationId));
      return handle;
    },
  };
  const unsubscribe = cancels.subscribe((m) => {
    const held = running.get(m.generationId);
    // The same tenant by internal id (issue 14 §4): a later tenant with the same slug cannot stop it.
    if (held && held.tenantId === tenantKeyOf(m)) held.handle.stop(m.cause);
  });

  const binding = createRelayGrpcServer(tracked);
  const grpc = await startGrpcServer({ host: env.HOST, port: env.GRPC_PORT, services: [binding], ...(tls ? { tls } : {}) });
  let draining = false;
  const ops = await startOpsServer({
    host: env.HOST,
    port: env.OPS_PORT,
    readiness: () =>
      draining ? { ready: false, reason: 'draining' } : settlements.saturated() ? { ready: false, reason: 'usage backlog full' } : { ready: true },
    metricsHandler: telemetry.metricsHandler,
  });
  logger.info({ grpc: grpc.address, ops: ops.port, replicas: engines.size }, 'streaming relay listening');
  return {
    async stop() {
      draining = true;
      // In-flight streams get the grace period, then are cut (each still records its usage).
      await grpc.close(env.SHUTDOWN_GRACE_MS);
      const until = Date.now() + 5_000;
      while (running.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      unsubscribe();
      await settlements.close();
      for (const engine of engines.values()) await engine.close().catch(() => undefined);
      await engineAgent?.close();
      await source.stop();
      await nc.drain().catch(() => undefined);
      await ops.close();
      await telemetry.shutdown();
    },
  };
});

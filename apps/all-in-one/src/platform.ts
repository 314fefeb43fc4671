/**
 * The all-in-one composition: every data-plane service in one process, wired through
 * in-process ports — gateway, admission, scheduler, router, streaming relay, ledger and the
 * engines — on PGlite (or Postgres when `DATABASE_URL` is set). The split topology binds
 * the same libraries to gRPC and NATS adapters instead. A revision that lists `replicas` is
 * served by those engine servers over HTTP exactly as in the split (`@weir/engines`' remote
 * replicas: an adapter per replica, their `/tokenize` for prompt tokens, `/healthz` probes and
 * ejection of a replica the relay cannot reach); any other revision runs its engine in-process.
 */
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdmission, startReconciler } from '@weir/admission';
import { type AllInOneEnv, watchConfigFile, loadConfigFile, defaultConfig, replicaPlacement, resolveModelFile } from '@weir/config';
import { type BurnRateAlert, type EngineAdapter, type GenerationInput, type PlatformConfig, type RevisionSpec, type Topic, systemClock } from '@weir/core';
import { createEngine, createReplicaEngines, type LlamaCppEngine, remoteReplicas, replicaTokenCounter, replicaUnreachable, startReplicaHealthChecks } from '@weir/engines';
import { createGatewayApp, createGenerationPipeline, createMetricsObserver, type Gateway } from '@weir/gateway';
import { createBatchedUsageSink, createBurnRateMonitor, type BatchedUsageSink } from '@weir/ledger';
import { createInProcessTopic } from '@weir/messaging';
import { breakerOptionsFrom, breakerScopeOf, breakerTransitionRecorder, createBreakerRegistry, createRevisionHealth, createRouter, revisionProviderKey } from '@weir/routing';
import { createPoolScheduler, createSchedulerSampler, replicaSamples, schedulerMetricsObserver } from '@weir/scheduling';
import { bootstrapTenants, createApiKeyRepository, createCachedApiKeyStore, createPgIdempotencyStore, createUsageQueries, createPgAdmissionStore, createUsageRepository, expireOrphans, openDatabase } from '@weir/store-pg';
import { createRelay } from '@weir/streaming';
import { lockDataDir } from './data-dir-lock';
import { createLogger, createTelemetry, type WeirLogger } from '@weir/telemetry';


/** A running all-in-one. */
export interface Platform {
  /** Base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  port: number;
  /** The demo key when it was created or supplied on this start (shown once); else undefined. */
  demoApiKey?: string;
  /** Public prefix of the demo tenant's key, for the banner. */
  demoKeyPrefix?: string;
  /** The aliases being served. */
  aliases: string[];
  /** Problems that removed a revision at start (e.g. no model file), already logged. */
  warnings: string[];
  /** Burn-rate alerts (in-process), checked every `settings.burnRateIntervalMs`; subscribe to act on them. */
  burnRateAlerts: Topic<BurnRateAlert>;
  /** Graceful stop: not ready, drain streams within `graceMs`, flush usage, close engines and DB. */
  stop(graceMs?: number): Promise<void>;
}

/** Starts the all-in-one with validated settings. */
export async function startPlatform(settings: AllInOneEnv, logger: WeirLogger = createLogger({ name: 'weir', level: settings.logLevel })): Promise<Platform> {
  const warnings: string[] = [];
  const loaded = settings.configPath ? loadConfigFile(settings.configPath) : defaultConfig();
  mkdirSync(settings.dataDir, { recursive: true });
  // PGlite is single-process: a second all-in-one on the same directory would lose rows.
  const lock = settings.databaseUrl ? undefined : lockDataDir(settings.dataDir);

  // Engines: a revision that lists `replicas` is served by those engine servers over HTTP (as
  // in the split topology); any other runs one in-process engine replica. A revision whose
  // engine cannot start is removed with a loud warning that says how to fix it; the platform
  // still starts for the rest.
  const engines = new Map<string, EngineAdapter>();
  const servingRevisions: RevisionSpec[] = [];
  for (const revision of loaded.revisions) {
    if (revision.replicas && revision.replicas.length > 0) {
      servingRevisions.push(revision);
      logger.info({ revision: revision.id, replicas: revision.replicas.map((r) => r.id) }, 'revision served by its remote replicas');
      continue;
    }
    try {
      let spec = revision.engine;
      if (spec.kind === 'llamacpp') {
        const file = await resolveModelFile(spec, {
          // WEIR_MODEL_PATH stands in for the default model: revisions naming a path keep theirs.
          modelPathOverride: spec.modelPath ? undefined : settings.modelPath,
          cacheDir: settings.modelCacheDir,
          allowDownload: settings.allowModelDownload,
          logger,
        });
        if (!file.ok) throw new Error(file.reason);
        spec = { ...spec, modelPath: file.path };
        logger.info({ revision: revision.id, source: file.source }, 'model file resolved');
      }
      engines.set(revision.id, await createEngine(spec, { logger }));
      servingRevisions.push(revision);
    } catch (err) {
      const message = `revision ${revision.id} is not served: ${err instanceof Error ? err.message : String(err)}`;
      warnings.push(message);
      logger.error({ revision: revision.id }, message);
    }
  }
  // The remote replicas (one OpenAI-compatible adapter each) and the in-process engine replicas.
  const remote = remoteReplicas(servingRevisions, { configuredOnly: true });
  const remoteEngines = createReplicaEngines(servingRevisions, remote, { logger });
  const inProcess = servingRevisions.filter((r) => engines.has(r.id));
  const config = withServingRevisions(loaded, servingRevisions);

  const database = await openDatabase({ databaseUrl: settings.databaseUrl, dataDir: settings.databaseUrl ? undefined : `${settings.dataDir}/pg`, logger });
  const boot = await bootstrapTenants(database.db, config, settings.demoApiKey, logger);

  const telemetry = createTelemetry({ serviceName: 'weir-all-in-one' });
  const usageSink: BatchedUsageSink = createBatchedUsageSink(createUsageRepository(database.db), { logger });
  const apiKeys = createCachedApiKeyStore(createApiKeyRepository(database.db));
  const usageQueries = createUsageQueries(database.db);
  const burnRateAlerts = createInProcessTopic<BurnRateAlert>({ onHandlerError: (err) => logger.warn({ err }, 'burn-rate alert subscriber failed') });
  const burnRate = createBurnRateMonitor(
    { settings: config.defaults.admission, intervalMs: settings.burnRateIntervalMs },
    { spend: usageQueries, alerts: burnRateAlerts, metrics: telemetry.metrics, logger },
  );
  burnRate.start();
  // Admission on the ledger's database (ADR 0001); reconciles expired reservations every 10 s.
  const admission = createAdmission(
    { tenants: config.tenants },
    {
      store: createPgAdmissionStore(database.db),
      observer: {
        onDecision: (d) => telemetry.metrics.recordAdmissionDecision({ outcome: d.outcome, reason: d.reason }),
        onOverspend: (o) => {
          telemetry.metrics.recordAdmissionOverspend({ tenant: o.tenantId });
          logger.warn({ tenant: o.tenantId, app: o.appId, reservationId: o.reservationId, overspendNano: o.overspendNano }, 'settlement above the reserved worst case');
        },
        onReconciled: (r) => telemetry.metrics.recordReconciliation(r),
      },
    },
  );
  // On its own PGlite this process is the only one: whatever a previous run left running or
  // held (it was killed) is orphaned. Free those keys, and settle or release those
  // reservations now rather than after their deadline and grace.
  if (database.kind === 'pglite') {
    const orphans = await expireOrphans(database.db);
    if (orphans.claimsFreed + orphans.reservationsExpired > 0) {
      const report = await admission.reconcileReservations();
      logger.warn({ ...orphans, settledFromLedger: report.expiredSettled, released: report.expiredReleased }, 'the previous run stopped with requests in flight: their keys are freed and their reservations reconciled');
    }
  }
  const reconciler = startReconciler(admission, {
    onReport: () => void admission.countHeld().then((n) => telemetry.metrics.recordReservationsHeld(n), () => undefined),
    onError: (err) => logger.warn({ err }, 'reservation reconciliation failed; retrying next interval'),
  });
  const router = createRouter(config);
  // Routing changes in the configuration file (canary weights, pins, fallbacks, a rollback)
  // apply live; a change to what is served needs a restart (watchConfigFile says so).
  const configWatch = settings.configPath
    ? watchConfigFile(settings.configPath, {
        current: config,
        onUpdate: (next, needsRestart) => {
          router.update(next);
          logger.info({ aliases: next.aliases.map((a) => ({ alias: a.name, targets: a.targets })) }, 'configuration file changed: routing updated');
          if (needsRestart.length > 0) logger.warn({ sections: needsRestart }, 'configuration file changed outside routing: those changes apply only after a restart');
        },
        onRejected: (reason) => logger.warn({ reason }, 'configuration file changed but was not applied'),
      })
    : undefined;
  // The scheduler's replicas: each remote replica with its slots, pool and KV tokens; one
  // in-process engine replica per other revision, in the revision's pool (default
  // interactive), with its sequences and KV tokens (default sequences × context window).
  const scheduler = createPoolScheduler({
    replicas: [
      ...remote.map(({ id, revisionId, slots, pool, kvTokens }) => ({ id, revisionId, slots, pool, kvTokens })),
      ...inProcess.map((r) => {
        const slots = engines.get(r.id)?.capacity.slots ?? 1;
        return { id: replicaId(r), revisionId: r.id, slots, ...replicaPlacement(r, { slots }) };
      }),
    ],
    tenants: config.tenants,
    maxQueuePerReplica: config.defaults.maxQueuePerReplica,
    ...(config.defaults.scheduling ? { settings: config.defaults.scheduling } : {}),
    observer: schedulerMetricsObserver(telemetry.metrics, {
      onBrownout: (e) => logger[e.active ? 'warn' : 'info']({ pool: e.pool, revision: e.revisionId, capacityRatio: e.capacityRatio }, e.active ? 'pool lost capacity: brownout (batch shed, queue bounds shrunk)' : 'pool capacity back: brownout over'),
      onSlotLimit: (e) => logger.info({ replica: e.replicaId, limit: e.limit, slots: e.slots, p95TpotMs: Math.round(e.p95Ms) }, `TPOT target: replica batch ${e.change} to ${e.limit} of ${e.slots} sequences`),
    }),
    clock: systemClock,
  });
  const poolOfReplica = new Map(scheduler.replicas().map((r) => [r.id, r.pool ?? 'interactive']));
  const sampleScheduler = createSchedulerSampler();
  telemetry.observeScheduler(() => sampleScheduler(scheduler.stats()));
  // Remote replicas are probed on /healthz (out of rotation after failed probes, back when they
  // answer) and ejected at once when the relay cannot reach one; in-process ones are always up.
  const replicaHealth = startReplicaHealthChecks({ scheduler, replicas: remote, logger });
  telemetry.observeReplicas(() => replicaSamples(scheduler, replicaHealth.up));
  telemetry.observeEngines(() =>
    inProcess.flatMap((r) => {
      const engine = engines.get(r.id);
      if (engine?.kind !== 'llamacpp') return [];
      const stats = (engine as LlamaCppEngine).stats();
      return [{ replica: replicaId(r), revision: r.id, outputTokens: stats.generatedTokens, inputTokens: stats.promptTokens, activeSequences: stats.activeSequences }];
    }),
  );
  telemetry.observeQueues(() => scheduler.stats().queued);
  const enginesByReplica = new Map([...remoteEngines, ...inProcess.map((r) => [replicaId(r), engines.get(r.id) as EngineAdapter] as const)]);
  const relay = createRelay({
    engineFor: (id) => enginesByReplica.get(id),
    usageSink,
    clock: systemClock,
    cancelGraceMs: config.defaults.cancelGraceMs,
    onOutcome(job, outcome) {
      // A remote replica it could not reach leaves rotation now (ids of in-process ones are ignored).
      if (replicaUnreachable(outcome)) replicaHealth.reportUnreachable(job.replicaId);
    },
  });
  // Prompt tokens: a revision with replicas counts with their tokenizer (`/tokenize`), any other
  // with its in-process engine.
  const counters = new Map(
    servingRevisions.map((r) => {
      const engine = engines.get(r.id);
      return [r.id, replicaTokenCounter(r) ?? ((input: GenerationInput) => (engine as EngineAdapter).countInputTokens(input))] as const;
    }),
  );
  const providerOf = new Map(servingRevisions.map((r) => [r.id, engines.get(r.id)?.kind ?? r.engine.kind]));
  // Circuit breakers per revision and per external provider (`defaults.circuit_breaker`): a
  // revision whose own or provider breaker is open is skipped for its fallbacks before any work.
  const breakers = createBreakerRegistry({
    breaker: breakerOptionsFrom(config.defaults.circuitBreaker),
    onStateChange: breakerTransitionRecorder(telemetry.metrics, (key, change) =>
      logger[change.to === 'closed' ? 'info' : 'warn']({ breaker: key, scope: breakerScopeOf(key), from: change.from, to: change.to, reason: change.reason }, `circuit breaker ${change.to}`),
    ),
  });
  telemetry.observeCircuitBreakers(() => breakers.snapshot(Date.now()));
  const providerKeys = new Map(servingRevisions.map((r) => [r.id, revisionProviderKey(r)]));
  const pipeline = createGenerationPipeline({
    router,
    health: createRevisionHealth(breakers, (id) => providerKeys.get(id)),
    admission,
    scheduler,
    relay,
    countInputTokens: (revision, input) => (counters.get(revision.id) as (input: GenerationInput) => Promise<number>)(input),
    usageSink,
    tenants: new Map(config.tenants.map((t) => [t.id, t])),
    clock: systemClock,
    reservationGraceMs: config.defaults.admission.reservationGraceMs,
    ...(config.defaults.scheduling ? { pushbackMs: config.defaults.scheduling.pushbackMs } : {}),
    observer: createMetricsObserver(telemetry.metrics, (revisionId) => providerOf.get(revisionId) ?? 'unknown', (id) => poolOfReplica.get(id)),
  });
  const gateway: Gateway = createGatewayApp({
    pipeline,
    router,
    apiKeys,
    defaults: config.defaults,
    clock: systemClock,
    logger,
    idempotency: createPgIdempotencyStore(database.db),
    usage: usageQueries,
    metricsHandler: (req, res) => telemetry.metricsHandler(req, res),
    readiness: () =>
      config.aliases.length === 0
        ? { ready: false, reason: 'no model is being served (see the startup warnings)' }
        : usageSink.saturated()
          ? { ready: false, reason: 'usage ledger backlog is full' }
          : { ready: true },
  });

  const server: Server = createServer(gateway.app);
  // Long generations must not be cut by Node's defaults; keep-alive a little above common LBs.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.port, settings.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${settings.host.includes(':') ? `[${settings.host}]` : settings.host}:${port}`;

  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    demoApiKey: boot.demoApiKey,
    demoKeyPrefix: boot.demoKeyPrefix,
    aliases: config.aliases.map((a) => a.name),
    warnings,
    burnRateAlerts,
    stop(graceMs = settings.shutdownGraceMs) {
      stopping ??= (async () => {
        // Keep listening while draining: /healthz stays 200, /readyz and new generations 503.
        await gateway.drain(graceMs);
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        const result = await usageSink.close({ timeoutMs: 10_000 });
        if (result.unwritten > 0) logger.error({ unwritten: result.unwritten }, 'usage records could not be written before exit');
        configWatch?.stop();
        await burnRate.stop();
        await reconciler.stop();
        replicaHealth.stop();
        for (const engine of enginesByReplica.values()) await engine.close().catch(() => undefined);
        await telemetry.shutdown().catch(() => undefined);
        await database.close();
        lock?.release();
        server.closeAllConnections();
        await closed;
      })();
      return stopping;
    },
  };
}

function replicaId(revision: RevisionSpec): string {
  return `${revision.id}/0`;
}

/** The config without revisions that are not served, and without alias arms that point at them. */
function withServingRevisions(config: PlatformConfig, serving: RevisionSpec[]): PlatformConfig {
  const ids = new Set(serving.map((r) => r.id));
  const aliases = config.aliases
    .map((a) => ({ ...a, targets: a.targets.filter((t) => ids.has(t.revision)) }))
    .filter((a) => a.targets.some((t) => t.weight > 0));
  return { ...config, revisions: serving, aliases };
}

/**
 * The all-in-one composition: every data-plane service in one process, wired through
 * in-process ports — gateway, admission, scheduler, router, streaming relay, ledger and the
 * engines — on PGlite (or Postgres when `DATABASE_URL` is set). The split topology binds
 * the same libraries to gRPC and NATS adapters instead. A revision that lists `replicas` is
 * served by those engine servers over HTTP exactly as in the split (`@weir/engines`' remote
 * replicas: an adapter per replica, their `/tokenize` for prompt tokens, `/healthz` probes and
 * ejection of a replica the relay cannot reach); any other revision runs its engine in-process.
 *
 * Configuration takes the control plane's path, in-process (`config-plane.ts`): the store on
 * the same database, every change a signed snapshot in an in-memory bucket, verified by the
 * subscriber and applied to the router, the gateway's tenants and revisions, admission and the
 * revocation fast path; the admin API is served under `/admin/v1` on the same port.
 */
import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import path from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { createAdmission, createLeasedAdmission, createSessionBudgets, withStoreFaultsAsUnavailable } from '@weir/admission';
import { type AllInOneEnv, replicaPlacement, resolveModelFile } from '@weir/config';
import { type ConfigBucket, createConfigSyncMetrics } from '@weir/config-sync';
import { createAdminRouter } from '@weir/control-plane';
import { type BurnRateAlert, DEFAULT_CACHE, type EngineAdapter, type GenerationInput, type PlatformConfig, type RevisionSpec, type Topic, retiredInternalIds, systemClock, tenantKeyOf } from '@weir/core';
import { type CacheTier, createGatewayResponseCache, createInMemorySemanticStore, createSemanticCacheMetrics } from '@weir/cache';
import type { Dispatcher } from 'undici';
import { createEngine, createReplicaEngines, egressDispatcher, type LlamaCppEngine, remoteReplicas, replicaTokenCounter, replicaUnreachable, startReplicaHealthChecks } from '@weir/engines';
import {
  createCachedAnswerScreen,
  createGatewayApp,
  createGenerationPipeline,
  createJournaledIdempotencyStore,
  createLiveConfig,
  createContentPolicies,
  contentPolicyOptionsFromEnv,
  redactionMetricsObserver,
  createMetricsObserver,
  createRevocations,
  type Gateway,
  batchLimitsFromEnv,
  batchRunnerOptionsFromEnv,
  type BatchLimits,
  type BatchRunner,
  type BatchRunnerOptions,
  startBatchRunner,
} from '@weir/gateway';
import { createBurnRateMonitor } from '@weir/ledger';
import { createInProcessTopic } from '@weir/messaging';
import { breakerOptionsFrom, breakerScopeOf, breakerTransitionRecorder, createBreakerRegistry, createRevisionHealth, createRouter, revisionProviderKey } from '@weir/routing';
import { createPoolScheduler, createSchedulerSampler, replicaSamples, schedulerMetricsObserver } from '@weir/scheduling';
import {
  bootstrapTenants,
  createApiKeyRepository,
  createCachedApiKeyStore,
  createPgAdmissionStore,
  createPgBatchStore,
  createPgExactCacheTier,
  createPgIdempotencyStore,
  createPgLeaseStore,
  createPgSemanticStore,
  createPgSettlementApplier,
  createUsageQueries,
  expireOrphans,
  fsyncDirectoryTree,
  openDatabase,
  openFileSettlementJournal,
  preparePrivateDataDir,
  purgeExpiredSemanticEntries,
} from '@weir/store-pg';
import { type ClientLimits, createAuthThrottle, createClientGuard, DEFAULT_CLIENT_LIMITS, type OpsServer, type OpsSettings, startOpsServer } from '@weir/service-runtime';
import { createRelay } from '@weir/streaming';
import { createLogger, createModerationMetrics, createTelemetry, type WeirLogger } from '@weir/telemetry';
import { compileModerationPolicies, logEngineFailures } from '@weir/moderation';
import { type ConfigPlane, openConfigPlane } from './config-plane';
import { lockDataDir } from './data-dir-lock';
import { createSemanticCache } from './semantic-cache';
import { evalRoutes } from './eval-routes';

/** Settings of {@link startPlatform} beyond {@link AllInOneEnv}. */
export interface PlatformOptions {
  /** `WEIR_ADMIN_TOKEN`: a bootstrap admin token, registered (hashed) if new. Unset: one is minted on a store that never had one. Secret. */
  adminToken?: string;
  /** `WEIR_CONFIG_SIGNING_KEY_FILE`: the Ed25519 PKCS#8 PEM snapshot signing key. Unset: `<WEIR_DATA_DIR>/config-signing-key.pem` (created 0600). */
  signingKeyFile?: string;
  /** Heartbeat interval of the in-process control plane (ms). Default 5,000. */
  configHeartbeatMs?: number;
  /** Snapshot age beyond which requests get 503 `config_stale` (ms). Default 300,000. */
  configMaxStalenessMs?: number;
  /** Limits on the public listener's clients (`clientLimitsFromEnv`: timeouts, connection caps, trusted proxies, failed-auth throttle). Default {@link DEFAULT_CLIENT_LIMITS}. */
  clientLimits?: ClientLimits;
  /**
   * The ops listener (`/healthz`, `/readyz`, `/metrics`; `opsSettingsFromEnv` with `WEIR_OPS_PORT`,
   * `WEIR_OPS_HOST`, `WEIR_OPS_TOKEN`). Default 127.0.0.1:9464. `port: 'off'`: none, and `/metrics`
   * is served nowhere.
   */
  ops?: OpsSettings;
  /**
   * The undici dispatcher for the revisions' configured engine replicas (the mutual-TLS agent
   * when `WEIR_TLS_*` is set: docs/security.md §8); hosted upstreams never use it. Default:
   * undici's global dispatcher.
   */
  replicaDispatcher?: Dispatcher;
  /**
   * Extra response-cache tiers tried after the exact and semantic tiers (docs/caching.md), for
   * tenants whose policy turns them on. Default none.
   */
  cacheTiers?: readonly CacheTier[];
  /**
   * The Batch API (docs/batch.md): input limits (default `WEIR_BATCH_MAX_FILE_BYTES` /
   * `WEIR_BATCH_MAX_LINES`, else 200 MiB and 50,000 lines) and the in-process runner's settings
   * (concurrency, leases, polling, budget pause).
   */
  batch?: { limits?: Partial<BatchLimits>; runner?: Pick<BatchRunnerOptions, 'concurrency' | 'leaseMs' | 'pollMs' | 'budgetPauseMs' | 'maxAttempts'> };
}


/** A running all-in-one. */
export interface Platform {
  /** Base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  port: number;
  /** Base URL of the ops listener (`/metrics`, `/readyz`, `/healthz`), e.g. `http://127.0.0.1:9464`; undefined when it is off. */
  opsUrl?: string;
  /** The demo key when it was created or supplied on this start (shown once); else undefined. */
  demoApiKey?: string;
  /** Public prefix of the demo tenant's key, for the banner. */
  demoKeyPrefix?: string;
  /** An admin token minted on this start (the store had none and `WEIR_ADMIN_TOKEN` is unset): shown once; only its SHA-256 is stored. */
  adminToken?: string;
  /** The in-memory bucket the signed configuration travels through (tests write forged entries into it). */
  configBucket: ConfigBucket;
  /** The applied configuration snapshot's version and freshness (what `/readyz` reports). */
  configState(): { version?: number; ageMs: number; stale: boolean };
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
export async function startPlatform(settings: AllInOneEnv, logger: WeirLogger = createLogger({ name: 'weir', level: settings.logLevel }), options: PlatformOptions = {}): Promise<Platform> {
  const warnings: string[] = [];
  // Private to the service user whatever the umask (issue 14, part 6): 0700 directories, no
  // group/other bits on any file, including what an earlier start left.
  const tightened = preparePrivateDataDir(settings.dataDir);
  if (tightened > 0) logger.warn({ entries: tightened }, 'data directory entries were readable by other users; their permissions were tightened');
  // PGlite is single-process: a second all-in-one on the same directory would lose rows.
  const lock = settings.databaseUrl ? undefined : lockDataDir(settings.dataDir);

  const database = await openDatabase({ databaseUrl: settings.databaseUrl, dataDir: settings.databaseUrl ? undefined : `${settings.dataDir}/pg`, logger });
  const telemetry = createTelemetry({ serviceName: 'weir-all-in-one' });
  // The configuration: the store's latest snapshot (seeded on the first start), signed and
  // verified in-process like every later change.
  let configPlane: ConfigPlane;
  try {
    configPlane = await openConfigPlane({
      db: database.db,
      dataDir: settings.dataDir,
      configPath: settings.configPath,
      signingKeyFile: options.signingKeyFile,
      adminToken: options.adminToken,
      heartbeatMs: options.configHeartbeatMs,
      maxStalenessMs: options.configMaxStalenessMs,
      logger,
      metrics: createConfigSyncMetrics(telemetry.meter),
    });
  } catch (err) {
    await telemetry.shutdown().catch(() => undefined);
    await database.close();
    lock?.release();
    throw err;
  }
  const loaded = configPlane.initial;

  // Engines: a revision that lists `replicas` is served by those engine servers over HTTP (as
  // in the split topology); any other runs one in-process engine replica. A revision whose
  // engine cannot start is removed with a loud warning that says how to fix it; the platform
  // still starts for the rest.
  const engines = new Map<string, EngineAdapter>();
  const servingRevisions: RevisionSpec[] = [];
  /** In-process revisions as their engines were started (model files resolved), for eval replays. */
  const startedRevisions = new Map<string, RevisionSpec>();
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
        if (!file.ok) throw new ModelFileError(file.reason);
        spec = { ...spec, modelPath: file.path };
        logger.info({ revision: revision.id, source: file.source }, 'model file resolved');
      }
      engines.set(revision.id, await createEngine(spec, { logger, revision }));
      servingRevisions.push(revision);
      startedRevisions.set(revision.id, { ...revision, engine: spec });
    } catch (err) {
      // Weir's own reasons are quoted; a library's error text is not (it can quote the bytes of
      // whatever file a revision names, issue 14): a fixed text, and the error's class name.
      const reason = err instanceof ModelFileError ? err.message : `its engine failed to start (${err instanceof Error ? err.name : typeof err}); check the model file and the engine settings`;
      const message = `revision ${revision.id} is not served: ${reason}`;
      warnings.push(message);
      logger.error({ revision: revision.id }, message);
    }
  }
  // The remote replicas (one OpenAI-compatible adapter each) and the in-process engine replicas.
  const remote = remoteReplicas(servingRevisions, { configuredOnly: true });
  const replicaDispatch = options.replicaDispatcher ? { dispatcher: options.replicaDispatcher } : {};
  const remoteEngines = createReplicaEngines(servingRevisions, remote, { logger, ...replicaDispatch });
  const inProcess = servingRevisions.filter((r) => engines.has(r.id));
  const servedIds = new Set(servingRevisions.map((r) => r.id));
  const config = withServingRevisions(loaded, servedIds);
  const boot = await bootstrapTenants(database.db, config, settings.demoApiKey, logger);

  // The settlement journal (ADR 0002 §2): the relay appends every finished request's entry —
  // usage row, the leases it settles, a keyed request's result — before its terminal event; the
  // applier writes them to the database in group commits. Opening it replays what a crash left
  // unapplied and settles abandoned generations, before anything is leased or served.
  // On a shared Postgres, this data directory's journal and budget-lease holder are named after
  // it: the directory's lock (held by this process) proves their previous owner dead.
  const dataDirTag = `${hostname()}:${createHash('sha256').update(path.resolve(settings.dataDir)).digest('hex').slice(0, 12)}`;
  const journal = await openFileSettlementJournal(
    {
      dir: path.join(settings.dataDir, 'journal'),
      // One journal per process on a shared Postgres; the embedded PGlite has only this one.
      name: database.kind === 'pglite' ? 'local' : `all-in-one:${dataDirTag}`,
      syncIntervalMs: settings.journalSyncMs,
      progressIntervalMs: settings.journalProgressMs,
      // PGlite never fsyncs its commits: applied segments stay until its files are synced.
      ...(database.kind === 'pglite' ? { syncDatabase: () => fsyncDirectoryTree(path.join(settings.dataDir, 'pg')) } : {}),
      logger,
      onOverspend: (events) => {
        for (const e of events) logger.warn({ lease: e.leaseId, reason: e.reason, excessNano: e.excessNano, generations: e.generationIds.length }, 'settlement beyond its lease');
      },
    },
    { applier: createPgSettlementApplier(database.db) },
  );
  if (journal.recovery.replayed + journal.recovery.estimated + journal.recovery.interrupted > 0) logger.warn({ ...journal.recovery }, 'the previous run stopped with settlements unapplied or generations running: replayed and settled');
  const usageQueries = createUsageQueries(database.db);
  const burnRateAlerts = createInProcessTopic<BurnRateAlert>({ onHandlerError: (err) => logger.warn({ err }, 'burn-rate alert subscriber failed') });
  const burnRate = createBurnRateMonitor(
    { settings: config.defaults.admission, intervalMs: settings.burnRateIntervalMs },
    { spend: usageQueries, alerts: burnRateAlerts, metrics: telemetry.metrics, logger },
  );
  burnRate.start();
  // Reservations and idempotency claims a run before ADR 0002 left held in the database (the
  // per-request tables): on its own PGlite this process is the only one, so they are orphans;
  // release them now so the leases below see the whole budget.
  if (database.kind === 'pglite') {
    const orphans = await expireOrphans(database.db);
    if (orphans.reservationsExpired > 0) await createAdmission({ tenants: config.tenants }, { store: createPgAdmissionStore(database.db) }).reconcileReservations();
    if (orphans.claimsFreed + orphans.reservationsExpired > 0) logger.warn({ ...orphans }, 'per-request holds of an earlier version released');
  }
  // Admission decides in memory on budget leases (ADR 0002 §1): on its own PGlite this process
  // leases everything (exclusive: its predecessor's leases are reclaimed at start, after the
  // journal's replay above); on a shared Postgres it leases by demand like any holder, as the
  // holder named after its data directory, reclaiming that holder's leases at start (a previous
  // run killed with leases held: its journal was replayed above, so what it settled is applied).
  const holderId = `hld_aio_${dataDirTag}`;
  const admission = createLeasedAdmission(
    database.kind === 'pglite' ? { tenants: config.tenants, mode: 'exclusive' } : { tenants: config.tenants, mode: 'shared', holderId, predecessors: [holderId] },
    {
      store: createPgLeaseStore(database.db),
      observer: {
        onDecision: (d) => telemetry.metrics.recordAdmissionDecision({ outcome: d.outcome, reason: d.reason }),
        onOverspend: (o) => {
          telemetry.metrics.recordAdmissionOverspend({ tenant: o.tenantId });
          logger.warn({ tenant: o.tenantId, app: o.appId, reservationId: o.reservationId, overspendNano: o.overspendNano }, 'settlement above the reserved worst case');
        },
        onError: (err, operation) => logger.warn({ err, operation }, 'budget lease maintenance failed; retrying next pass'),
      },
    },
  );
  await admission.start();
  // Session budgets (`x-weir-session-id`, for apps that allow them): held and settled around admission, in memory.
  const sessionBudgets = createSessionBudgets({ tenants: config.tenants });
  const router = createRouter(config);
  // Tenants and revisions as the latest snapshot has them; revocations on their fast path.
  const live = createLiveConfig(config);
  // Moderation policies, compiled when a snapshot is applied (never per request); openai engines go through the egress-checked dispatcher.
  // Metrics of checks, plus a warn line per engine failure or timeout (engine, error class, status; never text).
  const moderationMetrics = logEngineFailures(createModerationMetrics(telemetry.meter), logger);
  const compileModeration = (c: PlatformConfig) => compileModerationPolicies(c, { dispatcher: egressDispatcher() });
  let moderation = compileModeration(config);
  // Content logging and upstream redaction per tenant: profiles compiled when a snapshot applies.
  const contentPolicies = createContentPolicies(config, {
    ...contentPolicyOptionsFromEnv(process.env),
    onInvalid: (tenant, problems) => logger.error({ tenant, problems }, 'redaction profile unusable: no content of this tenant is logged'),
  });
  const apiKeys = createCachedApiKeyStore(createApiKeyRepository(database.db));
  const revocations = createRevocations({ keyCache: apiKeys });
  revocations.applyConfig(config.tenants);
  let served = config;
  let latest = loaded;
  // Every verified snapshot (an admin change, or the file imported by `config-file`): routing,
  // tenants, deprecations, limits and budgets, tenant flags apply at once; what the engines,
  // replicas and scheduler were built from applies after a restart, and the log says so.
  // Set once the gateway exists: drops what it holds for internal ids a snapshot retires (issue 14 §4).
  const retiring: { drop?: (retired: ReadonlySet<string>) => number } = {};
  // The response cache (docs/caching.md): the exact tier in this process, or in Postgres
  // (`defaults.cache.exact_store`), then any other tier given; used only for tenants whose policy is on.
  const cacheDefaults = config.defaults.cache ?? DEFAULT_CACHE;
  const cacheFault = (tier: string, op: string, err: unknown) => logger.warn({ err, tier, op }, 'response cache fault (taken as a miss)');
  // The semantic tier (tried after an exact miss, for tenants whose policy turns it on): prompts
  // embedded by the embedding revisions' own engines, entries in this process or in Postgres
  // (`defaults.cache.semantic_store`, default as the exact store).
  const semanticOnPg = (cacheDefaults.semanticStore ?? cacheDefaults.exactStore) === 'postgres';
  const remoteEngineOfRevision = new Map<string, EngineAdapter>();
  for (const r of remote) if (!remoteEngineOfRevision.has(r.revisionId) && remoteEngines.has(r.id)) remoteEngineOfRevision.set(r.revisionId, remoteEngines.get(r.id) as EngineAdapter);
  const semanticCache = createSemanticCache({
    revisions: servingRevisions,
    engineFor: (id) => engines.get(id) ?? remoteEngineOfRevision.get(id),
    tenants: config.tenants,
    store: semanticOnPg ? createPgSemanticStore(database.db) : createInMemorySemanticStore(),
    metrics: createSemanticCacheMetrics(telemetry.meter),
    logger,
  });
  const responseCache = createGatewayResponseCache({
    settings: cacheDefaults,
    sharedExactTier: (onFault, bounds) => createPgExactCacheTier(database.db, { onFault, ...bounds }),
    moreTiers: [semanticCache.tier, ...(options.cacheTiers ?? [])],
    onFault: cacheFault,
  });
  const semanticPurge = semanticOnPg ? setInterval(() => void purgeExpiredSemanticEntries(database.db, Date.now()).catch((err: unknown) => cacheFault('semantic', 'purge', err)), 60_000) : undefined;
  semanticPurge?.unref();
  configPlane.onChange((next, version) => {
    const nextServed = withServingRevisions(next, servedIds);
    const retired = retiredInternalIds(served.tenants, nextServed.tenants);
    // A tenant whose cache policy was turned off, or that was deleted, leaves nothing cached.
    responseCache.applyTenants(served.tenants, nextServed.tenants);
    semanticCache.update(nextServed.tenants);
    router.update(nextServed);
    live.update(nextServed);
    try {
      moderation = compileModeration(nextServed);
    } catch (err) {
      // parseConfig checked the snapshot; a policy that still fails to compile keeps the previous policies.
      logger.error({ err, version }, 'moderation policies not applied; the previous ones stay');
    }
    contentPolicies.update(nextServed);
    admission.updateTenants(nextServed.tenants);
    sessionBudgets.updateTenants(nextServed.tenants);
    revocations.applyConfig(nextServed.tenants);
    if (retired.size > 0) logger.info({ version, retired: retired.size, dropped: retiring.drop?.(retired) ?? 0 }, 'deleted tenants or apps: their retained state dropped');
    const needsRestart = restartOnlyChanges({ before: served, after: nextServed, previousFull: latest, full: next, servedIds, scheduled: config.tenants });
    served = nextServed;
    latest = next;
    logger.info({ version, aliases: nextServed.aliases.map((a) => ({ alias: a.name, targets: a.targets })) }, 'configuration snapshot applied');
    if (needsRestart.length > 0) logger.warn({ version, changes: needsRestart }, 'configuration changes that apply only after a restart');
  });
  configPlane.onRevocation((r) => {
    revocations.apply(r);
    logger.info({ seq: r.seq, kind: r.kind, tenant: r.tenant_id, keyId: r.api_key_id }, 'revocation applied');
  });
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
  const replicaHealth = startReplicaHealthChecks({ scheduler, replicas: remote, logger, ...replicaDispatch });
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
    settlements: journal,
    clock: systemClock,
    cancelGraceMs: config.defaults.cancelGraceMs,
    moderation: {
      outputFor: (job) => (moderation.any ? moderation.of(tenantKeyOf(job.caller))?.output : undefined),
      observer: moderationMetrics,
      onCut: (_job, reason, categories) => moderationMetrics.onBlock('output', { reason, categories }),
    },
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
      return [r.id, replicaTokenCounter(r, replicaDispatch) ?? ((input: GenerationInput, limit?: number) => (engine as EngineAdapter).countInputTokens(input, limit))] as const;
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
    admission: withStoreFaultsAsUnavailable(sessionBudgets.wrap(admission), (err, call) => logger.warn({ err, call }, 'budget lease store unreachable')),
    scheduler,
    relay,
    countInputTokens: (revision, input, limit) => (counters.get(revision.id) as (input: GenerationInput, limit?: number) => Promise<number>)(input, limit),
    settlements: journal,
    cache: responseCache,
    // A hit of a tenant with output moderation is checked before it is served (docs/caching.md).
    screenCachedAnswer: createCachedAnswerScreen({ policies: () => moderation, observer: moderationMetrics, onBlock: (v) => moderationMetrics.onBlock('output', v) }),
    tenants: live.tenants,
    revisions: live.revisions,
    clock: systemClock,
    reservationGraceMs: config.defaults.admission.reservationGraceMs,
    ...(config.defaults.scheduling ? { pushbackMs: config.defaults.scheduling.pushbackMs } : {}),
    observer: createMetricsObserver(telemetry.metrics, (revisionId) => providerOf.get(revisionId) ?? 'unknown', (id) => poolOfReplica.get(id)),
  });
  const clients = createClientGuard(options.clientLimits ?? DEFAULT_CLIENT_LIMITS);
  // The Batch API: files, batches and items in the database; the runner runs items in-process.
  const batchStore = createPgBatchStore(database.db);
  const batchLimits: BatchLimits = { ...batchLimitsFromEnv(process.env, config.defaults.maxBodyBytes), ...options.batch?.limits };
  const batch: { runner?: BatchRunner } = {};
  const gateway: Gateway = createGatewayApp({
    batches: { store: batchStore, limits: batchLimits, onChange: () => batch.runner?.poke() },
    pipeline,
    router,
    apiKeys,
    revocations,
    catalog: live,
    moderation: { policies: () => moderation, observer: moderationMetrics, onBlock: (stage, v) => moderationMetrics.onBlock(stage, v) },
    contentPolicies,
    redaction: redactionMetricsObserver(telemetry.metrics),
    configState: () => configPlane.state(),
    defaults: config.defaults,
    clock: systemClock,
    logger,
    // Keys decided in memory and journaled; finished ones reach the database through the journal.
    idempotency: createJournaledIdempotencyStore({ journal, durable: createPgIdempotencyStore(database.db) }),
    usage: usageQueries,
    metricsHandler: (req, res) => telemetry.metricsHandler(req, res),
    clients,
    readiness: () =>
      served.aliases.length === 0
        ? { ready: false, reason: 'no model is being served (see the startup warnings)' }
        : journal.saturated()
          ? { ready: false, reason: 'usage ledger backlog is full' }
          : { ready: true },
  });
  retiring.drop = (retired) => gateway.registry.purgeTenants((key) => retired.has(key));

  // The admin API on the same port, outside the gateway: it stays reachable while the
  // configuration is stale (that is how an operator fixes it) and during a drain.
  const admin = express();
  admin.disable('x-powered-by');
  admin.set('etag', false);
  // Failed admin tokens are counted apart from failed API keys (the gateway's throttle stays
  // inactive, and so free on its hot path, when only the admin API is being guessed), under the
  // same client key: the peer, or the forwarded client behind a trusted proxy.
  const adminAuth = createAuthThrottle({ limit: clients.limits.authFailureLimit, windowMs: clients.limits.authFailureWindowMs });
  admin.use(
    '/admin/v1',
    createAdminRouter(
      {},
      { controlPlane: configPlane.controlPlane, logger, extraRoutes: [evalRoutes(configPlane.controlPlane, startedRevisions, logger)], authFailures: { throttle: adminAuth, clientKey: clients.clientKey } },
    ),
  );
  // The request and header timeouts bound receiving a request only: answers stream as long as they run.
  const server: Server = createServer(clients.serverOptions, (req, res) => {
    const url = req.url ?? '/';
    if (url === '/admin/v1' || url.startsWith('/admin/v1/') || url.startsWith('/admin/v1?')) admin(req, res);
    else gateway.app(req, res);
  });
  clients.attach(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.port, settings.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${settings.host.includes(':') ? `[${settings.host}]` : settings.host}:${port}`;
  // Metrics and readiness details for operators, on their own listener (docs/security.md §9).
  const opsSettings = options.ops ?? { host: '127.0.0.1', port: 9464 };
  let ops: OpsServer | undefined;
  if (opsSettings.port !== 'off') {
    try {
      ops = await startOpsServer({
        host: opsSettings.host,
        port: opsSettings.port,
        readiness: () => ({ ready: true }),
        handle: gateway.ops,
        ...(opsSettings.token ? { token: opsSettings.token } : {}),
      });
    } catch (err) {
      server.close();
      throw new Error(`the ops port ${opsSettings.host}:${opsSettings.port} cannot be opened (${err instanceof Error ? err.message : String(err)}): set WEIR_OPS_PORT to a free port, 0 for any, or off`);
    }
  }
  const opsUrl = ops ? `http://${opsSettings.host.includes(':') ? `[${opsSettings.host}]` : opsSettings.host}:${ops.port}` : undefined;

  configPlane.watchConfigFile();
  batch.runner = startBatchRunner({ store: batchStore, dispatch: (caller, request) => gateway.dispatch(caller, request), logger, limits: batchLimits, ...batchRunnerOptionsFromEnv(process.env), ...options.batch?.runner });

  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    ...(opsUrl ? { opsUrl } : {}),
    demoApiKey: boot.demoApiKey,
    demoKeyPrefix: boot.demoKeyPrefix,
    ...(configPlane.mintedAdminToken ? { adminToken: configPlane.mintedAdminToken } : {}),
    configBucket: configPlane.bucket,
    configState: () => configPlane.state(),
    aliases: config.aliases.map((a) => a.name),
    warnings,
    burnRateAlerts,
    stop(graceMs = settings.shutdownGraceMs) {
      stopping ??= (async () => {
        // Batch items in flight finish first (what is left runs again after a restart, never billed twice).
        await batch.runner?.stop(graceMs);
        // Keep listening while draining: /healthz stays 200, /readyz and new generations 503.
        await gateway.drain(graceMs);
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        // Every answer's settlement is in the journal already; apply what is pending (what is
        // left is applied at the next start, nothing is lost) and give back unused leases.
        const result = await journal.close({ timeoutMs: 10_000 });
        if (result.unapplied > 0) logger.warn({ unapplied: result.unapplied }, 'settlements not yet in the database at exit: they stay in the journal and are applied at the next start');
        responseCache.close();
        if (semanticPurge) clearInterval(semanticPurge);
        await admission.stop();
        await configPlane.stop();
        await burnRate.stop();
        replicaHealth.stop();
        for (const engine of enginesByReplica.values()) await engine.close().catch(() => undefined);
        await telemetry.shutdown().catch(() => undefined);
        await database.close();
        lock?.release();
        server.closeAllConnections();
        await closed;
        await ops?.close();
        clients.close();
        adminAuth.close();
      })();
      return stopping;
    },
  };
}

function replicaId(revision: RevisionSpec): string {
  return `${revision.id}/0`;
}

/** The config without revisions that are not served (by id), and without alias arms that point at them. */
function withServingRevisions(config: PlatformConfig, ids: ReadonlySet<string>): PlatformConfig {
  const aliases = config.aliases
    .map((a) => ({ ...a, targets: a.targets.filter((t) => ids.has(t.revision)) }))
    .filter((a) => a.targets.some((t) => t.weight > 0));
  return { ...config, revisions: config.revisions.filter((r) => ids.has(r.id)), aliases };
}

/** What {@link restartOnlyChanges} compares. */
export interface SnapshotTransition {
  /** The previous and the new snapshot's configuration, restricted to the revisions this process serves. */
  before: PlatformConfig;
  after: PlatformConfig;
  /** The previous and the new snapshot's whole configuration. */
  previousFull: PlatformConfig;
  full: PlatformConfig;
  /** The revisions whose engines this process built at start. */
  servedIds: ReadonlySet<string>;
  /** The tenants the scheduler was built with (the first snapshot's). */
  scheduled: PlatformConfig['tenants'];
}

/**
 * What a snapshot changed that this process applies only at its next start: revisions it newly
 * lists that this process does not serve (engines and replicas are built at start; one that
 * failed to start was reported then), the defaults, and tenants whose scheduling changed (see
 * {@link schedulingRestartTenants}). Empty when nothing needs a restart — e.g. a tenant created
 * or deleted with the default scheduling.
 */
export function restartOnlyChanges({ before, after, previousFull, full, servedIds, scheduled }: SnapshotTransition): string[] {
  const out: string[] = [];
  const listedBefore = new Set(previousFull.revisions.map((r) => r.id));
  const unserved = full.revisions.filter((r) => !servedIds.has(r.id) && !listedBefore.has(r.id)).map((r) => r.id);
  if (unserved.length > 0) out.push(`revisions not served by this process (restart to serve them): ${unserved.join(', ')}`);
  if (JSON.stringify(before.defaults) !== JSON.stringify(after.defaults)) out.push('defaults');
  const tenants = schedulingRestartTenants(before.tenants, after.tenants, scheduled);
  if (tenants.length > 0) {
    out.push(`tenants' scheduling (the scheduler is built at start; until a restart they keep what it was built with): ${tenants.join('; ')}`);
  }
  return out;
}

/**
 * Tenants whose scheduling weight or dedicated pool this snapshot changed to something the
 * scheduler does not run, each as `<id>: weight 2 (runs 1)` / `<id>: dedicated pool gold (runs in
 * the shared pools)`. The scheduler treats a tenant it was not built with as weight 1 in the shared
 * pools, so a new tenant with those defaults needs no restart, nor does a deleted one (admission
 * refuses its requests); a change back to what the scheduler runs needs none either.
 */
function schedulingRestartTenants(before: PlatformConfig['tenants'], after: PlatformConfig['tenants'], scheduled: PlatformConfig['tenants']): string[] {
  type Tenant = PlatformConfig['tenants'][number];
  const view = (t: Tenant | undefined) => ({ weight: t?.schedulingWeight ?? 1, pool: t?.dedicatedPool });
  const same = (a: ReturnType<typeof view>, b: ReturnType<typeof view>) => a.weight === b.weight && a.pool === b.pool;
  const previous = new Map(before.map((t) => [t.id, t]));
  const running = new Map(scheduled.map((t) => [t.id, t]));
  const out: string[] = [];
  for (const t of after) {
    const want = view(t);
    const runs = view(running.get(t.id));
    if (same(want, view(previous.get(t.id))) || same(want, runs)) continue;
    const parts: string[] = [];
    if (want.weight !== runs.weight) parts.push(`weight ${want.weight} (runs ${runs.weight})`);
    if (want.pool !== runs.pool) parts.push(`${want.pool ? `dedicated pool ${want.pool}` : 'shared pools'} (runs in ${runs.pool ? `dedicated pool ${runs.pool}` : 'the shared pools'})`);
    out.push(`${t.id}: ${parts.join(', ')}`);
  }
  return out;
}

/** A model file Weir refused or could not find; its message is Weir's own text (safe to show). */
class ModelFileError extends Error {}

/**
 * The gateway service (split topology): the HTTP edge — authentication, validation, the
 * public REST/SSE contracts, client-disconnect detection — with one round trip before the
 * relay (issue 13, item 6): routes are resolved in-process from the configuration snapshot
 * (a pure function of the snapshot and the sticky key, `createRouter`), and one `Admit` call to
 * an admission instance reserves and acquires the first slot (the instance asks the scheduler).
 * Settle and release go to the instance that reserved; retries and fallbacks before the first
 * token acquire from the scheduler directly. Settlement entries of requests that end before an
 * engine (deadline or cancel in the queue) or whose relay is lost mid-stream go to NATS
 * JetStream; cancels for generations held elsewhere are fanned out on NATS.
 *
 * The response cache (`defaults.cache`; docs/caching.md) is looked up after routing for tenants
 * whose policy is on: a hit takes no scheduler slot and reaches no relay — it is admitted by one
 * `Reserve` call (instead of `Admit`), its usage row (`cache_hit`) goes to JetStream like the
 * gateway's other own settlement entries, and it is settled at the instance that reserved.
 * The semantic tier (tenants whose `cache.semantic` is on) embeds prompts through the relay
 * (`internal` embedding jobs on the embedding revision's replicas: no slot, no usage row), within
 * `semantic_lookup_timeout_ms`; its entries live in Postgres, shared by the fleet, when
 * `defaults.cache.semantic_store` (else `exact_store`) is `postgres`, else in this process.
 *
 * Idempotency keys are claimed in Postgres under this process's holder id, kept alive by a
 * heartbeat (`key_holders`), so a retry on another gateway after this one died is answered from
 * the relay's settlement (the ledger writes the result) or told the generation was interrupted
 * within seconds. Results are written by the ledger only (`resultsFromJournal`).
 *
 * Configuration: signed snapshots from the control plane when WEIR_CONFIG_PUBLIC_KEY(_FILE) is
 * set (WEIR_CONFIG_CACHE_DIR keeps the last good one, WEIR_CONFIG_MAX_STALENESS_MS bounds its
 * age: beyond it requests get 503 config_stale), else the file WEIR_CONFIG.
 *
 * Environment: WEIR_CONFIG, DATABASE_URL, NATS_URL, WEIR_NATS_NAMESPACE (default weir: deployments sharing a NATS server need different ones), HOST, PORT (default 8080),
 * ADMISSION_ADDR (host:port, or a comma-separated list of admission instances: the first is
 * preferred, the others take over when it is unreachable), SCHEDULER_ADDR, RELAY_ADDR
 * (host:port), WEIR_DEMO_API_KEY (registered for
 * the demo tenant if set), SHUTDOWN_GRACE_MS (default 10000), GATEWAY_HOLDER_ID (default a
 * fresh id per start), LOG_LEVEL; the client limits of `clientLimitsFromEnv` (WEIR_HEADERS_TIMEOUT_MS,
 * WEIR_MAX_CONNECTIONS_PER_ADDRESS, WEIR_TRUSTED_PROXIES, …); the ops listener (`/metrics`,
 * `/readyz`, `/healthz`; never on PORT): OPS_PORT (default 9460, 0 = any free port, off = none),
 * OPS_HOST (default 127.0.0.1), WEIR_OPS_TOKEN; WEIR_TLS_CA / WEIR_TLS_CERT / WEIR_TLS_KEY (mutual TLS
 * to admission, scheduler, relay and the engines' /tokenize; the certificate names `gateway`:
 * docs/security.md §8).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createGatewayResponseCache, createInMemorySemanticStore, createSemanticCacheMetrics, createTenantSemanticCache } from '@weir/cache';
import { createConfigSyncMetrics, openDataPlaneConfig } from '@weir/config-sync';
import { type CancelMessage, DEFAULT_CACHE, type GenerationInput, newId, retiredInternalIds, SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS, systemClock } from '@weir/core';
import { adapterTokenCounter, countInputWith, egressDispatcher, remoteReplicas, replicaTokenCounter, utf8TokenUpperBound } from '@weir/engines';
import { createCachedAnswerScreen, createGatewayApp, relayEmbeddersOf, createGenerationPipeline, createContentPolicies, contentPolicyOptionsFromEnv, createLiveConfig, redactionMetricsObserver, createMetricsObserver, createRevocations } from '@weir/gateway';
import { cancelMessageCodec, connectNats, natsAuthFromEnv, createNatsTopic, createNatsSettlementJournal, ensureUsageStream, natsNames } from '@weir/messaging-nats';
import { clientLimitsFromEnv, createClientGuard, envInt, envRequired, envString, opsSettingsFromEnv, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import {
  bootstrapTenants,
  createApiKeyRepository,
  createCachedApiKeyStore,
  createPgExactCacheTier,
  createPgIdempotencyStore,
  createPgSemanticStore,
  createUsageQueries,
  createUsageRepository,
  openDatabase,
  purgeExpiredSemanticEntries,
  startKeyHolder,
} from '@weir/store-pg';
import { createLogger, createModerationMetrics, createTelemetry } from '@weir/telemetry';
import { compileModerationPolicies, logEngineFailures, type ModerationPolicies } from '@weir/moderation';
import { breakerOptionsFrom, breakerScopeOf, breakerTransitionRecorder, createBreakerRegistry, createRevisionHealth, createRouter, revisionProviderKey } from '@weir/routing';
import { createServiceTlsAgent, serviceTlsFromEnv } from '@weir/service-tls';
import { createAdmitGrpcClient, createRelayGrpcClient, createSchedulerGrpcClient, installTracing } from '@weir/transport-grpc';
import { loadTenantUids, withTenantUids } from './tenant-uids';

const env = readEnv({
  WEIR_CONFIG: envString(''),
  DATABASE_URL: envRequired('the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir'),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  HOST: envString('127.0.0.1'),
  PORT: envInt(8080, 0, 65535),
  ADMISSION_ADDR: envString('127.0.0.1:50052'),
  SCHEDULER_ADDR: envString('127.0.0.1:50053'),
  RELAY_ADDR: envString('127.0.0.1:50054'),
  WEIR_DEMO_API_KEY: envString(''),
  SHUTDOWN_GRACE_MS: envInt(10_000, 0),
  GATEWAY_HOLDER_ID: envString(''),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const clientLimits = clientLimitsFromEnv(process.env);
const opsSettings = opsSettingsFromEnv(process.env, { port: 'OPS_PORT', host: 'OPS_HOST', defaultPort: 9460 });
const logger = createLogger({ name: 'gateway', level: env.LOG_LEVEL as 'info' });

runUntilSignal('gateway', logger, async () => {
  installTracing();
  // Mutual TLS to admission, scheduler, relay and the engines' /tokenize (docs/security.md §8).
  const tls = serviceTlsFromEnv('gateway', { logger, serves: false });
  const engineAgent = tls ? createServiceTlsAgent(tls, { expectedServer: 'engine' }) : undefined;
  const telemetry = createTelemetry({ serviceName: 'weir-gateway' });
  const nc = await connectNats({ servers: env.NATS_URL, name: 'weir-gateway', auth: natsAuth, logger });
  const source = await openDataPlaneConfig({ env: process.env, service: 'gateway', connectNats: async () => nc, logger, metrics: createConfigSyncMetrics(telemetry.meter), watchFile: true });
  const config = source.initial;
  const database = await openDatabase({ databaseUrl: env.DATABASE_URL, logger });
  const boot = await bootstrapTenants(database.db, config, env.WEIR_DEMO_API_KEY || undefined, logger);
  if (boot.demoKeyPrefix) logger.info({ prefix: boot.demoKeyPrefix }, 'demo tenant key ready');

  const names = natsNames(env.WEIR_NATS_NAMESPACE);
  await ensureUsageStream(nc, { stream: names.usageStream, subjects: [`${names.usageSubjectPrefix}.>`] });
  const settlements = createNatsSettlementJournal(nc, { logger, subjectPrefix: names.usageSubjectPrefix });
  const cancelTopic = createNatsTopic<CancelMessage>(nc, names.cancelSubject, cancelMessageCodec);

  const onBackgroundError = (error: Error, call: string) => logger.warn({ err: error, call }, 'background gRPC call failed');
  // Routing in-process: the router's answer is a pure function of the snapshot and the sticky key.
  const router = createRouter(config);
  const admissionAddresses = env.ADMISSION_ADDR.split(',').map((a) => a.trim()).filter(Boolean);
  if (admissionAddresses.length === 0) throw new Error('ADMISSION_ADDR: give at least one host:port');
  const scheduler = createSchedulerGrpcClient({ address: env.SCHEDULER_ADDR, onBackgroundError, ...(tls ? { tls } : {}) });
  const admit = createAdmitGrpcClient({ addresses: admissionAddresses, scheduler, onBackgroundError, ...(tls ? { tls } : {}) });
  const holder = await startKeyHolder(database.db, {
    holder: env.GATEWAY_HOLDER_ID || newId('gw'),
    onError: (err) => logger.warn({ err }, 'key holder heartbeat failed; retrying'),
  });
  const relay = createRelayGrpcClient({ address: env.RELAY_ADDR, onBackgroundError, ...(tls ? { tls } : {}) });

  // Prompt tokens with the revision's own tokenizer (its replicas' /tokenize) where Weir
  // runs the model; a hosted upstream's as its adapter counts (the declared tokenizer, else the
  // byte bound of the prompt as the upstream receives it), like the all-in-one; else the
  // documented upper bound.
  const upperBound = (input: GenerationInput) => countInputWith(input, utf8TokenUpperBound);
  const counters = new Map(config.revisions.map((r) => [r.id, replicaTokenCounter(r, engineAgent ? { dispatcher: engineAgent } : {}) ?? adapterTokenCounter(r) ?? upperBound]));
  const providerOf = new Map(config.revisions.map((r) => [r.id, r.engine.kind]));
  const poolOf = new Map(remoteReplicas(config.revisions).map((x) => [x.id, x.pool]));
  const usageRepository = createUsageRepository(database.db);
  // Circuit breakers per revision and per external provider (per gateway process,
  // `defaults.circuit_breaker`): a revision whose own or provider breaker is open is skipped
  // for its fallbacks before any work.
  const breakers = createBreakerRegistry({
    breaker: breakerOptionsFrom(config.defaults.circuitBreaker),
    onStateChange: breakerTransitionRecorder(telemetry.metrics, (key, change) =>
      logger[change.to === 'closed' ? 'info' : 'warn']({ breaker: key, scope: breakerScopeOf(key), from: change.from, to: change.to, reason: change.reason }, `circuit breaker ${change.to}`),
    ),
  });
  telemetry.observeCircuitBreakers(() => breakers.snapshot(Date.now()));
  const providerKeys = new Map(config.revisions.map((r) => [r.id, revisionProviderKey(r)]));
  // Tenants and revisions as the latest configuration has them; revocations on their fast path.
  const live = createLiveConfig(config);
  // Input moderation and /v1/moderations: policies compiled when a snapshot is applied (output windows run on the relay).
  // Metrics of checks, plus a warn line per engine failure or timeout (engine, error class, status; never text).
  const moderationMetrics = logEngineFailures(createModerationMetrics(telemetry.meter), logger);
  const moderationDispatcher = egressDispatcher();
  let moderation: ModerationPolicies = compileModerationPolicies(config, { dispatcher: moderationDispatcher });
  // Content logging and upstream redaction per tenant: profiles compiled when a snapshot applies.
  const contentPolicies = createContentPolicies(config, {
    ...contentPolicyOptionsFromEnv(process.env),
    onInvalid: (tenant, problems) => logger.error({ tenant, problems }, 'redaction profile unusable: no content of this tenant is logged'),
  });
  const apiKeys = createCachedApiKeyStore(createApiKeyRepository(database.db));
  const revocations = createRevocations({ keyCache: apiKeys });
  revocations.applyConfig(config.tenants);
  // The response cache (docs/caching.md), for tenants whose policy is on: the exact tier in this
  // process, or the Postgres one every gateway of the fleet shares (`defaults.cache.exact_store`),
  // then the semantic tier (tried after an exact miss, for tenants whose policy turns it on):
  // prompts embedded through the relay on the embedding revisions' replicas (internal jobs: no
  // usage row, no scheduler slot, bounded by `semantic_lookup_timeout_ms`), entries in this process
  // or in the Postgres store the fleet shares (`defaults.cache.semantic_store`, default as the exact store).
  // A hit is admitted by one `Reserve` (no scheduler slot) and settled at the instance that reserved.
  const cacheDefaults = config.defaults.cache ?? DEFAULT_CACHE;
  const cacheFault = (tier: string, op: string, err: unknown) => logger.warn({ err, tier, op }, 'response cache fault (taken as a miss)');
  const semanticOnPg = (cacheDefaults.semanticStore ?? cacheDefaults.exactStore) === 'postgres';
  // Tenants of a file carry no internal id; callers do (from their key's row): key the cache's per-tenant state alike.
  const tenantUids = await loadTenantUids(database.db);
  const keyed = (tenants: typeof config.tenants) => withTenantUids(tenants, tenantUids);
  const semanticCache = createTenantSemanticCache({
    embedders: relayEmbeddersOf({
      relay,
      revisions: config.revisions,
      replicas: remoteReplicas(config.revisions),
      timeoutMs: cacheDefaults.semanticLookupTimeoutMs ?? SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS,
    }),
    tenants: keyed(config.tenants),
    store: semanticOnPg ? createPgSemanticStore(database.db) : createInMemorySemanticStore(),
    metrics: createSemanticCacheMetrics(telemetry.meter),
    logger,
  });
  const responseCache = createGatewayResponseCache({
    settings: cacheDefaults,
    sharedExactTier: (onFault, bounds) => createPgExactCacheTier(database.db, { onFault, ...bounds }),
    moreTiers: [semanticCache.tier],
    onFault: cacheFault,
  });
  const semanticPurge = semanticOnPg ? setInterval(() => void purgeExpiredSemanticEntries(database.db, Date.now()).catch((err: unknown) => cacheFault('semantic', 'purge', err)), 60_000) : undefined;
  semanticPurge?.unref();
  let applied = config;
  // Set once the gateway exists.
  const retiring: { drop?: (retired: ReadonlySet<string>) => number } = {};
  source.onChange((next, version) => {
    // Internal ids the snapshot retires (deleted tenants and apps, issue 14 §4): their retained generations go.
    const retired = retiredInternalIds(applied.tenants, next.tenants);
    // A tenant whose cache policy was turned off, or that was deleted, leaves nothing cached.
    responseCache.applyTenants(keyed(applied.tenants), keyed(next.tenants));
    semanticCache.update(keyed(next.tenants));
    applied = next;
    router.update(next);
    live.update(next);
    contentPolicies.update(next);
    revocations.applyConfig(next.tenants);
    try {
      moderation = compileModerationPolicies(next, { dispatcher: moderationDispatcher });
    } catch (err) {
      logger.error({ err, version }, 'moderation policies not applied; the previous ones stay');
    }
    const dropped = retired.size > 0 ? (retiring.drop?.(retired) ?? 0) : 0;
    logger.info({ version, ...(retired.size > 0 ? { retired: retired.size, dropped } : {}) }, 'configuration applied');
  });
  source.onRevocation((r) => {
    revocations.apply(r);
    logger.info({ seq: r.seq, kind: r.kind, tenant: r.tenant_id, keyId: r.api_key_id }, 'revocation applied');
  });
  const pipeline = createGenerationPipeline({
    router,
    health: createRevisionHealth(breakers, (id) => providerKeys.get(id)),
    admit,
    scheduler,
    relay,
    countInputTokens: (revision, input, limit) => (counters.get(revision.id) ?? upperBound)(input, limit),
    settlements,
    cache: responseCache,
    // A hit of a tenant with output moderation is checked before it is served (docs/caching.md).
    screenCachedAnswer: createCachedAnswerScreen({ policies: () => moderation, observer: moderationMetrics, onBlock: (v) => moderationMetrics.onBlock('output', v) }),
    tenants: live.tenants,
    revisions: live.revisions,
    clock: systemClock,
    reservationGraceMs: config.defaults.admission.reservationGraceMs,
    ...(config.defaults.scheduling ? { pushbackMs: config.defaults.scheduling.pushbackMs } : {}),
    observer: createMetricsObserver(telemetry.metrics, (revisionId) => providerOf.get(revisionId) ?? 'unknown', (replicaId) => poolOf.get(replicaId)),
  });
  const clients = createClientGuard(clientLimits);
  const gateway = createGatewayApp({
    pipeline,
    clients,
    router,
    apiKeys,
    revocations,
    catalog: live,
    moderation: { policies: () => moderation, observer: moderationMetrics, onBlock: (stage, v) => moderationMetrics.onBlock(stage, v) },
    contentPolicies,
    redaction: redactionMetricsObserver(telemetry.metrics),
    configState: () => source.state(),
    defaults: config.defaults,
    clock: systemClock,
    logger,
    // Claims name this process (a retry elsewhere can tell it died); the ledger writes results.
    idempotency: createPgIdempotencyStore(database.db, {
      holder: holder.holder,
      resultsFromJournal: true,
      interruptedRetentionMs: config.defaults.admission.idempotencyRetentionMs,
    }),
    metricsHandler: (req, res) => telemetry.metricsHandler(req, res),
    readiness: () => (settlements.saturated() ? { ready: false, reason: 'usage backlog full' } : { ready: true }),
    cancelTopic,
    usage: createUsageQueries(database.db),
    findFinished: async (tenantId, generationId) => {
      const record = await usageRepository.getUsage(generationId);
      return record?.tenantId === tenantId ? record : undefined;
    },
  });
  retiring.drop = (retired) => gateway.registry.purgeTenants((key) => retired.has(key));
  // The request and header timeouts bound receiving a request only: answers stream as long as they run.
  const server = createServer(clients.serverOptions, gateway.app);
  clients.attach(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(env.PORT, env.HOST, () => resolve());
  });
  const ops =
    opsSettings.port === 'off'
      ? undefined
      : await startOpsServer({ host: opsSettings.host, port: opsSettings.port, readiness: () => ({ ready: true }), handle: gateway.ops, ...(opsSettings.token ? { token: opsSettings.token } : {}) });
  logger.info({ port: (server.address() as AddressInfo).port, ...(ops ? { opsPort: ops.port } : {}) }, 'gateway listening');

  return {
    async stop() {
      // Keep listening while draining: /healthz stays 200, /readyz and new generations 503.
      await gateway.drain(env.SHUTDOWN_GRACE_MS);
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await settlements.close();
      responseCache.close();
      if (semanticPurge) clearInterval(semanticPurge);
      await source.stop();
      holder.stop();
      admit.close();
      scheduler.close();
      relay.close();
      await engineAgent?.close();
      await nc.drain().catch(() => undefined);
      await database.close();
      await telemetry.shutdown();
      server.closeAllConnections();
      await closed;
      await ops?.close();
      clients.close();
    },
  };
});

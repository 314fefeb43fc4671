/**
 * The server side of the hot-path harness (`hot-path.ts`): one child process serving either
 *
 * - `weir`: the all-in-one's request path without its database — the real gateway, pipeline,
 *   router, pool scheduler, relay, circuit breakers, metrics (OpenTelemetry + Prometheus
 *   exporter), the logger (pino at `info`, to this process's stdout; the access log at its
 *   default level) and the real OpenAI-compatible engine adapter, composed as
 *   `apps/all-in-one/src/platform.ts` composes them: admission on budget leases (ADR 0002 §1)
 *   over the in-memory lease store, the real file settlement journal (ADR 0002 §2: every
 *   request's entry appended before its terminal event, group fdatasync) in a temporary
 *   directory with an applier that discards the batches instead of writing the database,
 *   idempotency decided in memory and journaled, the API key behind the same cache as the
 *   all-in-one's (`createCachedApiKeyStore` over a map). That is the request path minus the
 *   database;
 * - `bare`: a `node:http` pass-through (body in, upstream call through an undici Pool, body
 *   piped back): the floor any Node gateway pays on this machine.
 *
 * Started by the driver with an IPC channel: `node --import tsx tools/bench/hot-path-server.ts
 * <weir|bare> <upstream origin> [leased|memory|stub]` (the admission: budget leases over the
 * in-memory lease store as the all-in-one will run it (ADR 0002, exclusive holder), the
 * per-request transactions of ADR 0001 on the in-memory admission store, or one that admits
 * everything at once). It sends `{type: 'ready', url}` once it
 * listens, and answers `{cmd: 'cpu'}` with `{type: 'cpu', user, system}` (µs, this process's
 * `process.cpuUsage()`), `{cmd: 'profile-start'}` / `{cmd: 'profile-stop', file}` (a V8 CPU
 * profile of exactly the window in between, written to `file`), `{cmd: 'alloc-start'}` /
 * `{cmd: 'alloc-stop', file}` (a sampling heap profile of the allocations in between, collected
 * ones included), `{cmd: 'heap'}` (used heap
 * after a full GC, when run with `--expose-gc`) and `{cmd: 'stop'}`.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { createAdmission, createInMemoryAdmissionStore, createInMemoryLeaseStore, createLeasedAdmission } from '@weir/admission';
import { createMemoryExactTier, createResponseCache } from '@weir/cache';
import { parseConfig } from '@weir/config';
import { type AdmissionService, type ApiKeyIdentity, type EngineAdapter, type GenerationInput, hashApiKey, systemClock } from '@weir/core';
import { createEngine } from '@weir/engines';
import {
  createGatewayApp,
  createGenerationPipeline,
  createJournaledIdempotencyStore,
  createLiveConfig,
  createMemoryIdempotencyStore,
  createMetricsObserver,
  createRevocations,
} from '@weir/gateway';
import { breakerOptionsFrom, createBreakerRegistry, createRevisionHealth, createRouter, revisionProviderKey } from '@weir/routing';
import { createPoolScheduler, createSchedulerSampler, replicaSamples, schedulerMetricsObserver } from '@weir/scheduling';
import { type ClientGuard, createClientGuard, DEFAULT_CLIENT_LIMITS } from '@weir/service-runtime';
import { createCachedApiKeyStore, openFileSettlementJournal } from '@weir/store-pg';
import { createRelay } from '@weir/streaming';
import { createLogger, createTelemetry } from '@weir/telemetry';

/** The harness's API key (tenant `bench`, app `bench-app`). */
export const HOT_PATH_KEY = 'wk_hotpath1_' + 'H'.repeat(43);
/** The alias the harness sends as `model`. */
export const HOT_PATH_ALIAS = 'bench';
const REVISION = 'bench-upstream@1';

/**
 * The configuration: one OpenAI-compatible revision on the mock, one tenant with a monthly
 * budget, tokens per minute and a concurrency limit (so every admission check runs), both far
 * above what a run spends.
 */
export function hotPathConfigYaml(upstream: string, cache = false): string {
  return `revisions:
  - id: ${REVISION}
    model: bench-upstream
    engine:
      kind: openai-compatible
      base_url: ${upstream}/v1
      upstream_model: bench-upstream
      api: chat
      max_concurrency: 256
      first_token_timeout_ms: 10000
      idle_timeout_ms: 10000
    context_window: 8192
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: 1.0, output_per_mtok: 4.0 }
aliases:
  - name: ${HOT_PATH_ALIAS}
    revision: ${REVISION}
tenants:
  - id: bench
    name: Bench
    apps: [{ id: bench-app, name: Bench app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 1024, tokens_per_minute: 100000000000, monthly_budget_usd: 1000000000 }
${cache ? '    cache: { exact: { enabled: true, ttl_ms: 600000 }, deterministic_only: false }\n' : ''}defaults:
  max_queue_per_replica: 1024
`;
}

/**
 * Admission that admits everything at once with a tokens window (`--admission stub`): the
 * request path's cost without admission's, which budget leases make an in-memory decision
 * (ADR 0002) that is not this harness's to measure.
 */
function stubAdmission(): AdmissionService {
  let n = 0;
  const rateLimits = { tokens: { limit: 100_000_000_000, remaining: 99_999_999_000, resetMs: 1 } };
  return {
    reserve: () => Promise.resolve({ ok: true, reservationId: `r${++n}`, rateLimits }),
    settle: () => Promise.resolve(),
    release: () => Promise.resolve(),
  };
}

/** The all-in-one's client limits (timeouts, connection caps, failed-auth throttle, stall limit), as `platform.ts` attaches them. */
const clients: ClientGuard = createClientGuard(DEFAULT_CLIENT_LIMITS);

async function startWeir(upstream: string, admissionKind: string, cache: string): Promise<(req: IncomingMessage, res: ServerResponse) => void> {
  const config = parseConfig(hotPathConfigYaml(upstream, cache !== 'off'), 'hot-path.yaml');
  const logger = createLogger({ name: 'weir', level: 'info' });
  const telemetry = createTelemetry({ serviceName: 'weir-hot-path' });
  const revision = config.revisions[0];
  const engine: EngineAdapter = await createEngine(revision.engine, { logger });
  const replicaId = `${revision.id}/0`;
  // The settlement journal as the all-in-one opens it; its applier drops the batches instead of
  // writing them to the database (what the harness leaves out).
  const journal = await openFileSettlementJournal(
    { dir: mkdtempSync(path.join(os.tmpdir(), 'weir-hot-path-journal-')), logger },
    {
      applier: {
        apply: async (batch) => ({ inserted: batch.items.length, duplicates: 0, idempotencyWritten: 0, overspends: [] }),
        position: async () => undefined,
      },
    },
  );
  const leased = admissionKind === 'leased' ? createLeasedAdmission({ tenants: config.tenants, mode: 'exclusive' }, { store: createInMemoryLeaseStore() }) : undefined;
  if (leased) await leased.start();
  const admission: AdmissionService = leased ?? (admissionKind === 'stub' ? stubAdmission() : createAdmission(
    { tenants: config.tenants },
    {
      store: createInMemoryAdmissionStore(),
      observer: { onDecision: (d) => telemetry.metrics.recordAdmissionDecision({ outcome: d.outcome, reason: d.reason }) },
    },
  ));
  const router = createRouter(config);
  const live = createLiveConfig(config);
  const identity: ApiKeyIdentity = { keyId: 'bench-key', prefix: 'hotpath1', tenantId: 'bench', appId: 'bench-app' };
  const keyHash = hashApiKey(HOT_PATH_KEY);
  const apiKeys = createCachedApiKeyStore({ findByHash: async (h) => (h === keyHash ? identity : undefined) });
  const revocations = createRevocations({ keyCache: apiKeys });
  revocations.applyConfig(config.tenants);
  const scheduler = createPoolScheduler({
    replicas: [{ id: replicaId, revisionId: revision.id, slots: engine.capacity.slots }],
    tenants: config.tenants,
    maxQueuePerReplica: config.defaults.maxQueuePerReplica,
    ...(config.defaults.scheduling ? { settings: config.defaults.scheduling } : {}),
    observer: schedulerMetricsObserver(telemetry.metrics),
    clock: systemClock,
  });
  const sampleScheduler = createSchedulerSampler();
  telemetry.observeScheduler(() => sampleScheduler(scheduler.stats()));
  telemetry.observeReplicas(() => replicaSamples(scheduler, () => true));
  telemetry.observeQueues(() => scheduler.stats().queued);
  const relay = createRelay({ engineFor: (id) => (id === replicaId ? engine : undefined), settlements: journal, clock: systemClock, cancelGraceMs: config.defaults.cancelGraceMs });
  const breakers = createBreakerRegistry({ breaker: breakerOptionsFrom(config.defaults.circuitBreaker) });
  telemetry.observeCircuitBreakers(() => breakers.snapshot(Date.now()));
  const providerKeys = new Map(config.revisions.map((r) => [r.id, revisionProviderKey(r)]));
  const pipeline = createGenerationPipeline({
    router,
    health: createRevisionHealth(breakers, (id) => providerKeys.get(id)),
    admission,
    scheduler,
    relay,
    countInputTokens: (_revision, input: GenerationInput) => engine.countInputTokens(input),
    settlements: journal,
    tenants: live.tenants,
    revisions: live.revisions,
    clock: systemClock,
    reservationGraceMs: config.defaults.admission.reservationGraceMs,
    observer: createMetricsObserver(telemetry.metrics, () => engine.kind),
    ...(cache !== 'off' ? { cache: createResponseCache({ tiers: [createMemoryExactTier()] }) } : {}),
  });
  const gateway = createGatewayApp({
    pipeline,
    router,
    apiKeys,
    revocations,
    catalog: live,
    configState: () => ({ ageMs: 0, stale: false, version: 1 }),
    defaults: config.defaults,
    clock: systemClock,
    logger,
    idempotency: createJournaledIdempotencyStore({ journal, durable: createMemoryIdempotencyStore() }),
    metricsHandler: (req, res) => telemetry.metricsHandler(req, res),
    clients,
    readiness: () => (journal.saturated() ? { ready: false, reason: 'usage ledger backlog is full' } : { ready: true }),
  });
  return gateway.app as unknown as (req: IncomingMessage, res: ServerResponse) => void;
}

function startBare(upstream: string): (req: IncomingMessage, res: ServerResponse) => void {
  const pool = new Pool(upstream, { connections: 256, keepAliveTimeout: 60_000 });
  return (req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      pool.request({ path: req.url ?? '/', method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.concat(parts) }).then(
        (up) => {
          res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
          up.body.on('data', (d: Buffer) => res.write(d));
          up.body.on('end', () => res.end());
          up.body.on('error', () => res.destroy());
        },
        () => {
          res.writeHead(502).end();
        },
      );
    });
  };
}

async function main(): Promise<void> {
  const [kind, upstream, admission = 'leased', cache = 'off'] = process.argv.slice(2);
  if ((kind !== 'weir' && kind !== 'bare') || !upstream) throw new Error('usage: hot-path-server.ts <weir|bare> <upstream origin>');
  const handler = kind === 'weir' ? await startWeir(upstream, admission, cache) : startBare(upstream);
  const server = createServer(clients.serverOptions, handler);
  clients.attach(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let session: Session | undefined;
  process.on('message', (msg: { cmd: string; file?: string }) => {
    void (async () => {
      switch (msg.cmd) {
        case 'cpu': {
          const { user, system } = process.cpuUsage();
          process.send?.({ type: 'cpu', user, system });
          return;
        }
        case 'profile-start':
          session = new Session();
          session.connect();
          await session.post('Profiler.enable');
          await session.post('Profiler.setSamplingInterval', { interval: 500 });
          await session.post('Profiler.start');
          process.send?.({ type: 'profiling' });
          return;
        case 'profile-stop': {
          const { profile } = await (session as Session).post('Profiler.stop');
          writeFileSync(msg.file as string, JSON.stringify(profile));
          (session as Session).disconnect();
          session = undefined;
          process.send?.({ type: 'profiled' });
          return;
        }
        case 'alloc-start':
          session = new Session();
          session.connect();
          await session.post('HeapProfiler.enable');
          // Every 4 KiB allocated, on average: the allocation sites of the hot path by bytes.
          await session.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
          process.send?.({ type: 'allocating' });
          return;
        case 'alloc-stop': {
          const { profile } = await (session as Session).post('HeapProfiler.stopSampling');
          writeFileSync(msg.file as string, JSON.stringify(profile));
          (session as Session).disconnect();
          session = undefined;
          process.send?.({ type: 'allocated' });
          return;
        }
        case 'heap': {
          (globalThis as { gc?: () => void }).gc?.();
          process.send?.({ type: 'heap', used: process.memoryUsage().heapUsed, rss: process.memoryUsage().rss });
          return;
        }
        case 'stop':
          server.closeAllConnections();
          server.close(() => process.exit(0));
          return;
      }
    })();
  });
  process.send?.({ type: 'ready', url });
}

if (process.argv[1] && /hot-path-server\.[cm]?[jt]s$/.test(process.argv[1])) {
  void main().catch((err: unknown) => {
    process.stderr.write(`hot-path-server failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
}

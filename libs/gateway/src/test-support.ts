/**
 * A gateway for the gateway's own specs: the real express app, pipeline, router, scheduler
 * and relay over a hand-written engine, with two tenants (`t`/app `a`, `u`/app `b`) and a key
 * for each. Specs choose the admission, the idempotency store and the usage reader.
 */
import { createRecordingSettlements } from '@weir/testing';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ClientGuard } from '@weir/service-runtime';
import {
  type AdmissionService,
  type AdmitService,
  DEFAULT_ADMISSION,
  type EngineAdapter,
  type IdempotencyStore,
  type MintedApiKey,
  type PlatformConfig,
  type RevisionSpec,
  type SchedulerService,
  type UsageReader,
  type UsageRecord,
  mintApiKey,
  tenantKeyOf,
} from '@weir/core';
import { createStaticRouter } from '@weir/routing';
import { createPoolScheduler, createSlotScheduler } from '@weir/scheduling';
import { createRelay, type Relay } from '@weir/streaming';
import type { ModerationPolicies } from '@weir/moderation';
import { createCachedAnswerScreen } from './cache-moderation';
import { createGatewayApp, type Gateway, type GatewayDeps, type GatewayLogger } from './app';
import { createLiveConfig, type LiveConfig } from './live-config';
import type { Revocations } from './revocations';
import { createGenerationPipeline, type PipelineObserver } from './pipeline';
import type { ResponseCache } from '@weir/cache';

/** The fake revision `fake@1` (context 64, output ≤ 32, default 8) with the given prices (USD per million tokens). */
export function fakeRevision(pricing: RevisionSpec['pricing'] = { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 }): RevisionSpec {
  return {
    id: 'fake@1',
    model: 'fake',
    engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'x', api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
    contextWindow: 64,
    maxOutputTokens: 32,
    defaultOutputTokens: 8,
    pricing,
  };
}

/** Two tenants (`t` with app `a`, `u` with app `b`, 8 concurrent each) on alias `fake` → `revision`. */
export function twoTenantConfig(revision: RevisionSpec = fakeRevision()): PlatformConfig {
  return {
    revisions: [revision],
    aliases: [{ name: 'fake', targets: [{ revision: revision.id, weight: 1 }] }],
    tenants: [
      { id: 't', name: 'T', apps: [{ id: 'a', name: 'A', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 8 } },
      { id: 'u', name: 'U', apps: [{ id: 'b', name: 'B', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 8 } },
    ],
    defaults: { cancelGraceMs: 20, maxBodyBytes: 4096, sseHeartbeatMs: 10_000, maxQueuePerReplica: 8, admission: { ...DEFAULT_ADMISSION } },
  };
}

/** What {@link startTestGateway} needs. */
export interface TestGatewayOptions {
  config: PlatformConfig;
  /** The engine of every revision, unless `engines` names another for it. */
  engine: EngineAdapter;
  /** Engines by revision id (each revision's one replica `r<i>` runs its engine). Default none. */
  engines?: Record<string, EngineAdapter>;
  admission: AdmissionService;
  idempotency?: IdempotencyStore;
  usage?: UsageReader;
  /** Client limits, attached to the server and handed to the gateway. Default none. */
  clients?: ClientGuard;
  /** Concurrent sequences of each revision's one replica (`r0`, `r1`, … in config order). Default 4. */
  slots?: number;
  /**
   * KV tokens of each revision's one replica: when set, the pool scheduler (which places by KV
   * tokens and refuses a request larger than every replica) replaces the slot scheduler. Default unset.
   */
  kvTokens?: number;
  /** Where usage records go (e.g. an array a usage reader aggregates). Default a new array. */
  records?: UsageRecord[];
  /** The snapshot's freshness (`GatewayDeps.configState`). Default none (always fresh). */
  configState?: GatewayDeps['configState'];
  /** The revocation fast path (`GatewayDeps.revocations`). Default none. */
  revocations?: Revocations;
  /** Wall clock (epoch ms) of the pipeline and the gateway (deprecation days). Default `Date.now`. */
  wallClock?: () => number;
  /** The gateway's logger. Default silent. */
  logger?: GatewayLogger;
  /**
   * Puts the relay behind a transport (e.g. a gRPC server and its client, as the split runs
   * it): given the in-process relay, returns the relay the pipeline calls. Default: in-process.
   */
  relayVia?: (relay: Relay) => Relay | Promise<Relay>;
  /**
   * Puts admission and the scheduler behind a transport, as the split runs them (an admission
   * gRPC server whose `Admit` acquires from a scheduler gRPC server, and the gateway's clients):
   * given the in-process admission and scheduler, returns the `admit` port the pipeline calls
   * and the scheduler it acquires retries from. The pipeline then gets no `admission` (as in the
   * split). Default: both in-process (`composeAdmit`).
   */
  admitVia?: (admission: AdmissionService, scheduler: SchedulerService) => Promise<{ admit: AdmitService; scheduler: SchedulerService }>;
  /** Compiled moderation policies for the relay (output) and the gateway (input, `/v1/moderations`). Default none. */
  moderation?: ModerationPolicies;
  /** Per-tenant content policies (`GatewayDeps.contentPolicies`). Default none. */
  contentPolicies?: GatewayDeps['contentPolicies'];
  /** The content log (`GatewayDeps.contentLog`). Default one over `logger`. */
  contentLog?: GatewayDeps['contentLog'];
  /** Redaction metrics (`GatewayDeps.redaction`). Default none. */
  redaction?: GatewayDeps['redaction'];
  /** The response cache's tiers (`GenerationPipelineDeps.cache`). Default none. */
  cache?: ResponseCache;
  /** The pipeline's observer (metrics). Default none. */
  observer?: PipelineObserver;
}

/** A running test gateway. */
export interface TestGateway {
  url: string;
  gateway: Gateway;
  /** Tenant `t`, app `a`. */
  key: MintedApiKey;
  /** Tenant `u`, app `b`. */
  otherKey: MintedApiKey;
  /** Every usage record the requests produced, in order. */
  records: UsageRecord[];
  /** The live tenants and revisions the pipeline and `/v1/models` read (update it to change them). */
  liveConfig: LiveConfig;
  /** POSTs JSON with tenant `t`'s key (or `apiKey`). */
  post(path: string, body: unknown, headers?: Record<string, string>, apiKey?: string): Promise<Response>;
  /** GETs with tenant `t`'s key (or `apiKey`). */
  get(path: string, headers?: Record<string, string>, apiKey?: string): Promise<Response>;
  close(): Promise<void>;
}

/** Starts a gateway on a free port (see the module comment). */
export async function startTestGateway(options: TestGatewayOptions): Promise<TestGateway> {
  const { config, engine } = options;
  const clock = { now: () => performance.now() };
  const key = mintApiKey();
  const otherKey = mintApiKey();
  const records: UsageRecord[] = options.records ?? [];
  const settlements = createRecordingSettlements(records);
  const engineOf = (revisionId: string | undefined) => (revisionId !== undefined ? options.engines?.[revisionId] : undefined) ?? engine;
  const router = createStaticRouter(config);
  const liveConfig = createLiveConfig(config);
  const replicas = config.revisions.map((r, i) => ({ id: `r${i}`, revisionId: r.id, slots: options.slots ?? 4 }));
  const scheduler: SchedulerService =
    options.kvTokens !== undefined
      ? createPoolScheduler({ replicas: replicas.map((r) => ({ ...r, kvTokens: options.kvTokens })), maxQueuePerReplica: config.defaults.maxQueuePerReplica, clock })
      : createSlotScheduler({ replicas, maxQueuePerReplica: config.defaults.maxQueuePerReplica, clock });
  const remote = options.admitVia ? await options.admitVia(options.admission, scheduler) : undefined;
  const pipeline = createGenerationPipeline({
    router,
    ...(remote ? { admit: remote.admit, scheduler: remote.scheduler } : { admission: options.admission, scheduler }),
    relay: await (options.relayVia ?? ((r: Relay) => r))(
      createRelay({
        engineFor: (replicaId) => engineOf(config.revisions[Number(replicaId.slice(1))]?.id),
        settlements,
        clock,
        cancelGraceMs: config.defaults.cancelGraceMs,
        ...(options.moderation ? { moderation: { outputFor: (job) => options.moderation?.of(tenantKeyOf(job.caller))?.output } } : {}),
      }),
    ),
    countInputTokens: (rev, input, limit) => engineOf(rev.id).countInputTokens(input, limit),
    settlements,
    tenants: liveConfig.tenants,
    revisions: liveConfig.revisions,
    ...(options.wallClock ? { wallClock: options.wallClock } : {}),
    ...(options.cache ? { cache: options.cache } : {}),
    ...(options.cache && options.moderation ? { screenCachedAnswer: createCachedAnswerScreen({ policies: () => options.moderation as ModerationPolicies }) } : {}),
    ...(options.observer ? { observer: options.observer } : {}),
    clock,
  });
  const gateway = createGatewayApp({
    pipeline,
    router,
    apiKeys: {
      findByHash: async (h) =>
        h === key.sha256
          ? { keyId: 'k', prefix: key.prefix, tenantId: 't', appId: 'a' }
          : h === otherKey.sha256
            ? { keyId: 'k2', prefix: otherKey.prefix, tenantId: 'u', appId: 'b' }
            : undefined,
    },
    defaults: config.defaults,
    clock,
    logger: options.logger ?? { info() {}, warn() {}, error() {} },
    catalog: liveConfig,
    ...(options.configState ? { configState: options.configState } : {}),
    ...(options.revocations ? { revocations: options.revocations } : {}),
    ...(options.wallClock ? { wallClock: options.wallClock } : {}),
    ...(options.idempotency ? { idempotency: options.idempotency } : {}),
    ...(options.usage ? { usage: options.usage } : {}),
    ...(options.clients ? { clients: options.clients } : {}),
    ...(options.moderation ? { moderation: { policies: () => options.moderation as ModerationPolicies } } : {}),
    ...(options.contentPolicies ? { contentPolicies: options.contentPolicies } : {}),
    ...(options.contentLog ? { contentLog: options.contentLog } : {}),
    ...(options.redaction ? { redaction: options.redaction } : {}),
  });
  const server: Server = createServer(options.clients?.serverOptions ?? {}, gateway.app);
  options.clients?.attach(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const auth = (apiKey: string) => ({ Authorization: `Bearer ${apiKey}` });
  return {
    url,
    gateway,
    key,
    otherKey,
    records,
    liveConfig,
    post: (path, body, headers = {}, apiKey = key.plaintext) =>
      fetch(`${url}${path}`, { method: 'POST', headers: { ...auth(apiKey), 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) }),
    get: (path, headers = {}, apiKey = key.plaintext) => fetch(`${url}${path}`, { headers: { ...auth(apiKey), ...headers } }),
    async close() {
      options.clients?.close();
      gateway.registry.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

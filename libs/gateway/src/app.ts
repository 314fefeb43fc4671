/**
 * The gateway's public API on its lean HTTP edge (`edge.ts`, `node:http`): authentication,
 * validation, the public contracts of ARCHITECTURE.md §3/§8, SSE writing and client-disconnect
 * detection. Everything behind the edge goes through the {@link GenerationPipeline}.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type AliasSpec,
  type ApiKeyStore,
  type ApiRoute,
  type CancelMessage,
  type Caller,
  tenantKeyOf,
  type Clock,
  type EmbeddingInput,
  type GenerationInput,
  type GenerationOutcome,
  type IdempotencyClaim,
  type IdempotencyStore,
  type RetainedResult,
  type RetainSpec,
  type PlatformDefaults,
  type RelayEvent,
  type RouterService,
  type SamplingParams,
  type ToolCallDelta,
  type Topic,
  type UsageReader,
  type UsageRecord,
  WeirError,
  hashApiKey,
  newId,
  parseApiKey,
  toWeirError,
} from '@weir/core';
import {
  SSE_DONE,
  accumulateToolCalls,
  contentChunkJson,
  formatSseJson,
  chatCompletion,
  chatCompletionChunk,
  formatSseEvent,
  openAiError,
  type OpenAiResponseMeta,
  HTTP_ERRORS,
  type RelayHandle,
  type WeirEndData,
  textCompletion,
  textCompletionChunk,
  toOpenAiFinishReason,
  toOpenAiToolCallChunks,
  toOpenAiUsage,
  screenOutputSchema,
  interruptedMessage,
} from '@weir/streaming';

import type { ClientGuard } from '@weir/service-runtime';
import { type CacheRoute, cacheDirectivesOf, keyMaterialOf, TEMPLATE_HEADER, templateOf } from '@weir/cache';
import { type ModerationObserver, type ModerationPolicies, type ModerationVerdict, type StagePlan, runCheck } from '@weir/moderation';
import { type CostMeter, createCostMeter } from './cost-report';
import { type AuthedRequest, createEdgeRouter, type EdgeRequest, type EdgeRoute, edgeRequest, readJsonBody, sendJson } from './edge';
import { createGenerationRegistry, type GenerationRegistry, type GenerationRegistryOptions, statusOf, type TrackedGeneration } from './generation-registry';
import { createMemoryIdempotencyStore, requestBodySha256 } from './idempotency';
import { AdmissionRejectedError, type CacheInputs, type GenerationPipeline, INPUT_FLAGGED_ABORT, type ParamNames } from './pipeline';
import { moderationsHandler } from './moderations-route';
import { rateLimitHeaders } from './rate-limit-headers';
import { blockedBeforeOutput, createTranscript, firstEventOrThrow as waitFirstEvent, pumpInto, readTranscript, type Transcript, type TranscriptEvent } from './transcript';
import {
  CHAT_COMPLETIONS_FIELDS,
  CHAT_UNSUPPORTED_HINTS,
  chatCompletionsBody,
  COMPLETIONS_FIELDS,
  completionsBody,
  generationsBody,
  parseBody,
  priorityOf,
  refuseUnknownFields,
  toChatInput,
  toStopList,
  useCaseOf,
} from './schemas';
import { type ChatTools, chatToolsOf, toolsCheck } from './tools';
import { usageHandler } from './usage-route';
import { aliasDeprecation, countdownHeaders, countdownOf, createDeprecationAnnouncer } from './deprecation';
import type { LiveConfig } from './live-config';
import type { Revocations } from './revocations';
import { checkThenCompile, registerResponsesRoute, schemaCheck } from './responses-route';
import { modelOrUseCase, sessionIdOf } from './use-cases';
import { registerEmbeddingsRoute } from './embeddings-route';
import { registerMessagesRoute } from './messages-route';
import { openSse, type SseWriter } from './sse-writer';
import { type ContentPolicies, redactInput, type TenantContentPolicy } from './content-policy';
import { type ContentLog, createContentLog, type RedactionObserver } from './content-log';
import { dispatchInternal, type InternalRequest, type InternalResponse } from './internal-dispatch';
import { type BatchApi, registerBatchRoutes } from './batch/routes';

/** A minimal structured logger (pino satisfies it). Never pass prompt or output text. */
export interface GatewayLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** For the access log at `debug` (see {@link GatewayDeps.accessLog}); without it, debug lines are not written. */
  debug?(obj: object, msg?: string): void;
  /** Whether lines at `level` are written (pino's); without it, every level is taken as enabled. */
  isLevelEnabled?(level: string): boolean;
}

/** Dependencies of {@link createGatewayApp}. */
export interface GatewayDeps {
  pipeline: GenerationPipeline;
  router: RouterService;
  /** Key lookup by SHA-256 (put a cache in front: this runs on every request). */
  apiKeys: ApiKeyStore;
  defaults: PlatformDefaults;
  clock: Clock;
  logger: GatewayLogger;
  /**
   * Prometheus text for `GET /metrics` on the ops handler ({@link Gateway.ops}) only: the public
   * listener never serves it (per-tenant series are for operators, docs/security.md §9).
   */
  metricsHandler?: (req: IncomingMessage, res: ServerResponse) => void;
  /**
   * The public listener's client limits (`createClientGuard`, already attached to the server):
   * the per-client cap on requests in flight behind a trusted proxy, the failed-authentication
   * throttle, and the stream stall limit. Default none (no throttle; streams stall for 60 s).
   */
  clients?: ClientGuard;
  /**
   * The level of the access log (one line per request: method, route, status, ms, tenant, app —
   * never bodies, keys or text). Default `debug`: off at the default `info`, because a line per
   * request costs a log write on the request path, and the usage ledger already records every
   * generation. `info` writes them at the default level.
   */
  accessLog?: 'info' | 'debug';
  /** Retention of finished generations (`GET /v1/generations/{id}`, `/events`, replays): see {@link GenerationRegistryOptions}. */
  registry?: GenerationRegistryOptions;
  /** Readiness beyond draining (e.g. the usage queue is saturated). */
  readiness?: () => { ready: boolean; reason?: string };
  /**
   * Split topology: a cancel for a generation this gateway does not hold is fanned out here,
   * so the relay holding the stream stops it (ARCHITECTURE.md §7, cancellation fan-out).
   */
  cancelTopic?: Topic<CancelMessage>;
  /** Split topology: a finished generation's record (from the ledger), for GET and cancel on any gateway. */
  findFinished?: (tenantId: string, generationId: string) => Promise<UsageRecord | undefined>;
  /**
   * Moderation (issue 15): tenants' compiled policies, replaced when a snapshot is applied (read
   * once per request: a tenant without a policy costs one map lookup), the metrics of checks,
   * and `POST /v1/moderations`. Default none: no moderation, and `/v1/moderations` answers with
   * the tenant's rules only when it has a policy (else 400).
   */
  moderation?: GatewayModeration;
  /** The ledger's aggregates for `GET /v1/usage` (the route answers 404 without it). */
  usage?: UsageReader;
  /**
   * Idempotency keys and retained results, shared by every gateway of a deployment (the
   * Postgres store). Default: an in-memory store, right only for a single gateway.
   */
  idempotency?: IdempotencyStore;
  /** How often expired idempotency keys are purged (ms). Default 60,000. */
  idempotencyPurgeMs?: number;
  /**
   * The configuration snapshot's freshness (`@weir/config-sync`), read on every request. While
   * `stale`, every route but `/healthz` and `/readyz` answers 503 `config_stale`
   * (fail closed: the snapshot's allow decisions are too old to trust) and `/readyz` is not
   * ready with reason `config_stale`; `/readyz` always reports `config_version` and
   * `config_age_ms`. `ageMs`: now − the snapshot's (or its latest heartbeat's) issue time;
   * `maxAgeMs`: the configured maximum, quoted in the error; `reason`: an operator detail for
   * `/readyz` (never sent to API clients). Default: always fresh (a file configuration).
   */
  configState?: () => ConfigState;
  /** The revocation fast path (`createRevocations`), checked before the key lookup. Default none. */
  revocations?: Revocations;
  /**
   * The live tenants and revisions (`createLiveConfig`), for the `deprecation` field of
   * `/v1/models` entries. Default none (no such field).
   */
  catalog?: Pick<LiveConfig, 'tenants' | 'revisions'>;
  /** Wall clock (epoch ms) for deprecation countdowns (UTC days). Default `Date.now`. */
  wallClock?: () => number;
  /**
   * Per-tenant content policies (`createContentPolicies`, updated with each snapshot): content
   * logging after redaction, and prompts redacted before they go upstream. Default none: no
   * prompt or output text is ever logged, and prompts go upstream as sent.
   */
  contentPolicies?: ContentPolicies;
  /** Where content lines go. Default `createContentLog` over {@link logger}. */
  contentLog?: ContentLog;
  /** Redaction metrics (`weir_redactions_total{type}`, `weir_redaction_failures_total`). Default none. */
  redaction?: RedactionObserver;
  /** OpenAI's Files and Batch API (docs/batch.md) on this store; without it, `/v1/files` and `/v1/batches` are 404. */
  batches?: BatchApi;
}

/** The freshness of the configuration snapshot a service runs on (see {@link GatewayDeps.configState}). */
export interface ConfigState {
  /** Age of the snapshot (ms). */
  ageMs: number;
  /** True beyond the configured maximum age: refuse requests. */
  stale: boolean;
  /** The applied snapshot's version; absent for a file configuration. */
  version?: number;
  /** The configured maximum age (ms), quoted in the `config_stale` message when given. */
  maxAgeMs?: number;
  /** Why it is stale (e.g. `nats unreachable`), for `/readyz` only. */
  reason?: string;
}

/** The schema of `response_format: {type: 'json_object'}`: any JSON object. */
const JSON_OBJECT_SCHEMA: object = Object.freeze({ type: 'object' });

/** `Retry-After` of a `config_stale` refusal (ms): about one control-plane heartbeat. */
const CONFIG_STALE_RETRY_MS = 5_000;

/**
 * A generation being answered: one started for this request, or the original generation of
 * an earlier request with the same idempotency key (a replay: no new reservation or charge).
 */
interface Answer {
  generationId: string;
  requestId: string;
  modelRevision: string;
  /** When the generation's response was created (Unix s), OpenAI's `created`. */
  createdS: number;
  transcript: Transcript;
  replayed: boolean;
  /** It ended in the queue (deadline or cancel) and never reached an engine. */
  endedInQueue: boolean;
  /** Reports cost and overhead (`x-weir-cost-usd`, …); absent on a replay, which bills nothing new. */
  cost?: CostMeter;
  /** Input tokens counted at admission (absent on a replay): Anthropic's `message_start` reports them. */
  inputTokens?: number;
}

/** The gateway: its HTTP handler plus lifecycle controls. */
export interface Gateway {
  /** The request handler of the public API: `createServer(gateway.app)`. */
  app: (req: IncomingMessage, res: ServerResponse) => void;
  /**
   * The operator endpoints, for an ops listener (`startOpsServer`'s `handle`): answers `GET`/`HEAD`
   * `/readyz` and `/metrics` (when a `metricsHandler` is given) and returns true; false for any
   * other request.
   */
  ops: (req: IncomingMessage, res: ServerResponse) => boolean;
  registry: GenerationRegistry;
  /**
   * Runs a request in-process as `caller` (already authenticated: its key and tenant are still
   * checked against revocations) through the same route as one from the network: validation,
   * moderation, idempotency, admission, scheduling and the ledger. Resolves with the answer
   * (errors as their HTTP status and OpenAI body); the batch runner's way in (docs/batch.md).
   */
  dispatch(caller: Caller, request: InternalRequest): Promise<InternalResponse>;
  /** Stops admitting (503 `shutting_down`, not ready) and waits up to `graceMs` for in-flight generations; then stops the rest (billed as cancelled). */
  drain(graceMs: number): Promise<void>;
}

type Authed = AuthedRequest;
/** A route handler; errors it throws (or rejects with) are answered by the edge's error handler. */
type Handler = (req: Authed, res: ServerResponse) => Promise<void> | void;
/** Answers an error on a route whose wire has its own error shape (Anthropic's Messages API); default {@link sendError}. */
export type ErrorWriter = (res: ServerResponse, error: WeirError, req: EdgeRequest) => void;
/** A route: `auth` (default true) authenticates first; `post` routes also refuse while draining and read the JSON body. */
type Route = EdgeRoute<{ run: Handler; auth: boolean; body: boolean; errors?: ErrorWriter }>;

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** How often a repeat polls for an original running behind another gateway (ms). */
const REPLAY_POLL_MS = 100;

/**
 * The outcome a client is told: a generation stopped by a revocation (key revoked, tenant
 * disabled, kill switch) ends as that error, not as a plain cancel an SDK would take for a
 * complete answer. Usage and cost are unchanged (the ledger records it as cancelled).
 */
/** What the gateway needs of moderation (see {@link GatewayDeps.moderation}). */
export interface GatewayModeration {
  /** The compiled policies as of the last applied snapshot (call per request; never keep). */
  policies(): ModerationPolicies;
  /** Check metrics (`weir_moderation_checks_total`, latency). */
  observer?: ModerationObserver;
  /** A block (`weir_moderation_blocks_total{stage,category}`); never the text. */
  onBlock?(stage: 'input' | 'output', verdict: ModerationVerdict): void;
}

/** A running input check: its verdict once known (`verdict` is set synchronously when it settles). */
interface InputCheck {
  promise: Promise<ModerationVerdict>;
  verdict?: ModerationVerdict;
  abort(): void;
}

/** The texts input moderation judges: the prompt, or each message's content (empty ones skipped). */
function moderatedTexts(input: GenerationInput): string[] {
  if (input.kind === 'text') return [input.text];
  // Embedding inputs: their text items (token-id arrays carry no text a rules engine can read).
  if (input.kind === 'embedding') {
    const items = input.items.filter((i): i is string => typeof i === 'string' && i.length > 0);
    return items.length > 0 ? items : [''];
  }
  const texts = input.messages.map((m) => m.content).filter((c) => c.length > 0);
  return texts.length > 0 ? texts : [''];
}

/**
 * Refuses (400 `invalid_request`, param `input`) an embedding input holding token-id arrays, for
 * a tenant whose policy redacts (`redacts`) or moderates (`moderates`) its input: both read text,
 * and ids would pass them unread.
 */
function refuseTokenIds(input: EmbeddingInput, redacts: boolean, moderates: boolean): void {
  const at = input.items.findIndex((i) => typeof i !== 'string');
  if (at < 0) return;
  const what = redacts && moderates ? 'redacts and moderates' : redacts ? 'redacts' : 'moderates';
  const where = input.items.length === 1 ? 'input' : `input[${at}]`;
  throw new WeirError('invalid_request', `Invalid request: \`${where}\` holds token ids; send text: this tenant's policy ${what} input, which it reads as text.`, { param: where });
}

/** Starts an input check (never rejects). */
function startInputCheck(plan: StagePlan, input: GenerationInput, observer: ModerationObserver | undefined): InputCheck {
  const ac = new AbortController();
  const check: InputCheck = {
    promise: runCheck('input', plan, moderatedTexts(input), ac.signal, observer).then((v) => (check.verdict = v)),
    abort: () => ac.abort(),
  };
  return check;
}

/**
 * The relay's events, with the first delta (or the end) held until the input check has
 * resolved — not held at all when it resolved first. After a block no delta passes, and the end
 * the client is told is {@link blockedOutcome}.
 */
async function* holdUntilChecked(events: AsyncIterable<RelayEvent>, check: InputCheck): AsyncGenerator<RelayEvent> {
  for await (const ev of events) {
    const verdict = check.verdict ?? (await check.promise);
    if (!verdict.blocked) yield ev;
    else if (ev.type === 'end') yield { type: 'end', outcome: blockedOutcome(ev.outcome, verdict) };
  }
}

/**
 * The outcome a client blocked by input moderation is told: `content_filter` with the error its
 * route answers (400 `content_filter` naming the categories; 503 `upstream_unavailable` when the
 * check failed and the policy fails closed). The usage record is the relay's.
 */
function blockedOutcome(o: GenerationOutcome, v: ModerationVerdict): GenerationOutcome {
  const error =
    v.reason === 'flagged'
      ? { code: 'content_filter', message: `The input was blocked by this tenant's moderation policy (categories: ${v.categories.join(', ')}); nothing was generated for you. Change the input.` }
      : {
          code: 'upstream_unavailable',
          message: `The input could not be checked by this tenant's moderation engine (${v.reason === 'timeout' ? 'it timed out' : 'it failed'}), and the policy blocks unchecked input; retry shortly.`,
          retryable: true,
          retryAfterMs: 1_000,
        };
  return { ...o, finishReason: 'content_filter', error };
}

function toldOutcome(tracked: TrackedGeneration, outcome: GenerationOutcome): GenerationOutcome {
  if (!tracked.revoked || outcome.finishReason !== 'cancelled') return outcome;
  return { ...outcome, finishReason: 'error', error: { code: tracked.revoked.code, message: tracked.revoked.message } };
}

/** Creates the gateway app. */
export function createGatewayApp(deps: GatewayDeps): Gateway {
  const { pipeline, clock, logger, defaults, revocations } = deps;
  const wallClock = deps.wallClock ?? Date.now;
  const announcer = createDeprecationAnnouncer(logger);
  const registry = createGenerationRegistry(deps.registry);
  // A key revoked, a tenant disabled or its kill switch engaged also stops what is running for it
  // (billed for what it produced, ending as cancelled), not only what comes next.
  revocations?.onRevoked((target) => {
    const running = registry.active().filter((g) => ('keyId' in target ? g.apiKeyId === target.keyId : g.tenantId === target.tenantId));
    for (const g of running) {
      g.revoked =
        'keyId' in target
          ? { code: 'authentication_failed', message: 'The API key was revoked while this generation ran, so it was stopped; the tokens produced are billed.' }
          : { code: target.reason, message: `${revocations.tenantRefusal(target.tenantId)?.message ?? `Tenant '${target.tenantId}' was stopped.`} This generation was stopped; the tokens produced are billed.` };
      g.stop('cancel_requested');
    }
    if (running.length > 0) logger.warn({ ...target, stopped: running.length }, 'generations in flight stopped by a revocation');
  });
  const idempotency = deps.idempotency ?? createMemoryIdempotencyStore();
  const purge = setInterval(() => {
    idempotency.purgeExpired(Date.now()).catch((err: unknown) => logger.warn({ err }, 'idempotency purge failed'));
  }, deps.idempotencyPurgeMs ?? 60_000);
  purge.unref();
  let draining = false;
  /** `created` of `/v1/models` entries: when this gateway loaded its configuration (Unix s). */
  const modelsCreated = Math.floor(Date.now() / 1000);
  const routes: Route[] = [];
  const get = (pattern: string, run: Handler, auth = true) => routes.push({ method: 'GET', pattern, handler: { run, auth, body: false } });
  const post = (pattern: string, run: Handler, errors?: ErrorWriter) => routes.push({ method: 'POST', pattern, handler: { run, auth: true, body: true, ...(errors ? { errors } : {}) } });
  const contentPolicies = deps.contentPolicies;
  const contentLog = deps.contentLog ?? (contentPolicies ? createContentLog({ logger, ...(deps.redaction ? { observer: deps.redaction } : {}) }) : undefined);
  const sseOptions = { heartbeatMs: defaults.sseHeartbeatMs, ...(deps.clients ? { stallMs: deps.clients.limits.streamStallMs } : {}) };
  const accessLevel = deps.accessLog ?? 'debug';
  const accessLine = accessLevel === 'info' ? logger.info.bind(logger) : logger.debug?.bind(logger);

  /** One access line per request, when its level is enabled: metadata only (never bodies, keys or text). */
  const watchAccess = (req: EdgeRequest, res: ServerResponse, line: (obj: object, msg?: string) => void) => {
    const started = performance.now();
    res.on('close', () => {
      const caller = req.caller;
      line(
        {
          requestId: req.requestId,
          method: req.method,
          // The route's pattern, never the raw path: an unmatched path is whatever the client sent.
          path: req.routePath ?? '(unmatched)',
          status: res.statusCode,
          ms: Math.round(performance.now() - started),
          ...(caller ? { tenant: caller.tenantId, app: caller.appId } : {}),
          ...(res.writableFinished ? {} : { clientGone: true }),
        },
        'request',
      );
    });
  };

  const readyz = (res: ServerResponse) => {
    const extra = deps.readiness?.() ?? { ready: true };
    const config = deps.configState?.();
    const ready = !draining && !config?.stale && extra.ready;
    const reason = draining ? 'draining' : config?.stale ? 'config_stale' : extra.reason;
    sendJson(res, ready ? 200 : 503, {
      status: ready ? 'ready' : 'not_ready',
      reason,
      ...(config
        ? {
            config_age_ms: Math.max(0, Math.round(config.ageMs)),
            ...(config.version !== undefined ? { config_version: config.version } : {}),
            ...(config.stale && config.reason !== undefined ? { config_detail: config.reason } : {}),
          }
        : {}),
    });
  };

  /**
   * Authenticates: a Bearer key, hashed, refused on the revocation fast path (even while a cache
   * still holds it), then looked up (a map hit in the cache in steady state).
   */
  const clients = deps.clients;
  /** Refuses (429) a client address with too many failed authentications: before any lookup. */
  const throttled = (guard: ClientGuard, req: EdgeRequest, key: string | undefined, sha256: string | undefined) => {
    const refusal = guard.auth.refusal(guard.clientKey(req.raw), key, sha256);
    if (refusal) throw refusal;
  };
  const authFailed = (req: EdgeRequest, key: string | undefined) => clients?.auth.failed(clients.clientKey(req.raw), key);
  const authenticate = async (req: EdgeRequest): Promise<Caller> => {
    const header = req.header('authorization');
    // Anthropic's clients send the key as `x-api-key` (the same tenant keys; never a body field).
    const xApiKey = req.header('x-api-key')?.trim();
    const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!match && !(header === undefined && xApiKey)) {
      if (clients?.auth.active) throttled(clients, req, undefined, undefined);
      authFailed(req, undefined);
      const message = header
        ? 'Use Bearer authentication: `Authorization: Bearer wk_…` (the header has another scheme or no key), or send the key as `x-api-key`.'
        : 'Missing API key. Send it as `Authorization: Bearer wk_…` or as `x-api-key: wk_…`.';
      throw new WeirError('authentication_failed', message);
    }
    const key = match ? match[1] : (xApiKey as string);
    if (match && xApiKey && xApiKey !== key) {
      authFailed(req, undefined);
      throw new WeirError('authentication_failed', '`Authorization` and `x-api-key` carry different keys; send one of them.');
    }
    const sha256 = hashApiKey(key);
    // Before the lookup only the address is throttled; a hammered key prefix is refused only for
    // keys that fail (below), so whoever knows a key's public prefix cannot lock its owner out.
    if (clients?.auth.active) throttled(clients, req, undefined, undefined);
    const unknownKey = () => {
      const throttledPrefix = clients?.auth.active ? clients.auth.refusal(clients.clientKey(req.raw), key, undefined) : undefined;
      authFailed(req, key);
      if (throttledPrefix) return throttledPrefix;
      const prefix = parseApiKey(key)?.prefix;
      return new WeirError('authentication_failed', prefix ? `Incorrect API key provided: wk_${prefix}_… is unknown or revoked.` : 'Incorrect API key provided.');
    };
    if (revocations?.isKeyRevoked({ sha256 })) throw unknownKey();
    const identity = await deps.apiKeys.findByHash(sha256);
    if (!identity || revocations?.isKeyRevoked({ keyId: identity.keyId })) throw unknownKey();
    clients?.auth.succeeded(sha256);
    const refusal = revocations?.tenantRefusal(identity.tenantId);
    if (refusal) throw new WeirError(refusal.code, refusal.message);
    // The internal ids travel with the caller (issue 14 §4): everything keyed by the tenant is filed under them.
    return { tenantId: identity.tenantId, appId: identity.appId, apiKeyId: identity.keyId, tenantUid: identity.tenantUid, appUid: identity.appUid };
  };

  const refuseWhileDraining = () => {
    if (draining) throw new WeirError('shutting_down', 'This gateway is shutting down; retry on another replica.', { retryable: true, retryAfterMs: 1_000 });
    const r = deps.readiness?.();
    if (r && !r.ready) throw new WeirError('engine_unavailable', `Weir is not ready: ${r.reason ?? 'unknown'}; retry shortly.`, { retryable: true, retryAfterMs: 1_000 });
  };

  /** One error handler: the Weir error's status and OpenAI-shaped body; faults are logged. */
  const onError = (err: unknown, req: EdgeRequest, res: ServerResponse, errors: ErrorWriter = sendError) => {
    const error = err instanceof WeirError ? err : toWeirError(err);
    if (error.code === 'internal') logger.error({ err: error.cause ?? err, requestId: req.requestId, path: req.routePath ?? '(unmatched)' }, 'request failed');
    if (res.headersSent) {
      if (!res.writableEnded) res.end();
      return;
    }
    errors(res, error, req);
  };

  /** Runs a matched route: authentication, then (POST) the drain check and the JSON body, then the handler. */
  const run = async (route: Route, req: EdgeRequest, res: ServerResponse): Promise<void> => {
    const { run: handler, auth, body } = route.handler;
    if (auth) req.caller = await authenticate(req);
    if (body) {
      refuseWhileDraining();
      req.body = await readJsonBody(req.raw, defaults.maxBodyBytes, defaults.maxBodyDepth);
      if (req.body === undefined && req.header('content-length') !== '0') {
        req.raw.resume();
        throw new WeirError('unsupported_media_type', 'Send the body as JSON with `Content-Type: application/json`.');
      }
    }
    await handler(req as Authed, res);
  };

  /** Watches the response: fires `onGone` if the client disconnects before we finish. */
  const watchClient = (res: ServerResponse, onGone: () => void) => {
    res.on('close', () => {
      if (!res.writableFinished) onGone();
    });
  };

  /**
   * The prompt redacted with the tenant's profile for the upstream (`redact_upstream`). Throws
   * `internal` (500, nothing sent, nothing reserved) when redaction fails or runs over its budget:
   * fail closed, never the raw prompt.
   */
  const redactUpstream = async (caller: Caller, policy: TenantContentPolicy, input: GenerationInput): Promise<GenerationInput> => {
    const r = await redactInput(policy.upstreamRedactor, input);
    if (!r.ok) {
      deps.redaction?.onFailure?.(r.reason, 'upstream');
      logger.error({ tenant: caller.tenantId, app: caller.appId, profile: policy.profile, reason: r.reason }, 'prompt redaction failed; request refused');
      throw new WeirError('internal', 'The prompt could not be redacted as your tenant policy requires (redact_upstream), so it was not sent; retry, or shorten the prompt.');
    }
    if (Object.keys(r.counts).length > 0) deps.redaction?.onRedactions?.(r.counts, 'upstream');
    return r.input;
  };

  /**
   * Answers a request: replays the original generation when `limits.requestId` (the client's
   * idempotency key) was already used by this tenant with the same body, else admits and starts
   * a new generation, tracks it for GET/cancel/events, and wires client disconnects.
   * Throws `conflict` when the key was used with a different body.
   */
  const begin = async (
    req: Authed,
    res: ServerResponse,
    route: ApiRoute,
    alias: string,
    input: GenerationInput,
    sampling: SamplingParams,
    limits: {
      maxOutputTokens?: number;
      routeDefaultOutputTokens?: number;
      deadlineMs?: number;
      requestId?: string;
      keyParam?: string;
      paramNames: ParamNames;
      useCase?: string;
      priority?: 'interactive' | 'batch';
      /** A JSON Schema the output must match (`EngineRequest.outputSchema`). */
      outputSchema?: object;
      /** Function tools, tool choice and parallel calls for the engine (chat completions only). */
      tools?: ChatTools;
      /** The end user a wire names elsewhere than OpenAI's `user` (Anthropic's `metadata.user_id`): a sticky key, and personalised for the cache. */
      endUser?: string;
      /** Anthropic's beta flags from `anthropic-beta` (`EngineRequest.anthropicBeta`). */
      anthropicBeta?: string[];
      /** Runs before the idempotency claim and admission, with the request's sticky key (the end user, else the request id); throws to refuse the request while it holds nothing. */
      beforeAdmit?: (requestId: string, useCase: string | undefined) => Promise<void>;
    },
  ): Promise<Answer> => {
    // A caller admission refused moments ago for every request: before hashing the body and claiming its key.
    pipeline.precheck(req.caller);
    const arrivedAt = clock.now();
    const useCase = useCaseOf(req.header('x-weir-use-case'), limits.useCase);
    const sessionId = sessionIdOf(req.header('x-weir-session-id'));
    // The tenant's content policy (its use case's, when that names its own redaction profile):
    // a map lookup or two, none while no tenant has one.
    const policy: TenantContentPolicy | undefined = contentPolicies?.active ? contentPolicies.forRequest(req.caller.tenantId, useCase) : undefined;
    // Redacted before moderation, the key claim, the token count and anything reserved: no
    // upstream (model or moderation engine) sees, and the tenant is billed for, the redacted
    // prompt. A failure sends nothing.
    const inputPlan = deps.moderation?.policies().of(tenantKeyOf(req.caller))?.input;
    // Token ids may decode to anything: a tenant whose policy reads its input (redaction, input
    // moderation) must send text, or neither would see what the model embeds.
    if (input.kind === 'embedding' && (policy?.redactUpstream || inputPlan)) refuseTokenIds(input, policy?.redactUpstream === true, inputPlan !== undefined);
    if (policy?.redactUpstream) input = await redactUpstream(req.caller, policy, input);
    // Input moderation starts with the request and runs while it is routed, admitted and
    // dispatched; its verdict is awaited only before the first delta reaches the client.
    const inputCheck = inputPlan ? startInputCheck(inputPlan, input, deps.moderation?.observer) : undefined;
    const generationId = newId('gen');
    const key = limits.requestId;
    const requestId = key ?? generationId;
    const deadlineMs = limits.deadlineMs ?? deadlineHeader(req);
    const priority = priorityOf(req.header('x-weir-priority'), limits.priority, (req.body as { service_tier?: unknown } | undefined)?.service_tier);
    // The tenant's internal id: its idempotency keys and generations are filed under it (issue 14 §4).
    const tenantId = tenantKeyOf(req.caller);
    // OpenAI's `user` (the client's end user) keeps one person on one canary arm across requests.
    // Only a `user` of at most 256 characters is a sticky key; a longer one still names an end user.
    const reqBody = req.body as { user?: unknown; safety_identifier?: unknown } | undefined;
    const user = limits.endUser ?? reqBody?.user;
    const endUser = typeof user === 'string' && user.length > 0 && user.length <= 256 ? user : undefined;
    // Personalised for the cache: any non-empty `user` (whatever its length) or `safety_identifier`
    // (OpenAI's per-end-user id) — never stored, never served (docs/caching.md).
    const personalised = isNonEmptyString(user) || isNonEmptyString(reqBody?.safety_identifier);
    // The cache's fields are checked on every request (400 naming the field); the key is made only
    // if the tenant's cache policy is on (the pipeline calls `cache` then).
    const cache = cacheInputsOf(req, personalised, useCase, sampling);
    const createdS = Math.floor(Date.now() / 1000);
    // A keyed request: its relay leaves the result (or that it was interrupted) for retries in its settlement entry.
    let retain: RetainSpec | undefined;
    try {
      await limits.beforeAdmit?.(endUser ?? requestId, useCase);
      if (key !== undefined) {
        const bodySha256 = requestBodySha256(route, req.body, useCase);
        const replay = await claimOrReplay(req, res, route, key, bodySha256, generationId, deadlineMs, limits.keyParam ?? 'request_id');
        if (replay) {
          inputCheck?.abort();
          return replay;
        }
        retain = { key, bodySha256, createdS, retainUntilMs: Date.now() + defaults.admission.idempotencyRetentionMs };
      }
    } catch (err) {
      // Refused before admission (a schema refused, a key in conflict): the check has no request left to judge.
      inputCheck?.abort();
      throw err;
    }
    const abandon = () => (key === undefined ? Promise.resolve() : idempotency.abandon(tenantId, key, generationId).catch((err: unknown) => logger.warn({ err }, 'idempotency abandon failed')));
    const admitted = await pipeline
      .admit({
        caller: req.caller,
        route,
        alias,
        generationId,
        requestId,
        input,
        maxOutputTokens: limits.maxOutputTokens,
        routeDefaultOutputTokens: limits.routeDefaultOutputTokens,
        sampling,
        deadlineMs,
        arrivedAt,
        paramNames: limits.paramNames,
        ...(useCase !== undefined ? { useCase } : {}),
        ...(sessionId !== undefined ? { sessionId } : {}),
        ...(priority !== undefined ? { priority } : {}),
        ...(limits.outputSchema !== undefined ? { outputSchema: limits.outputSchema } : {}),
        ...(limits.tools !== undefined ? limits.tools : {}),
        ...(limits.anthropicBeta !== undefined ? { anthropicBeta: limits.anthropicBeta } : {}),
        ...(endUser !== undefined ? { endUser } : {}),
        ...(retain ? { retain } : {}),
        ...(cache ? { cache } : {}),
      })
      .catch(async (err: unknown) => {
        inputCheck?.abort();
        await abandon();
        throw err;
      });
    for (const [name, value] of Object.entries(rateLimitHeaders(admitted.rateLimits))) res.setHeader(name, value);
    if (admitted.cache) {
      res.setHeader('x-weir-cache', admitted.cache.status);
      if (admitted.cache.status === 'hit') res.setHeader('x-weir-cache-tier', admitted.cache.tier);
    }
    const gone = new AbortController();
    // Set once the relay starts; until then a stop aborts the wait in the queue.
    const live: { handle?: RelayHandle } = {};
    // A block stops the upstream at once (or the wait for a slot): the relay ends it `content_filter`.
    void inputCheck?.promise.then((v) => {
      if (!v.blocked) return;
      deps.moderation?.onBlock?.('input', v);
      if (live.handle) live.handle.stop('input_flagged');
      else if (!gone.signal.aborted) gone.abort(INPUT_FLAGGED_ABORT);
    });
    const transcript = createTranscript();
    const tracked: TrackedGeneration = {
      generationId,
      requestId,
      tenantId: req.caller.tenantId,
      tenantKey: tenantId,
      apiKeyId: req.caller.apiKeyId,
      modelRevision: admitted.revision.id,
      state: 'queued' as const,
      transcript,
      createdS,
      stop(cause: 'client_disconnected' | 'cancel_requested') {
        if (live.handle) live.handle.stop(cause);
        else gone.abort();
      },
    };
    registry.add(tracked);
    // A client that leaves stops its generation after the grace period — unless it sent an
    // idempotency key: then the generation runs on, retained, so the client can resume it
    // (`/v1/generations/{id}/events` with Last-Event-ID) or repeat the request and get the
    // whole answer; `POST /v1/generations/{id}/cancel` still stops it.
    if (key === undefined) watchClient(res, () => tracked.stop('client_disconnected'));
    res.setHeader('x-weir-generation-id', generationId);
    res.setHeader('x-weir-model-revision', admitted.revision.id);
    // A deprecated revision's countdown (the revision chosen after pins and the canary split).
    const wallNow = wallClock();
    const countdown = countdownOf(admitted.revision, wallNow);
    if (countdown) {
      for (const [name, value] of Object.entries(countdownHeaders(countdown))) res.setHeader(name, value);
      announcer.note(admitted.revision, countdown, wallNow);
    }
    const answer: Answer = { generationId, requestId, modelRevision: admitted.revision.id, createdS, transcript, replayed: false, endedInQueue: false, inputTokens: admitted.inputTokens, cost: createCostMeter(clock, arrivedAt) };
    // A keyed request's check overlaps routing, counting and admission but not dispatch: its
    // relay leaves the result for retries when it ends, which must never hold an answer a block
    // withheld from the client (an unkeyed request's check also overlaps dispatch).
    // A cache hit is answered at once, so it waits for the check too (its reservation is then
    // released and it ends `content_filter`, as a request blocked in the queue does).
    if (inputCheck && (retain || admitted.cache?.status === 'hit') && !inputCheck.verdict) await inputCheck.promise;
    // A verdict known already (the rules engine decides synchronously, or the wait above) is
    // applied now: the `then` above runs only in a later microtask, after `start` has looked at
    // the signal — a blocked hit would be served, a blocked request dispatched.
    if (inputCheck?.verdict?.blocked && !gone.signal.aborted) gone.abort(INPUT_FLAGGED_ABORT);
    // One content line per request, for a tenant that logs content (the output read from the transcript only then).
    const logContent = (outcome: GenerationOutcome, told: Transcript = transcript) => {
      if (policy?.logContent && contentLog) {
        // Tool calls the model made follow the text as `→ name(arguments)` lines.
        const calls = told.deltaToolCalls.length > 0 ? accumulateToolCalls(told.deltaToolCalls.map((c) => c ?? undefined)) : [];
        const output = told.text() + calls.map((c) => `\n→ ${c.name}(${c.arguments})`).join('');
        contentLog.record({ policy, caller: req.caller, route, alias, generationId, input, output, outcome });
      }
    };
    const started = await admitted.start(gone.signal).catch(async (err: unknown) => {
      const failed = failedOutcome(admitted.revision.id, err);
      logContent(failed);
      transcript.end(failed);
      registry.finish(generationId, failed);
      await abandon();
      throw err;
    });
    if (started.kind === 'cached') {
      // A hit replays like a retained result (the same transcript machinery as an idempotent
      // replay), so every route streams it with the same events as a live answer.
      const { answer: cached, outcome } = started;
      const replay = createTranscript({ deltas: cached.deltas, ...(cached.deltaToolCalls ? { deltaToolCalls: cached.deltaToolCalls } : {}), outcome });
      tracked.transcript = replay;
      registry.finish(generationId, outcome);
      logContent(outcome, replay);
      if (key !== undefined) {
        await idempotency
          .complete(
            tenantId,
            key,
            { generationId, requestId, route, modelRevision: outcome.modelRevision, createdS, deltas: [...cached.deltas], ...(cached.deltaToolCalls ? { deltaToolCalls: [...cached.deltaToolCalls] } : {}), outcome },
            Date.now() + defaults.admission.idempotencyRetentionMs,
          )
          .catch((err: unknown) => logger.warn({ err, generationId }, 'idempotency result not retained'));
      }
      return { ...answer, transcript: replay };
    }
    if (started.kind === 'ended') {
      // Never reached an engine: nothing to replay, so a retry with the same key runs anew.
      logContent(started.outcome);
      const blocked = started.outcome.finishReason === 'content_filter' && inputCheck?.verdict?.blocked;
      transcript.end(blocked ? blockedOutcome(started.outcome, inputCheck.verdict as ModerationVerdict) : toldOutcome(tracked, started.outcome));
      registry.finish(generationId, started.outcome);
      await abandon();
      return { ...answer, endedInQueue: true };
    }
    const handle = (live.handle = started.handle);
    if (inputCheck?.verdict?.blocked) handle.stop('input_flagged');
    // The first attempt may not be on the first choice (its circuit breaker was open): say so
    // on responses whose headers are still to go (a later fallback is told by the answer's end).
    if (!res.headersSent && started.revisionId !== admitted.revision.id) {
      res.setHeader('x-weir-model-revision', started.revisionId);
      if (started.fallbackReason) res.setHeader('x-weir-fallback-reason', started.fallbackReason);
    }
    const entry = registry.get(tenantId, generationId);
    if (entry) entry.state = 'running';
    // One pump reads the relay; the route, repeats and /events readers follow the transcript.
    // The revision that answers is named once known: at the first delta (headers not yet sent on
    // a stream), and at the end (after a fallback, the first choice did not answer).
    const name = (revisionId: string, fallbackReason: string | undefined) => {
      tracked.modelRevision = answer.modelRevision = revisionId;
      if (res.headersSent) return;
      res.setHeader('x-weir-model-revision', revisionId);
      if (fallbackReason !== undefined) res.setHeader('x-weir-fallback-reason', fallbackReason);
    };
    const onFirstDelta = () => {
      const a = started.answering();
      name(a.revisionId, a.fallbackReason);
    };
    const told = (o: GenerationOutcome) => {
      name(o.modelRevision, o.fallback?.reason);
      return toldOutcome(tracked, o);
    };
    const remember = admitted.cache?.status !== 'hit' ? admitted.cache?.remember : undefined;
    void pumpInto(transcript, inputCheck ? holdUntilChecked(handle.events, inputCheck) : handle.events, (err) => failedOutcome(admitted.revision.id, err), told, onFirstDelta).then(async () => {
      const outcome = transcript.outcome as GenerationOutcome;
      registry.finish(generationId, outcome);
      logContent(outcome);
      // A complete answer of a cacheable miss is stored after it went out (never delaying it).
      if (remember && (outcome.finishReason === 'stop' || outcome.finishReason === 'length') && !outcome.fallback && !tracked.revoked && !inputCheck?.verdict?.blocked) {
        remember({
          modelRevision: outcome.modelRevision,
          deltas: [...transcript.deltas],
          ...(transcript.deltaToolCalls.some((c) => c !== null) ? { deltaToolCalls: [...transcript.deltaToolCalls] } : {}),
          finishReason: outcome.finishReason,
          usage: { ...outcome.usage, cachedInputTokens: outcome.usage.cachedInputTokens ?? 0 },
          storedAtMs: Date.now(),
          originalTotalMs: outcome.timings.totalMs,
          originalTtftMs: outcome.timings.ttftMs,
        });
      }
      if (key === undefined) return;
      // A failure before any output billed nothing: the key is freed and a retry runs anew. A
      // failure after output was billed: the key is `interrupted`, so a retry is told instead of
      // charged again (the relay's settlement entry makes it durable; ADR 0002 §2).
      if (outcome.finishReason === 'error') {
        if (outcome.usage.outputTokens === 0) return abandon();
        return idempotency
          .interrupt(tenantId, key, generationId, interruptedMessage(generationId, outcome.usage.outputTokens), Date.now() + defaults.admission.idempotencyRetentionMs)
          .catch((err: unknown) => logger.warn({ err, generationId }, 'idempotency interruption not kept'));
      }
      await idempotency
        .complete(
          tenantId,
          key,
          {
            generationId,
            requestId,
            route,
            modelRevision: outcome.modelRevision,
            createdS: answer.createdS,
            deltas: [...transcript.deltas],
            ...(transcript.deltaToolCalls.length > 0 ? { deltaToolCalls: [...transcript.deltaToolCalls] } : {}),
            outcome,
          },
          Date.now() + defaults.admission.idempotencyRetentionMs,
        )
        .catch((err: unknown) => logger.warn({ err, generationId }, 'idempotency result not retained'));
    });
    return answer;
  };

  /**
   * Claims an idempotency key, or answers with the generation that holds it: its retained
   * result, or (while it runs) its live transcript on this gateway, or — running behind another
   * gateway — its result once it finishes. Resolves undefined when this request claimed the key.
   */
  const claimOrReplay = async (
    req: Authed,
    res: ServerResponse,
    route: ApiRoute,
    key: string,
    bodySha256: string,
    generationId: string,
    deadlineMs: number | undefined,
    keyParam: string,
  ): Promise<Answer | undefined> => {
    const tenantId = tenantKeyOf(req.caller);
    const waitMs = pipeline.deadlineMsFor(req.caller, deadlineMs);
    const giveUpAt = Date.now() + waitMs;
    const gone = new AbortController();
    watchClient(res, () => gone.abort());
    for (;;) {
      const claim = await idempotency.claim({ tenantId, requestId: key, bodySha256, generationId, route, leaseUntilMs: Date.now() + waitMs + defaults.admission.reservationGraceMs });
      if (claim.claimed) return undefined;
      const existing = claim.existing;
      if (existing.bodySha256 !== bodySha256) {
        throw new WeirError(
          'conflict',
          `The idempotency key '${key}' was already used for a different request (generation ${existing.generationId}); resend the same request to get its result, or use a new key.`,
          { param: keyParam },
        );
      }
      if (existing.state === 'interrupted') {
        throw new WeirError('conflict', existing.interruption ?? `The generation for idempotency key '${key}' was interrupted after producing output, which was billed; send a new key to run it again.`, {
          param: keyParam,
        });
      }
      const answer = replayOf(existing);
      if (answer) {
        res.setHeader('idempotent-replayed', 'true');
        res.setHeader('x-weir-generation-id', answer.generationId);
        res.setHeader('x-weir-model-revision', answer.modelRevision);
        return answer;
      }
      if (gone.signal.aborted) throw new WeirError('invalid_request', 'The client went away while waiting for the original request.');
      if (Date.now() >= giveUpAt) {
        throw new WeirError(
          'conflict',
          `The request with idempotency key '${key}' is still running (on another gateway, or on one that stopped before it finished: its key is freed after the original's deadline plus the reservation grace); retry later to get its result, or use a new key.`,
          { param: keyParam, retryable: true, retryAfterMs: 1_000 },
        );
      }
      await new Promise((r) => setTimeout(r, REPLAY_POLL_MS));
    }
  };

  /** The answer a claim holder gives a repeat now, or undefined when it must be waited for. */
  const replayOf = (existing: IdempotencyClaim): Answer | undefined => {
    if (existing.state === 'done' && existing.result) return answerFromResult(existing.result);
    const local = registry.get(existing.tenantId, existing.generationId);
    return local && local.state !== 'queued' ? answerFromEntry(local) : undefined;
  };

  // ---- Weir's own route -------------------------------------------------------------
  post('/v1/generations', async (req, res) => {
    const body = parseBody(generationsBody, req.body);
    const input: GenerationInput = typeof body.input === 'string' ? { kind: 'text', text: body.input } : toChatInput(body.input);
    const g = await begin(req, res, 'generations', body.model_alias, input, sampling(body), {
      maxOutputTokens: body.max_output_tokens,
      deadlineMs: body.deadline_ms,
      ...generationsKey(req, body.request_id),
      useCase: body.use_case,
      priority: body.priority,
      paramNames: { model: 'model_alias', input: 'input', maxOutputTokens: 'max_output_tokens' },
    });

    if (body.stream) {
      // A failure before any output (a relay or engine that is down) is an HTTP error, not a 200 stream.
      await waitFirstEvent(g.transcript, outcomeError);
      const sse = openSse(res, sseOptions);
      await writeWeirStream(sse, g, 0);
      sse.end();
      return;
    }
    const outcome = await g.transcript.ended();
    const text = g.transcript.text();
    if ((outcome.finishReason === 'error' && outcome.usage.outputTokens === 0) || blockedBeforeOutput(outcome)) throw outcomeError(outcome);
    if (g.endedInQueue && outcome.finishReason === 'deadline') throw deadlineInQueue();
    answeredBy(res, outcome, g);
    sendJson(res, 200, {
      generation_id: g.generationId,
      request_id: g.requestId,
      model_revision: g.modelRevision,
      text,
      ...weirEndData(outcome),
    });
  });

  /**
   * Writes Weir's stream (ARCHITECTURE.md §8) for the events after `lastEventId`: `start` is
   * id 1, delta `i` is id `i + 2`, `end` is id `deltas + 2`. `events` must begin at delta
   * index `max(0, lastEventId - 1)`.
   */
  async function writeWeirStream(sse: SseWriter, g: Answer, lastEventId: number, signal?: AbortSignal) {
    const send = (id: number, event: string, data: unknown) => sse.write(formatSseEvent({ id, event, data: JSON.stringify(data) }));
    if (lastEventId < 1) await send(1, 'start', { generation_id: g.generationId, request_id: g.requestId, model_revision: g.modelRevision });
    const t = g.transcript;
    const outcome = await readTranscript(t, Math.max(0, lastEventId - 1), (i) => send(i + 2, 'delta', { text: t.deltas[i] }), signal);
    if (!outcome) return;
    const ended = t.deltas.length + 2;
    if (ended > lastEventId) await send(ended, 'end', weirEndData(outcome));
  }

  get('/v1/generations/:id/events', async (req, res) => {
    const tenantId = tenantKeyOf(req.caller);
    const id = req.params.id;
    const lastEventId = parseLastEventId(req);
    const entry = registry.get(tenantId, id);
    let g = entry ? answerFromEntry(entry) : undefined;
    if (!g) {
      // A keyed generation running behind another gateway: wait for it to end (its stream is
      // then retained here too), unless this reader leaves first.
      const readerGone = new AbortController();
      res.on('close', () => readerGone.abort());
      let claim = await idempotency.findClaimByGeneration(tenantId, id);
      while (claim?.state === 'running' && !readerGone.signal.aborted) {
        await new Promise((r) => setTimeout(r, REPLAY_POLL_MS));
        claim = await idempotency.findClaimByGeneration(tenantId, id);
      }
      if (claim?.state === 'done' && claim.result) g = answerFromResult(claim.result);
    }
    if (!g) {
      throw new WeirError(
        'not_found',
        `No retained stream for generation '${id}' of your tenant: streams are kept by the gateway that served them for 10 minutes, and on every gateway for the idempotency retention window when the request had a request_id.`,
      );
    }
    // A reader going away stops reading; it never cancels the generation.
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    const sse = openSse(res, sseOptions);
    await writeWeirStream(sse, g, lastEventId, gone.signal);
    sse.end();
  });

  /** A generation another gateway served, as the ledger recorded it. */
  const finishedElsewhere = async (caller: Caller, id: string) => {
    const record = await deps.findFinished?.(caller.tenantId, id);
    // The same tenant by internal id: a deleted tenant's row is not its same-slug successor's.
    return record && record.tenantId === caller.tenantId && tenantKeyOf(record) === tenantKeyOf(caller) ? describeRecord(record) : undefined;
  };

  get('/v1/generations/:id', async (req, res) => {
    const tenantId = tenantKeyOf(req.caller);
    const id = req.params.id;
    const entry = registry.get(tenantId, id);
    if (entry) {
      sendJson(res, 200, describe(entry));
      return;
    }
    const finished = await finishedElsewhere(req.caller, id);
    if (!finished) throw notFoundGeneration(id);
    sendJson(res, 200, finished);
  });

  // Cancel takes no body: it authenticates and answers, even while draining.
  routes.push({
    method: 'POST',
    pattern: '/v1/generations/:id/cancel',
    handler: { auth: true, body: false, run: (req, res) => cancel(req, res) },
  });
  const cancel = async (req: Authed, res: ServerResponse) => {
    const tenantId = tenantKeyOf(req.caller);
    const id = req.params.id;
    const entry = registry.get(tenantId, id);
    if (entry) {
      entry.stop('cancel_requested');
      // A stop takes effect within an event-loop turn or two (the relay cancels the upstream and
      // settles): answer the status it ends in, not the `running` it had a moment ago. Should it
      // take longer than CANCEL_WAIT_MS (an engine slow to stop), say the cancel was requested.
      const outcome = entry.outcome ?? (entry.transcript ? await endedWithin(entry.transcript, CANCEL_WAIT_MS) : undefined);
      if (outcome) sendJson(res, 200, describe({ ...entry, outcome }));
      else sendJson(res, 202, { ...describe(entry), status: 'cancel_requested' });
      return;
    }
    const finished = await finishedElsewhere(req.caller, id);
    if (finished) {
      sendJson(res, 200, finished);
      return;
    }
    if (!deps.cancelTopic) throw notFoundGeneration(id);
    // Not here and not finished: it may be running behind another gateway. The relay holding
    // it checks the tenant before acting, so a guessed id cannot cancel another tenant's work.
    deps.cancelTopic.publish({
      generationId: id,
      tenantId: req.caller.tenantId,
      ...(req.caller.tenantUid !== undefined ? { tenantUid: req.caller.tenantUid } : {}),
      cause: 'cancel_requested',
    });
    sendJson(res, 202, { generation_id: id, status: 'cancel_requested' });
  };

  // ---- OpenAI-compatible routes ----------------------------------------------------------
  post('/v1/chat/completions', async (req, res) => {
    refuseUnknownFields(req.body, CHAT_COMPLETIONS_FIELDS, CHAT_UNSUPPORTED_HINTS, 'POST /v1/chat/completions');
    const body = parseBody(chatCompletionsBody, req.body);
    // Without `model`, the use case's model chain routes the request (use-cases.ts).
    const model = modelOrUseCase(body.model, useCaseOf(req.header('x-weir-use-case'), body.use_case), pipeline.useCases(req.caller), { model: 'model', useCase: 'use_case' });
    const tools = chatToolsOf(body);
    // response_format json_schema / json_object: the revision constrains its output (grammar or
    // upstream structured output) and the relay validates every output against the schema.
    const format = body.response_format;
    // A caller admission refused moments ago is refused before its schema is compiled.
    if (format?.type === 'json_schema') pipeline.precheck(req.caller);
    // Cheap checks now; the compilation only after the route's capability checks (beforeAdmit).
    const raw =
      format?.type === 'json_schema'
        ? screenOutputSchema(format.json_schema.schema, 'response_format.json_schema.schema')
        : format?.type === 'json_object'
          ? JSON_OBJECT_SCHEMA
          : undefined;
    // One route resolution checks both, before any claim or reservation.
    const checks = [...(tools ? [toolsCheck] : []), ...(raw ? [schemaCheck('response_format', raw)] : [])];
    const schemaParam = format?.type === 'json_schema' ? 'response_format.json_schema.schema' : 'response_format';
    const g = await begin(req, res, 'chat.completions', model, toChatInput(body.messages), sampling(body), {
      maxOutputTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
      requestId: idempotencyKeyHeader(req),
      keyParam: 'Idempotency-Key',
      useCase: body.use_case,
      paramNames: { model: 'model', input: 'messages', maxOutputTokens: body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens' },
      ...(tools ? { tools } : {}),
      ...(raw ? { outputSchema: raw } : {}),
      ...(checks.length > 0 ? { beforeAdmit: checkThenCompile(deps.router, req.caller, model, checks, raw, schemaParam).beforeAdmit } : {}),
    });
    await answerOpenAi(res, g, model, 'chat', body.stream === true, body.stream_options?.include_usage === true);
  });

  post('/v1/completions', async (req, res) => {
    refuseUnknownFields(req.body, COMPLETIONS_FIELDS, {}, 'POST /v1/completions');
    const body = parseBody(completionsBody, req.body);
    const prompt = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
    const g = await begin(req, res, 'completions', body.model, { kind: 'text', text: prompt }, sampling(body), {
      maxOutputTokens: body.max_tokens ?? undefined,
      routeDefaultOutputTokens: 16, // OpenAI's default for /v1/completions (CONVENTIONS.md §1)
      requestId: idempotencyKeyHeader(req),
      keyParam: 'Idempotency-Key',
      paramNames: { model: 'model', input: 'prompt', maxOutputTokens: 'max_tokens' },
    });
    await answerOpenAi(res, g, body.model, 'text', body.stream === true, body.stream_options?.include_usage === true);
  });

  registerEmbeddingsRoute({ post, begin, answeredBy, outcomeError, deadlineOrCancel, idempotencyKeyHeader });
  registerMessagesRoute({ post, begin, pipeline, router: deps.router, sseOptions, firstEventOrThrow: followFromFirstEvent, answeredBy, outcomeError, deadlineOrCancel, idempotencyKeyHeader });
  registerResponsesRoute({ post, begin, precheck: (caller) => pipeline.precheck(caller), useCases: (caller) => pipeline.useCases(caller), router: deps.router, sseHeartbeatMs: defaults.sseHeartbeatMs, sseStallMs: sseOptions.stallMs, firstEventOrThrow: followFromFirstEvent, answeredBy, outcomeError, deadlineOrCancel, generationsKey, idempotencyKeyHeader, sampling });

  /** A `/v1/models` entry: OpenAI's fields, plus `deprecation` while the caller's revisions for the alias count down. */
  const modelEntry = (caller: Caller, alias: AliasSpec) => {
    const catalog = deps.catalog;
    const deprecation = catalog ? aliasDeprecation(alias, catalog.tenants().get(caller.tenantId), catalog.revisions(), wallClock()) : undefined;
    return { id: alias.name, object: 'model', created: modelsCreated, owned_by: 'weir', ...(deprecation ? { deprecation } : {}) };
  };
  get('/v1/models', async (req, res) => {
    const { caller } = req;
    sendJson(res, 200, { object: 'list', data: (await deps.router.listAliases(caller)).map((a) => modelEntry(caller, a)) });
  });
  if (deps.usage) get('/v1/usage', usageHandler(deps.usage));
  if (deps.moderation) post('/v1/moderations', moderationsHandler(deps.moderation.policies, deps.moderation.observer, (caller, id, ms) => pipeline.holdUnmetered(caller, id, ms)));
  get('/v1/models/:id', async (req, res) => {
    const { caller } = req;
    const alias = (await deps.router.listAliases(caller)).find((a) => a.name === req.params.id);
    if (!alias) throw new WeirError('model_not_found', `The model '${req.params.id}' does not exist or you do not have access to it.`, { param: 'model' });
    sendJson(res, 200, modelEntry(caller, alias));
  });

  // Known paths whose route is not configured here still answer 405 rather than 404 for other
  // methods (e.g. `/v1/usage` without a usage reader), as before.
  const knownPaths: [RegExp, string][] = [
    [/^\/v1\/generations$/i, 'POST'],
    [/^\/v1\/chat\/completions$/i, 'POST'],
    [/^\/v1\/completions$/i, 'POST'],
    [/^\/v1\/responses$/i, 'POST'],
    [/^\/v1\/messages(\/count_tokens)?$/i, 'POST'],
    [/^\/v1\/embeddings$/i, 'POST'],
    [/^\/v1\/models$/i, 'GET'],
    [/^\/v1\/usage$/i, 'GET'],
    [/^\/v1\/generations\/[^/]+$/i, 'GET'],
    [/^\/v1\/generations\/[^/]+\/events$/i, 'GET'],
    [/^\/v1\/generations\/[^/]+\/cancel$/i, 'POST'],
    [/^\/v1\/models\/[^/]+$/i, 'GET'],
  ];
  if (deps.batches) {
    registerBatchRoutes(
      { route: (method, pattern, handler, body) => routes.push({ method, pattern, handler: { run: handler, auth: true, body } }), refuseWhileDraining },
      deps.batches,
    );
  }
  const router = createEdgeRouter(routes);

  const dispatch = (caller: Caller, request: InternalRequest): Promise<InternalResponse> =>
    dispatchInternal(caller, request, newId('req'), (req, res) => {
      const answer = async () => {
        if (revocations?.isKeyRevoked({ keyId: caller.apiKeyId })) throw new WeirError('authentication_failed', 'The API key that created this batch was revoked.');
        const refusal = revocations?.tenantRefusal(caller.tenantId);
        if (refusal) throw new WeirError(refusal.code, refusal.message);
        const state = deps.configState?.();
        if (state?.stale) throw configStaleError(state);
        const match = router.match(request.method, request.path);
        if (!match) throw new WeirError('not_found', `Unknown route ${request.method} ${request.path}.`);
        req.params = match.params;
        req.routePath = match.route.pattern;
        if (match.route.handler.body) refuseWhileDraining();
        await match.route.handler.run(req, res);
      };
      answer().catch((err: unknown) => onError(err, req, res));
    });

  /** A path no route takes with this method: 405 with `Allow` for a known path, else 404. */
  const unrouted = (req: EdgeRequest, res: ServerResponse) => {
    const path = req.path.length > 1 && req.path.endsWith('/') ? req.path.slice(0, -1) : req.path;
    const allowed = router.allowed(path).join(', ') || knownPaths.find(([re]) => re.test(path))?.[1];
    if (allowed) {
      res.setHeader('allow', allowed);
      throw new WeirError('method_not_allowed', `${req.method} is not allowed on ${req.path}; use ${allowed}.`);
    }
    throw new WeirError('not_found', `Unknown route ${req.method} ${req.path}.`);
  };

  const app = (raw: IncomingMessage, res: ServerResponse): void => {
    // Every response carries x-request-id (the client's if well-formed, else ours).
    const given = raw.headers['x-request-id'];
    const requestId = typeof given === 'string' && REQUEST_ID.test(given) ? given : newId('req');
    res.setHeader('x-request-id', requestId);
    const req = edgeRequest(raw, requestId);
    if (accessLine && (logger.isLevelEnabled?.(accessLevel) ?? true)) watchAccess(req, res, accessLine);
    const method = req.method;
    const path = req.path;
    if ((method === 'GET' || method === 'HEAD') && (path === '/healthz' || path === '/readyz')) {
      if (path === '/healthz') return sendJson(res, 200, { status: 'ok' });
      return readyz(res);
    }
    // Matched first (a map lookup), so even the refusals below answer in the route's own error shape.
    const match = router.match(method, path);
    const errors = match?.route.handler.errors;
    try {
      if (clients) {
        const refusal = clients.enter(raw, res);
        if (refusal) throw refusal;
      }
      // Fail closed on a stale snapshot: every route below (the API, and unknown paths) is refused.
      const state = deps.configState?.();
      if (state?.stale) throw configStaleError(state);
      if (!match) return unrouted(req, res);
      req.params = match.params;
      req.routePath = match.route.pattern;
      run(match.route, req, res).catch((err: unknown) => onError(err, req, res, errors));
    } catch (err) {
      onError(err, req, res, errors);
    }
  };

  async function answerOpenAi(
    res: ServerResponse,
    g: Answer,
    model: string,
    kind: 'chat' | 'text',
    stream: boolean,
    includeUsage: boolean,
  ) {
    if (g.endedInQueue && g.transcript.outcome) throw deadlineOrCancel(g.transcript.outcome);
    const meta: OpenAiResponseMeta = { id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${g.generationId.slice(4)}`, created: g.createdS, model };
    const weir = (o: GenerationOutcome) => ({ finish_reason: o.finishReason, model_revision: o.modelRevision, ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}) });
    if (!stream) {
      // The whole answer: wait for the end, then read the transcript once.
      const outcome = await g.transcript.ended();
      const text = g.transcript.text();
      const toolCallDeltas = g.transcript.deltaToolCalls.filter((c): c is ToolCallDelta[] => c !== null);
      if (outcome.finishReason === 'error' || blockedBeforeOutput(outcome)) throw outcomeError(outcome);
      if (outcome.finishReason === 'deadline' && g.transcript.deltas.length === 0) throw deadlineBeforeOutput();
      answeredBy(res, outcome, g);
      const finish = toOpenAiFinishReason(outcome.finishReason);
      const ext = { ...weir(outcome), ...g.cost?.report(outcome) };
      sendJson(
        res,
        200,
        kind === 'chat'
          ? chatCompletion(meta, text, finish, toOpenAiUsage(outcome.usage), ext, accumulateToolCalls(toolCallDeltas), g.transcript.deltaReasoning.join(''))
          : textCompletion(meta, text, finish, toOpenAiUsage(outcome.usage), ext),
      );
      return;
    }
    // Headers go out only once a slot is held and the first event is in, so queue rejections
    // and failures before any output are still HTTP errors the SDKs can retry.
    await waitFirstEvent(g.transcript, outcomeError);
    if (g.transcript.deltas.length === 0 && g.transcript.outcome?.finishReason === 'deadline') throw deadlineBeforeOutput();
    const sse = openSse(res, sseOptions);
    const send = (chunk: unknown) => sse.write(formatSseJson(JSON.stringify(chunk)));
    // A text delta's chunk: its JSON around the text is built once for the response.
    const contentChunk = contentChunkJson(meta, kind);
    if (kind === 'chat') await send(chatCompletionChunk(meta, { delta: { role: 'assistant', content: '' }, finishReason: null }));
    const t = g.transcript;
    const outcome = await readTranscript(t, 0, (i) => {
      const calls = kind === 'chat' ? t.deltaToolCalls[i] : undefined;
      const reasoning = kind === 'chat' ? t.deltaReasoning[i] : undefined;
      if (!calls && !reasoning) return sse.write(formatSseJson(contentChunk(t.deltas[i])));
      // A delta of tool calls (or reasoning, as `reasoning_content`) only has no `content`, as OpenAI streams it.
      const text = t.deltas[i];
      const delta = { ...(text !== '' ? { content: text } : {}), ...(reasoning ? { reasoning_content: reasoning } : {}), ...(calls ? { tool_calls: toOpenAiToolCallChunks(calls) } : {}) };
      return send(chatCompletionChunk(meta, { delta, finishReason: null }));
    });
    /** The end of the stream: an in-band error, or the finish chunk, the usage chunk and [DONE]. */
    const writeEnd = async (o: GenerationOutcome) => {
      if (o.finishReason === 'error') {
        // After the headers, an error can only be reported in-band (CONVENTIONS.md §1).
        const code = asCode(o.error?.code ?? 'internal');
        await send(openAiError(o.error?.message ?? 'the generation failed', HTTP_ERRORS[code].type, code));
        return;
      }
      if (o.finishReason === 'cancelled') {
        // Cancelled through the API while this client still reads: OpenAI has no finish reason
        // for it, and `stop` would pass a cut answer off as whole, so it ends in-band as an error.
        await send(openAiError('The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.', 'invalid_request_error', 'cancelled'));
        return;
      }
      const finish = toOpenAiFinishReason(o.finishReason);
      await send(
        kind === 'chat'
          ? chatCompletionChunk(meta, { delta: {}, finishReason: finish }, { weir: weir(o) })
          : textCompletionChunk(meta, { text: '', finishReason: finish }, { weir: weir(o) }),
      );
      if (includeUsage) {
        // The usage chunk closes the answer: its `weir` object says what it cost and Weir's overhead.
        const usage = toOpenAiUsage(o.usage);
        const ext = g.cost ? { weir: { ...weir(o), ...g.cost.report(o) } } : {};
        await send(kind === 'chat' ? chatCompletionChunk(meta, null, { usage, ...ext }) : textCompletionChunk(meta, null, { usage, ...ext }));
      }
      await sse.write(SSE_DONE);
    };
    if (outcome) await writeEnd(outcome);
    sse.end();
  }

  const ops = (raw: IncomingMessage, res: ServerResponse): boolean => {
    if (raw.method !== 'GET' && raw.method !== 'HEAD') return false;
    const url = raw.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path === '/readyz') readyz(res);
    else if (path === '/metrics' && deps.metricsHandler) deps.metricsHandler(raw, res);
    else return false;
    return true;
  };

  return {
    app,
    ops,
    registry,
    dispatch,
    async drain(graceMs) {
      draining = true;
      const until = Date.now() + graceMs;
      while (registry.active().length > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      for (const g of registry.active()) g.stop('cancel_requested');
      const hardStop = Date.now() + 5_000;
      while (registry.active().length > 0 && Date.now() < hardStop) await new Promise((r) => setTimeout(r, 20));
      registry.close();
    },
  };
}

/** A replay of a generation this gateway holds (running or finished), from its transcript; undefined without one. */
function answerFromEntry(entry: TrackedGeneration): Answer | undefined {
  if (!entry.transcript) return undefined;
  return {
    generationId: entry.generationId,
    requestId: entry.requestId,
    modelRevision: entry.modelRevision,
    createdS: entry.createdS ?? Math.floor(Date.now() / 1000),
    transcript: entry.transcript,
    replayed: true,
    endedInQueue: false,
  };
}

/** A replay of a retained result (finished, possibly on another gateway). */
function answerFromResult(r: RetainedResult): Answer {
  return {
    generationId: r.generationId,
    requestId: r.requestId,
    modelRevision: r.modelRevision,
    createdS: r.createdS,
    transcript: createTranscript({ deltas: r.deltas, ...(r.deltaToolCalls ? { deltaToolCalls: r.deltaToolCalls } : {}), outcome: r.outcome }),
    replayed: true,
    endedInQueue: false,
  };
}

/** A string of at least one character (an empty `user` or `safety_identifier` names no one). */
function isNonEmptyString(v: unknown): v is string {
  return typeof v === 'string' && v.length > 0;
}

/** The routes whose answers are cached, by their edge pattern. */
const CACHE_ROUTES: ReadonlyMap<string, CacheRoute> = new Map<string, CacheRoute>([
  ['/v1/chat/completions', '/v1/chat/completions'],
  ['/v1/completions', '/v1/completions'],
  ['/v1/generations', '/v1/generations'],
  ['/v1/responses', '/v1/responses'],
  ['/v1/messages', '/v1/messages'],
]);

/**
 * A request's cache inputs (see `CacheInputs`): its directives and template are checked now
 * (a 400 naming the field; nothing to do when absent), its key material only when called.
 * Undefined on a route that is not cached.
 */
function cacheInputsOf(req: EdgeRequest, endUser: boolean, useCase: string | undefined, sampling: SamplingParams): CacheInputs | undefined {
  const route = req.routePath !== undefined ? CACHE_ROUTES.get(req.routePath) : undefined;
  if (!route) return undefined;
  const body = req.body as { weir_cache?: unknown; weir_prompt_template?: unknown } | undefined;
  const directives = cacheDirectivesOf(req.header('cache-control'), body?.weir_cache);
  const template = templateOf(req.header(TEMPLATE_HEADER), body?.weir_prompt_template);
  return () => ({
    material: keyMaterialOf(route, body, template),
    facts: { temperature: sampling.temperature, seed: sampling.seed, endUser, ...(useCase !== undefined ? { useCase } : {}), directives },
  });
}

function sampling(body: { temperature?: number | null; top_p?: number | null; seed?: number | null; stop?: string | string[] | null }): SamplingParams {
  return {
    ...(body.temperature != null ? { temperature: body.temperature } : {}),
    ...(body.top_p != null ? { topP: body.top_p } : {}),
    ...(body.seed != null ? { seed: body.seed } : {}),
    ...(body.stop != null ? { stop: toStopList(body.stop) } : {}),
  };
}

function deadlineHeader(req: EdgeRequest): number | undefined {
  const v = req.header('x-weir-deadline-ms');
  if (v === undefined) return undefined;
  const n = /^\d{1,7}$/.test(v.trim()) ? Number(v.trim()) : NaN;
  if (!Number.isInteger(n) || n <= 0 || n > 3_600_000) {
    throw new WeirError('invalid_request', '`x-weir-deadline-ms` must be a whole number of milliseconds between 1 and 3600000.', { param: 'x-weir-deadline-ms' });
  }
  return n;
}

/** How long `POST /v1/generations/{id}/cancel` waits for the generation it stopped to end (ms). */
const CANCEL_WAIT_MS = 2_000;

/** The transcript's outcome once it ends, or undefined after `ms` (the timer never holds the process). */
function endedWithin(transcript: Transcript, ms: number): Promise<GenerationOutcome | undefined> {
  if (transcript.outcome) return Promise.resolve(transcript.outcome);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    timer.unref();
    void transcript.ended().then((o) => {
      clearTimeout(timer);
      resolve(o);
    });
  });
}

function describe(entry: { generationId: string; requestId: string; modelRevision: string; state: string; outcome?: GenerationOutcome }) {
  const o = entry.outcome;
  return {
    generation_id: entry.generationId,
    request_id: entry.requestId,
    model_revision: entry.modelRevision,
    status: o ? statusOf(o.finishReason) : entry.state,
    ...(o
      ? {
          finish_reason: o.finishReason,
          usage: { input_tokens: o.usage.inputTokens, output_tokens: o.usage.outputTokens, cost_usd: o.costNanoUsd / 1e9 },
        }
      : {}),
  };
}

function describeRecord(r: UsageRecord) {
  return {
    generation_id: r.generationId,
    request_id: r.requestId,
    model_revision: r.modelRevision,
    status: statusOf(r.finishReason),
    finish_reason: r.finishReason,
    usage: { input_tokens: r.inputTokens, output_tokens: r.outputTokens, cost_usd: r.costNanoUsd / 1e9 },
  };
}

/**
 * Waits for a generation's first event. A failure before any output throws its Weir error
 * (so the route answers with an HTTP status); otherwise returns every event, first included.
 */
async function followFromFirstEvent(events: AsyncIterable<TranscriptEvent>): Promise<AsyncIterable<TranscriptEvent>> {
  const it = events[Symbol.asyncIterator]();
  const first = await it.next();
  if (!first.done && first.value.type === 'end' && ((first.value.outcome.finishReason === 'error' && first.value.outcome.usage.outputTokens === 0) || blockedBeforeOutput(first.value.outcome))) {
    throw outcomeError(first.value.outcome);
  }
  return {
    async *[Symbol.asyncIterator]() {
      if (first.done) return;
      yield first.value;
      for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
    },
  };
}

/**
 * On a response whose headers are still unsent: the revision that answered
 * (`x-weir-model-revision`, which before the answer named the first choice) and, after a
 * fallback, why (`x-weir-fallback-reason`); with the answer `g` of a live request, its cost and
 * Weir's overhead (`x-weir-cost-usd`, `x-weir-overhead-ms`: cost-report.ts).
 */
function answeredBy(res: ServerResponse, o: GenerationOutcome, g?: { cost?: CostMeter }): void {
  if (res.headersSent) return;
  res.setHeader('x-weir-model-revision', o.modelRevision);
  if (o.fallback) res.setHeader('x-weir-fallback-reason', o.fallback.reason);
  g?.cost?.setHeaders(res, o);
}

/** The `end` event's data on Weir's stream and the tail of its JSON response. */
function weirEndData(o: GenerationOutcome): WeirEndData {
  return {
    finish_reason: o.finishReason,
    usage: { input_tokens: o.usage.inputTokens, output_tokens: o.usage.outputTokens, cost_usd: o.costNanoUsd / 1e9 },
    model_used: o.modelRevision,
    ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}),
    ...(o.error ? { error: { type: HTTP_ERRORS[asCode(o.error.code)].type, code: o.error.code, message: o.error.message } } : {}),
  };
}

/** `Last-Event-ID` (header, or `last_event_id` query for clients that cannot set headers); 0 when absent. */
function parseLastEventId(req: EdgeRequest): number {
  const header = req.header('last-event-id');
  const fromQuery = req.query().last_event_id;
  const raw = header ?? (typeof fromQuery === 'string' ? fromQuery : undefined);
  if (raw === undefined || raw.trim() === '') return 0;
  const v = raw.trim();
  if (!/^\d{1,9}$/.test(v)) {
    const param = header !== undefined ? 'Last-Event-ID' : 'last_event_id';
    throw new WeirError('invalid_request', `\`${param}\` must be the non-negative integer id of the last event received.`, { param });
  }
  return Number(v);
}

/**
 * The idempotency key of `POST /v1/generations`: `request_id` in the body, or an
 * `Idempotency-Key` header (the same key both ways is fine; two different keys are a 400).
 */
function generationsKey(req: EdgeRequest, bodyKey: string | undefined): { requestId?: string; keyParam: string } {
  const headerKey = idempotencyKeyHeader(req);
  if (bodyKey !== undefined && headerKey !== undefined && bodyKey !== headerKey) {
    throw new WeirError('invalid_request', '`request_id` and the `Idempotency-Key` header name different keys; send one of them, or the same key in both.', { param: 'request_id' });
  }
  if (bodyKey !== undefined) return { requestId: bodyKey, keyParam: 'request_id' };
  if (headerKey !== undefined) return { requestId: headerKey, keyParam: 'Idempotency-Key' };
  return { keyParam: 'request_id' };
}

/** The OpenAI routes' opt-in idempotency key (`Idempotency-Key`), validated like `request_id`. */
function idempotencyKeyHeader(req: EdgeRequest): string | undefined {
  const v = req.header('idempotency-key');
  if (v === undefined) return undefined;
  if (!REQUEST_ID.test(v)) {
    throw new WeirError('invalid_request', '`Idempotency-Key` must be 1–128 characters of letters, digits and . _ : -.', { param: 'Idempotency-Key' });
  }
  return v;
}

function asCode(code: string): keyof typeof HTTP_ERRORS {
  return code in HTTP_ERRORS ? (code as keyof typeof HTTP_ERRORS) : 'internal';
}

/**
 * The HTTP error of a generation that failed before any output. A transient failure (the
 * outcome says `retryable`, or gave a hint) is retryable with `Retry-After` (the upstream's
 * hint, else 1 s) and says so in its message.
 */
function outcomeError(o: GenerationOutcome): WeirError {
  const retryAfterMs = o.error?.retryAfterMs;
  const message = o.error?.message ?? 'the generation failed';
  if (retryAfterMs === undefined && !o.error?.retryable) return new WeirError(asCode(o.error?.code ?? 'internal'), message);
  return new WeirError(asCode(o.error?.code ?? 'internal'), /retry/i.test(message) ? message : `${message}; retry shortly`, { retryable: true, retryAfterMs: retryAfterMs ?? 1_000 });
}

/** 503 `config_stale`: how old the snapshot is, the maximum when known, and what must come back. */
function configStaleError(state: ConfigState): WeirError {
  const age = Math.round(state.ageMs / 1000);
  const max = state.maxAgeMs !== undefined ? ` of ${Math.round(state.maxAgeMs / 1000)} s` : '';
  return new WeirError(
    'config_stale',
    `This gateway's configuration snapshot${state.version !== undefined ? ` (version ${state.version})` : ''} is ${age} s old, past the maximum staleness${max}: it refuses requests rather than trust stale access decisions until it reaches the control plane over NATS again. Retry shortly (another gateway may be current).`,
    { retryable: true, retryAfterMs: CONFIG_STALE_RETRY_MS },
  );
}

function deadlineInQueue(): WeirError {
  return new WeirError('deadline_exceeded', 'The deadline passed before the generation could start (waiting for capacity, or a deadline shorter than the request takes to reach an engine); raise the deadline or retry later.', { retryable: true });
}

/**
 * 504 `deadline_exceeded` on the OpenAI routes for a generation that reached an engine but whose
 * deadline passed before its first token: an empty `200` would read as a complete answer.
 */
function deadlineBeforeOutput(): WeirError {
  return new WeirError('deadline_exceeded', 'The deadline passed before the model produced any output; raise the deadline (x-weir-deadline-ms) or retry.', { retryable: true });
}

function deadlineOrCancel(o: GenerationOutcome): WeirError {
  if (blockedBeforeOutput(o)) return outcomeError(o);
  return o.finishReason === 'deadline' ? deadlineInQueue() : new WeirError('invalid_request', 'The request was cancelled before it started.');
}

function notFoundGeneration(id: string): WeirError {
  return new WeirError('not_found', `No generation '${id}' for your tenant on this gateway (finished generations are kept for 10 minutes).`);
}

function failedOutcome(revision: string, err: unknown): GenerationOutcome {
  const e = toWeirError(err);
  return {
    finishReason: 'error',
    usage: { inputTokens: 0, outputTokens: 0 },
    costNanoUsd: 0,
    modelRevision: revision,
    timings: { queueMs: 0, ttftMs: null, totalMs: 0 },
    error: { code: e.code, message: e.message },
  };
}

/** Sends an OpenAI-shaped error with the headers clients use to decide on retries. */
export function sendError(res: ServerResponse, error: WeirError): void {
  const mapping = HTTP_ERRORS[error.code];
  if (error.retryAfterMs !== undefined) {
    res.setHeader('retry-after', String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))));
    res.setHeader('retry-after-ms', String(Math.ceil(error.retryAfterMs)));
  }
  // The official clients retry 409 and 429 unless told not to: say so when retrying the same
  // request cannot help (a spent budget, a key used for another request, a request larger
  // than a rate limit's whole window).
  // A kill switch is a 503 that only an operator lifts: the clients' automatic retries would only add load.
  // An `output_invalid` (502) was generated and billed: a blind retry pays again (the caller decides).
  if (error.code === 'kill_switch' || error.code === 'output_invalid' || (!error.retryable && (mapping.status === 409 || mapping.status === 429))) res.setHeader('x-should-retry', 'false');
  if (error instanceof AdmissionRejectedError) {
    for (const [name, value] of Object.entries(rateLimitHeaders(error.rateLimits))) res.setHeader(name, value);
  }
  sendJson(res, mapping.status, openAiError(error.message, mapping.type, error.code, error.param ?? null));
}

/**
 * The request path behind every public route (ARCHITECTURE.md §2): route → count input
 * tokens → check limits → reserve → schedule → relay → settle. Routes only translate
 * between their wire format and this pipeline, so every door gets the same admission,
 * metering and exactly-once accounting. A request like one the scheduler refused moments ago
 * (same tenant, revision and priority) is refused right after routing, before the token count
 * and the reservation (scheduler pushback, `scheduler-pushback.ts`).
 *
 * Invariants kept here: a request rejected before the engine holds nothing (its
 * reservation is released); a request that ended in the queue gets one zero-token usage
 * record; a request that reached the engine is settled to what the relay measured.
 */
import { createHash } from 'node:crypto';
import {
  type AdmissionService,
  type AdmitService,
  type Admitted,
  type AliasSpec,
  type ApiRoute,
  type Caller,
  type Clock,
  type GenerationInput,
  type GenerationOutcome,
  type RateLimitStatus,
  type RequestPriority,
  type RevisionDeprecation,
  type RevisionSpec,
  type RouterService,
  type SamplingParams,
  type SchedulerService,
  type ScheduleResult,
  type Settlement,
  type TenantCachePolicy,
  type TenantSpec,
  type TokenUsage,
  type UseCasePolicy,
  useCasePolicyOf,
  type ToolChoice,
  type ToolDefinition,
  type RetainSpec,
  type ReservationRef,
  type SettlementJournal,
  type WeirErrorCode,
  DEFAULT_SCHEDULING,
  WeirError,
  retryDelayMs,
  revisionKindOf,
  tenantKeyOf,
} from '@weir/core';
import { type CachedAnswer, type CacheHit, type CacheKeyMaterial, type CacheQuery, type CacheRequestFacts, type ResponseCache, cacheEnabled, cacheQueryOf, checkTemplate, decideCache, type CacheBypassReason } from '@weir/cache';
import { priceUsage, worstCaseNanoUsd } from '@weir/ledger';
import { pickWeighted } from '@weir/routing';
import { type Relay, type RelayHandle, settlementOf } from '@weir/streaming';
import { isRetired } from './deprecation';
import { composeAdmit } from './admit';
import { type AnsweringAttempt, type CandidateHealth, type FailoverOptions, startWithFailover } from './failover';
import { createSchedulerPushback, type PushbackKey } from './scheduler-pushback';
import { createAdmissionPushback } from './admission-pushback';

/** What the pipeline reports to metrics. */
export interface PipelineObserver {
  /** A request refused before any work (4xx/429/503); `reason` is the Weir error code. */
  onRejected?(caller: Caller, reason: WeirErrorCode): void;
  /** A request that was admitted has ended (engine or queue), after its usage record is queued. */
  onFinished?(summary: { caller: Caller; route: ApiRoute; alias: string; revision: RevisionSpec; outcome: GenerationOutcome; /** The replica that served; absent when the request ended in the queue. */ replicaId?: string }): void;
  /**
   * A request of a tenant whose cache policy is on was looked up (or bypassed the cache).
   * `savedNanoUsd`: on a hit, the revision's price of the cached usage minus what was billed;
   * `savedMs`: on a hit, the cached answer's original latency (arrival to end) minus the hit's.
   */
  onCache?(event: CacheEvent): void;
}

/** One cache outcome of a request (see {@link PipelineObserver.onCache}); never content. */
export interface CacheEvent {
  caller: Caller;
  revision: RevisionSpec;
  result: 'hit' | 'miss' | 'bypass';
  /** The tier that answered (hit). */
  tier?: CacheHit['tier'];
  /** Why the cache was bypassed. */
  reason?: CacheBypassReason;
  savedNanoUsd?: number;
  savedMs?: number;
}

/**
 * What a request says about the cache (docs/caching.md), computed by its route only when the
 * tenant's cache policy is on: the key material of its body and the facts the policy decides on.
 * May throw `WeirError` (400) for a malformed cache field.
 */
export type CacheInputs = () => { material: CacheKeyMaterial; facts: CacheRequestFacts };

/** A request's place in the cache, as the route tells the client (`x-weir-cache`). */
export type CacheStatus =
  | { status: 'hit'; tier: CacheHit['tier'] }
  | {
      status: 'miss' | 'bypass';
      /**
       * Stores the complete answer (finish `stop`/`length`) of a miss the policy lets be stored,
       * answered by the routed revision; returns at once (the write is in the background).
       * Absent when nothing may be stored.
       */
      remember?: (answer: CachedAnswer) => void;
    };

/** Dependencies of {@link createGenerationPipeline}. */
export interface GenerationPipelineDeps {
  router: RouterService;
  /**
   * Admission (reserve, settle, release). The pipeline reserves and acquires the first slot
   * through {@link admit} when it is given, else through both composed in-process
   * (`composeAdmit(admission, scheduler)`); one of the two is required.
   */
  admission?: AdmissionService;
  /**
   * Reserve + acquire in one call (the split's admission `Admit`: one round trip from the
   * gateway, issue 13 item 6); settle and release go to the instance that reserved. Default
   * `composeAdmit(admission, scheduler)`.
   */
  admit?: AdmitService;
  /** The scheduler: the first slot when {@link admit} is not given, and every retry or fallback's slot. */
  scheduler: SchedulerService;
  relay: Relay;
  /**
   * Counts prompt tokens with the revision's tokenizer (or the engine's documented upper bound).
   * `limit` is the revision's context window: counting may stop once past it (any number above
   * it refuses the input), so a huge input costs no more than one just over the window.
   */
  countInputTokens(revision: RevisionSpec, input: GenerationInput, limit?: number): Promise<number>;
  /**
   * Where the settlement entries the gateway itself makes go (ADR 0002 §2): requests that ended
   * in the queue, failures no relay recorded, a lost relay's stream. The relay journals the rest.
   */
  settlements: SettlementJournal;
  /**
   * Tenants by id (deadline defaults, pins). A function is called on every request, so a
   * snapshot can replace the map while the gateway serves (`createLiveConfig(...).tenants`).
   */
  tenants: ReadonlyMap<string, TenantSpec> | (() => ReadonlyMap<string, TenantSpec>);
  /**
   * Revisions by id, as of the current configuration: lets a request the alias's canary split
   * sent to a retired arm go to one of the alias's other, serving arms (the same sticky key).
   * Without it such a request fails with `model_retired`. Default none.
   */
  revisions?: () => ReadonlyMap<string, RevisionSpec>;
  /** Wall clock (epoch ms) for deprecation dates (UTC days). Default `Date.now`. */
  wallClock?: () => number;
  clock: Clock;
  observer?: PipelineObserver;
  /** A reservation never settled expires this long after the request's deadline (ms). Default 60,000. */
  reservationGraceMs?: number;
  /**
   * Scheduler pushback (ms, 0 = off; `defaults.scheduling.pushback_ms`): after the scheduler
   * refuses a request with `queue_full` (or sheds batch work) or `deadline_unmeetable`, like
   * requests of the same tenant, revision and priority are refused by `admit` for up to this
   * long — before counting tokens or reserving — unless a grant for that key comes first
   * (see `scheduler-pushback.ts`). Default 1,000 (`DEFAULT_SCHEDULING.pushbackMs`).
   */
  pushbackMs?: number;
  /**
   * Health of revisions (circuit breakers, keyed by revision id; `createBreakerRegistry` from
   * `@weir/routing` fits): a revision whose breaker is open is skipped for the next one of the
   * chain. Default none (every revision is tried).
   */
  health?: CandidateHealth;
  /** Retry and fallback bounds before the first token (see `failover.ts`). Default 3 attempts, 50–1,000 ms backoff. */
  failover?: FailoverOptions;
  /**
   * The response cache's tiers in order (exact, then semantic; `createResponseCache` from
   * `@weir/cache`), used for tenants whose `TenantSpec.cache` is set. A hit is admitted by a
   * reservation without a scheduler slot (`AdmitService.reserve`: in the split one `Reserve`
   * call to an admission instance, settled or released at that instance). Default none (no cache).
   */
  cache?: ResponseCache;
  /**
   * Output moderation of a cache hit (issue 15; docs/caching.md): resolves false when the
   * tenant's output stage flags the cached answer (checked in the windows the relay would use,
   * `checkWholeOutput` of `@weir/moderation`), and true when it passes or the tenant has no
   * output stage (a map lookup: no call). A flagged hit is not served: its entry is dropped
   * (`ResponseCache.forget`) and the request runs live as a miss, where the relay's windows cut
   * it. Never rejects. Default none (hits are served unchecked: no tenant has output moderation).
   */
  screenCachedAnswer?: (caller: Caller, answer: CachedAnswer) => Promise<boolean>;
}

/** One request, as the routes hand it over. */
export interface GenerationParams {
  caller: Caller;
  route: ApiRoute;
  alias: string;
  generationId: string;
  /** The client's idempotency key, else the generation id. */
  requestId: string;
  input: GenerationInput;
  /** The client's output limit; undefined means the route's default. */
  maxOutputTokens?: number;
  /** The route's default output limit (OpenAI's 16 on `/v1/completions`); else the revision's. */
  routeDefaultOutputTokens?: number;
  sampling: SamplingParams;
  /** The client's deadline (ms from arrival); undefined means the tenant's default. */
  deadlineMs?: number;
  /** Arrival on `clock` (ms). */
  arrivedAt: number;
  /** The route's own names of the fields errors point at (OpenAI's `param`). Default: the chat route's. */
  paramNames?: ParamNames;
  /** The caller's use case (validated: `USE_CASE_PATTERN`), carried into the usage record. Default none. */
  useCase?: string;
  /** The client's session or agent-run id (`x-weir-session-id`, validated): admission caps it when the app allows sessions. Default none. */
  sessionId?: string;
  /** Scheduling class (`batch` runs after interactive work, on the batch pool if any, shed first). Default `interactive`. */
  priority?: RequestPriority;
  /** The client's end-user id (OpenAI's `user`), used as the canary's sticky key when given. Default none (the request id). */
  endUser?: string;
  /** A JSON Schema the output must match, passed to the engine (`EngineRequest.outputSchema`). Default none. */
  outputSchema?: object;
  /** Function tools the model may call, passed to the engine (`EngineRequest.tools`). Default none. */
  tools?: ToolDefinition[];
  /** OpenAI's `tool_choice` (`EngineRequest.toolChoice`); only with `tools`. Default none. */
  toolChoice?: ToolChoice;
  /** OpenAI's `parallel_tool_calls` (`EngineRequest.parallelToolCalls`); only with `tools`. Default none. */
  parallelToolCalls?: boolean;
  /** Anthropic's beta flags (`EngineRequest.anthropicBeta`): for Anthropic upstreams only. Default none. */
  anthropicBeta?: string[];
  /** The request claimed an idempotency key: its settlement leaves the result for retries (`RelayJob.retain`). Default none. */
  retain?: RetainSpec;
  /** The request's cache inputs, read only when its tenant's cache policy is on. Default none (never cached). */
  cache?: CacheInputs;
}

/**
 * The JSON text of what a request adds to the model's prompt besides its messages: its tool
 * definitions (with `tool_choice`) and, when `schemaInPrompt`, its output schema; undefined when
 * it has neither.
 */
function promptExtrasText(params: Pick<GenerationParams, 'tools' | 'toolChoice' | 'outputSchema'>, schemaInPrompt: boolean): string | undefined {
  const hasTools = params.tools !== undefined && params.tools.length > 0;
  const schema = schemaInPrompt ? params.outputSchema : undefined;
  if (!hasTools && schema === undefined) return undefined;
  return JSON.stringify([hasTools ? params.tools : null, hasTools ? (params.toolChoice ?? null) : null, schema ?? null]);
}

/**
 * The abort reason the gateway gives `AdmittedGeneration.start`'s signal when input moderation
 * blocked the request while it waited for a slot: the request then ends in the queue as
 * `content_filter` (one zero-token usage record) rather than `cancelled`.
 */
export const INPUT_FLAGGED_ABORT = 'weir:input_flagged';

/** Characters of a prompt's beginning that make its prefix-affinity key. */
const AFFINITY_PREFIX_CHARS = 2_048;

/**
 * The scheduler's prefix-affinity key of a request: its tenant and a hash of its prompt's first
 * {@link AFFINITY_PREFIX_CHARS} characters (roles included), so requests sharing a system prompt
 * or a conversation's beginning go to the replica whose KV cache holds it. Never the text itself.
 */
export function affinityKeyOf(tenantId: string, input: GenerationInput): string {
  const text =
    input.kind === 'text'
      ? input.text
      : input.kind === 'embedding'
        ? input.items.map((i) => (typeof i === 'string' ? i : i.join(','))).join('\u0001')
        : input.messages.map((m) => `${m.role}\u0000${m.content}`).join('\u0001');
  return `${tenantId}:${createHash('sha256').update(text.slice(0, AFFINITY_PREFIX_CHARS)).digest('base64url').slice(0, 16)}`;
}

/** Bytes a request's input holds while it waits in the scheduler's queue (UTF-8). */
function inputBytes(input: GenerationInput): number {
  if (input.kind === 'text') return Buffer.byteLength(input.text);
  if (input.kind === 'embedding') return input.items.reduce((sum, i) => sum + (typeof i === 'string' ? Buffer.byteLength(i) : 4 * i.length), 0);
  return input.messages.reduce((sum, m) => sum + Buffer.byteLength(m.content) + (m.name ? Buffer.byteLength(m.name) : 0), 0);
}

/** Field names a route's clients know, for error messages and `param`. */
export interface ParamNames {
  model: string;
  input: string;
  maxOutputTokens: string;
}

const CHAT_PARAMS: ParamNames = { model: 'model', input: 'messages', maxOutputTokens: 'max_tokens' };

/**
 * Admission refused the request: a `WeirError` (`rate_limited`, `concurrency_limited`,
 * `budget_exhausted`) that also carries the rate-limit windows for the `x-ratelimit-*` headers.
 */
export class AdmissionRejectedError extends WeirError {
  constructor(
    code: 'rate_limited' | 'concurrency_limited' | 'budget_exhausted',
    message: string,
    retryAfterMs: number | undefined,
    readonly rateLimits: RateLimitStatus | undefined,
  ) {
    // Retrying helps only when the limiter says when: a spent budget, or a request larger than a
    // rate limit's whole window, comes with no hint; a budget whose rest is held by other
    // admission instances (ADR 0002 §1, demand) comes with one.
    super(code, message, { retryAfterMs, retryable: retryAfterMs !== undefined });
  }
}

/** A request that passed routing, validation and admission and holds a reservation. */
export interface AdmittedGeneration {
  revision: RevisionSpec;
  /** The rate-limit windows after this request (for `x-ratelimit-*`); absent when none apply. */
  rateLimits?: RateLimitStatus;
  inputTokens: number;
  maxOutputTokens: number;
  /** Absolute deadline on the pipeline's clock (ms). */
  deadlineAt: number;
  /** The request's place in the cache; absent when its tenant's policy is off (no `x-weir-cache` header). */
  cache?: CacheStatus;
  /**
   * Waits for a slot, then starts the relay. A cache hit resolves `cached` at once: its usage is
   * recorded (one usage row with `cacheHit`) and its reservation settled before it resolves. Resolves `running` with the relay handle, or
   * `ended` when the request ended in the queue (deadline passed, or `signal` fired).
   * Throws `WeirError` (`queue_full` — also for batch work shed in a brownout —,
   * `deadline_unmeetable`, `engine_unavailable`) after releasing the reservation.
   * Call at most once.
   */
  start(
    signal: AbortSignal,
  ): Promise<
    | {
        kind: 'running';
        handle: RelayHandle;
        /** The revision of the first attempt (not the first choice when its breaker was open). */
        revisionId: string;
        /** Why the first attempt is not on the first choice (`circuit_open`); absent when it is. */
        fallbackReason?: string;
        /**
         * The attempt relaying now — after a fallback before the first token, not the first one:
         * ask it once the first delta is out to name the revision that answers.
         */
        answering(): AnsweringAttempt;
      }
    | { kind: 'ended'; outcome: GenerationOutcome }
    | { kind: 'cached'; outcome: GenerationOutcome; answer: CachedAnswer }
  >;
}

/** The pipeline. */
export interface GenerationPipeline {
  /**
   * Routes, validates limits and reserves. Throws `WeirError`: `model_not_found`,
   * `model_retired` (the revision the request resolves to is retired: pinned, or the alias's
   * only serving arm; holds nothing),
   * `output_limit_exceeded`, `context_length_exceeded`, `rate_limited`,
   * `concurrency_limited`, `budget_exhausted` (the last three as {@link AdmissionRejectedError}),
   * and `queue_full` / `deadline_unmeetable` (retryable, message prefixed "recently refused: ")
   * when the scheduler refused a like request moments ago (scheduler pushback,
   * {@link GenerationPipelineDeps.pushbackMs}); those hold nothing and cost no token count.
   */
  admit(params: GenerationParams): Promise<AdmittedGeneration>;
  /**
   * Holds one request of `caller` against its tenant's and app's requests per minute and
   * concurrency, for work that runs no model (`POST /v1/moderations`): one reservation of 0
   * input tokens, 1 output token and $0 (one `Reserve` call in the split), released — never
   * settled, so no usage row is written and no token stays counted; the request stays counted
   * in the requests-per-minute window, and in flight until `release`. `holdMs`: how long the
   * reservation may live before admission expires it (a crash). Throws
   * {@link AdmissionRejectedError} (`rate_limited`, `concurrency_limited`, `budget_exhausted`)
   * with the rate-limit status for the 429's headers.
   */
  holdUnmetered(caller: Caller, requestId: string, holdMs: number): Promise<{ rateLimits?: RateLimitStatus; release(): Promise<void> }>;
  /**
   * Counts `input`'s tokens with `revision`'s tokenizer, as admission counts them (the
   * {@link GenerationPipelineDeps.countInputTokens} it was built with; no limit): for routes
   * that answer a count (`POST /v1/messages/count_tokens`). Reserves nothing.
   */
  countInputTokens(revision: RevisionSpec, input: GenerationInput): Promise<number>;
  /** The deadline a request of `caller` gets (ms from arrival): `requestedMs`, else the tenant's default, else 120,000. */
  deadlineMsFor(caller: Caller, requestedMs?: number): number;
  /**
   * Throws the refusal `caller` would get from admission now, when admission refused it moments
   * ago in a way that holds for every request of it (admission pushback,
   * `admission-pushback.ts`: the requests window empty, the concurrency limit reached, the
   * budget spent; the message prefixed "recently refused: "). O(1); `admit` calls it first.
   * Routes call it before expensive work of their own (compiling an output schema). A spent
   * budget is not applied here to a tenant whose cache policy is on (a cache hit's worst case is
   * far smaller than the refused request's): `admit` applies it after the cache lookup, on a miss.
   */
  precheck(caller: Caller): void;
  /**
   * The use cases the caller's tenant defines (model chain, limits, redaction profile) in the
   * current snapshot; empty when none. No I/O.
   */
  useCases(caller: Caller): readonly UseCasePolicy[];
}

/**
 * The most a request can cost (nano-USD): `inputTokens` plus the whole output limit, priced at
 * whichever candidate revision (the routed one and its fallback chain) charges most for them —
 * ledger pricing (`worstCaseNanoUsd`: each token at its revision's dearest class, so no split
 * into cache reads, cache writes or reasoning can cost more). 0 for an empty chain.
 */
export function worstCaseCostNanoUsd(candidates: readonly RevisionSpec[], inputTokens: number, maxOutputTokens: number): number {
  let worst = 0;
  for (const c of candidates) worst = Math.max(worst, worstCaseNanoUsd(c.pricing, inputTokens, maxOutputTokens));
  return worst;
}

/** The revision a tenant route pins for `alias` (the use case's route first, then the alias's own), if any. */
function pinOf(tenant: TenantSpec | undefined, alias: string, useCase: string | undefined): string | undefined {
  // A use case's own chain is its most specific route (as the router takes it).
  const uc = useCasePolicyOf(tenant, useCase);
  if (uc && uc.model === alias) return uc.pin;
  const routes = tenant?.routes;
  if (!routes) return undefined;
  const route = (useCase !== undefined ? routes.find((r) => r.alias === alias && r.useCase === useCase) : undefined) ?? routes.find((r) => r.alias === alias && r.useCase === undefined);
  return route?.pin;
}

/** Another arm of the alias's split that is known and not retired, picked by the same sticky key; undefined when none. */
function otherServingArm(alias: AliasSpec, revisions: ReadonlyMap<string, RevisionSpec> | undefined, stickyKey: string, nowMs: number): RevisionSpec | undefined {
  if (!revisions) return undefined;
  const arms = alias.targets.flatMap((t) => {
    const r = revisions.get(t.revision);
    return r && t.weight > 0 && !isRetired(r, nowMs) ? [{ value: r, weight: t.weight }] : [];
  });
  return pickWeighted(arms, stickyKey);
}

/** `model_retired` for a request that resolved to a retired revision: names the retirement day and the replacement. */
/**
 * What the gateway's own settlement entries need of a request (the relay's carry the same):
 * ids, route, caller, alias, use case and the reservation its row settles.
 */
function usageJobOf(params: GenerationParams, reservation: ReservationRef | undefined) {
  return {
    generationId: params.generationId,
    requestId: params.requestId,
    route: params.route,
    caller: params.caller,
    modelAlias: params.alias,
    ...(params.useCase !== undefined ? { useCase: params.useCase } : {}),
    ...(reservation ? { reservation } : {}),
  };
}

function retiredError(alias: string, revision: RevisionSpec, pinned: boolean, param: string): WeirError {
  const d = revision.deprecation as RevisionDeprecation;
  const how = pinned ? `is pinned to revision '${revision.id}' for your tenant` : `routes only to revision '${revision.id}'`;
  return new WeirError(
    'model_retired',
    `Model '${alias}' ${how}, which was retired on ${d.retiresOn} (UTC); its replacement is revision '${d.replacement}'. Weir never switches revisions on its own: have your platform team pin '${d.replacement}' (or move the alias to it), or send a model that routes to it.`,
    { param },
  );
}

/** 400 for a request of the other kind than its revision: an embedding model on a generation route, or a generation model on `/v1/embeddings`. */
function wrongKindError(alias: string, revision: RevisionSpec, param: string): WeirError {
  return revisionKindOf(revision) === 'embedding'
    ? new WeirError('invalid_request', `Model '${alias}' is an embedding model (revision '${revision.id}'): it serves POST /v1/embeddings only; send a text-generation model here.`, { param })
    : new WeirError('invalid_request', `Model '${alias}' is not an embedding model (revision '${revision.id}' generates text); send an embedding model to /v1/embeddings.`, { param });
}

/** Why an embedding revision cannot give `dimensions`, or undefined when it can. */
function dimensionsProblem(revision: RevisionSpec, dimensions: number): string | undefined {
  const spec = revision.embedding;
  if (!spec) return undefined; // no declared size: the upstream decides
  if (dimensions === spec.dimensions) return undefined;
  if (!spec.variableDimensions) return `returns ${spec.dimensions}-dimensional embeddings and cannot shorten them; leave out \`dimensions\` (or send ${spec.dimensions})`;
  if (dimensions > spec.dimensions) return `returns at most ${spec.dimensions} dimensions; lower \`dimensions\``;
  return undefined;
}

/** Attempts of a settlement before it is left to reconciliation (≈ 30 s of backoff). */
const SETTLE_ATTEMPTS = 7;

/** Creates the pipeline. */
export function createGenerationPipeline(deps: GenerationPipelineDeps): GenerationPipeline {
  const { clock } = deps;
  const pushback = createSchedulerPushback({ holdMs: deps.pushbackMs ?? DEFAULT_SCHEDULING.pushbackMs, clock });
  const admissionMemo = createAdmissionPushback({ holdMs: deps.pushbackMs ?? DEFAULT_SCHEDULING.pushbackMs });

  const reject = (caller: Caller, error: WeirError): never => {
    deps.observer?.onRejected?.(caller, error.code);
    throw error;
  };

  /**
   * Settles, retrying a failed call (admission briefly unreachable) with backoff for about
   * 30 s; settle is idempotent. If it still fails, the reservation stays held until it expires
   * and reconciliation settles it from the ledger.
   */
  const settleWithRetry = async (admitted: Pick<Admitted, 'settle'>, settlement: Settlement) => {
    for (let attempt = 1; ; attempt++) {
      try {
        await admitted.settle(settlement);
        return;
      } catch {
        if (attempt >= SETTLE_ATTEMPTS) return;
        await new Promise((r) => setTimeout(r, retryDelayMs(attempt, { baseMs: 250, maxMs: 8_000 })).unref());
      }
    }
  };

  if (!deps.admit && !deps.admission) throw new TypeError('createGenerationPipeline: give `admission` or `admit`');
  const admitPort: AdmitService = deps.admit ?? composeAdmit(deps.admission as AdmissionService, deps.scheduler);
  const tenants = typeof deps.tenants === 'function' ? deps.tenants : ((map) => () => map)(deps.tenants);
  const wallClock = deps.wallClock ?? Date.now;
  const deadlineMsFor = (caller: Caller, requestedMs?: number) => requestedMs ?? tenants().get(caller.tenantId)?.defaultDeadlineMs ?? 120_000;

  /** Whether `caller`'s tenant may be answered from the response cache (a policy with a tier on, and a cache). */
  const mayHitCache = (caller: Caller) => deps.cache !== undefined && cacheEnabled(tenants().get(caller.tenantId)?.cache);
  /**
   * Refuses `caller` at once when admission refused it moments ago in a way every request of it
   * would be (admission pushback). A remembered `budget_exhausted` is not applied here to a
   * tenant that may be answered from the cache (`deferBudget`, the default for such tenants): a
   * budget refusal means that request's worst case did not fit, and a hit's worst case is a
   * fraction of it, so the memo is consulted after the cache lookup instead (on a miss or bypass,
   * still before the token count); a hit goes to admission, which decides it.
   */
  const precheck = (caller: Caller, deferBudget = mayHitCache(caller)) => {
    const memo = admissionMemo.check(caller, clock.now());
    if (!memo) return;
    if (deferBudget && memo.reason === 'budget_exhausted') return;
    // A spent budget carries no retry hint, as admission's own refusal did not (retrying cannot help).
    reject(caller, new AdmissionRejectedError(memo.reason, `recently refused: ${memo.message}`, memo.hinted ? memo.retryAfterMs : undefined, memo.rateLimits));
  };

  /**
   * Decides and looks a request up in the cache: a hit (with its query), or the status a miss
   * or bypass is told with. Throws `WeirError` 400 (rejected: nothing held) for a malformed cache
   * field or a template the tenant does not declare.
   */
  const lookUpCache = async (
    cache: ResponseCache,
    policy: TenantCachePolicy,
    params: GenerationParams,
    revision: RevisionSpec,
  ): Promise<{ hit: CacheHit; query: CacheQuery } | { status: CacheStatus }> => {
    const { caller } = params;
    let inputs: ReturnType<CacheInputs>;
    try {
      inputs = (params.cache as CacheInputs)();
      checkTemplate(policy, inputs.material.template);
    } catch (err) {
      return reject(caller, err instanceof WeirError ? err : new WeirError('invalid_request', 'The request’s cache fields are invalid.', { cause: err }));
    }
    const decision = decideCache(policy, inputs.facts);
    if (decision.bypass) {
      deps.observer?.onCache?.({ caller, revision, result: 'bypass', reason: decision.bypass });
      return { status: { status: 'bypass' } };
    }
    const query = cacheQueryOf(inputs.material, tenantKeyOf(caller), revision.id, params.input);
    const remember = (answer: CachedAnswer) => {
      if (answer.modelRevision !== revision.id || (answer.finishReason !== 'stop' && answer.finishReason !== 'length')) return;
      cache.store(policy, query, answer);
    };
    if (decision.read) {
      const hit = await cache.lookup(policy, query);
      // A cached answer the tenant's output moderation now flags is never served: dropped, and run live.
      if (hit && deps.screenCachedAnswer && !(await deps.screenCachedAnswer(caller, hit.answer))) cache.forget(policy, query, hit);
      else if (hit) return { hit, query };
    }
    deps.observer?.onCache?.({ caller, revision, result: decision.read ? 'miss' : 'bypass', ...(decision.read ? {} : { reason: 'no_cache' as const }) });
    return { status: { status: decision.read ? 'miss' : 'bypass', ...(decision.store ? { remember } : {}) } };
  };

  /**
   * A cache hit, admitted like any request: reserved (rate limits, concurrency and budget count
   * it: its tokens are the cached answer's, its worst case the price it is billed), then — when
   * started — recorded as one usage row with `cacheHit` and settled. Nothing reaches a scheduler
   * or an upstream.
   */
  const cachedGeneration = async (
    params: GenerationParams,
    revision: RevisionSpec,
    policy: TenantCachePolicy,
    hit: CacheHit,
    _query: CacheQuery,
    deadlineAt: number,
  ): Promise<AdmittedGeneration> => {
    const { caller } = params;
    const u = hit.answer.usage;
    // The cached answer's token classes too: a hit is billed the policy's share of what it cost.
    const usage: TokenUsage = {
      inputTokens: u.inputTokens,
      outputTokens: u.outputTokens,
      cachedInputTokens: u.cachedInputTokens,
      ...(u.cacheWriteInputTokens ? { cacheWriteInputTokens: u.cacheWriteInputTokens } : {}),
      ...(u.reasoningTokens ? { reasoningTokens: u.reasoningTokens } : {}),
    };
    const fullNanoUsd = priceUsage(revision.pricing, usage);
    const billedNanoUsd = Math.round(fullNanoUsd * policy.hitPriceFraction);
    // A reservation without a scheduler slot (the split: one `Reserve` call, bound to its instance).
    const reserved = await admitPort.reserve({
      caller,
      requestId: params.requestId,
      generationId: params.generationId,
      expiresAtMs: Date.now() + (deadlineAt - clock.now()) + (deps.reservationGraceMs ?? 60_000),
      inputTokens: usage.inputTokens,
      // At least 1, as every reservation asks (an empty cached answer still settles to 0).
      maxOutputTokens: Math.max(1, usage.outputTokens),
      worstCaseCostNanoUsd: billedNanoUsd,
      ...(params.useCase !== undefined ? { useCase: params.useCase } : {}),
      ...(params.sessionId !== undefined ? { sessionId: params.sessionId } : {}),
    });
    if (!reserved.ok) {
      if (!hasOwnScope(params)) admissionMemo.noteRefusal(caller, reserved, clock.now());
      return reject(caller, new AdmissionRejectedError(reserved.reason, reserved.message, reserved.retryAfterMs, reserved.rateLimits));
    }
    let started = false;
    return {
      revision,
      ...(reserved.rateLimits ? { rateLimits: reserved.rateLimits } : {}),
      inputTokens: usage.inputTokens,
      maxOutputTokens: usage.outputTokens,
      deadlineAt,
      cache: { status: 'hit', tier: hit.tier },
      async start(signal) {
        if (started) throw new Error('AdmittedGeneration.start called twice');
        started = true;
        const elapsedMs = Math.max(0, clock.now() - params.arrivedAt);
        if (signal.aborted && signal.reason === INPUT_FLAGGED_ABORT) {
          // Input moderation blocked the request before its hit went out: nothing is billed, the
          // reservation is released, and one zero-token row says `content_filter` (as a request
          // blocked in the queue).
          await reserved.release().catch(() => undefined);
          const blocked: GenerationOutcome = {
            finishReason: 'content_filter',
            usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
            costNanoUsd: 0,
            modelRevision: revision.id,
            timings: { queueMs: 0, ttftMs: null, totalMs: elapsedMs },
          };
          await deps.settlements.append(settlementOf(usageJobOf(params, reserved.reservation), blocked, Date.now()));
          admissionMemo.noteEnded(tenantKeyOf(caller));
          deps.observer?.onFinished?.({ caller, route: params.route, alias: params.alias, revision, outcome: blocked });
          return { kind: 'ended', outcome: blocked };
        }
        const outcome: GenerationOutcome = {
          finishReason: hit.answer.finishReason === 'length' ? 'length' : 'stop',
          usage,
          costNanoUsd: billedNanoUsd,
          modelRevision: revision.id,
          timings: { queueMs: 0, ttftMs: elapsedMs, totalMs: elapsedMs },
          cacheHit: hit.tier,
        };
        const job = { ...usageJobOf(params, reserved.reservation), ...(params.retain ? { retain: params.retain } : {}) };
        const toolCalls = hit.answer.deltaToolCalls ?? [];
        // The usage row (and a keyed request's result for its retries) before the answer goes out, as a relay does.
        try {
          await deps.settlements.append(
            settlementOf(job, outcome, Date.now(), { deltas: hit.answer.deltas, toolCalls, anyToolCalls: toolCalls.some((c) => c !== null) }),
          );
        } catch (err) {
          await reserved.release().catch(() => undefined);
          throw err;
        }
        void settleWithRetry(reserved, { usage, costNanoUsd: billedNanoUsd }).then(() => admissionMemo.noteEnded(tenantKeyOf(caller)));
        const savedMs = hit.answer.originalTotalMs !== undefined ? Math.max(0, hit.answer.originalTotalMs - elapsedMs) : undefined;
        deps.observer?.onCache?.({ caller, revision, result: 'hit', tier: hit.tier, savedNanoUsd: Math.max(0, fullNanoUsd - billedNanoUsd), ...(savedMs !== undefined ? { savedMs } : {}) });
        deps.observer?.onFinished?.({ caller, route: params.route, alias: params.alias, revision, outcome });
        return { kind: 'cached', outcome, answer: hit.answer };
      },
    };
  };

  /**
   * Whether admission may have refused this request on a scope of its own — its use case's (one
   * its tenant defines) or its session's — rather than one every request of the caller shares:
   * such a refusal is not remembered for the caller (admission pushback).
   */
  const hasOwnScope = (params: GenerationParams) =>
    params.sessionId !== undefined || (params.useCase !== undefined && useCasePolicyOf(tenants().get(params.caller.tenantId), params.useCase) !== undefined);

  return {
    deadlineMsFor,
    precheck,
    countInputTokens: (revision, input) => deps.countInputTokens(revision, input),
    useCases: (caller) => tenants().get(caller.tenantId)?.useCases ?? [],
    async holdUnmetered(caller, requestId, holdMs) {
      const reserved = await admitPort.reserve({
        caller,
        requestId,
        generationId: requestId,
        expiresAtMs: Date.now() + holdMs + (deps.reservationGraceMs ?? 60_000),
        inputTokens: 0,
        // At least 1, as every reservation asks; released, so never counted.
        maxOutputTokens: 1,
        worstCaseCostNanoUsd: 0,
      });
      if (!reserved.ok) return reject(caller, new AdmissionRejectedError(reserved.reason, reserved.message, reserved.retryAfterMs, reserved.rateLimits));
      return { ...(reserved.rateLimits ? { rateLimits: reserved.rateLimits } : {}), release: () => reserved.release().catch(() => undefined) };
    },
    async admit(params) {
      const { caller } = params;
      // Before routing, counting tokens and reserving: a caller admission just refused for good
      // (a budget refusal waits for the cache lookup when a hit is possible).
      const cacheable = params.cache !== undefined && mayHitCache(caller);
      precheck(caller, cacheable);
      const names = params.paramNames ?? CHAT_PARAMS;
      // The canary arm follows the end user when the client names one (the same person keeps
      // one arm across requests), else the request id.
      const stickyKey = params.endUser ?? params.requestId;
      const routed = await deps.router.resolve(caller, params.alias, stickyKey, params.useCase);
      if (!routed.ok) return reject(caller, new WeirError('model_not_found', routed.message, { param: names.model }));
      // A retired revision serves nothing: before any token count or reservation, the request
      // moves to another serving arm of the alias's split, or fails naming the replacement.
      const wallNow = wallClock();
      let revision = routed.route.revision;
      if (isRetired(revision, wallNow)) {
        const pinned = pinOf(tenants().get(caller.tenantId), params.alias, params.useCase) !== undefined;
        const other = pinned ? undefined : otherServingArm(routed.route.alias, deps.revisions?.(), stickyKey, wallNow);
        if (!other) return reject(caller, retiredError(params.alias, revision, pinned, names.model));
        revision = other;
      }
      // An embedding request needs an embedding revision and a generation a generation one: a
      // 400 before any count or reservation; fallbacks of the other kind are left out.
      const embedding = params.input.kind === 'embedding';
      const kind = revisionKindOf(revision);
      if ((kind === 'embedding') !== embedding) return reject(caller, wrongKindError(params.alias, revision, names.model));
      if (params.input.kind === 'embedding' && params.input.dimensions !== undefined) {
        const problem = dimensionsProblem(revision, params.input.dimensions);
        if (problem) return reject(caller, new WeirError('invalid_request', `Model '${params.alias}' ${problem}.`, { param: 'dimensions' }));
      }
      /** The candidates before the first token: the chosen revision, then its fallback chain (retired revisions and other kinds left out). */
      const chain = [revision, ...routed.route.fallbacks.filter((r) => r.id !== revision.id && !isRetired(r, wallNow) && revisionKindOf(r) === kind)];

      // Checks that need no token count come first, so an invalid request learns it is invalid.
      if (params.maxOutputTokens !== undefined && params.maxOutputTokens > revision.maxOutputTokens) {
        return reject(
          caller,
          new WeirError(
            'output_limit_exceeded',
            `The output limit ${params.maxOutputTokens} is above the maximum of model '${params.alias}' (${revision.maxOutputTokens} tokens); lower \`${names.maxOutputTokens}\`.`,
            { param: names.maxOutputTokens },
          ),
        );
      }

      const deadlineMs = deadlineMsFor(caller, params.deadlineMs);
      const deadlineAt = params.arrivedAt + deadlineMs;

      // The response cache, after routing (the partition names the revision) and before any token
      // count, scheduler pushback or slot: a hit needs neither. Off for the tenant: one property read.
      const cachePolicy = deps.cache && params.cache ? tenants().get(caller.tenantId)?.cache : undefined;
      let cacheStatus: CacheStatus | undefined;
      if (cachePolicy) {
        const looked = await lookUpCache(deps.cache as ResponseCache, cachePolicy, params, revision);
        if ('hit' in looked) return cachedGeneration(params, revision, cachePolicy, looked.hit, looked.query, deadlineAt);
        cacheStatus = looked.status;
      }
      // Not answered from the cache: a budget refusal deferred above applies now.
      if (cacheable) precheck(caller, false);
      // Scheduler pushback: the scheduler refused a like request moments ago, so refuse this one
      // before the token count, the reservation and the scheduler call it would cost.
      // Slack is compared where the memo is consulted (here), for the refused request too: its
      // slack at the scheduler was already lowered by its token count and reservation, so a like
      // request (same deadline) would otherwise always look roomier and slip through.
      const pushbackKey: PushbackKey = { tenantId: caller.tenantId, revisionId: revision.id, priority: params.priority ?? 'interactive' };
      const admitSlackMs = deadlineAt - clock.now();
      // The output limit asked for (before trimming to the window): a shorter answer may fit where a longer did not.
      const askedOutputTokens = params.maxOutputTokens ?? params.routeDefaultOutputTokens ?? revision.defaultOutputTokens;
      const memo = pushback.check(pushbackKey, admitSlackMs, askedOutputTokens);
      if (memo) {
        const like = memo.code === 'deadline_unmeetable' ? 'recently refused a like request (no later deadline, no smaller output limit)' : 'recently refused';
        return reject(caller, new WeirError(memo.code, `${like}: ${memo.message}`, { retryable: true, retryAfterMs: memo.retryAfterMs }));
      }

      let inputTokens: number;
      // KV tokens the request holds on a replica while it runs: its whole context (input + output
      // limit); for an embedding batch, its largest item (the items are embedded one at a time).
      let kvTokens = 0;
      if (params.input.kind === 'embedding') {
        // Each item must fit the window on its own (they are embedded one by one); the bill is their sum.
        inputTokens = 0;
        for (const [i, item] of params.input.items.entries()) {
          const n = typeof item === 'string' ? await deps.countInputTokens(revision, { kind: 'text', text: item }, revision.contextWindow) : item.length;
          if (n > revision.contextWindow) {
            return reject(
              caller,
              new WeirError('context_length_exceeded', `\`${names.input}[${i}]\` is ${n} tokens or more; model '${params.alias}' embeds at most ${revision.contextWindow} tokens per input. Shorten or split it.`, {
                param: names.input,
              }),
            );
          }
          inputTokens += n;
          kvTokens = Math.max(kvTokens, n);
        }
      } else {
        inputTokens = await deps.countInputTokens(revision, params.input, revision.contextWindow);
        // Tool definitions and an output schema reach a hosted model as prompt text too, and the
        // providers bill them as input: counted (as their JSON) into what admission reserves, so
        // the billed input — never above the reservation — covers them. (llama.cpp turns a schema
        // into a grammar, outside the prompt.)
        const extra = promptExtrasText(params, revision.engine.kind !== 'llamacpp');
        if (extra !== undefined) inputTokens += await deps.countInputTokens(revision, { kind: 'text', text: extra }, revision.contextWindow);
      }
      if (!embedding && inputTokens >= revision.contextWindow) {
        return reject(
          caller,
          new WeirError(
            'context_length_exceeded',
            `The input is ${inputTokens} tokens or more; model '${params.alias}' accepts at most ${revision.contextWindow - 1} input tokens (a context window of ${revision.contextWindow} tokens). Shorten the input.`,
            { param: names.input },
          ),
        );
      }
      let maxOutputTokens: number;
      // An embedding produces no output tokens: its worst case is its input.
      if (embedding) maxOutputTokens = 0;
      else if (params.maxOutputTokens !== undefined) {
        if (inputTokens + params.maxOutputTokens > revision.contextWindow) {
          return reject(
            caller,
            new WeirError(
              'context_length_exceeded',
              `The input (${inputTokens} tokens) plus the output limit (${params.maxOutputTokens}) exceeds the context window of model '${params.alias}' (${revision.contextWindow} tokens); shorten the input or lower \`${names.maxOutputTokens}\`.`,
              { param: names.maxOutputTokens },
            ),
          );
        }
        maxOutputTokens = params.maxOutputTokens;
      } else {
        // No limit given: the default, trimmed to what fits in the context window.
        const wanted = params.routeDefaultOutputTokens ?? revision.defaultOutputTokens;
        maxOutputTokens = Math.max(1, Math.min(wanted, revision.contextWindow - inputTokens));
      }
      if (!embedding) kvTokens = inputTokens + maxOutputTokens;

      // The first attempt's revision: the first choice, unless its circuit breaker is open —
      // then the first revision of the chain whose breaker lets a call through (fallback before
      // any work; nothing is reserved when none does).
      let firstIndex = 0;
      let permit = deps.health?.tryAcquire(chain[0].id, clock.now()) ?? { allowed: true as const, probe: false };
      let refusedFor = 0;
      while (!permit.allowed) {
        refusedFor = Math.max(refusedFor, permit.retryAfterMs);
        firstIndex++;
        if (firstIndex >= chain.length) {
          return reject(
            caller,
            new WeirError('upstream_unavailable', `Model '${params.alias}' (revision ${chain[0].id}${chain.length > 1 ? ' and its fallbacks' : ''}) is failing and its circuit breaker is open; retry later.`, {
              retryable: true,
              retryAfterMs: Math.max(1_000, refusedFor),
            }),
          );
        }
        permit = deps.health?.tryAcquire(chain[firstIndex].id, clock.now()) ?? { allowed: true as const, probe: false };
      }
      let firstRevision = chain[firstIndex];
      const giveBackProbe = () => {
        if (permit.allowed && permit.probe) deps.health?.record(firstRevision.id, 'ignored', undefined, clock.now(), true);
      };
      // By internal id: a re-created tenant shares no KV-cache placement with its predecessor (issue 14 §4).
      const affinityKey = affinityKeyOf(tenantKeyOf(caller), params.input);
      const bytes = inputBytes(params.input);
      // The slot of the revision tried first (it moves down the chain on no_replica), as asked for
      // with the reservation and again directly from the scheduler.
      const slotSpec = () => ({
        revisionId: firstRevision.id,
        tokens: kvTokens,
        inputTokens,
        bytes,
        ...(params.priority !== undefined ? { priority: params.priority } : {}),
        affinityKey,
        deadlineAt,
      });

      // Worst case: every input token plus the whole output limit at the highest prices of the
      // candidate chain, so a fallback can never break the cap (ARCHITECTURE.md §2). Reserved and
      // the first slot asked for in one call (one round trip in the split).
      const worstCase = worstCaseCostNanoUsd(chain, inputTokens, maxOutputTokens);
      let reserved: Awaited<ReturnType<AdmitService['admit']>>;
      try {
        reserved = await admitPort.admit({
          reservation: {
            caller,
            requestId: params.requestId,
            generationId: params.generationId,
            expiresAtMs: Date.now() + (deadlineAt - clock.now()) + (deps.reservationGraceMs ?? 60_000),
            inputTokens,
            maxOutputTokens,
            worstCaseCostNanoUsd: worstCase,
            ...(params.useCase !== undefined ? { useCase: params.useCase } : {}),
            ...(params.sessionId !== undefined ? { sessionId: params.sessionId } : {}),
          },
          schedule: slotSpec(),
        });
      } catch (err) {
        giveBackProbe();
        throw err;
      }
      if (!reserved.ok) {
        giveBackProbe();
        // A refusal of a use case's scope holds only for that use case: not remembered for the caller.
        if (!hasOwnScope(params)) admissionMemo.noteRefusal(caller, reserved, clock.now());
        return reject(caller, new AdmissionRejectedError(reserved.reason, reserved.message, reserved.retryAfterMs, reserved.rateLimits));
      }
      const admitted = reserved;
      const reservation = reserved.reservation;
      // What the gateway's own settlement entries need of the request (the relay's carry the same).
      const usageJob = usageJobOf(params, reservation);

      const endedInQueue = async (reason: 'deadline' | 'cancelled' | 'content_filter', queueMs: number): Promise<GenerationOutcome> => {
        const outcome: GenerationOutcome = {
          finishReason: reason,
          usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
          costNanoUsd: 0,
          modelRevision: revision.id,
          timings: { queueMs, ttftMs: null, totalMs: clock.now() - params.arrivedAt },
        };
        // Never reached an engine: no result to leave for retries (the gateway frees a keyed request's key).
        await deps.settlements.append(settlementOf(usageJob, outcome, Date.now()));
        admissionMemo.noteEnded(tenantKeyOf(caller));
        deps.observer?.onFinished?.({ caller, route: params.route, alias: params.alias, revision, outcome });
        return outcome;
      };

      // A release that fails (admission unreachable) must not turn the answer into a 500: the
      // reservation then expires on the admission side.
      const releaseQuietly = () => admitted.release().catch(() => undefined);
      let started = false;
      return {
        revision,
        ...(reserved.rateLimits ? { rateLimits: reserved.rateLimits } : {}),
        inputTokens,
        maxOutputTokens,
        deadlineAt,
        ...(cacheStatus ? { cache: cacheStatus } : {}),
        async start(signal) {
          if (started) throw new Error('AdmittedGeneration.start called twice');
          started = true;
          let initialFallbackReason: string | undefined = firstIndex > 0 ? 'circuit_open' : undefined;
          let scheduled: ScheduleResult;
          // The first slot comes with the reservation's call; a refusal there (but `no_replica`)
          // has released the reservation already.
          let releasedByAdmit = false;
          for (let first = true; ; first = false) {
            try {
              scheduled = first
                ? await admitted.schedule(signal)
                : await deps.scheduler.acquire({ caller, ...slotSpec(), signal });
            } catch (err) {
              // The scheduler is unreachable: hold nothing.
              giveBackProbe();
              if (!first) await releaseQuietly();
              throw err;
            }
            releasedByAdmit = first && !scheduled.ok && scheduled.reason !== 'no_replica';
            // No replica serves this revision (e.g. a canary not placed yet): the next revision of
            // the chain whose breaker lets a call through, before any work (fallback_reason no_replica).
            if (scheduled.ok || scheduled.reason !== 'no_replica') break;
            let next = firstIndex + 1;
            let found: { allowed: true; probe: boolean } | undefined;
            for (; next < chain.length && !found; next++) {
              const p = deps.health?.tryAcquire(chain[next].id, clock.now()) ?? { allowed: true as const, probe: false };
              if (p.allowed) found = p;
            }
            if (!found) break;
            giveBackProbe();
            firstIndex = next - 1;
            permit = found;
            firstRevision = chain[firstIndex];
            initialFallbackReason ??= 'no_replica';
          }
          if (!scheduled.ok) {
            giveBackProbe();
            // Capacity refusals are remembered for like requests at once, before the release is
            // awaited (`deadline`, `cancelled` and `no_replica` say nothing about overload).
            if (scheduled.reason === 'queue_full' || scheduled.reason === 'shed' || scheduled.reason === 'deadline_unmeetable') {
              pushback.noteRefusal(pushbackKey, {
                code: scheduled.reason === 'deadline_unmeetable' ? 'deadline_unmeetable' : 'queue_full',
                message: scheduled.message,
                ...(scheduled.retryAfterMs !== undefined ? { retryAfterMs: scheduled.retryAfterMs } : {}),
                slackMs: admitSlackMs,
                outputTokens: maxOutputTokens,
              });
            }
            if (!releasedByAdmit) await releaseQuietly();
            admissionMemo.noteEnded(tenantKeyOf(caller));
            if (scheduled.reason === 'deadline' || scheduled.reason === 'cancelled') {
              const why = scheduled.reason === 'cancelled' && signal.reason === INPUT_FLAGGED_ABORT ? 'content_filter' : scheduled.reason;
              return { kind: 'ended', outcome: await endedInQueue(why, scheduled.queueMs) };
            }
            // `shed` (batch work in a brownout) answers like a full queue: 503 queue_full, with the reason in the message.
            const code = scheduled.reason === 'queue_full' || scheduled.reason === 'shed' ? 'queue_full' : scheduled.reason === 'deadline_unmeetable' ? 'deadline_unmeetable' : 'engine_unavailable';
            return reject(caller, new WeirError(code, scheduled.message, { retryable: true, retryAfterMs: scheduled.retryAfterMs ?? 1_000 }));
          }
          // Only a grant without queueing shows free capacity; a queued one only shows that the queue moves.
          if (scheduled.lease.queueMs < 1) pushback.noteGrant(pushbackKey);
          let answeredOn = scheduled.lease.replicaId;
          let answeredBy = firstRevision;
          const handle = startWithFailover(
            {
              job: {
                generationId: params.generationId,
                requestId: params.requestId,
                route: params.route,
                caller,
                modelAlias: params.alias,
                engineRequest: {
                  input: params.input,
                  maxOutputTokens,
                  sampling: params.sampling,
                  ...(params.outputSchema !== undefined ? { outputSchema: params.outputSchema } : {}),
                  ...(params.tools !== undefined ? { tools: params.tools } : {}),
                  ...(params.toolChoice !== undefined ? { toolChoice: params.toolChoice } : {}),
                  ...(params.parallelToolCalls !== undefined ? { parallelToolCalls: params.parallelToolCalls } : {}),
                  ...(params.anthropicBeta !== undefined ? { anthropicBeta: params.anthropicBeta } : {}),
                },
                arrivedAt: params.arrivedAt,
                deadlineAt,
                inputTokens,
                ...(params.useCase !== undefined ? { useCase: params.useCase } : {}),
                ...(reservation ? { reservation } : {}),
                ...(params.retain ? { retain: params.retain } : {}),
              },
              caller,
              ...(params.priority !== undefined ? { priority: params.priority } : {}),
              tokens: kvTokens,
              bytes,
              affinityKey,
              chain,
              first: { revision: firstRevision, lease: scheduled.lease, grantedAt: clock.now(), probe: permit.allowed && permit.probe },
              firstIndex,
              ...(initialFallbackReason !== undefined ? { initialFallbackReason } : {}),
            },
            {
              relay: deps.relay,
              scheduler: deps.scheduler,
              clock,
              ...(deps.health ? { health: deps.health } : {}),
              ...(deps.failover ? { options: deps.failover } : {}),
              onAttemptEnd(attempt, outcome) {
                // The measurements feed the scheduler's service-rate estimate (times from the grant).
                const startedAt = attempt.grantedAt - params.arrivedAt;
                attempt.lease.release({
                  inputTokens: outcome.usage.inputTokens,
                  outputTokens: outcome.usage.outputTokens,
                  ttftMs: outcome.timings.ttftMs === null ? null : Math.max(0, outcome.timings.ttftMs - startedAt),
                  durationMs: Math.max(0, outcome.timings.totalMs - startedAt),
                });
                answeredOn = attempt.lease.replicaId;
                answeredBy = attempt.revision;
              },
              // Every attempt failed before any output: billed nothing, and a keyed request's key is freed by the gateway.
              recordFailure: (outcome) => deps.settlements.append(settlementOf(usageJob, outcome, Date.now())),
            },
          );
          void handle.done.then(async (outcome) => {
            // Settlement failures are logged by the transport; they never reach the client.
            if (outcome.relayLost) {
              // A lost relay could not record usage: record what was relayed (estimated), with the
              // reservation it settles, so the ledger moves its cost from the right leases and
              // reconciliation can settle the row from the engine's own count (ADR 0002 §3).
              await deps.settlements
                .append(settlementOf({ ...usageJob, ...(params.retain ? { retain: params.retain } : {}) }, outcome, Date.now()))
                .catch(() => undefined);
              // The engine may have produced more than was relayed, so admission counts the worst
              // case as spent (what an expiry would count), but at once: the request's concurrency
              // slot is free now rather than at the reservation's expiry.
              await settleWithRetry(admitted, { usage: { inputTokens, outputTokens: maxOutputTokens, cachedInputTokens: 0 }, costNanoUsd: worstCase });
            } else {
              await settleWithRetry(admitted, { usage: outcome.usage, costNanoUsd: outcome.costNanoUsd });
            }
            admissionMemo.noteEnded(tenantKeyOf(caller));
            deps.observer?.onFinished?.({ caller, route: params.route, alias: params.alias, revision: answeredBy, outcome, replicaId: answeredOn });
          });
          return {
            kind: 'running',
            handle,
            revisionId: firstRevision.id,
            ...(initialFallbackReason !== undefined ? { fallbackReason: initialFallbackReason } : {}),
            answering: () => handle.answering(),
          };
        },
      };
    },
  };
}

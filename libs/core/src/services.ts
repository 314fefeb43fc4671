/**
 * Service ports on the request path (ARCHITECTURE.md §1). The gateway orchestrates through
 * these; the all-in-one binds in-process implementations, the split topology binds gRPC
 * clients with the same interfaces.
 */
import type { AliasSpec, RevisionSpec } from './platform-config';
import type { EngineRequest, FinishReason, GenerationTimings, TokenUsage, ToolCallDelta } from './generation';
import type { ApiRoute, CacheTierName } from './ports';
import type { ReservationRef, RetainSpec, UpstreamAttempt, UsageSource } from './settlement';

/** Who is asking: from the API key only. */
export interface Caller {
  tenantId: string;
  appId: string;
  apiKeyId: string;
  /** The tenant's internal id, from the key's row (see `tenantKeyOf`). Absent: the slug. */
  tenantUid?: string;
  /** The app's internal id, from the key's row (see `appKeyOf`). Absent: the app id. */
  appUid?: string;
}

/** The router's answer for one request: the pinned revision and the fallback chain after it. */
export interface RouteResolution {
  alias: AliasSpec;
  /** The revision chosen for this request (canary arm picked by a hash of the request key). */
  revision: RevisionSpec;
  /** Revisions to try, in order, if `revision` fails before the first token (may be empty). */
  fallbacks: RevisionSpec[];
}

/** Outcome of a routing decision: an expected failure is a value, not a throw. */
export type RouteResult =
  | { ok: true; route: RouteResolution }
  | { ok: false; reason: 'model_not_found'; message: string };

/** Resolves model aliases to pinned revisions. */
export interface RouterService {
  /**
   * Resolves `alias` for `caller`. `stickyKey` (the request id, or the end user's key) makes
   * the canary arm deterministic: the same key always lands on the same arm. `useCase` selects
   * the tenant's use-case route (pin, fallbacks) when it has one.
   */
  resolve(caller: Caller, alias: string, stickyKey: string, useCase?: string): Promise<RouteResult>;
  /** Aliases this caller may use, in config order. */
  listAliases(caller: Caller): Promise<AliasSpec[]>;
}

/** What admission is asked to hold for one request. */
export interface ReservationRequest {
  caller: Caller;
  /** The client's idempotency key, else the generation id. */
  requestId: string;
  /** Weir's generation id (`gen_…`): the ledger row the reservation settles against. */
  generationId: string;
  /** Worst-case input tokens (tokenizer count or documented upper bound). */
  inputTokens: number;
  /** The request's output limit (tokens). */
  maxOutputTokens: number;
  /** Worst-case cost (nano-USD) at the highest prices in the candidate chain. */
  worstCaseCostNanoUsd: number;
  /**
   * When an unsettled reservation may be presumed abandoned (epoch ms): the request's
   * deadline plus `defaults.admission.reservationGraceMs`. Reconciliation then settles it from
   * the ledger or releases it.
   */
  expiresAtMs: number;
  /**
   * The request's use case. When the caller's tenant defines it (`TenantSpec.useCases`), its
   * limits and budget are a third scope the request must fit (tenant → app → use case), reserved
   * and settled like the others. Absent, or not defined by the tenant: no use-case scope.
   */
  useCase?: string;
  /**
   * The client's session or agent-run id (`x-weir-session-id`). Taken only when the caller's
   * app allows sessions (`AdmissionLimits.sessionMaxTokens` / `sessionBudgetUsd`): the session's
   * token and dollar caps then hold too (`withSessionBudgets`). Otherwise ignored.
   */
  sessionId?: string;
}

/**
 * One OpenAI-style rate-limit window as the `x-ratelimit-*` headers report it: the limit, what
 * is left after this request, and the time until the bucket is full again (ms).
 */
export interface RateLimitWindow {
  limit: number;
  remaining: number;
  resetMs: number;
}

/**
 * The tightest request and token windows that applied to a request (tenant or app scope),
 * for `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`. A window is absent when no
 * such limit is configured.
 */
export interface RateLimitStatus {
  requests?: RateLimitWindow;
  tokens?: RateLimitWindow;
}

/** Why admission refused a request. */
export type RejectReason = 'rate_limited' | 'concurrency_limited' | 'budget_exhausted';

/** Admission's answer. Rejections are values with the reason and a retry hint. */
export type ReserveResult =
  | {
      ok: true;
      reservationId: string;
      rateLimits?: RateLimitStatus;
      /**
       * What the reservation holds, for the usage record to carry to the ledger's settlement
       * (ADR 0002). Always set by admission on leases (`createLeasedAdmission`); absent from
       * ADR 0001's per-request admission.
       */
      reservation?: ReservationRef;
    }
  | {
      ok: false;
      reason: RejectReason;
      message: string;
      /** Hint for `Retry-After` (ms), from the limiter; absent when retrying cannot help (budgets). */
      retryAfterMs?: number;
      rateLimits?: RateLimitStatus;
    };

/** Measured actuals that a reservation is settled to. */
export interface Settlement {
  usage: TokenUsage;
  /** Cost at the answering revision's prices (nano-USD). */
  costNanoUsd: number;
}

/**
 * Admission: reserve before work, settle after (ARCHITECTURE.md §2). Holds, per tenant and
 * per app, settled + reserved ≤ budget at every instant, and token and request rates that
 * do not multiply with replica count.
 */
export interface AdmissionService {
  /** Holds the worst case, or rejects (a value). A rejected request holds nothing. */
  reserve(request: ReservationRequest): Promise<ReserveResult>;
  /**
   * Settles to actuals and releases the rest. Idempotent per reservation id: a second call,
   * or a call after the reservation expired and was reconciled, changes nothing.
   */
  settle(reservationId: string, settlement: Settlement): Promise<void>;
  /** Releases a reservation that did no work (rejected later, ended in the queue). Idempotent. */
  release(reservationId: string): Promise<void>;
}

/**
 * What a generation measured on its replica, handed back with the lease so the scheduler can
 * keep its service-rate estimate (an EWMA of prefill and decode throughput per replica). Times
 * are from the moment the lease was granted (ms), not from the request's arrival.
 */
export interface LeaseUsageReport {
  /** Prompt tokens the replica evaluated. */
  inputTokens: number;
  /** Output tokens it produced. */
  outputTokens: number;
  /** From the grant to the first output token (ms); null when no token came. */
  ttftMs: number | null;
  /** From the grant to the end of the generation (ms). */
  durationMs: number;
}

/**
 * A held slot on one replica; `release()` must be called exactly once (idempotent). Passing
 * the generation's measurements feeds the scheduler's service-rate estimate; a release without
 * them (nothing ran, or nothing was measured) frees the capacity only.
 */
export interface SlotLease {
  replicaId: string;
  /** Time spent queued for the slot (ms). */
  queueMs: number;
  release(report?: LeaseUsageReport): void;
}

/**
 * A request's scheduling class: `interactive` (default) is served first; `batch` only gets
 * capacity interactive work does not want, runs on the `batch` pool when one serves the
 * revision, and is shed first when a pool loses capacity (brownout).
 */
export type RequestPriority = 'interactive' | 'batch';

/** What the scheduler needs to place one request. */
export interface ScheduleRequest {
  caller: Caller;
  revisionId: string;
  /**
   * KV tokens this request holds on a replica: input + output limit; for an embedding batch
   * (items embedded one at a time) its largest item's tokens.
   */
  tokens: number;
  /** Absolute deadline on the scheduler's clock (ms). */
  deadlineAt: number;
  /** Fires when the client goes away or cancels while queued. */
  signal: AbortSignal;
  /** Replicas not to use (a retry after a failure before the first token). Default none. */
  avoidReplicas?: readonly string[];
  /**
   * Prompt tokens (prefill work), for the start-time estimate; the output is `tokens` minus
   * these (none when they are more: an embedding batch). Default 0 (all of `tokens` counted as output).
   */
  inputTokens?: number;
  /** Scheduling class. Default `interactive`. */
  priority?: RequestPriority;
  /** Bytes the request holds while queued (its input), for the byte bounds. Default `tokens × 4`. */
  bytes?: number;
  /**
   * Prefix affinity: requests with the same key (the pipeline uses the tenant and a hash of the
   * prompt's beginning) go to the same replica while its load allows, so its KV cache already
   * holds their common prefix. Default none (least loaded).
   */
  affinityKey?: string;
}

/**
 * Why the scheduler did not grant a lease:
 * - `queue_full` (immediate): the pool's or the tenant's queue is at its bound (length or bytes);
 * - `deadline_unmeetable` (immediate): the estimated start plus the estimated run (prefill and
 *   the expected output at the measured decode rate) ends past the deadline;
 * - `shed`: batch work dropped because its pool lost capacity (brownout), at arrival or while queued;
 * - `deadline` / `cancelled`: while queued, the deadline passed or the request could no longer
 *   finish by it (dropped before starting) / the client left;
 * - `no_replica`: no replica of the request's pool serves the revision.
 */
export type ScheduleRejectReason = 'queue_full' | 'deadline_unmeetable' | 'shed' | 'deadline' | 'cancelled' | 'no_replica';

/** Scheduler result: a lease, or a rejection value (see {@link ScheduleRejectReason}). */
export type ScheduleResult =
  | { ok: true; lease: SlotLease }
  | {
      ok: false;
      reason: ScheduleRejectReason;
      message: string;
      queueMs: number;
      /** Hint for `Retry-After` (ms): when the scheduler expects capacity; absent when it has none. */
      retryAfterMs?: number;
    };

/** Per-pool queues over replica capacity. */
export interface SchedulerService {
  acquire(request: ScheduleRequest): Promise<ScheduleResult>;
}

/**
 * What {@link AdmitService.admit} is asked: the reservation, and the slot to acquire for the
 * request's first attempt once it is held.
 */
export interface AdmitRequest {
  reservation: ReservationRequest;
  /** The scheduler request of the first attempt; its caller is the reservation's, its signal the one {@link Admitted.schedule} takes. */
  schedule: Omit<ScheduleRequest, 'caller' | 'signal'>;
}

/**
 * A held reservation, bound to the admission that made it (in the split: one admission
 * instance). `settle` and `release` go to that instance; if it is gone, the reservation died
 * with it (ADR 0002: its leases are reclaimed at their `hold_until`), and they fail or do nothing.
 */
export interface Reserved {
  ok: true;
  reservationId: string;
  rateLimits?: RateLimitStatus;
  /** What the reservation holds, for the usage record (see {@link ReserveResult}). */
  reservation?: ReservationRef;
  /** Settles the reservation to actuals (see {@link AdmissionService.settle}). Idempotent. */
  settle(settlement: Settlement): Promise<void>;
  /** Releases the reservation (see {@link AdmissionService.release}). Idempotent. */
  release(): Promise<void>;
}

/**
 * A held reservation whose slot is being acquired (in the split: by the admission instance that
 * reserved, in the same call). `settle` and `release` go to the instance that made the
 * reservation (see {@link Reserved}).
 */
export interface Admitted extends Reserved {
  /**
   * The scheduler's answer to {@link AdmitRequest.schedule}; call at most once. `signal` withdraws
   * the request while it waits (`cancelled`). A refusal other than `no_replica` has released
   * the reservation; after `no_replica` it is still held (the caller may try another revision,
   * then settles or releases it). Throws `WeirError` when the scheduler, or the instance carrying
   * the call, cannot be reached (the reservation is then released, or died with its instance).
   */
  schedule(signal: AbortSignal): Promise<ScheduleResult>;
}

/** Reserve's refusal, as {@link AdmitService.admit} returns it. */
export type AdmitRejected = Extract<ReserveResult, { ok: false }>;

/**
 * Reserve, then acquire the first attempt's slot (issue 13, item 6): in-process two calls; in the
 * split one round trip from the gateway — the admission instance reserves in memory and asks the
 * scheduler itself. Throws `WeirError` as `reserve` does (unreachable, shutting down).
 */
export interface AdmitService {
  admit(request: AdmitRequest): Promise<Admitted | AdmitRejected>;
  /**
   * Reserve only, without a scheduler slot: for a request that runs nothing on a replica (a
   * response-cache hit). One call (the split's unary `Reserve`, to the instance `admit` would
   * use); the reservation is bound to the instance that made it, like {@link Admitted}'s.
   * Throws `WeirError` as `admit` does (unreachable, shutting down).
   */
  reserve(request: ReservationRequest): Promise<Reserved | AdmitRejected>;
}

/** One generation handed to the streaming relay. */
export interface RelayJob {
  generationId: string;
  requestId: string;
  route: ApiRoute;
  caller: Caller;
  modelAlias: string;
  revision: RevisionSpec;
  replicaId: string;
  engineRequest: Omit<EngineRequest, 'signal' | 'generationId'>;
  /** Request arrival on the relay's clock (ms): TTFT and total are measured from here. */
  arrivedAt: number;
  /** Absolute deadline (ms, same clock). */
  deadlineAt: number;
  /** Queue time already spent (ms), recorded in the usage record. */
  queueMs: number;
  /** Input tokens counted before admission; billed if the engine fails before reporting its own. */
  inputTokens: number;
  /** The caller's use case (see `UsageRecord.useCase`), carried into the usage record. Default none. */
  useCase?: string;
  /**
   * The caller will try elsewhere if this attempt fails before its first output token with a
   * retryable error (a fallback or retry, issue 6). The relay then records no usage for it —
   * nothing was produced or delivered, so nothing is billed — and ends with
   * `outcome.unrecorded` set; the caller records the request once, on its last attempt.
   * Default false: every attempt records its usage.
   */
  retryBeforeFirstToken?: boolean;
  /**
   * The request's earlier upstream attempts (each failed before any output), oldest first:
   * the relay numbers this attempt after them and carries them, with its own, on the outcome
   * and the usage record (`UsageRecord.attempts`). Default none (this is the first attempt).
   */
  priorAttempts?: UpstreamAttempt[];
  /**
   * The admission holds this generation settles (ADR 0002): carried into its usage record, so
   * the ledger's applier moves its cost from the leases that covered it. Default none.
   */
  reservation?: ReservationRef;
  /**
   * The request carries an idempotency key: the relay keeps its deltas and its settlement entry
   * leaves the result (or that it was interrupted) for retries (ADR 0002 §2). Default none.
   */
  retain?: RetainSpec;
  /**
   * A call the gateway makes for itself, not for the caller (the semantic cache embedding a
   * prompt, docs/caching.md): platform overhead, like the all-in-one's in-process embeddings.
   * Honoured only for an embedding input: the relay appends no settlement entry (no usage row,
   * nothing billed, nothing retained), applies no output moderation, and ends with
   * `outcome.unrecorded` set. Default false.
   */
  internal?: boolean;
}

/** Events the relay streams back; exactly one `end`, always last. */
export type RelayEvent =
  | { type: 'delta'; text: string; tokens: number; toolCalls?: ToolCallDelta[]; /** Reasoning text (`EngineEvent` delta's `reasoning`); absent when none. */ reasoning?: string }
  | { type: 'end'; outcome: GenerationOutcome };

/** How a generation ended, with what it measured and what it cost. */
export interface GenerationOutcome {
  finishReason: FinishReason;
  usage: TokenUsage;
  costNanoUsd: number;
  timings: GenerationTimings;
  /** The revision that produced the tokens (after a fallback, the one that answered). */
  modelRevision: string;
  /**
   * How `usage` was obtained (see {@link UsageSource}); absent means `reported`. A failure
   * before any output bills nothing and is `reported` (zero is exact).
   */
  usageSource?: UsageSource;
  /**
   * Every upstream attempt of the request, oldest first, this outcome's own last (absent when
   * no attempt reached an upstream: the request ended in the queue). Failed attempts carry the
   * tokens their upstream reported; only `usage` bills.
   */
  attempts?: UpstreamAttempt[];
  /** Set when finishReason is `error`. */
  error?: {
    code: string;
    message: string;
    /** Retry hint (ms) when the failure was a refusal before any work. */
    retryAfterMs?: number;
    /** The failure was transient (an upstream 408/429/5xx, a refused connection, no first token in time): trying again, elsewhere, may succeed. */
    retryable?: boolean;
    /**
     * The failure was Weir's own — a split service (the streaming relay) unreachable or lost —
     * and says nothing about the revision or its provider: circuit breakers ignore it.
     */
    internal?: boolean;
  };
  /**
   * True when the relay was lost mid-stream (its process died): the outcome was made by the
   * caller from what it had received, and the relay could not record usage. The caller then
   * records it, marked uncertain, for reconciliation against the engines' counters.
   */
  relayLost?: boolean;
  /** With `finishReason` `stop`: the stop sequence that ended it, when the engine said (`EngineEvent` end's `stopSequence`). */
  stopSequence?: string;
  /**
   * The answer came from the response cache (docs/caching.md): which tier. No upstream ran; the
   * usage is the cached answer's, billed at the tenant's cache price. Absent: a live answer.
   */
  cacheHit?: CacheTierName;
  /**
   * Set by the relay when the job allowed a retry (`RelayJob.retryBeforeFirstToken`) and the
   * attempt failed retryably before any output token, or the job was `internal`: no usage was
   * recorded for it.
   */
  unrecorded?: boolean;
  /**
   * Set when the request was answered (or finally failed) after the first choice failed before
   * its first token: why (`upstream_unavailable`, `circuit_open`, …), the revision first chosen,
   * and the attempts made. `modelRevision` names the revision that answered.
   */
  fallback?: { reason: string; from: string; attempts: number };
}

/**
 * Why the relay was asked to stop early. `input_flagged`: the request's input moderation blocked
 * it before any output reached the client — the relay stops now, ends `content_filter` and
 * retains no output for an idempotency key (the client was sent none).
 */
export type StopCause = 'client_disconnected' | 'cancel_requested' | 'input_flagged';

/** A running generation on a relay (in-process, or the client end of a gRPC stream). */
export interface RelayHandle {
  /** Deltas as they are produced, then exactly one `end`. One consumer. */
  events: AsyncIterable<RelayEvent>;
  /** Resolves with the outcome once the generation has ended (and, on the relay, its usage is queued). */
  done: Promise<GenerationOutcome>;
  /**
   * Asks the generation to stop. `client_disconnected` waits the relay's grace period first;
   * `cancel_requested` stops now. Idempotent; a no-op once finished.
   */
  stop(cause: StopCause): void;
}

/** The streaming relay as a service: starts generations on engine replicas. */
export interface RelayService {
  start(job: RelayJob): RelayHandle;
}

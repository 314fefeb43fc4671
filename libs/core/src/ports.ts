/**
 * Port interfaces: the seams where adapters (in-process, Postgres, gRPC, NATS, HTTP) plug in.
 * Domain libraries depend on these, never on a transport or a driver.
 */
import type { EngineEvent, EngineRequest, FinishReason } from './generation';
import type {
  ClaimMark,
  IdempotencySettlement,
  JournalPosition,
  ProgressMark,
  ReservationRef,
  SettlementApplyResult,
  SettlementBatch,
  UpstreamAttempt,
  UsageSource,
} from './settlement';

/** The identity an API key resolves to. Tenant and app come only from here, never a body. */
export interface ApiKeyIdentity {
  keyId: string;
  /** Public prefix of the key (`wk_<prefix>_…`), safe to log and display. */
  prefix: string;
  tenantId: string;
  appId: string;
  /** The tenant's internal id (`@weir/core` internal-ids): what its state is filed under. Absent: the slug. */
  tenantUid?: string;
  /** The app's internal id. Absent: the app id. */
  appUid?: string;
}

/** Looks up API keys by their SHA-256 hash (hex). */
export interface ApiKeyStore {
  /** Resolves the identity for a key hash, or undefined when the key is unknown or revoked. */
  findByHash(sha256Hex: string): Promise<ApiKeyIdentity | undefined>;
}

/** Capacity an engine replica declares to the scheduler. */
export interface EngineCapacity {
  /** Concurrent sequences it decodes together. */
  slots: number;
  /** Context tokens per sequence (prompt + output). */
  contextTokens: number;
}

/**
 * An engine adapter: one model replica or upstream. Adapters own the wire protocol; the
 * relay owns timing, deadlines, cancellation grace and metering.
 */
export interface EngineAdapter {
  /** The engine kind, for metrics (`gen_ai.provider.name`). */
  readonly kind: string;
  readonly capacity: EngineCapacity;
  /**
   * Counts the prompt tokens of an input with the revision's own tokenizer, or returns a
   * documented upper bound when the engine has none (never characters ÷ 4). With `limit`
   * (tokens; the gateway passes the context window), an adapter may stop counting once the
   * count passes it and return that partial count (some number above `limit`), so a huge input
   * costs no more CPU than one just over the window (issue 14). Default: count everything.
   */
  countInputTokens(input: EngineRequest['input'], limit?: number): Promise<number>;
  /**
   * Starts a generation. Yields `delta`s then exactly one `end`; throws a `WeirError` on a
   * fault (`upstream_error`, `upstream_timeout`, `upstream_unavailable`, `upstream_bad_request`).
   * The caller must have a free slot (the scheduler guarantees it).
   */
  generate(request: EngineRequest): AsyncIterable<EngineEvent>;
  /** Releases the model / connections. */
  close(): Promise<void>;
}

/** Terminal status of a request as recorded in the ledger. */
export type UsageStatus = 'completed' | 'cancelled' | 'deadline' | 'failed' | 'filtered';

/** A response-cache tier (docs/caching.md). */
export type CacheTierName = 'exact' | 'semantic';

/** Which public route carried the request. */
export type ApiRoute = 'generations' | 'chat.completions' | 'completions' | 'embeddings';

/**
 * One usage record: exactly one per request that reached an engine (or was admitted).
 * Metadata only: never prompt or output text.
 */
export interface UsageRecord {
  /** Weir's generation id (`gen_…`), the ledger's primary key. */
  generationId: string;
  /** The client's idempotency key if it sent one, else the generation id. */
  requestId: string;
  tenantId: string;
  appId: string;
  /**
   * The tenant's internal id (see `tenantKeyOf`): the ledger files the row under it, so a later
   * tenant with the same slug does not see it. Absent: the slug.
   */
  tenantUid?: string;
  /** The app's internal id (its budget rows are filed under it). Absent: the app id. */
  appUid?: string;
  apiKeyId: string;
  route: ApiRoute;
  modelAlias: string;
  modelRevision: string;
  /** Input tokens in total, cache reads and writes included. */
  inputTokens: number;
  /** Output tokens in total, reasoning tokens included. */
  outputTokens: number;
  /** Of `inputTokens`, those read from a prompt cache. */
  cachedInputTokens: number;
  /** Of `inputTokens`, those written to a prompt cache. Absent: 0. */
  cacheWriteInputTokens?: number;
  /** Of `outputTokens`, reasoning tokens. Absent: 0. */
  reasoningTokens?: number;
  /** Cost in nano-USD (1e-9 USD), integer, from the answering revision's prices. */
  costNanoUsd: number;
  status: UsageStatus;
  finishReason: FinishReason;
  /** Weir error code when status is `failed`. */
  errorCode: string | null;
  queueMs: number;
  ttftMs: number | null;
  totalMs: number;
  startedAt: Date;
  finishedAt: Date;
  /**
   * True when the counts are Weir's best knowledge rather than the relay's measurement (the
   * relay was lost mid-stream and the gateway recorded what it had relayed); reconciliation
   * settles such records against the engines' counters. Default false.
   */
  uncertain?: boolean;
  /**
   * The caller's use case (`use_case` in the body of `/v1/generations`, or the
   * `x-weir-use-case` header on any generation route): 1–64 characters of
   * {@link USE_CASE_PATTERN}. Absent when the caller named none (`/v1/usage` reports it as
   * `null`). A label for reporting, never prompt text.
   */
  useCase?: string;
  /** How the token counts were obtained (ADR 0002). Default `reported`. */
  usageSource?: UsageSource;
  /** Every upstream attempt, the answering one last (absent when none was made: ended in the queue). */
  attempts?: UpstreamAttempt[];
  /** The admission holds this record settles (budget periods, leases); absent when nothing was reserved. */
  reservation?: ReservationRef;
  /**
   * The request was answered from the response cache (docs/caching.md): `exact` or `semantic`.
   * Its tokens are the cached answer's, its cost the tenant's cache price. Absent: a live answer.
   */
  cacheHit?: CacheTierName;
}

/**
 * Everything a finished request leaves, written together (ADR 0002): its usage record (with the
 * reservation it settles) and, for a request with an idempotency key, what a retry gets. One
 * owner appends it — the relay that ran the generation — before the terminal event reaches the
 * client; the ledger applies it exactly once (usage row, settlement, idempotency result in one
 * transaction).
 */
export interface SettlementEntry {
  usage: UsageRecord;
  idempotency?: IdempotencySettlement;
}

/** What a use case may look like: 1–64 letters, digits and `.` `_` `:` `-`. */
export const USE_CASE_PATTERN = /^[A-Za-z0-9._:-]{1,64}$/;

/**
 * Where usage records go. `record` never blocks the request: it enqueues (bounded, batched)
 * and returns; `flush` drains the queue (called on shutdown and by tests).
 */
export interface UsageSink {
  record(record: UsageRecord): void;
  flush(): Promise<void>;
}

/**
 * The settlement journal (ADR 0002): the relay that ran a generation appends its
 * {@link SettlementEntry} here before the terminal event reaches the client; the ledger's
 * applier writes it to the database exactly once. `append` resolves once the entry has left the
 * process (a file append in the OS page cache, or a publish the NATS server acknowledged); it
 * rejects only when that is impossible (the caller then ends the request with an error rather
 * than deliver an answer that was not recorded).
 */
export interface SettlementJournal {
  /**
   * Journals a finished request's settlement. Resolves once it has left the process; rejects with
   * WeirError `shutting_down` after close, or the I/O error when it could not be written.
   * @throws (rejects) WeirError `internal` when the entry is malformed (`settlementEntryFault` in `@weir/ledger`).
   */
  append(entry: SettlementEntry): Promise<void>;
  /**
   * Journals that a keyed generation started (see {@link ClaimMark}); resolves like `append`.
   * Journals that keep no progress (JetStream: a dead relay's stream is recorded by its gateway)
   * resolve at once without writing.
   */
  claim(claim: ClaimMark): Promise<void>;
  /**
   * Offers a running generation's progress. The journal takes `mark()` only when the
   * generation's last mark is at least `progressIntervalMs` old (default 1 s), so a relay may
   * call this on every frame: `mark` is not called otherwise (no allocation on the hot path).
   * Never blocks and never throws (a failed progress write is logged: progress only narrows what
   * a crash loses). A no-op on journals that keep no progress.
   */
  progress(generationId: string, mark: () => ProgressMark): void;
  /**
   * Says a generation that claimed a key or offered progress ended without a settlement (it did
   * no billable work: refused, ended in the queue), so recovery will not mark its key
   * `interrupted`. Never blocks and never throws; a no-op for a generation the journal holds
   * nothing of.
   */
  release(generationId: string): void;
  /** Resolves once every entry appended so far has been applied to the database (tests, shutdown). */
  flush(): Promise<void>;
  /**
   * True while too many entries wait to be applied (the database is slow or away): refuse new
   * work (503) rather than let the backlog grow without bound. Appends are still accepted.
   */
  saturated(): boolean;
}

/**
 * Applies settlement batches to the ledger's database (ADR 0002 §2): one transaction per batch
 * and each generation once — usage rows inserted idempotently on `generation_id`, and only for
 * rows actually inserted: their attempts, their cost on the four budget rows
 * (tenant/app × month/day), their cost moved from their leases, their idempotency results; plus
 * the journal's position. A batch that fails changes nothing and may be applied again.
 */
export interface SettlementApplier {
  /** @throws the driver's error when the database fails (nothing was applied). */
  apply(batch: SettlementBatch): Promise<SettlementApplyResult>;
  /** The position stored for `journal` by the last applied batch, if any. */
  position(journal: string): Promise<JournalPosition | undefined>;
}

/** Durable storage of usage records; inserts are idempotent on `generationId`. */
export interface UsageRepository {
  insertMany(records: readonly UsageRecord[]): Promise<void>;
}

/** A UTC calendar period of `/v1/usage`: the month or the day that contains the instant asked about. */
export type UsageWindow = 'day' | 'month';

/** Sums over a set of usage records. Tokens are counts; cost is exact. */
export interface UsageAggregate {
  inputTokens: number;
  outputTokens: number;
  /** Of `inputTokens`, tokens read from a prompt cache. */
  cachedInputTokens: number;
  /** Of `inputTokens`, tokens written to a prompt cache. */
  cacheWriteInputTokens: number;
  /** Of `outputTokens`, reasoning tokens. */
  reasoningTokens: number;
  /** Total cost in nano-USD (1e-9 USD), exact (a bigint: no float ever touches it). */
  costNanoUsd: bigint;
  /** Usage records summed (one per generation, rejected requests have none). */
  requests: number;
  /** Of `requests`, those answered from the response cache (`UsageRecord.cacheHit`). */
  cacheHits: number;
}

/** A tenant's usage in `[since, until)`, in total and broken down three ways. */
export interface UsageSummary extends UsageAggregate {
  byModel: (UsageAggregate & { modelAlias: string; modelRevision: string })[];
  byApp: (UsageAggregate & { appId: string })[];
  /** `useCase` null: records whose caller named no use case. */
  byUseCase: (UsageAggregate & { useCase: string | null })[];
}

/**
 * Reads aggregated usage from the ledger (the read side of `GET /v1/usage`). Breakdowns are
 * ordered by cost, highest first, then by key.
 */
export interface UsageReader {
  /**
   * Sums the records that finished in `[since, until)` of the tenant whose internal id is
   * `tenantId` (`tenantKeyOf(caller)`: a deleted tenant's rows, under its retired internal id,
   * are not a later same-slug tenant's).
   * @throws RangeError if a token sum or count exceeds Number.MAX_SAFE_INTEGER (never rounded).
   */
  summarize(query: { tenantId: string; since: Date; until: Date }): Promise<UsageSummary>;
}

/** One tenant's spend in the two windows of the burn-rate check, in nano-USD (exact). */
export interface TenantSpend {
  tenantId: string;
  /** Spend of records that finished in `[recentSince, until)`. */
  recentNanoUsd: bigint;
  /** Spend of records that finished in `[baselineSince, recentSince)`. */
  baselineNanoUsd: bigint;
}

/** Reads per-tenant spend from the ledger for the burn-rate check. */
export interface TenantSpendReader {
  /**
   * Every tenant with spend in `[baselineSince, until)`, with its spend split at `recentSince`
   * (`baselineSince ≤ recentSince ≤ until`). Tenants with no records there are absent.
   */
  spendByTenant(query: { baselineSince: Date; recentSince: Date; until: Date }): Promise<TenantSpend[]>;
}

/** A monotonic millisecond clock (injectable for tests). */
export interface Clock {
  now(): number;
}

/** The real clock: `performance.now()` based, ms. */
export const systemClock: Clock = { now: () => performance.now() };

/** A cancel request fanned out to every relay (the one holding the stream acts on it). */
export interface CancelMessage {
  generationId: string;
  tenantId: string;
  /** The asking tenant's internal id: a relay acts only on a generation of that same tenant (absent: the slug). */
  tenantUid?: string;
  cause: 'client_disconnected' | 'cancel_requested';
}

/** Replica health as observed by a relay or prober. */
export interface ReplicaHealthEvent {
  replicaId: string;
  revisionId: string;
  state: 'healthy' | 'unhealthy';
  /** Short machine-readable reason, e.g. `connect_refused`, `timeout`, `recovered`. */
  reason: string;
  /** Wall-clock ms. */
  at: number;
}

/**
 * A burn-rate alert, published (in this snake_case shape, as JSON on NATS) when a tenant's spend
 * in the last hour exceeds `factor` × its trailing hourly baseline (see `@weir/ledger`
 * `evaluateBurnRate`). Metadata only.
 */
export interface BurnRateAlert {
  type: 'burn_rate';
  tenant_id: string;
  /** Spend in the hour before `at` (USD). */
  hourly_spend_usd: number;
  /** Average hourly spend over the baseline window before that hour (USD); 0 when the tenant had none. */
  baseline_hourly_usd: number;
  /** `defaults.admission.burnRateFactor` in force. */
  factor: number;
  /** `hourly_spend_usd / baseline_hourly_usd`; null when the baseline is 0. */
  ratio: number | null;
  /** When the check ran (ISO 8601, UTC). */
  at: string;
}

/** A fan-out topic: every subscriber (in every process) receives every message published after it subscribed. */
export interface Topic<T> {
  publish(message: T): void;
  /** Returns an unsubscribe function. Handlers must not throw. */
  subscribe(handler: (message: T) => void): () => void;
}

/**
 * A durable source of usage records (the ledger's input). `handler` is called with batches;
 * a batch is acknowledged only when the returned promise resolves, so a crash before that
 * redelivers it (at-least-once; the repository insert is idempotent on `generationId`).
 */
export interface UsageRecordSource {
  start(handler: (records: readonly UsageRecord[]) => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

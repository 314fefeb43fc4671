/**
 * The money path's shared contract (ADR 0002, `docs/adr/0002-budget-leases-and-settlement-journal.md`):
 * what a finished request leaves behind — one usage record that names how its tokens were
 * counted, every upstream attempt, the admission holds it settles, and (for a request with an
 * idempotency key) its retained result — written together as one {@link SettlementEntry} by one
 * owner, the relay that ran the generation, before the terminal event reaches the client.
 */
import type { RetainedResult } from './idempotency';
import type { ApiRoute, SettlementEntry } from './ports';

/**
 * How a usage record's token counts were obtained (issue 13, item 3):
 * - `reported`: the engine or upstream said so itself (its usage chunk, continuous usage
 *   stats, or Weir's own in-process engine counting what it ran) — exact;
 * - `counted`: Weir counted what it relayed with the revision's tokenizer — exact to ±1 at a cut;
 * - `estimated`: neither was possible (counted content deltas, or what a killed process had
 *   journaled); reconciliation may settle it against the engine's own count.
 */
export type UsageSource = 'reported' | 'counted' | 'estimated';

/** How one upstream attempt of a request ended. */
export type AttemptOutcome = 'answered' | 'failed';

/**
 * One upstream attempt of a request (issue 13, item 4): the answering attempt and every failed
 * attempt before it (retries on another replica, fallbacks along the chain). A failed attempt
 * before any output bills nothing; only the request's one usage record bills.
 */
export interface UpstreamAttempt {
  /** 1, 2, … in the order tried. */
  attempt: number;
  revisionId: string;
  /** The engine kind (`llamacpp`, `openai-compatible`, `anthropic`, …) or provider of the revision. */
  provider: string;
  /** The replica that served it; absent when none was reached. */
  replicaId?: string;
  outcome: AttemptOutcome;
  /** Weir error code of a failed attempt. */
  errorCode?: string;
  /** When the attempt started (epoch ms). */
  startedAtMs: number;
  /** From the attempt's start to its first output token (ms); null when none came. */
  ttftMs: number | null;
  /** From the attempt's start to its end (ms). */
  durationMs: number;
  /** Tokens the upstream reported or Weir counted for the attempt (0 for a failure before any output). */
  inputTokens: number;
  outputTokens: number;
}

/**
 * The admission holds a finished request settles (ADR 0002): the budget periods its worst case
 * was reserved in (UTC `YYYY-MM-DD` of the month's and the day's first day) and the budget
 * leases that covered it, by budget row. The ledger's settlement moves the request's cost from
 * those leases to the rows' settled spend in the same transaction that inserts its usage row.
 */
export interface ReservationRef {
  reservationId: string;
  /** Worst case held (nano-USD). */
  worstCaseNano: number;
  monthStartsOn: string;
  dayStartsOn: string;
  /** Lease ids that held the worst case, one per budgeted row (absent rows had no budget). */
  leaseIds: string[];
  /**
   * The use case whose scope the reservation held too (one its tenant defines): the ledger then
   * charges that use case's budget rows as well as the tenant's and the app's. Absent: none.
   */
  useCase?: string;
}

/**
 * What a keyed request leaves for its retries: its result (a finished generation), or that it
 * was interrupted (its process died, or it failed after output) so a retry is told rather than
 * charged again.
 */
export type IdempotencyOutcome =
  | { kind: 'result'; result: RetainedResult }
  | { kind: 'interrupted'; generationId: string; message: string };

/**
 * What a keyed request's relay job carries so that its settlement entry can leave the result for
 * retries (`RelayJob.retain`): the key, the body it was claimed with and how long to keep it.
 * Tenant and route come from the job.
 */
export interface RetainSpec {
  /** The client's idempotency key (`request_id` / `Idempotency-Key`). */
  key: string;
  /** SHA-256 (hex) of the canonical request body the key was claimed with. */
  bodySha256: string;
  /** The original response's `created` (Unix seconds), replayed unchanged. */
  createdS: number;
  /** Keep the result until (epoch ms). */
  retainUntilMs: number;
}

/** The idempotency part of a settlement entry: the tenant's key and what a retry gets. */
export interface IdempotencySettlement {
  /** The tenant's internal id (`tenantKeyOf`): what its keys are filed under. */
  tenantId: string;
  /** The client's idempotency key (`request_id` / `Idempotency-Key`). */
  key: string;
  outcome: IdempotencyOutcome;
  /** Keep it until (epoch ms). */
  retainUntilMs: number;
  /**
   * The claim's body hash and route, when the settling process knows them: with both, the applier
   * writes the key even if the database never saw the claim (a claim held in memory); without,
   * it only updates a key the generation still holds.
   */
  bodySha256?: string;
  route?: ApiRoute;
}

/**
 * A running generation's progress (ADR 0002 §2): what it has produced so far and everything
 * needed to bill it if its process dies before it finishes. The relay journals one at most every
 * `progressIntervalMs` (default 1 s) per generation while it streams; recovery turns the last
 * mark of a generation that never settled into an `estimated` usage row (finish reason `error`,
 * error code `interrupted`), its cost capped at the reservation's worst case.
 * Metadata only: never prompt or output text.
 */
export interface ProgressMark {
  generationId: string;
  /** The client's idempotency key if it sent one, else the generation id. */
  requestId: string;
  tenantId: string;
  appId: string;
  /** The tenant's and app's internal ids (as on `UsageRecord`); absent: the slugs. */
  tenantUid?: string;
  appUid?: string;
  apiKeyId: string;
  route: ApiRoute;
  modelAlias: string;
  /** The revision answering (the attempt running now). */
  modelRevision: string;
  /** Tokens so far (input: the prompt as counted or reported; output: produced so far). */
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /**
   * Cost of the tokens so far at the answering revision's prices (integer nano-USD), computed
   * when the mark is taken: recovery must not price with a configuration that may have changed
   * since.
   */
  costNanoUsd: number;
  /** When the request started (epoch ms). */
  startedAtMs: number;
  /** When this mark was taken (epoch ms); an estimated row finishes here. */
  atMs: number;
  queueMs: number;
  /** From the start to the first output token (ms); null before it. */
  ttftMs: number | null;
  useCase?: string;
  /** The holds the request settles; absent when nothing was reserved. */
  reservation?: ReservationRef;
  /** The client's idempotency key, when it sent one (the key becomes `interrupted` at recovery). */
  idempotencyKey?: string;
  /** Attempts so far, the running one last (recovery records it as failed, `interrupted`). */
  attempts?: UpstreamAttempt[];
}

/**
 * A keyed generation started (ADR 0002 §3): journaled when a request with an idempotency key
 * claims it, so that if the process dies before the generation settles, recovery marks the key
 * `interrupted` and a retry is told so at once instead of waiting out the claim's lease. Holds
 * what is needed to write the key even when the database never saw the claim.
 */
export interface ClaimMark {
  /** The tenant's internal id (`tenantKeyOf`): what its keys are filed under. */
  tenantId: string;
  /** The client's idempotency key (`request_id` / `Idempotency-Key`). */
  key: string;
  generationId: string;
  /** SHA-256 (hex) of the canonical request body (tells a retry from a different request). */
  bodySha256: string;
  route: ApiRoute;
  /** Keep an `interrupted` outcome until (epoch ms). */
  retainUntilMs: number;
  /** When the claim was taken (epoch ms). */
  atMs: number;
}

/**
 * One unit of work for the settlement applier:
 * - `settle`: a finished (or recovered) request — its usage row, its budget and lease
 *   settlement and its idempotency result, all or nothing, applied once per generation id;
 * - `interrupted`: a keyed generation that died before any progress was journaled — no usage
 *   row (nothing billable is known), only its key becomes `interrupted`.
 */
export type SettlementItem = { kind: 'settle'; entry: SettlementEntry } | { kind: 'interrupted'; idempotency: IdempotencySettlement };

/**
 * How far a journal has been applied. File journal: segment number and byte offset just past
 * the last applied line. JetStream: segment 0 and the stream sequence of the last applied message.
 */
export interface JournalPosition {
  segment: number;
  offset: number;
}

/** A batch for {@link SettlementApplier.apply}: items in journal order, and the position they end at. */
export interface SettlementBatch {
  /** The journal's name (the key of `journal_positions`). */
  journal: string;
  items: readonly SettlementItem[];
  /** Recorded in the same transaction; absent when the source has no position (it never moves back). */
  position?: JournalPosition;
}

/**
 * Money a settlement could not take from a lease: the lease was reclaimed (`lease_gone`), or
 * the cost exceeded what the lease still had (`lease_exhausted`). The cost is still added to the
 * budget rows' settled spend, so the rows may exceed their budget by `excessNano`: an overspend
 * to alert on.
 */
export interface OverspendEvent {
  leaseId: string;
  reason: 'lease_gone' | 'lease_exhausted';
  /** Nano-USD settled beyond the lease. */
  excessNano: number;
  /** The generations whose cost went to this lease in the batch. */
  generationIds: string[];
}

/** What one {@link SettlementApplier.apply} did. */
export interface SettlementApplyResult {
  /** Usage rows inserted (settle items whose generation id was new). */
  inserted: number;
  /** Settle items skipped because their generation id was already in the ledger. */
  duplicates: number;
  /** Idempotency keys written (`done` or `interrupted`); keys no longer held by the generation are skipped. */
  idempotencyWritten: number;
  overspends: OverspendEvent[];
}

/**
 * The money path's shared contract (ADR 0002, `docs/adr/0002-budget-leases-and-settlement-journal.md`):
 * what a finished request leaves behind — one usage record that names how its tokens were
 * counted, every upstream attempt, the admission holds it settles, and (for a request with an
 * idempotency key) its retained result — written together as one {@link SettlementEntry} by one
 * owner, the relay that ran the generation, before the terminal event reaches the client.
 */
import type { RetainedResult } from './idempotency';

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
}

/**
 * What a keyed request leaves for its retries: its result (a finished generation), or that it
 * was interrupted (its process died, or it failed after output) so a retry is told rather than
 * charged again.
 */
export type IdempotencyOutcome =
  | { kind: 'result'; result: RetainedResult }
  | { kind: 'interrupted'; generationId: string; message: string };

/** The idempotency part of a settlement entry: the tenant's key and what a retry gets. */
export interface IdempotencySettlement {
  tenantId: string;
  /** The client's idempotency key (`request_id` / `Idempotency-Key`). */
  key: string;
  outcome: IdempotencyOutcome;
  /** Keep it until (epoch ms). */
  retainUntilMs: number;
}

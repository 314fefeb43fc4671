/**
 * The port between admission's logic and where its state lives. A store offers locked
 * read-modify-write transactions over the rows of `admission-state.ts`; every decision is made
 * by the pure functions in `decide.ts`, passed in as callbacks and run while the rows are
 * locked. Implementations: {@link createInMemoryAdmissionStore} (this library, for unit tests
 * and a single process) and `createPgAdmissionStore` in `@weir/store-pg` (Postgres or PGlite,
 * any number of admission instances).
 */
import type { FinishedBy, LedgerFacts, LockKeys, LockedState, ReservationRecord, StateWrites } from './admission-state';

/** What a reserve callback returns: its result, and the rows to write when it admits. */
export interface ReserveStep<T> {
  result: T;
  /** Rows to write back; absent means write nothing (a rejection holds nothing). */
  writes?: StateWrites;
  /** The reservation to insert (state `held`), with the writes. */
  insert?: ReservationRecord;
  /** More reservations to insert (a batch of reserves decided in one transaction). */
  inserts?: readonly ReservationRecord[];
}

/** How a held reservation ends, as stored on it. Times are epoch ms. */
export type FinishTransition =
  | { state: 'settled'; settledNano: number; inputTokens: number; outputTokens: number; finishedBy: FinishedBy; finishedAtMs: number }
  | { state: 'released' | 'expired'; finishedBy: FinishedBy; finishedAtMs: number };

/** A finished reservation whose charge differs from its ledger row. */
export interface LedgerMismatch {
  reservation: ReservationRecord;
  ledger: LedgerFacts;
}

/** Durable admission state with locked transactions (see the module comment). */
export interface AdmissionStore {
  /**
   * One transaction: creates the missing scope and budget rows of `keys` (zeroed), locks them
   * (scopes in key order, then budgets in key order, so concurrent transactions never
   * deadlock), calls `step` with their state, then writes what it returns. Resolves with the
   * step's result. A throwing step rolls everything back.
   */
  reserve<T>(keys: LockKeys, step: (state: LockedState) => ReserveStep<T>): Promise<T>;
  /**
   * One transaction: moves reservation `id` from `held` to `transition` (state-guarded, so
   * of concurrent finishers exactly one wins), then locks the rows of its scopes and budget
   * periods and writes what `apply` returns. Resolves with the reservation as it was while
   * held, or undefined (nothing changed) when it is unknown or no longer held.
   */
  finish(id: string, transition: FinishTransition, apply: (reservation: ReservationRecord, state: LockedState) => StateWrites): Promise<ReservationRecord | undefined>;
  /**
   * {@link finish} for several reservations in one transaction: each of `items` still `held`
   * moves to its transition (state-guarded), then the rows of all their scopes and budget
   * periods are locked (scopes, then budgets, each in key order) and `apply` — given the
   * reservations as they were while held, in `items` order — returns what to write. Resolves
   * with those reservations; ids unknown or no longer held are left out.
   */
  finishMany(
    items: readonly { id: string; transition: FinishTransition }[],
    apply: (reservations: readonly ReservationRecord[], state: LockedState) => StateWrites,
  ): Promise<ReservationRecord[]>;
  /** Held reservations whose `expiresAtMs` ≤ `nowMs`, oldest expiry first, at most `limit`. */
  listExpired(nowMs: number, limit: number): Promise<ReservationRecord[]>;
  /** The ledger's facts for those of `generationIds` that have a `usage_ledger` row. */
  ledgerFacts(generationIds: readonly string[]): Promise<Map<string, LedgerFacts>>;
  /**
   * Finished (not held) reservations finished at or after `sinceMs` whose generation has a
   * ledger row with a cost different from what the reservation charged (`settledNano`, 0 when
   * released or expired), at most `limit`.
   */
  listLedgerMismatches(sinceMs: number, limit: number): Promise<LedgerMismatch[]>;
  /**
   * One transaction: sets a finished reservation's charge to the ledger's facts (state
   * `settled`, finished by the reconciler at `nowMs`) only if it still charges
   * `expectedNano` (so two reconcilers never both correct it), then locks its budget rows and
   * writes what `apply` returns. Resolves with the reservation as it was before, or undefined.
   */
  correct(
    id: string,
    expectedNano: number,
    ledger: LedgerFacts,
    nowMs: number,
    apply: (reservation: ReservationRecord, state: LockedState) => StateWrites,
  ): Promise<ReservationRecord | undefined>;
  /** Reservations held now, over every tenant. */
  countHeld(): Promise<number>;
}

/**
 * An {@link AdmissionStore} in process memory: the unit-test double of the Postgres store, and
 * enough for one process that needs no durability. Each transaction takes a per-row mutex in
 * the same order the Postgres store takes row locks (scopes, then budgets, each sorted) and
 * yields to the event loop while holding them, so parallel reserves interleave and serialise
 * exactly as they would on row locks.
 */
import {
  type BudgetState,
  type LedgerFacts,
  type LockKeys,
  type LockedState,
  type ReservationRecord,
  type ScopeState,
  type StateWrites,
  budgetKeyString,
  emptyBudget,
  emptyScope,
  reservationLockKeys,
} from './admission-state';
import type { AdmissionStore, FinishTransition, LedgerMismatch, ReserveStep } from './admission-store';

/** The in-memory store plus synchronous views for tests and metrics. */
export interface InMemoryAdmissionStore extends AdmissionStore {
  /** Every reservation, in insertion order (copies). */
  reservations(): ReservationRecord[];
  /** A scope's row (a copy), or undefined before its first reserve. */
  scope(key: string): ScopeState | undefined;
  /** Every budget row (copies). */
  budgets(): BudgetState[];
  /** Records what the usage ledger holds for a generation (tests stand in for `usage_ledger`). */
  recordLedger(generationId: string, facts: LedgerFacts): void;
}

/** Creates an empty {@link InMemoryAdmissionStore}. */
export function createInMemoryAdmissionStore(): InMemoryAdmissionStore {
  const scopes = new Map<string, ScopeState>();
  const budgets = new Map<string, BudgetState>();
  const reservations = new Map<string, ReservationRecord>();
  const ledger = new Map<string, LedgerFacts>();
  const mutex = createKeyedMutex();

  /** Locks the rows of `keys` (creating missing ones), runs `fn`, unlocks. */
  async function withLocked<T>(keys: LockKeys, fn: (state: LockedState) => T): Promise<T> {
    const names = [...keys.scopes.map((s) => `s|${s}`), ...keys.budgets.map((b) => `b|${budgetKeyString(b)}`)];
    const releases: (() => void)[] = [];
    try {
      for (const name of names) releases.push(await mutex.acquire(name));
      // Yield while holding the locks, as a database round trip would.
      await Promise.resolve();
      const lockedScopes = new Map<string, ScopeState>();
      for (const key of keys.scopes) lockedScopes.set(key, { ...(scopes.get(key) ?? emptyScope(key)) });
      const lockedBudgets = new Map<string, BudgetState>();
      for (const key of keys.budgets) lockedBudgets.set(budgetKeyString(key), { ...(budgets.get(budgetKeyString(key)) ?? emptyBudget(key)) });
      return fn({ scopes: lockedScopes, budgets: lockedBudgets });
    } finally {
      for (const release of releases.reverse()) release();
    }
  }

  function write(writes: StateWrites | undefined): void {
    for (const s of writes?.scopes ?? []) scopes.set(s.scope, { ...s });
    for (const b of writes?.budgets ?? []) budgets.set(budgetKeyString(b), { ...b });
  }

  return {
    async reserve<T>(keys: LockKeys, step: (state: LockedState) => ReserveStep<T>): Promise<T> {
      return withLocked(keys, (state) => {
        const out = step(state);
        if (out.writes) write(out.writes);
        if (out.insert) reservations.set(out.insert.id, { ...out.insert });
        for (const r of out.inserts ?? []) reservations.set(r.id, { ...r });
        return out.result;
      });
    },
    async finish(id: string, transition: FinishTransition, apply) {
      const held = reservations.get(id);
      if (!held || held.state !== 'held') return undefined;
      const before = { ...held };
      reservations.set(id, {
        ...held,
        state: transition.state,
        finishedAtMs: transition.finishedAtMs,
        finishedBy: transition.finishedBy,
        ...(transition.state === 'settled'
          ? { settledNano: transition.settledNano, settledInputTokens: transition.inputTokens, settledOutputTokens: transition.outputTokens }
          : {}),
      });
      await withLocked(reservationLockKeys(before), (state) => write(apply(before, state)));
      return before;
    },
    async finishMany(items, apply) {
      const before: ReservationRecord[] = [];
      for (const { id, transition } of items) {
        const held = reservations.get(id);
        if (!held || held.state !== 'held') continue;
        before.push({ ...held });
        reservations.set(id, {
          ...held,
          state: transition.state,
          finishedAtMs: transition.finishedAtMs,
          finishedBy: transition.finishedBy,
          ...(transition.state === 'settled'
            ? { settledNano: transition.settledNano, settledInputTokens: transition.inputTokens, settledOutputTokens: transition.outputTokens }
            : {}),
        });
      }
      if (before.length === 0) return [];
      await withLocked(mergeKeys(before.map(reservationLockKeys)), (state) => write(apply(before, state)));
      return before;
    },
    async listExpired(nowMs, limit) {
      return [...reservations.values()]
        .filter((r) => r.state === 'held' && r.expiresAtMs <= nowMs)
        .sort((a, b) => a.expiresAtMs - b.expiresAtMs)
        .slice(0, limit)
        .map((r) => ({ ...r }));
    },
    async ledgerFacts(generationIds) {
      const out = new Map<string, LedgerFacts>();
      for (const g of generationIds) {
        const facts = ledger.get(g);
        if (facts) out.set(g, { ...facts });
      }
      return out;
    },
    async listLedgerMismatches(sinceMs, limit) {
      const out: LedgerMismatch[] = [];
      for (const r of reservations.values()) {
        if (out.length >= limit) break;
        if (r.state === 'held' || (r.finishedAtMs ?? 0) < sinceMs) continue;
        const facts = ledger.get(r.generationId);
        if (facts && facts.costNano !== (r.settledNano ?? 0)) out.push({ reservation: { ...r }, ledger: { ...facts } });
      }
      return out;
    },
    async correct(id, expectedNano, facts, nowMs, apply) {
      const r = reservations.get(id);
      if (!r || r.state === 'held' || (r.settledNano ?? 0) !== expectedNano) return undefined;
      const before = { ...r };
      reservations.set(id, {
        ...r,
        state: 'settled',
        settledNano: facts.costNano,
        settledInputTokens: facts.inputTokens,
        settledOutputTokens: facts.outputTokens,
        finishedAtMs: nowMs,
        finishedBy: 'reconciler',
      });
      await withLocked({ scopes: [], budgets: reservationLockKeys(before).budgets }, (state) => write(apply(before, state)));
      return before;
    },
    async countHeld() {
      let n = 0;
      for (const r of reservations.values()) if (r.state === 'held') n++;
      return n;
    },
    reservations: () => [...reservations.values()].map((r) => ({ ...r })),
    scope: (key) => {
      const s = scopes.get(key);
      return s ? { ...s } : undefined;
    },
    budgets: () => [...budgets.values()].map((b) => ({ ...b })),
    recordLedger(generationId, facts) {
      ledger.set(generationId, { ...facts });
    },
  };
}

/** The union of several lock keys, sorted as rows are locked. */
function mergeKeys(all: readonly LockKeys[]): LockKeys {
  const scopes = [...new Set(all.flatMap((k) => k.scopes))].sort();
  const budgets = new Map<string, LockKeys['budgets'][number]>();
  for (const k of all) for (const b of k.budgets) budgets.set(budgetKeyString(b), b);
  return { scopes, budgets: [...budgets.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, b]) => b) };
}

/** A mutex per key: `acquire` resolves with a release function once every earlier holder released. */
function createKeyedMutex(): { acquire(key: string): Promise<() => void> } {
  const tails = new Map<string, Promise<void>>();
  return {
    async acquire(key) {
      const previous = tails.get(key) ?? Promise.resolve();
      let release!: () => void;
      const mine = new Promise<void>((resolve) => (release = resolve));
      const tail = previous.then(() => mine);
      tails.set(key, tail);
      await previous;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        release();
        if (tails.get(key) === tail) tails.delete(key);
      };
    },
  };
}

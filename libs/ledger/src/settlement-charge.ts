import { type BudgetKey, budgetKeyString, lockKeys, periodStarts } from '@weir/admission';
import type { UsageRecord } from '@weir/core';

/**
 * What settling one usage record moves (ADR 0002 §2): its cost onto the settled spend of the
 * four budget rows — tenant and app × the month and the day of its reservation's periods (of its
 * finish time when nothing was reserved), and the use case's two when the reservation held its
 * scope (`ReservationRef.useCase`) — and off the leases that held it.
 */
export interface SettlementCharge {
  generationId: string;
  /** Nano-USD (integer). */
  costNano: number;
  /** First day (`YYYY-MM-DD`, UTC) of the month and the day charged. */
  monthStartsOn: string;
  dayStartsOn: string;
  /** The four (six with a use case) budget rows, sorted the way stores lock them (shared between charges of the same rows: never mutate). */
  budgets: readonly BudgetKey[];
  /** The budget leases that covered the reservation (none when nothing was reserved). */
  leaseIds: string[];
}

/** The charge of one usage record (see {@link SettlementCharge}). */
export function settlementCharge(usage: UsageRecord): SettlementCharge {
  const r = usage.reservation;
  const periods = r ? { month: r.monthStartsOn, day: r.dayStartsOn } : periodStarts(usage.finishedAt.getTime());
  return {
    generationId: usage.generationId,
    costNano: usage.costNanoUsd,
    monthStartsOn: periods.month,
    dayStartsOn: periods.day,
    // Budget rows are filed under the internal ids (issue 14 §4), as admission reserved them.
    budgets: budgetRows(usage.tenantUid ?? usage.tenantId, usage.appUid ?? usage.appId, periods.month, periods.day, r?.useCase),
    leaseIds: r ? distinct(r.leaseIds) : [],
  };
}

/**
 * The four rows of a tenant/app pair and periods, sorted for locking: computed once and shared
 * (frozen) while the same rows keep coming — a batch of settlements is mostly a few tenants —
 * so a charge costs one map look-up instead of building and sorting four keys. At most
 * {@link BUDGET_ROWS_CACHED} sets are kept; the cache starts over when full.
 */
function budgetRows(tenantId: string, appId: string, month: string, day: string, useCase: string | undefined): readonly BudgetKey[] {
  const key = `${tenantId}\u0000${appId}\u0000${month}\u0000${day}\u0000${useCase ?? ''}`;
  let rows = budgetRowsCache.get(key);
  if (!rows) {
    if (budgetRowsCache.size >= BUDGET_ROWS_CACHED) budgetRowsCache.clear();
    rows = Object.freeze(lockKeys(tenantId, appId, month, day, useCase).budgets.map((b) => Object.freeze(b)));
    budgetRowsCache.set(key, rows);
  }
  return rows;
}
const BUDGET_ROWS_CACHED = 4096;
const budgetRowsCache = new Map<string, readonly BudgetKey[]>();

function distinct(ids: readonly string[]): string[] {
  if (ids.length <= 1 || (ids.length === 2 && ids[0] !== ids[1])) return [...ids];
  return [...new Set(ids)];
}

/** A budget row's share of a batch: nano-USD to add to its settled spend. */
export interface BudgetRowCharge extends BudgetKey {
  nano: number;
}

/** A lease's share of a batch: nano-USD to move from it, and whose. */
export interface LeaseCharge {
  leaseId: string;
  nano: number;
  generationIds: string[];
}

/** The charges of a batch summed per budget row and per lease. */
export interface ChargeTotals {
  /** Sorted by `budgetKeyString` (the lock order); rows with nothing to add are left out. */
  budgets: BudgetRowCharge[];
  /** Sorted by lease id; leases with nothing to move are left out. */
  leases: LeaseCharge[];
}

/**
 * Sums charges per budget row and per lease, so a batch of hundreds of settlements is a handful
 * of statements. Zero-cost charges move nothing and are left out.
 */
export function sumCharges(charges: readonly SettlementCharge[]): ChargeTotals {
  // Costs per set of rows first (charges of the same rows share one array), then per row.
  const perRows = new Map<readonly BudgetKey[], number>();
  const leases = new Map<string, LeaseCharge>();
  for (const c of charges) {
    if (c.costNano === 0) continue;
    perRows.set(c.budgets, (perRows.get(c.budgets) ?? 0) + c.costNano);
    for (const id of c.leaseIds) {
      const lease = leases.get(id);
      if (lease) {
        lease.nano += c.costNano;
        lease.generationIds.push(c.generationId);
      } else leases.set(id, { leaseId: id, nano: c.costNano, generationIds: [c.generationId] });
    }
  }
  const budgets = new Map<string, BudgetRowCharge>();
  for (const [rows, nano] of perRows) {
    for (const b of rows) {
      const k = budgetKeyString(b);
      const row = budgets.get(k);
      if (row) row.nano += nano;
      else budgets.set(k, { ...b, nano });
    }
  }
  const byKey = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return {
    budgets: [...budgets.entries()].sort(([a], [b]) => byKey(a, b)).map(([, v]) => v),
    leases: [...leases.values()].sort((a, b) => byKey(a.leaseId, b.leaseId)),
  };
}

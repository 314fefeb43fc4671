import { type BudgetKey, budgetKeyString, lockKeys, periodStarts } from '@weir/admission';
import type { UsageRecord } from '@weir/core';

/**
 * What settling one usage record moves (ADR 0002 §2): its cost onto the settled spend of the
 * four budget rows — tenant and app × the month and the day of its reservation's periods (of its
 * finish time when nothing was reserved) — and off the leases that held it.
 */
export interface SettlementCharge {
  generationId: string;
  /** Nano-USD (integer). */
  costNano: number;
  /** First day (`YYYY-MM-DD`, UTC) of the month and the day charged. */
  monthStartsOn: string;
  dayStartsOn: string;
  /** The four budget rows, sorted the way stores lock them. */
  budgets: BudgetKey[];
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
    budgets: lockKeys(usage.tenantId, usage.appId, periods.month, periods.day).budgets,
    leaseIds: r ? [...new Set(r.leaseIds)] : [],
  };
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
  const budgets = new Map<string, BudgetRowCharge>();
  const leases = new Map<string, LeaseCharge>();
  for (const c of charges) {
    if (c.costNano === 0) continue;
    for (const b of c.budgets) {
      const k = budgetKeyString(b);
      const row = budgets.get(k);
      if (row) row.nano += c.costNano;
      else budgets.set(k, { ...b, nano: c.costNano });
    }
    for (const id of c.leaseIds) {
      const lease = leases.get(id);
      if (lease) {
        lease.nano += c.costNano;
        lease.generationIds.push(c.generationId);
      } else leases.set(id, { leaseId: id, nano: c.costNano, generationIds: [c.generationId] });
    }
  }
  const byKey = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return {
    budgets: [...budgets.entries()].sort(([a], [b]) => byKey(a, b)).map(([, v]) => v),
    leases: [...leases.values()].sort((a, b) => byKey(a.leaseId, b.leaseId)),
  };
}

/**
 * The admission invariant checked after the fact: for every configured budget, settled +
 * reserved + leased ≤ budget in each of its periods (ADR 0001's reservations, ADR 0002's
 * leases). A settlement applied after its lease was reclaimed, or an estimated row settled
 * higher from the engine's count, can push a row over; this check makes that visible instead
 * of silent.
 */
import { scopeLimits } from '@weir/admission';
import type { AdmissionLimits, TenantSpec } from '@weir/core';

/** One `budget_periods` row. */
export interface BudgetPeriodRow {
  scope: string;
  period: 'month' | 'day';
  /** First day of the period, `YYYY-MM-DD` (UTC). */
  startsOn: string;
  settledNano: number;
  /** Held by per-request reservations (ADR 0001). */
  reservedNano: number;
  /** Held by budget leases (ADR 0002). */
  leasedNano: number;
}

/** The configured budget of a scope key (`tenant:<id>`, `app:<tenant>/<app>`) and period, in nano-USD; undefined when none. */
export function budgetNanoOf(scope: string, period: 'month' | 'day', tenants: readonly TenantSpec[]): number | undefined {
  // Scopes are filed under internal ids (issue 14 §4): a deleted tenant's rows have no budget.
  const limits: AdmissionLimits | undefined = scopeLimits(new Map(tenants.map((t) => [t.id, t])), scope);
  const usd = period === 'month' ? limits?.monthlyBudgetUsd : limits?.dailyBudgetUsd;
  // The same conversion admission uses when it decides.
  return usd === undefined ? undefined : Math.round(usd * 1_000_000_000);
}

/**
 * Every budget row over its configured budget, as report lines (empty when none). Rows whose
 * scope or period has no configured budget are not checked.
 */
export function budgetOverruns(rows: readonly BudgetPeriodRow[], tenants: readonly TenantSpec[]): string[] {
  const out: string[] = [];
  for (const r of rows) {
    const budget = budgetNanoOf(r.scope, r.period, tenants);
    if (budget === undefined) continue;
    const committed = r.settledNano + r.reservedNano + r.leasedNano;
    if (committed > budget) {
      out.push(
        `${r.scope} ${r.period} from ${r.startsOn}: settled ${r.settledNano} + reserved ${r.reservedNano} + leased ${r.leasedNano} = ${committed} nano-USD is over its budget of ${budget} by ${committed - budget}`,
      );
    }
  }
  return out;
}

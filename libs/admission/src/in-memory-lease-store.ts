/**
 * The {@link LeaseStore} in one process's memory: the same semantics as the Postgres store
 * (`createPgLeaseStore`), without durability. For unit tests (with a fake clock) and as the
 * reference the lease store contract checks both against. Every call completes in one
 * synchronous step, as one transaction would.
 */
import { appScope, type BudgetKey, budgetKeyString, tenantScope, useCaseScope } from './admission-state';
import {
  type BudgetLeaseRow,
  type BudgetRowMoney,
  type HolderMode,
  type LeaseSettlement,
  type LeaseStore,
  RATE_FIELDS,
  type RateLeaseRow,
  type ReclaimReport,
  leaseGrant,
  noShares,
} from './lease-store';

/** The in-memory store plus what tests need: the applier's side of settlements and raw views. */
export interface InMemoryLeaseStore extends LeaseStore {
  /** Applies settlements as the ledger's applier does in Postgres (see {@link LeaseSettlement}). */
  applySettlements(items: readonly LeaseSettlement[]): void;
  /** Every budget row with its money. */
  budgetRows(): (BudgetKey & BudgetRowMoney)[];
  /** Holder rows. */
  holders(): { holder: string; mode: HolderMode; expiresAtMs: number }[];
  /** Store calls made so far (each is one transaction in Postgres). */
  calls(): number;
  /** Makes every following call reject with `err` until called with undefined (a database outage). */
  failWith(err: Error | undefined): void;
}

interface Row extends BudgetKey, BudgetRowMoney {
  /** Another holder's demand for this row's money (see `BudgetDraw.demandUntilMs`); 0: none. */
  demandUntilMs: number;
  demandHolder?: string;
}

/** Creates an empty in-memory lease store. */
export function createInMemoryLeaseStore(): InMemoryLeaseStore {
  const rows = new Map<string, Row>();
  const budgetLeases = new Map<string, BudgetLeaseRow>();
  const rateLeases = new Map<string, RateLeaseRow>();
  const holderRows = new Map<string, { holder: string; mode: HolderMode; expiresAtMs: number }>();
  let calls = 0;
  let failure: Error | undefined;

  const row = (key: BudgetKey): Row => {
    const k = budgetKeyString(key);
    let r = rows.get(k);
    if (!r) rows.set(k, (r = { scope: key.scope, period: key.period, startsOn: key.startsOn, settledNano: 0, reservedNano: 0, leasedNano: 0, demandUntilMs: 0 }));
    return r;
  };
  const copyBudget = (l: BudgetLeaseRow): BudgetLeaseRow => ({ ...l, key: { ...l.key } });
  const copyRate = (l: RateLeaseRow): RateLeaseRow => ({ ...l, shares: { ...l.shares } });
  // Every call is one "transaction": counted, and refused while the database is "down".
  const tx = async <T>(fn: () => T): Promise<T> => {
    calls++;
    if (failure) throw failure;
    return fn();
  };
  const deleteLease = (id: string): number => {
    const b = budgetLeases.get(id);
    if (b) {
      const back = b.grantedNano - b.consumedNano;
      row(b.key).leasedNano -= back;
      budgetLeases.delete(id);
      return back;
    }
    rateLeases.delete(id);
    return 0;
  };
  const holds = (holder: string) => [...budgetLeases.values(), ...rateLeases.values()].some((l) => l.holder === holder);

  return {
    heartbeat: ({ holder, mode, nowMs, ttlMs, leaseIds, holdUntilMs }) =>
      tx(() => {
        const h = holderRows.get(holder);
        holderRows.set(holder, { holder, mode: h?.mode ?? mode, expiresAtMs: nowMs + ttlMs });
        const live = new Set<string>();
        const wanted = new Set<string>();
        for (const id of leaseIds) {
          const b = budgetLeases.get(id);
          const l = b ?? rateLeases.get(id);
          if (!l || l.holder !== holder) continue;
          l.holdUntilMs = Math.max(l.holdUntilMs, holdUntilMs);
          live.add(id);
          if (b) {
            const r = row(b.key);
            if (r.demandUntilMs > nowMs && r.demandHolder !== holder) wanted.add(id);
          }
        }
        return { live, wanted };
      }),

    drawBudget: (d) =>
      tx(() => {
        const r = row(d.key);
        const unleased = d.budgetNano - r.settledNano - r.reservedNano - r.leasedNano;
        let lease = budgetLeases.get(d.leaseId);
        if (lease && lease.holder !== d.holder) throw new Error(`lease ${d.leaseId} belongs to another holder`);
        if (!lease) {
          if (!d.create) return { addedNano: 0, unleasedNano: unleased, othersLeasedNano: 0 };
          lease = { leaseId: d.leaseId, holder: d.holder, key: { ...d.key }, grantedNano: 0, consumedNano: 0, holdUntilMs: d.holdUntilMs };
          budgetLeases.set(d.leaseId, lease);
        }
        const added = leaseGrant(unleased, d.ask);
        lease.grantedNano += added;
        lease.holdUntilMs = Math.max(lease.holdUntilMs, d.holdUntilMs);
        r.leasedNano += added;
        if (d.demandUntilMs !== undefined && added < d.ask.min) {
          r.demandUntilMs = d.demandUntilMs;
          r.demandHolder = d.holder;
        } else if (added > 0 && (r.demandUntilMs <= d.nowMs || r.demandHolder === d.holder)) {
          r.demandUntilMs = 0;
          r.demandHolder = undefined;
        }
        let others = 0;
        if (added < d.ask.min) {
          for (const l of budgetLeases.values()) {
            const alive = (holderRows.get(l.holder)?.expiresAtMs ?? 0) > d.nowMs;
            if (l.holder !== d.holder && alive && budgetKeyString(l.key) === budgetKeyString(d.key)) others += l.grantedNano - l.consumedNano;
          }
        }
        return { lease: copyBudget(lease), addedNano: added, unleasedNano: unleased - added, othersLeasedNano: others };
      }),

    returnBudget: ({ holder, leaseId, returnNano }) =>
      tx(() => {
        const lease = budgetLeases.get(leaseId);
        if (!lease || lease.holder !== holder) return { returnedNano: 0 };
        const back = Math.max(0, Math.min(Math.floor(returnNano), lease.grantedNano - lease.consumedNano));
        lease.grantedNano -= back;
        row(lease.key).leasedNano -= back;
        return { returnedNano: back, lease: copyBudget(lease) };
      }),

    drawRate: (d) =>
      tx(() => {
        let lease = rateLeases.get(d.leaseId);
        if (lease && lease.holder !== d.holder) throw new Error(`lease ${d.leaseId} belongs to another holder`);
        const sums = noShares();
        for (const l of rateLeases.values()) if (l.scope === d.scope) for (const f of RATE_FIELDS) sums[f] += l.shares[f];
        if (!lease) {
          if (!d.create) {
            const unleased: Partial<Record<keyof typeof sums, number>> = {};
            for (const f of RATE_FIELDS) if (d.ask[f] && d.limits[f] !== undefined) unleased[f] = (d.limits[f] as number) - sums[f];
            return { added: {}, unleased };
          }
          lease = { leaseId: d.leaseId, holder: d.holder, scope: d.scope, shares: noShares(), holdUntilMs: d.holdUntilMs };
          rateLeases.set(d.leaseId, lease);
        }
        const added: Partial<typeof sums> = {};
        const unleased: Partial<typeof sums> = {};
        for (const f of RATE_FIELDS) {
          const ask = d.ask[f];
          const limit = d.limits[f];
          if (!ask || limit === undefined) continue;
          const free = limit - sums[f];
          const g = leaseGrant(free, ask);
          lease.shares[f] += g;
          added[f] = g;
          unleased[f] = free - g;
        }
        lease.holdUntilMs = Math.max(lease.holdUntilMs, d.holdUntilMs);
        return { lease: copyRate(lease), added, unleased };
      }),

    shrinkRate: ({ holder, leaseId, shares }) =>
      tx(() => {
        const lease = rateLeases.get(leaseId);
        if (!lease || lease.holder !== holder) return undefined;
        for (const f of RATE_FIELDS) {
          const v = shares[f];
          if (v !== undefined) lease.shares[f] = Math.max(0, Math.min(lease.shares[f], v));
        }
        return copyRate(lease);
      }),

    retire: ({ holder, nowMs, leases }) =>
      tx(() => {
        const h = holderRows.get(holder);
        if (h) h.expiresAtMs = Math.min(h.expiresAtMs, nowMs);
        for (const { leaseId, holdUntilMs } of leases) {
          const l = budgetLeases.get(leaseId) ?? rateLeases.get(leaseId);
          if (l && l.holder === holder) l.holdUntilMs = Math.min(l.holdUntilMs, holdUntilMs);
        }
      }),

    reclaimExpired: ({ nowMs, graceMs }) =>
      tx(() => {
        const report: ReclaimReport = { leases: 0, returnedNano: 0, holders: 0 };
        for (const l of [...budgetLeases.values(), ...rateLeases.values()]) {
          if (l.holdUntilMs + graceMs > nowMs) continue;
          report.returnedNano += deleteLease(l.leaseId);
          report.leases++;
        }
        for (const h of [...holderRows.values()]) {
          if (h.expiresAtMs + graceMs <= nowMs && !holds(h.holder)) {
            holderRows.delete(h.holder);
            report.holders++;
          }
        }
        return report;
      }),

    reclaimHolders: ({ exceptHolder, holders }) =>
      tx(() => {
        const report: ReclaimReport = { leases: 0, returnedNano: 0, holders: 0 };
        const spared = (h: string) => (holders ? !holders.includes(h) : h === exceptHolder);
        for (const l of [...budgetLeases.values(), ...rateLeases.values()]) {
          if (spared(l.holder)) continue;
          report.returnedNano += deleteLease(l.leaseId);
          report.leases++;
        }
        for (const h of [...holderRows.keys()]) {
          if (spared(h)) continue;
          holderRows.delete(h);
          report.holders++;
        }
        return report;
      }),

    readBudget: (key) =>
      tx(() => {
        const r = rows.get(budgetKeyString(key));
        return r ? { settledNano: r.settledNano, reservedNano: r.reservedNano, leasedNano: r.leasedNano } : undefined;
      }),

    listLeases: (holder) =>
      tx(() => ({
        budget: [...budgetLeases.values()].filter((l) => holder === undefined || l.holder === holder).map(copyBudget).sort(byId),
        rate: [...rateLeases.values()].filter((l) => holder === undefined || l.holder === holder).map(copyRate).sort(byId),
      })),

    applySettlements(items) {
      for (const it of items) {
        const { reservation: ref } = it;
        for (const scope of [tenantScope(it.tenantId), appScope(it.tenantId, it.appId), ...(ref.useCase !== undefined ? [useCaseScope(it.tenantId, ref.useCase)] : [])]) {
          row({ scope, period: 'month', startsOn: ref.monthStartsOn }).settledNano += it.costNano;
          row({ scope, period: 'day', startsOn: ref.dayStartsOn }).settledNano += it.costNano;
        }
        for (const id of ref.leaseIds) {
          const lease = budgetLeases.get(id);
          if (!lease) continue;
          const moved = Math.max(0, Math.min(it.costNano, lease.grantedNano - lease.consumedNano));
          lease.consumedNano += moved;
          row(lease.key).leasedNano -= moved;
        }
      }
    },
    budgetRows: () =>
      [...rows.values()].map((r) => ({ scope: r.scope, period: r.period, startsOn: r.startsOn, settledNano: r.settledNano, reservedNano: r.reservedNano, leasedNano: r.leasedNano })),
    holders: () => [...holderRows.values()].map((h) => ({ ...h })),
    calls: () => calls,
    failWith(err) {
      failure = err;
    },
  };
}

function byId(a: { leaseId: string }, b: { leaseId: string }): number {
  return a.leaseId < b.leaseId ? -1 : a.leaseId > b.leaseId ? 1 : 0;
}

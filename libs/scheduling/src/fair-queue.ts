/**
 * A tenant-fair queue: deficit round robin between tenants, counted in tokens, with earliest
 * deadline first inside each tenant. Pure data structure: no clock, no timers.
 *
 * Deficit round robin is from M. Shreedhar and G. Varghese, "Efficient Fair Queueing using
 * Deficit Round Robin", SIGCOMM 1995 (IEEE/ACM ToN 4(3), 1996): each backlogged tenant earns
 * `quantum × weight` tokens of credit per round and may take entries while its head's cost
 * fits its credit; a tenant whose queue empties loses its credit. Over any interval in which
 * two tenants stay backlogged, the tokens they get differ from the weight ratio by at most one
 * quantum plus one largest entry (the paper's Lemma 2), so no tenant starves and weights hold
 * in tokens, not requests.
 */

/** What the queue needs of an entry. */
export interface FairEntry {
  /** The tenant it is charged to. */
  tenant: string;
  /** Its cost (tokens): what DRR charges against the tenant's credit. */
  cost: number;
  /** Absolute deadline (ms, any clock): the order inside a tenant (earliest first). */
  deadlineAt: number;
  /** Arrival order: breaks deadline ties first-come first-served. */
  seq: number;
}

/** Options of {@link FairQueue}. */
export interface FairQueueOptions {
  /** Credit (tokens) a weight-1 tenant earns per round. Must be > 0. */
  quantum: number;
  /** A tenant's weight (> 0). Read when a tenant's turn starts, so weights may change live. */
  weightOf(tenant: string): number;
}

interface TenantQueue<E> {
  items: E[];
  deficit: number;
  tokens: number;
}

/** Earlier deadline first, then arrival order. */
function before(a: FairEntry, b: FairEntry): boolean {
  return a.deadlineAt < b.deadlineAt || (a.deadlineAt === b.deadlineAt && a.seq < b.seq);
}

/**
 * The queue. `peek()` names the entry deficit round robin serves next (it may advance the
 * round: a visit is part of the algorithm), `take(e)` removes an entry that was served and
 * charges its tenant, `remove(e)` drops one that left (cancelled, deadline, shed) without charge.
 */
export class FairQueue<E extends FairEntry> {
  private readonly tenants = new Map<string, TenantQueue<E>>();
  /** Backlogged tenants in round-robin order. */
  private active: string[] = [];
  private ptr = 0;
  /** Whether the tenant at `ptr` has already been given its quantum this turn. */
  private turnOpen = false;
  private count = 0;
  private tokenSum = 0;

  constructor(private readonly options: FairQueueOptions) {
    if (!(options.quantum > 0)) throw new RangeError(`quantum must be > 0, got ${options.quantum}`);
  }

  /** Entries queued. */
  get size(): number {
    return this.count;
  }

  /** Sum of queued entries' costs (tokens). */
  get tokens(): number {
    return this.tokenSum;
  }

  /** Adds an entry (O(n) in the tenant's queue length: binary search plus splice). */
  push(entry: E): void {
    let t = this.tenants.get(entry.tenant);
    if (!t) {
      t = { items: [], deficit: 0, tokens: 0 };
      this.tenants.set(entry.tenant, t);
    }
    if (t.items.length === 0) this.active.push(entry.tenant);
    let lo = 0;
    let hi = t.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (before(t.items[mid], entry)) lo = mid + 1;
      else hi = mid;
    }
    t.items.splice(lo, 0, entry);
    t.tokens += entry.cost;
    this.count++;
    this.tokenSum += entry.cost;
  }

  /**
   * The entry DRR serves next, or undefined when empty. Repeated calls without `take` return
   * the same entry. With `eligible`, tenants it refuses are passed over in the round as if
   * absent: they earn no credit while passed over (a paused flow, not a starved one), and
   * undefined is returned when no backlogged tenant is eligible.
   */
  peek(eligible?: (tenant: string) => boolean): E | undefined {
    if (this.active.length === 0) return undefined;
    if (eligible && !this.active.some(eligible)) return undefined;
    for (;;) {
      for (let visited = 0; visited < this.active.length; visited++) {
        const name = this.active[this.ptr];
        const t = this.tenants.get(name) as TenantQueue<E>;
        if (eligible && !eligible(name)) {
          this.turnOpen = false;
          this.ptr = (this.ptr + 1) % this.active.length;
          continue;
        }
        if (!this.turnOpen) {
          t.deficit += this.options.quantum * this.weight(name);
          this.turnOpen = true;
        }
        const head = t.items[0];
        if (head.cost <= t.deficit) return head;
        this.turnOpen = false;
        this.ptr = (this.ptr + 1) % this.active.length;
      }
      // A whole round passed and no head fits its credit (entries larger than a quantum): run
      // the rounds it would take at once instead of looping through them.
      let rounds = Infinity;
      for (const name of this.active) {
        if (eligible && !eligible(name)) continue;
        const t = this.tenants.get(name) as TenantQueue<E>;
        rounds = Math.min(rounds, Math.ceil((t.items[0].cost - t.deficit) / (this.options.quantum * this.weight(name))));
      }
      if (rounds > 1) {
        for (const name of this.active) {
          if (eligible && !eligible(name)) continue;
          (this.tenants.get(name) as TenantQueue<E>).deficit += (rounds - 1) * this.options.quantum * this.weight(name);
        }
      }
    }
  }

  /** Removes a served entry and charges its cost to its tenant's credit. No-op when absent. */
  take(entry: E): void {
    const t = this.tenants.get(entry.tenant);
    if (!t || !this.detach(t, entry)) return;
    t.deficit -= entry.cost;
    this.settleTenant(entry.tenant, t);
  }

  /** Removes an entry that left without being served (no charge). Returns false when absent. */
  remove(entry: E): boolean {
    const t = this.tenants.get(entry.tenant);
    if (!t || !this.detach(t, entry)) return false;
    this.settleTenant(entry.tenant, t);
    return true;
  }

  /** Every queued entry (tenants in round order, each in EDF order). */
  *entries(): IterableIterator<E> {
    for (const name of this.active) yield* (this.tenants.get(name) as TenantQueue<E>).items;
  }

  /** Queued entries and tokens of one tenant. */
  tenantLoad(tenant: string): { requests: number; tokens: number } {
    const t = this.tenants.get(tenant);
    return { requests: t?.items.length ?? 0, tokens: t?.tokens ?? 0 };
  }

  /** Tenants with queued entries. */
  backlogged(): readonly string[] {
    return this.active;
  }

  /** The tenant's queued entries in EDF order (read-only view). */
  queueOf(tenant: string): readonly E[] {
    return this.tenants.get(tenant)?.items ?? [];
  }

  private weight(tenant: string): number {
    const w = this.options.weightOf(tenant);
    return w > 0 && Number.isFinite(w) ? w : 1;
  }

  private detach(t: TenantQueue<E>, entry: E): boolean {
    const i = t.items.indexOf(entry);
    if (i < 0) return false;
    t.items.splice(i, 1);
    t.tokens -= entry.cost;
    this.count--;
    this.tokenSum -= entry.cost;
    return true;
  }

  /** A tenant whose queue emptied leaves the round and loses its credit (DRR). */
  private settleTenant(name: string, t: TenantQueue<E>): void {
    if (t.items.length > 0) return;
    t.deficit = 0;
    this.tenants.delete(name);
    const i = this.active.indexOf(name);
    if (i < 0) return;
    this.active.splice(i, 1);
    if (i < this.ptr) this.ptr--;
    else if (i === this.ptr) this.turnOpen = false;
    if (this.ptr >= this.active.length) this.ptr = 0;
  }
}

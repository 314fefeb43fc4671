import { FairQueue, type FairEntry } from './fair-queue';

/** Deterministic pseudo-random sizes (mulberry32), so the runs are reproducible. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let seq = 0;
const entry = (tenant: string, cost: number, deadlineAt = 0): FairEntry => ({ tenant, cost, deadlineAt, seq: seq++ });

/** Serves `n` entries, refilling each tenant so every one stays backlogged; returns tokens served per tenant. */
function serve(queue: FairQueue<FairEntry>, n: number, refill: (tenant: string) => FairEntry): Map<string, number> {
  const served = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const e = queue.peek() as FairEntry;
    queue.take(e);
    served.set(e.tenant, (served.get(e.tenant) ?? 0) + e.cost);
    queue.push(refill(e.tenant));
  }
  return served;
}

describe('FairQueue (deficit round robin in tokens, EDF inside a tenant)', () => {
  it.each([
    { weights: { a: 1, b: 1 }, label: 'equal weights' },
    { weights: { a: 3, b: 1 }, label: '3:1' },
    { weights: { a: 1, b: 2, c: 5 }, label: '1:2:5 with three tenants' },
  ])('honours weights in tokens over many rounds, within 3 % ($label)', ({ weights }) => {
    const w = weights as Record<string, number>;
    const random = rng(42);
    // Tenants send different request sizes: counting requests instead of tokens would fail this.
    const sizeOf: Record<string, () => number> = { a: () => 50 + Math.floor(random() * 500), b: () => 500 + Math.floor(random() * 3_000), c: () => 10 + Math.floor(random() * 100) };
    const queue = new FairQueue<FairEntry>({ quantum: 1_000, weightOf: (t) => w[t] });
    for (const t of Object.keys(w)) for (let i = 0; i < 5; i++) queue.push(entry(t, sizeOf[t]()));
    const served = serve(queue, 20_000, (t) => entry(t, sizeOf[t]()));
    const total = [...served.values()].reduce((s, v) => s + v, 0);
    const weightSum = Object.values(w).reduce((s, v) => s + v, 0);
    for (const [t, weight] of Object.entries(w)) {
      const share = (served.get(t) ?? 0) / total;
      expect(Math.abs(share - weight / weightSum) / (weight / weightSum)).toBeLessThan(0.03);
    }
  });

  it('serves earliest deadline first inside a tenant, arrival order on ties', () => {
    const queue = new FairQueue<FairEntry>({ quantum: 10_000, weightOf: () => 1 });
    const late = entry('a', 10, 300);
    const early = entry('a', 10, 100);
    const tieFirst = entry('a', 10, 200);
    const tieSecond = entry('a', 10, 200);
    for (const e of [late, early, tieFirst, tieSecond]) queue.push(e);
    const order: FairEntry[] = [];
    while (queue.size > 0) {
      const e = queue.peek() as FairEntry;
      queue.take(e);
      order.push(e);
    }
    expect(order).toEqual([early, tieFirst, tieSecond, late]);
  });

  it('never starves a low-weight tenant: it is served within a bounded number of rounds', () => {
    const queue = new FairQueue<FairEntry>({ quantum: 100, weightOf: (t) => (t === 'quiet' ? 0.01 : 1) });
    for (let i = 0; i < 50; i++) queue.push(entry('noisy', 100));
    queue.push(entry('quiet', 100));
    // DRR: the quiet tenant earns 1 token per round, so it is served by round 100 (≤ 100 noisy entries).
    let takes = 0;
    for (;;) {
      const e = queue.peek() as FairEntry;
      queue.take(e);
      takes++;
      if (e.tenant === 'quiet') break;
      queue.push(entry('noisy', 100));
      expect(takes).toBeLessThanOrEqual(101);
    }
    expect(takes).toBeGreaterThan(1);
  });

  it('serves entries larger than a quantum (rounds are skipped, not looped)', () => {
    const queue = new FairQueue<FairEntry>({ quantum: 1, weightOf: () => 1 });
    const big = entry('a', 1_000_000_000);
    queue.push(big);
    queue.push(entry('b', 5));
    const first = queue.peek() as FairEntry;
    expect(first.tenant).toBe('b');
    queue.take(first);
    expect(queue.peek()).toBe(big);
  });

  it('remove drops an entry without charging its tenant and forgets an emptied tenant', () => {
    const queue = new FairQueue<FairEntry>({ quantum: 100, weightOf: () => 1 });
    const a1 = entry('a', 40);
    const a2 = entry('a', 40);
    queue.push(a1);
    queue.push(a2);
    expect(queue.size).toBe(2);
    expect(queue.tokens).toBe(80);
    expect(queue.remove(a2)).toBe(true);
    expect(queue.remove(a2)).toBe(false);
    expect(queue.tenantLoad('a')).toEqual({ requests: 1, tokens: 40 });
    expect(queue.remove(a1)).toBe(true);
    expect(queue.size).toBe(0);
    expect(queue.backlogged()).toEqual([]);
    expect(queue.peek()).toBeUndefined();
  });

  it('passes over tenants the eligibility check refuses, without giving them credit meanwhile', () => {
    const q = new FairQueue<FairEntry>({ quantum: 100, weightOf: () => 1 });
    for (let i = 0; i < 4; i++) q.push(entry('noisy', 100));
    q.push(entry('quiet', 100));
    const notNoisy = (t: string) => t !== 'noisy';
    expect(q.peek(notNoisy)?.tenant).toBe('quiet');
    q.take(q.peek(notNoisy) as FairEntry);
    // Nothing eligible left: undefined, and the queue is untouched.
    expect(q.peek(notNoisy)).toBeUndefined();
    expect(q.size).toBe(4);
    // Paused, noisy earned nothing: once eligible it alternates with a new quiet tenant as usual.
    q.push(entry('quiet', 100));
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const e = q.peek() as FairEntry;
      q.take(e);
      order.push(e.tenant);
      if (e.tenant === 'quiet') q.push(entry('quiet', 100));
    }
    expect(order.filter((t) => t === 'noisy')).toHaveLength(2);
  });

  it('rejects a quantum that is not positive', () => {
    expect(() => new FairQueue<FairEntry>({ quantum: 0, weightOf: () => 1 })).toThrow(/quantum must be > 0/);
  });
});

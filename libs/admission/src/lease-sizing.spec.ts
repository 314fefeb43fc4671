/**
 * Lease sizing and grants as pure functions, table-driven: what a draw is granted near the cap,
 * the sliding-window estimate of recent spend, and the background plans.
 */
import { DEFAULT_SIZING, addRecent, budgetTarget, emptyRecent, leaseGrant, observeRecent, planBudget, planShare, rateTarget, recentMax, recentSum, slotTarget } from './index';

describe('leaseGrant', () => {
  it.each([
    // unleased, want, min, fraction, granted
    [1_000, 100, 0, 0.5, 100], // what it wants, well within half
    [1_000, 800, 0, 0.5, 500], // at most half of what is unleased
    [1_000, Infinity, 0, 1, 1_000], // exclusive: everything
    [100, 80, 60, 0.5, 60], // half is less than the shortfall: the shortfall, since it is there
    [59, 80, 60, 0.5, 0], // not even the shortfall is unleased: nothing
    [60, 80, 60, 0.5, 60], // exactly the shortfall left: the last of the budget goes
    [0, 10, 0, 0.5, 0],
    [-50, 10, 0, 0.5, 0], // a lowered budget below what is held
    [1, 5, 0, 0.5, 0], // half of 1 is 0 and nothing is needed
    [1, 5, 1, 0.5, 1], // … but a waiting request needs 1
    [1_000, 10.7, 0, 0.5, 10], // integers
  ])('%p unleased, want %p, min %p, fraction %p → %p', (unleased, want, min, maxFraction, granted) => {
    expect(leaseGrant(unleased, { want, min, maxFraction })).toBe(granted);
  });

  it('shrinks to one worst case as a budget runs out (two holders alternating)', () => {
    // Each holder wants 8 worst cases; each draw takes at most half of what is unleased.
    const worst = 10;
    let unleased = 1_000;
    const grants: number[] = [];
    while (unleased >= worst) {
      const g = leaseGrant(unleased, { want: 8 * worst, min: worst, maxFraction: 0.5 });
      grants.push(g);
      unleased -= g;
    }
    expect(grants.slice(0, 3)).toEqual([80, 80, 80]);
    expect(grants.slice(-4)).toEqual([60, 30, 15, 10]);
    expect(unleased).toBeLessThan(worst);
    expect(grants.reduce((a, b) => a + b, 0) + unleased).toBe(1_000);
  });
});

describe('recent windows', () => {
  const W = 10_000;
  const T = 1_700_000_000_000; // a multiple of W

  it('sums the current window plus the overlapping part of the previous one', () => {
    const r = emptyRecent();
    addRecent(r, T, 100, W);
    addRecent(r, T + 5_000, 50, W);
    expect(recentSum(r, T + 9_999, W)).toBe(150);
    // 12.5 s: previous window (150) overlaps the last 10 s by 75 %.
    expect(recentSum(r, T + 12_500, W)).toBeCloseTo(112.5, 6);
    addRecent(r, T + 12_500, 10, W);
    expect(recentSum(r, T + 12_500, W)).toBeCloseTo(122.5, 6);
    // Two windows later everything has aged out.
    expect(recentSum(r, T + 30_000, W)).toBe(0);
  });

  it('keeps the largest item of the current and previous window', () => {
    const r = emptyRecent();
    addRecent(r, T, 7, W);
    observeRecent(r, T + 1, 3, W);
    expect(recentMax(r, T + 11_000, W)).toBe(7);
    expect(recentMax(r, T + 20_000, W)).toBe(0);
  });
});

describe('targets and plans', () => {
  it.each([
    // recent Σ worst cases, largest worst case, target
    [0, 1_000, 8_000], // no history: 8 worst cases
    [50_000, 1_000, 50_000], // 10 s of spend
    [3_000, 1_000, 8_000],
    [0, 0, 1],
  ])('budgetTarget(%p, %p) = %p', (recent, largest, target) => {
    expect(budgetTarget(recent, largest, DEFAULT_SIZING)).toBe(target);
  });

  it.each([
    // available, target, plan
    [0, 1_000, { kind: 'draw', wantNano: 1_000 }],
    [299, 1_000, { kind: 'draw', wantNano: 701 }], // below 30 %: refill to the target
    [300, 1_000, { kind: 'none' }],
    [2_000, 1_000, { kind: 'none' }],
    [2_001, 1_000, { kind: 'return', nano: 1_001 }], // more than twice: trim to the target
  ])('planBudget(%p, %p) = %p', (available, target, plan) => {
    expect(planBudget(available, target, DEFAULT_SIZING)).toEqual(plan);
  });

  it.each([
    // recent use in 10 s, largest need, limit, target
    [0, 0, 1_000, 1],
    [0, 30, 1_000, 60], // twice the largest need
    [100, 30, 1_000, 900], // 600 a minute × 1.5
    [1_000, 30, 1_000, 1_000], // never above the limit
  ])('rateTarget(%p, %p, %p) = %p', (use, need, limit, target) => {
    expect(rateTarget(use, need, limit, DEFAULT_SIZING)).toBe(target);
  });

  it.each([
    [0, 64, 1],
    [4, 64, 6],
    [60, 64, 64],
  ])('slotTarget(%p, %p) = %p', (peak, limit, target) => {
    expect(slotTarget(peak, limit)).toBe(target);
  });

  it.each([
    // share, target, free, change
    [100, 200, 0, 100], // below target: draw the difference
    [300, 200, 300, 0], // within 1.5 ×
    [301, 200, 301, -101], // above: give back down to the target
    [400, 100, 50.9, -50], // only the full part of the bucket
    [400, 100, 0, 0], // a full bucket in use gives nothing back
  ])('planShare(%p, %p, %p) = %p', (share, target, free, change) => {
    expect(planShare(share, target, free)).toBe(change);
  });
});

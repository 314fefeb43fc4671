import { TpotLimiter, nearestRankPercentile } from './tpot-limiter';

describe('nearestRankPercentile', () => {
  it('takes the smallest value with at least q of the values at or below it', () => {
    const twenty = Array.from({ length: 20 }, (_, i) => i + 1);
    expect(nearestRankPercentile(twenty, 0.95)).toBe(19);
    expect(nearestRankPercentile(twenty, 0.5)).toBe(10);
    expect(nearestRankPercentile(twenty, 1)).toBe(20);
    expect(nearestRankPercentile([7], 0.95)).toBe(7);
    expect(nearestRankPercentile([3, 1, 2], 0.01)).toBe(1);
  });
});

describe('TpotLimiter', () => {
  const feed = (l: TpotLimiter, tpotMs: number, n: number, grantedAt: number, now: number) => {
    const changes = [];
    for (let i = 0; i < n; i++) changes.push(l.observe(tpotMs, grantedAt, now));
    return changes.filter(Boolean);
  };

  it('starts at the declared slots and holds while the p95 is under the target', () => {
    const l = new TpotLimiter({ targetMs: 50, maxLimit: 32 });
    expect(l.limit).toBe(32);
    expect(feed(l, 45, 40, 0, 1_000)).toEqual([]);
    expect(l.limit).toBe(32);
  });

  it('waits for minSamples before deciding', () => {
    const l = new TpotLimiter({ targetMs: 50, maxLimit: 32, minSamples: 8 });
    expect(feed(l, 80, 7, 0, 1_000)).toEqual([]);
    expect(l.observe(80, 0, 1_000)).toBe('decreased');
  });

  it('decreases multiplicatively by target ÷ p95, clamped to [0.5, 0.9], by at least one', () => {
    const l = new TpotLimiter({ targetMs: 50, maxLimit: 32 });
    feed(l, 60, 8, 0, 1_000); // 50/60 = 0.83 → floor(32 × 0.83) = 26
    expect(l.limit).toBe(26);
    feed(l, 500, 8, 2_000, 3_000); // factor clamped to 0.5 → 13
    expect(l.limit).toBe(13);
    feed(l, 51, 8, 4_000, 5_000); // factor clamped to 0.9 → floor(11.7) = 11
    expect(l.limit).toBe(11);
    const small = new TpotLimiter({ targetMs: 50, maxLimit: 2 });
    feed(small, 51, 8, 0, 1);
    expect(small.limit).toBe(1);
    expect(feed(small, 500, 16, 2, 3)).toEqual([]); // never below 1
    expect(small.limit).toBe(1);
  });

  it('ignores generations granted before the last change (they ran at the old batch)', () => {
    const l = new TpotLimiter({ targetMs: 50, maxLimit: 32 });
    feed(l, 60, 8, 0, 1_000);
    expect(l.limit).toBe(26);
    expect(feed(l, 90, 20, 999, 1_500)).toEqual([]); // granted at 999 < change at 1,000
    expect(l.limit).toBe(26);
    expect(l.p95()).toBeUndefined();
  });

  it('increases by one only when the p95 is well under the target and the replica was full', () => {
    const l = new TpotLimiter({ targetMs: 50, maxLimit: 32 });
    feed(l, 60, 8, 0, 1_000);
    expect(l.limit).toBe(26);
    // Fast, but never filled: no evidence more would fit.
    expect(feed(l, 30, 16, 1_000, 2_000)).toEqual([]);
    l.noteInFlight(25);
    expect(feed(l, 30, 1, 1_000, 2_000)).toEqual([]);
    l.noteInFlight(26);
    expect(l.observe(30, 1_000, 2_000)).toBe('increased');
    expect(l.limit).toBe(27);
    // Between 0.85 × target and the target: hold (two windows of 8)…
    l.noteInFlight(27);
    expect(feed(l, 45, 16, 2_000, 3_000)).toEqual([]);
    expect(l.limit).toBe(27);
    // …and after a third window held at a full replica, probe one up.
    expect(feed(l, 45, 8, 2_000, 3_000)).toEqual(['increased']);
    expect(l.limit).toBe(28);
  });

  it('does not ratchet down for good when the target is close to the single-sequence TPOT', () => {
    // A replica at 50 ms per token alone, 60 ms at 4: target 55.
    const l = new TpotLimiter({ targetMs: 55, maxLimit: 4 });
    feed(l, 60, 8, 0, 1);
    expect(l.limit).toBe(3);
    // At 3 it runs at 53 ms: within the target, never below 0.85 × 55 = 46.75.
    let t = 2;
    const run = (ms: number) => {
      l.noteInFlight(l.limit);
      return feed(l, ms, 8, t, ++t);
    };
    expect([run(53), run(53), run(53)].flat()).toEqual(['increased']);
    expect(l.limit).toBe(4);
    // At 4 it is over the target again: back to 3.
    expect(run(60)).toEqual(['decreased']);
    expect(l.limit).toBe(3);
  });

  it('never rises above the declared slots', () => {
    const l = new TpotLimiter({ targetMs: 50, maxLimit: 4 });
    l.noteInFlight(4);
    expect(feed(l, 10, 16, 0, 1)).toEqual([]);
    expect(l.limit).toBe(4);
  });

  it('rejects a target or limit that cannot work', () => {
    expect(() => new TpotLimiter({ targetMs: 0, maxLimit: 4 })).toThrow(RangeError);
    expect(() => new TpotLimiter({ targetMs: 50, maxLimit: 0 })).toThrow(RangeError);
  });
});

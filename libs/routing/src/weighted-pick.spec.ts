import { pickWeighted } from './weighted-pick';
import { stickyUnit } from './sticky-hash';

describe('pickWeighted', () => {
  it('is sticky: the same key always lands on the same arm', () => {
    const arms = [
      { value: 'stable', weight: 90 },
      { value: 'canary', weight: 10 },
    ];
    for (let i = 0; i < 500; i++) {
      const key = `req-${i}`;
      expect(pickWeighted(arms, key)).toBe(pickWeighted(arms, key));
    }
  });

  it.each([1, 5, 10, 25, 50])('splits 10,000 ids within ±3 points of a %i%% canary weight', (canary) => {
    const arms = [
      { value: 'stable', weight: 100 - canary },
      { value: 'canary', weight: canary },
    ];
    let hits = 0;
    for (let i = 0; i < 10_000; i++) if (pickWeighted(arms, `request-${i}`) === 'canary') hits++;
    expect(Math.abs(hits / 100 - canary)).toBeLessThanOrEqual(3);
  });

  it('never picks a zero-weight arm and returns undefined with no positive weight', () => {
    const arms = [
      { value: 'a', weight: 0 },
      { value: 'b', weight: 1 },
    ];
    for (let i = 0; i < 200; i++) expect(pickWeighted(arms, String(i))).toBe('b');
    expect(pickWeighted([{ value: 'a', weight: 0 }], 'x')).toBeUndefined();
    expect(pickWeighted([], 'x')).toBeUndefined();
  });

  it('splits huge finite weights by their ratio instead of sending every key to the last arm', () => {
    // Two weights of 1e308 sum to Infinity; the pick must still be about 50/50.
    const arms = [
      { value: 'stable', weight: 1e308 },
      { value: 'canary', weight: 1e308 },
    ];
    let canary = 0;
    for (let i = 0; i < 10_000; i++) if (pickWeighted(arms, `request-${i}`) === 'canary') canary++;
    expect(Math.abs(canary / 100 - 50)).toBeLessThanOrEqual(3);
    const lopsided = [
      { value: 'stable', weight: 9e307 },
      { value: 'canary', weight: 1e307 },
      { value: 'idle', weight: 0 },
    ];
    let small = 0;
    for (let i = 0; i < 10_000; i++) {
      const picked = pickWeighted(lopsided, `request-${i}`);
      expect(picked).not.toBe('idle');
      if (picked === 'canary') small++;
    }
    expect(Math.abs(small / 100 - 10)).toBeLessThanOrEqual(3);
  });

  it.each([
    ['zero', 0],
    ['negative', -5],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['-Infinity', Number.NEGATIVE_INFINITY],
  ])('never picks an arm whose weight is %s, wherever it is listed', (_name, bad) => {
    const last = [
      { value: 'ok', weight: 1 },
      { value: 'bad', weight: bad },
    ];
    const first = [...last].reverse();
    for (let i = 0; i < 2_000; i++) {
      expect(pickWeighted(last, `k${i}`)).toBe('ok');
      expect(pickWeighted(first, `k${i}`)).toBe('ok');
    }
    expect(pickWeighted([{ value: 'bad', weight: bad }], 'x')).toBeUndefined();
  });

  it('maps keys into [0, 1)', () => {
    for (let i = 0; i < 1000; i++) {
      const u = stickyUnit(`k${i}`);
      expect(u).toBeGreaterThanOrEqual(0);
      expect(u).toBeLessThan(1);
    }
  });
});

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

  it('maps keys into [0, 1)', () => {
    for (let i = 0; i < 1000; i++) {
      const u = stickyUnit(`k${i}`);
      expect(u).toBeGreaterThanOrEqual(0);
      expect(u).toBeLessThan(1);
    }
  });
});

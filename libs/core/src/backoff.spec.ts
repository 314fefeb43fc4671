import { isLogWorthyAttempt, retryDelayMs } from './backoff';

describe('retryDelayMs', () => {
  const opts = { baseMs: 100, maxMs: 1_000 };
  it.each([
    [1, 0, 50],
    [1, 0.999999, 100],
    [2, 0.999999, 200],
    [4, 0.999999, 800],
    [5, 0.999999, 1_000],
    [1_000, 0, 500],
    [0, 0.999999, 100],
  ])('attempt %d with random %d gives %d ms', (attempt, r, expected) => {
    expect(retryDelayMs(attempt, opts, () => r)).toBe(expected);
  });
});

describe('isLogWorthyAttempt', () => {
  it('is true for powers of two only', () => {
    expect([0, 1, 2, 3, 4, 5, 8, 9, 16].map(isLogWorthyAttempt)).toEqual([false, true, true, false, true, false, true, false, true]);
  });
});

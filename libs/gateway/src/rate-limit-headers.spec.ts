import { goDuration, rateLimitHeaders } from './rate-limit-headers';

describe('goDuration', () => {
  it.each([
    [0, '0s'],
    [-5, '0s'],
    [Number.NaN, '0s'],
    [12, '12ms'],
    [0.2, '1ms'],
    [999, '999ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [1234, '1.234s'],
    [60_000, '1m0s'],
    [360_000, '6m0s'],
    [61_500, '1m1.5s'],
    [3_723_000, '1h2m3s'],
    [3_600_000, '1h0m0s'],
  ])('%p ms → %p', (ms, text) => {
    expect(goDuration(ms)).toBe(text);
  });
});

describe('rateLimitHeaders', () => {
  it('names both windows as OpenAI does', () => {
    expect(
      rateLimitHeaders({ requests: { limit: 60, remaining: 59, resetMs: 1000 }, tokens: { limit: 10_000, remaining: 9_870.6, resetMs: 780 } }),
    ).toEqual({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-limit-tokens': '10000',
      'x-ratelimit-remaining-tokens': '9870',
      'x-ratelimit-reset-tokens': '780ms',
    });
  });

  it('leaves out windows that are not configured, and never reports a negative remainder', () => {
    expect(rateLimitHeaders(undefined)).toEqual({});
    expect(rateLimitHeaders({ tokens: { limit: 100, remaining: -3, resetMs: 2500 } })).toEqual({
      'x-ratelimit-limit-tokens': '100',
      'x-ratelimit-remaining-tokens': '0',
      'x-ratelimit-reset-tokens': '2.5s',
    });
  });
});

import type { RevisionPricing } from '@weir/core';
import { formatUsd, microUsdPerMTok, priceUsage } from './pricing';

const price = (inputPerMTok: number, outputPerMTok: number, cachedInputPerMTok = inputPerMTok): RevisionPricing => ({
  inputPerMTok,
  outputPerMTok,
  cachedInputPerMTok,
});

describe('priceUsage', () => {
  it.each([
    ['free model', price(0, 0), { inputTokens: 1_000, outputTokens: 1_000 }, 0],
    ['$1 in / $2 out', price(1, 2), { inputTokens: 1_000, outputTokens: 500 }, 2_000_000],
    ['one million tokens at $3', price(3, 0), { inputTokens: 1_000_000, outputTokens: 0 }, 3_000_000_000],
    ['cached input at its own price', price(0.15, 0.6, 0.075), { inputTokens: 1_000, outputTokens: 100, cachedInputTokens: 400 }, 180_000],
    ['all input cached', price(2.5, 10, 1.25), { inputTokens: 2_000, outputTokens: 0, cachedInputTokens: 2_000 }, 2_500_000],
    // 0.1 + 0.2 style prices where float arithmetic drifts: 7 × 0.07 × 1000 = 490.00000000000006.
    ['float-unfriendly price', price(0.07, 0.07), { inputTokens: 7, outputTokens: 0 }, 490],
    ['float-unfriendly sum', price(0.1, 0.2), { inputTokens: 3, outputTokens: 3 }, 900],
    ['6-decimal price, sub-nano rounds half up (0.5 → 1)', price(0.000001, 0), { inputTokens: 500, outputTokens: 0 }, 1],
    ['6-decimal price, sub-nano rounds half up (0.499 → 0)', price(0.000001, 0), { inputTokens: 499, outputTokens: 0 }, 0],
    ['6-decimal price', price(12.345678, 98.765432), { inputTokens: 1_000, outputTokens: 1_000 }, 111_111_110],
    ['large request at a high price', price(1_000, 2_000), { inputTokens: 10_000_000, outputTokens: 1_000_000 }, 12_000_000_000_000],
  ])('%s', (_name, pricing, usage, expected) => {
    expect(priceUsage(pricing, usage)).toBe(expected);
  });

  it('matches an independent decimal-string computation on random 6-decimal prices', () => {
    // Reference: parse "D.DDDDDD" by hand into micro-USD, multiply as BigInt, round half up.
    let seed = 42;
    const rand = (n: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31), seed % n);
    for (let i = 0; i < 500; i++) {
      const micros = [rand(100_000_000), rand(100_000_000), rand(100_000_000)];
      const asPrice = (m: number) => Number(`${Math.floor(m / 1e6)}.${String(m % 1e6).padStart(6, '0')}`);
      const input = rand(2_000_000);
      const cached = rand(input + 1);
      const output = rand(100_000);
      const pico = BigInt(input - cached) * BigInt(micros[0]) + BigInt(cached) * BigInt(micros[2]) + BigInt(output) * BigInt(micros[1]);
      const expected = Number((pico + 500n) / 1000n);
      const got = priceUsage(price(asPrice(micros[0]), asPrice(micros[1]), asPrice(micros[2])), {
        inputTokens: input,
        outputTokens: output,
        cachedInputTokens: cached,
      });
      expect(got).toBe(expected);
    }
  });

  it.each([
    ['negative tokens', price(1, 1), { inputTokens: -1, outputTokens: 0 }],
    ['fractional tokens', price(1, 1), { inputTokens: 1.5, outputTokens: 0 }],
    ['more cached than input', price(1, 1), { inputTokens: 1, outputTokens: 0, cachedInputTokens: 2 }],
    ['negative price', price(-1, 1), { inputTokens: 1, outputTokens: 0 }],
    ['NaN price', price(1, Number.NaN), { inputTokens: 1, outputTokens: 0 }],
    ['cost beyond 2^53 nano-USD', price(1_000, 0), { inputTokens: 9_000_000_000_000, outputTokens: 0 }],
  ])('throws RangeError for %s', (_name, pricing, usage) => {
    expect(() => priceUsage(pricing, usage)).toThrow(RangeError);
  });
});

describe('microUsdPerMTok', () => {
  it.each([
    [0, 0],
    [0.000001, 1],
    [0.15, 150_000],
    [2.5, 2_500_000],
    [12.345678, 12_345_678],
    [0.0000004, 0],
  ])('%s USD/MTok → %s µUSD/MTok', (usd, micro) => {
    expect(microUsdPerMTok(usd)).toBe(micro);
  });
});

describe('formatUsd', () => {
  it.each([
    [0, 0, '0'],
    [1_234, 0.000001234, '0.000001234'],
    [300_000_001, 0.300000001, '0.300000001'],
    [2_000_000_000, 2, '2'],
  ])('%s nano-USD → %s USD', (nano, usd, json) => {
    expect(formatUsd(nano)).toBe(usd);
    expect(JSON.stringify(formatUsd(nano))).toBe(json);
  });
});

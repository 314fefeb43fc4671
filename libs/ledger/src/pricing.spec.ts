import type { RevisionPricing } from '@weir/core';
import { formatUsd, microUsdPerMTok, priceUsage, worstCaseNanoUsd } from './pricing';

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
    ['cache reads and writes beyond input', price(1, 1), { inputTokens: 10, outputTokens: 0, cachedInputTokens: 6, cacheWriteInputTokens: 5 }],
    ['more reasoning than output', price(1, 1), { inputTokens: 0, outputTokens: 3, reasoningTokens: 4 }],
    ['negative cache writes', price(1, 1), { inputTokens: 1, outputTokens: 0, cacheWriteInputTokens: -1 }],
    ['fractional reasoning', price(1, 1), { inputTokens: 0, outputTokens: 2, reasoningTokens: 0.5 }],
    ['negative cache-write price', { ...price(1, 1), cacheWriteInputPerMTok: -1 }, { inputTokens: 1, outputTokens: 0 }],
    ['NaN reasoning price', { ...price(1, 1), reasoningPerMTok: Number.NaN }, { inputTokens: 0, outputTokens: 1 }],
  ])('throws RangeError for %s', (_name, pricing, usage) => {
    expect(() => priceUsage(pricing, usage)).toThrow(RangeError);
  });
});

/** Anthropic-style prices (claude sonnet: $3 in, $15 out, reads 0.1×, 5-minute writes 1.25×) and an OpenAI reasoning price. */
const classes: RevisionPricing = { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3, cacheWriteInputPerMTok: 3.75, reasoningPerMTok: 20 };

describe('priceUsage by token class', () => {
  it.each([
    // nano-USD = tokens × USD/MTok × 1,000 (the module comment): $3/MTok is 3,000 nano-USD a token.
    ['uncached input and output only', classes, { inputTokens: 100, outputTokens: 10 }, 100 * 3_000 + 10 * 15_000],
    // Anthropic: input 100 + cache write 1,000 + cache read 2,000 = 3,100 input tokens in total.
    [
      'cache reads and writes beside uncached input',
      classes,
      { inputTokens: 3_100, outputTokens: 50, cachedInputTokens: 2_000, cacheWriteInputTokens: 1_000 },
      100 * 3_000 + 2_000 * 300 + 1_000 * 3_750 + 50 * 15_000,
    ],
    // OpenAI: completion_tokens 500 of which 400 reasoning; prompt 1,000 of which 800 cached.
    [
      'reasoning inside output',
      classes,
      { inputTokens: 1_000, outputTokens: 500, cachedInputTokens: 800, reasoningTokens: 400 },
      200 * 3_000 + 800 * 300 + 100 * 15_000 + 400 * 20_000,
    ],
    ['all output reasoning', classes, { inputTokens: 0, outputTokens: 7, reasoningTokens: 7 }, 7 * 20_000],
    // Absent class prices take their defaults: writes at input, reasoning at output.
    ['defaults: writes at input, reasoning at output', price(2, 8, 0.5), { inputTokens: 10, outputTokens: 10, cacheWriteInputTokens: 4, reasoningTokens: 6 }, 10 * 2_000 + 10 * 8_000],
  ])('%s', (_name, pricing, usage, expected) => {
    expect(priceUsage(pricing, usage)).toBe(expected);
  });
});

describe('worstCaseNanoUsd', () => {
  it('prices every input token at the dearest input class and every output token at the dearest output class', () => {
    // Input: max(3, 0.3, 3.75) = 3.75; output: max(15, 20) = 20.
    expect(worstCaseNanoUsd(classes, 1_000, 100)).toBe(1_000 * 3_750 + 100 * 20_000);
    // Plain prices: the same as priceUsage of the whole usage.
    expect(worstCaseNanoUsd(price(1, 2), 1_000, 500)).toBe(priceUsage(price(1, 2), { inputTokens: 1_000, outputTokens: 500 }));
    // A cache-read price above the input price (a misconfiguration, still bounded).
    expect(worstCaseNanoUsd(price(1, 2, 5), 10, 0)).toBe(10 * 5_000);
  });

  it('bounds priceUsage of every split of the same totals into classes (the reservation stays a hard cap)', () => {
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31), seed % n);
    for (let i = 0; i < 500; i++) {
      const pricing: RevisionPricing = {
        inputPerMTok: rand(20_000) / 1000,
        outputPerMTok: rand(80_000) / 1000,
        cachedInputPerMTok: rand(20_000) / 1000,
        cacheWriteInputPerMTok: rand(30_000) / 1000,
        reasoningPerMTok: rand(90_000) / 1000,
      };
      const input = rand(100_000);
      const output = rand(10_000);
      const cached = rand(input + 1);
      const cacheWrite = rand(input - cached + 1);
      const reasoning = rand(output + 1);
      const cost = priceUsage(pricing, { inputTokens: input, outputTokens: output, cachedInputTokens: cached, cacheWriteInputTokens: cacheWrite, reasoningTokens: reasoning });
      expect(cost).toBeLessThanOrEqual(worstCaseNanoUsd(pricing, input, output));
    }
  });

  it('throws RangeError for negative or fractional counts', () => {
    expect(() => worstCaseNanoUsd(classes, -1, 1)).toThrow(RangeError);
    expect(() => worstCaseNanoUsd(classes, 1, 1.5)).toThrow(RangeError);
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

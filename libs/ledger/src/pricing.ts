import type { RevisionPricing, TokenUsage } from '@weir/core';

/**
 * Token pricing in exact integer arithmetic.
 *
 * Prices are USD per 1,000,000 tokens (`RevisionPricing`). Each price is first converted to
 * an integer number of micro-USD per million tokens (6 decimals: `$0.15/MTok` → 150,000), so
 * `tokens × microUsdPerMTok` is an exact integer of pico-USD (1e-12 USD):
 *
 *   tokens × (µUSD / 1e6 tokens) = tokens × 1e-12 USD
 *
 * The three products are summed as BigInts (no 2^53 overflow, no float error) and divided by
 * 1,000 once, rounding half up, to give nano-USD (1e-9 USD). Results are exact for prices
 * with up to 6 decimals; the only rounding is that final one, under 0.5 nano-USD per request.
 * Equivalently: nano-USD = tokens × pricePerMTok × 1,000.
 */

const MICRO = 1_000_000;

/**
 * A USD-per-MTok price as integer micro-USD per MTok (`2.5` → `2_500_000`). Prices with more
 * than 6 decimals are rounded to the nearest micro-USD.
 * @throws RangeError when the price is negative, not finite, or too large to be exact.
 */
export function microUsdPerMTok(pricePerMTok: number): number {
  if (!Number.isFinite(pricePerMTok) || pricePerMTok < 0) {
    throw new RangeError(`a price must be a finite, non-negative USD amount per million tokens, got ${pricePerMTok}`);
  }
  const micro = Math.round(pricePerMTok * MICRO);
  if (!Number.isSafeInteger(micro)) throw new RangeError(`price ${pricePerMTok} USD/MTok is too large`);
  return micro;
}

/**
 * The cost of one generation in nano-USD (1e-9 USD), an exact integer (see the module
 * comment for the arithmetic).
 *
 * - input tokens not served from cache (`inputTokens − cachedInputTokens`) at `inputPerMTok`;
 * - cached input tokens (`cachedInputTokens`, default 0) at `cachedInputPerMTok`;
 * - output tokens at `outputPerMTok`.
 *
 * @throws RangeError when a token count is not a non-negative integer, when
 *   `cachedInputTokens > inputTokens`, or when a price is invalid ({@link microUsdPerMTok}).
 */
export function priceUsage(pricing: RevisionPricing, usage: TokenUsage): number {
  const cached = usage.cachedInputTokens ?? 0;
  for (const [name, value] of [
    ['inputTokens', usage.inputTokens],
    ['outputTokens', usage.outputTokens],
    ['cachedInputTokens', cached],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
  }
  if (cached > usage.inputTokens) {
    throw new RangeError(`cachedInputTokens (${cached}) cannot exceed inputTokens (${usage.inputTokens})`);
  }
  const pico =
    BigInt(usage.inputTokens - cached) * BigInt(microUsdPerMTok(pricing.inputPerMTok)) +
    BigInt(cached) * BigInt(microUsdPerMTok(pricing.cachedInputPerMTok)) +
    BigInt(usage.outputTokens) * BigInt(microUsdPerMTok(pricing.outputPerMTok));
  const nano = (pico + 500n) / 1000n;
  if (nano > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError('cost exceeds Number.MAX_SAFE_INTEGER nano-USD');
  return Number(nano);
}

/**
 * Nano-USD → USD as a JSON number (`1_234` → `0.000001234`). The division is correctly
 * rounded, so the result is the double nearest the exact decimal and `JSON.stringify`
 * prints that decimal. For sums that must stay exact keep the integer nano-USD.
 */
export function formatUsd(nanoUsd: number): number {
  return nanoUsd / 1e9;
}

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
 * comment for the arithmetic). Each token is billed once, in exactly one class:
 *
 * - uncached input (`inputTokens − cachedInputTokens − cacheWriteInputTokens`) at `inputPerMTok`;
 * - cache reads (`cachedInputTokens`, default 0) at `cachedInputPerMTok`;
 * - cache writes (`cacheWriteInputTokens`, default 0) at `cacheWriteInputPerMTok` (default `inputPerMTok`);
 * - output other than reasoning (`outputTokens − reasoningTokens`) at `outputPerMTok`;
 * - reasoning (`reasoningTokens`, default 0) at `reasoningPerMTok` (default `outputPerMTok`).
 *
 * Source of the classes: OpenAI's usage object counts cached tokens inside `prompt_tokens` and
 * reasoning tokens inside `completion_tokens` (openai-node `CompletionUsage`), and bills
 * reasoning as output; Anthropic reports cache reads and writes beside `input_tokens` and prices
 * them apart (docs.anthropic.com "Prompt caching" pricing: writes 1.25× base input for the 5-minute
 * cache, reads 0.1×) — the engine adapters fold them into `inputTokens` so one formula serves both.
 *
 * @throws RangeError when a token count is not a non-negative integer, when
 *   `cachedInputTokens + cacheWriteInputTokens > inputTokens` or `reasoningTokens > outputTokens`,
 *   or when a price is invalid ({@link microUsdPerMTok}).
 */
export function priceUsage(pricing: RevisionPricing, usage: TokenUsage): number {
  const cached = usage.cachedInputTokens ?? 0;
  const cacheWrite = usage.cacheWriteInputTokens ?? 0;
  const reasoning = usage.reasoningTokens ?? 0;
  for (const [name, value] of [
    ['inputTokens', usage.inputTokens],
    ['outputTokens', usage.outputTokens],
    ['cachedInputTokens', cached],
    ['cacheWriteInputTokens', cacheWrite],
    ['reasoningTokens', reasoning],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
  }
  if (cached + cacheWrite > usage.inputTokens) {
    throw new RangeError(`cachedInputTokens (${cached}) + cacheWriteInputTokens (${cacheWrite}) cannot exceed inputTokens (${usage.inputTokens})`);
  }
  if (reasoning > usage.outputTokens) {
    throw new RangeError(`reasoningTokens (${reasoning}) cannot exceed outputTokens (${usage.outputTokens})`);
  }
  const p = classPrices(pricing);
  const pico =
    BigInt(usage.inputTokens - cached - cacheWrite) * p.input +
    BigInt(cached) * p.cacheRead +
    BigInt(cacheWrite) * p.cacheWrite +
    BigInt(usage.outputTokens - reasoning) * p.output +
    BigInt(reasoning) * p.reasoning;
  return toNano(pico);
}

/**
 * The most one generation can cost at these prices, in nano-USD: `inputTokens` at the highest
 * input-class price (uncached, cache read, cache write) plus `maxOutputTokens` at the highest
 * output-class price (output, reasoning). It bounds {@link priceUsage} of every usage with at
 * most that many input and output tokens, however the upstream splits them into classes, so a
 * reservation of it is a hard cap (docs/architecture.md §2).
 * @throws RangeError as {@link priceUsage}.
 */
export function worstCaseNanoUsd(pricing: RevisionPricing, inputTokens: number, maxOutputTokens: number): number {
  for (const [name, value] of [
    ['inputTokens', inputTokens],
    ['maxOutputTokens', maxOutputTokens],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
  }
  const p = classPrices(pricing);
  const maxOf = (...v: bigint[]): bigint => v.reduce((a, b) => (b > a ? b : a));
  return toNano(BigInt(inputTokens) * maxOf(p.input, p.cacheRead, p.cacheWrite) + BigInt(maxOutputTokens) * maxOf(p.output, p.reasoning));
}

/** The five class prices as integer micro-USD per MTok, defaults applied. */
function classPrices(pricing: RevisionPricing): { input: bigint; cacheRead: bigint; cacheWrite: bigint; output: bigint; reasoning: bigint } {
  return {
    input: BigInt(microUsdPerMTok(pricing.inputPerMTok)),
    cacheRead: BigInt(microUsdPerMTok(pricing.cachedInputPerMTok)),
    cacheWrite: BigInt(microUsdPerMTok(pricing.cacheWriteInputPerMTok ?? pricing.inputPerMTok)),
    output: BigInt(microUsdPerMTok(pricing.outputPerMTok)),
    reasoning: BigInt(microUsdPerMTok(pricing.reasoningPerMTok ?? pricing.outputPerMTok)),
  };
}

/** Pico-USD → nano-USD, rounding half up. @throws RangeError past `Number.MAX_SAFE_INTEGER`. */
function toNano(pico: bigint): number {
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

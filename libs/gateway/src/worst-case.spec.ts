import type { RevisionPricing } from '@weir/core';
import { priceUsage } from '@weir/ledger';
import { worstCaseCostNanoUsd } from './pipeline';
import { fakeRevision } from './test-support';

/** Claude-like: cache writes dearer than input, reasoning dearer than output. */
const classes: RevisionPricing = { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3, cacheWriteInputPerMTok: 3.75, reasoningPerMTok: 20 };
const plain: RevisionPricing = { inputPerMTok: 3.5, outputPerMTok: 12, cachedInputPerMTok: 3.5 };

describe('the reservation worst case with token classes', () => {
  it('holds each token at the dearest class of the dearest candidate', () => {
    // nano-USD = tokens × USD/MTok × 1,000. classes: 1,000 at 3.75 + 100 at 20 = 5,750,000; plain: 1,000 at 3.5 + 100 at 12 = 4,700,000.
    expect(worstCaseCostNanoUsd([fakeRevision(plain), fakeRevision(classes)], 1_000, 100)).toBe(1_000 * 3_750 + 100 * 20_000);
    expect(worstCaseCostNanoUsd([fakeRevision(plain)], 1_000, 100)).toBe(1_000 * 3_500 + 100 * 12_000);
  });

  it('bounds what the answering revision can settle, however the upstream splits the tokens into classes', () => {
    const worst = worstCaseCostNanoUsd([fakeRevision(classes)], 1_000, 100);
    // The dearest split: every input token a cache write, every output token reasoning.
    const dearest = priceUsage(classes, { inputTokens: 1_000, outputTokens: 100, cacheWriteInputTokens: 1_000, reasoningTokens: 100 });
    expect(dearest).toBe(worst);
    // Priced as plain input and output, the same reservation would have been too small for it.
    expect(priceUsage(classes, { inputTokens: 1_000, outputTokens: 100 })).toBeLessThan(dearest);
  });
});

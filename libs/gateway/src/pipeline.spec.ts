import type { RevisionSpec } from '@weir/core';
import { worstCaseCostNanoUsd } from './pipeline';

const revision: RevisionSpec = {
  id: 'x@1',
  model: 'x',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'x', api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 4096,
  maxOutputTokens: 1024,
  defaultOutputTokens: 256,
  pricing: { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 },
};

describe('worstCaseCostNanoUsd', () => {
  const priced = (id: string, inputPerMTok: number, outputPerMTok: number): RevisionSpec => ({ ...revision, id, pricing: { inputPerMTok, outputPerMTok, cachedInputPerMTok: 0 } });

  it('prices input plus the whole output limit at the dearest candidate of the chain', () => {
    // 1,000 in × $2/MTok + 500 out × $10/MTok = $0.007 = 7,000,000 nano-USD
    expect(worstCaseCostNanoUsd([priced('a', 1, 4), priced('b', 2, 10), priced('c', 3, 1)], 1_000, 500)).toBe(7_000_000);
    // c: 1,000 × 3 + 0 = 3,000,000 beats b's 2,000,000 when the output limit is tiny
    expect(worstCaseCostNanoUsd([priced('b', 2, 10), priced('c', 3, 1)], 1_000, 0)).toBe(3_000_000);
    expect(worstCaseCostNanoUsd([], 10, 10)).toBe(0);
  });
});

import type { GenerationOutcome } from '@weir/core';
import { createGenerationRegistry } from './generation-registry';

const outcome: GenerationOutcome = { finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 1, modelRevision: 'r', timings: { queueMs: 0, ttftMs: 1, totalMs: 2 } };
const entry = (id: string) => ({ generationId: id, requestId: id, tenantId: 't', modelRevision: 'r', state: 'running' as const, stop: () => undefined });

describe('createGenerationRegistry', () => {
  it('keeps at most maxFinished finished entries, evicting the oldest, and never evicts running ones', () => {
    const registry = createGenerationRegistry({ maxFinished: 3 });
    try {
      registry.add(entry('live'));
      for (let i = 0; i < 5; i++) {
        registry.add(entry(`g${i}`));
        registry.finish(`g${i}`, outcome);
      }
      expect(registry.get('t', 'g0')).toBeUndefined();
      expect(registry.get('t', 'g1')).toBeUndefined();
      expect(registry.get('t', 'g4')?.state).toBe('finished');
      expect(registry.get('t', 'live')?.state).toBe('running');
      expect(registry.active().map((e) => e.generationId)).toEqual(['live']);
      expect(registry.get('other-tenant', 'g4')).toBeUndefined();
    } finally {
      registry.close();
    }
  });
});

import type { GenerationOutcome } from '@weir/core';
import { createGenerationRegistry, retainedBytesOf } from './generation-registry';
import { createTranscript } from './transcript';

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

  it('keeps finished entries within maxRetainedBytes (estimated), the oldest dropped first', () => {
    const withText = (id: string, text: string) => {
      const transcript = createTranscript();
      for (const piece of text.match(/.{1,10}/g) ?? []) transcript.push(piece, 1);
      transcript.end(outcome);
      return { ...entry(id), transcript };
    };
    const one = retainedBytesOf(withText('probe', 'x'.repeat(1000)));
    // 1,000 chars in 100 deltas: 2 bytes a char plus the per-delta and per-entry overheads.
    expect(one).toBeGreaterThan(2_000 + 100 * 32);
    const registry = createGenerationRegistry({ maxRetainedBytes: Math.floor(2.5 * one) });
    try {
      for (let i = 0; i < 4; i++) {
        registry.add(withText(`g${i}`, 'x'.repeat(1000)));
        registry.finish(`g${i}`, outcome);
      }
      expect(['g0', 'g1', 'g2', 'g3'].map((id) => registry.get('t', id) !== undefined)).toEqual([false, false, true, true]);
      expect(registry.retained()).toEqual({ finished: 2, bytes: 2 * one });
    } finally {
      registry.close();
    }
  });

  it('lets go of a finished generation’s stop (a closure over its request), and stops nothing after', () => {
    const registry = createGenerationRegistry();
    try {
      let stops = 0;
      const live = { ...entry('g'), stop: () => void stops++ };
      registry.add(live);
      registry.get('t', 'g')?.stop('cancel_requested');
      registry.finish('g', outcome);
      registry.get('t', 'g')?.stop('cancel_requested');
      expect(stops).toBe(1);
      expect(registry.get('t', 'g')).toMatchObject({ state: 'finished', outcome });
    } finally {
      registry.close();
    }
  });

  it('drops finished entries older than retentionMs at the sweep, keeping younger and running ones', async () => {
    let clock = 0;
    const registry = createGenerationRegistry({ retentionMs: 20, now: () => clock });
    try {
      registry.add(entry('old'));
      registry.finish('old', outcome);
      clock = 15;
      registry.add(entry('young'));
      registry.finish('young', outcome);
      registry.add(entry('running'));
      clock = 30;
      await new Promise((r) => setTimeout(r, 40));
      expect(registry.get('t', 'old')).toBeUndefined();
      expect(registry.get('t', 'young')?.state).toBe('finished');
      expect(registry.get('t', 'running')?.state).toBe('running');
      expect(registry.retained().finished).toBe(1);
    } finally {
      registry.close();
    }
  });

  it('finds a generation only for the internal id it was made under, and drops a retired tenant’s (issue 14 §4)', () => {
    const registry = createGenerationRegistry();
    try {
      const stopped: string[] = [];
      const made = (id: string, tenantKey: string) => ({ ...entry(id), tenantId: 'acme', tenantKey, stop: () => void stopped.push(id) });
      registry.add(made('old-done', 'acme~00000000000000aa'));
      registry.finish('old-done', outcome);
      registry.add(made('old-live', 'acme~00000000000000aa'));
      registry.add(made('new', 'acme~00000000000000bb'));
      // Same slug, another internal id: not found.
      expect(registry.get('acme~00000000000000bb', 'old-done')).toBeUndefined();
      expect(registry.get('acme', 'old-done')).toBeUndefined();
      expect(registry.get('acme~00000000000000aa', 'old-done')?.state).toBe('finished');
      // An entry without an internal id belongs to its slug (a legacy tenant).
      registry.add(entry('legacy'));
      expect(registry.get('t', 'legacy')?.generationId).toBe('legacy');

      expect(registry.purgeTenants((key) => key === 'acme~00000000000000aa')).toBe(2);
      expect(registry.get('acme~00000000000000aa', 'old-done')).toBeUndefined();
      expect(stopped).toEqual(['old-live']);
      expect(registry.get('acme~00000000000000bb', 'new')?.state).toBe('running');
      expect(registry.retained()).toEqual({ finished: 0, bytes: 0 });
    } finally {
      registry.close();
    }
  });
});

import type { EngineAdapter, RevisionSpec } from '@weir/core';
import { createScriptedEngine, type ScriptedEngine } from '@weir/testing';
import { createEngineEvalGenerator } from './engine-generate';

function revision(id: string, maxOutputTokens = 64): RevisionSpec {
  return {
    id,
    model: 'scripted',
    engine: { kind: 'simulated', prefillTokensPerSecond: 1, decodeStepMs: [[1, 1]], kvTokens: 1, maxSequences: 1, seed: 1 },
    contextWindow: 1024,
    maxOutputTokens,
    defaultOutputTokens: 16,
    pricing: { inputPerMTok: 0, outputPerMTok: 0, cachedInputPerMTok: 0 },
  };
}

const ask = (content: string, maxTokens = 16) => ({ messages: [{ role: 'user' as const, content }], maxTokens, signal: new AbortController().signal });

describe('createEngineEvalGenerator', () => {
  let created: ScriptedEngine[];
  let closed: number;
  const make = (specs: Record<string, RevisionSpec>) =>
    createEngineEvalGenerator({
      resolveRevision: (id) => specs[id],
      createEngine: async () => {
        const engine = createScriptedEngine();
        created.push(engine);
        return Object.assign(engine, {
          close: async () => {
            closed += 1;
          },
        }) as EngineAdapter;
      },
    });
  beforeEach(() => {
    created = [];
    closed = 0;
  });

  it('collects the text greedily, capped at the revision limit, with time to first text; one engine per revision, closed once', async () => {
    const generator = make({ a: revision('a', 3), b: revision('b') });
    const first = await generator.generate('a', ask(JSON.stringify({ tokens: 5 }), 10));
    expect(first).toEqual({ text: 't0 t1 t2 ', ttftMs: expect.any(Number), totalMs: expect.any(Number) });
    expect(first.ttftMs as number).toBeLessThanOrEqual(first.totalMs);
    await generator.generate('a', ask(JSON.stringify({ tokens: 1 }), 2));
    await generator.generate('b', { ...ask(JSON.stringify({ tokens: 2 })), outputSchema: { type: 'object' } });
    expect(created).toHaveLength(2);
    expect(created[0].requests.map((r) => [r.maxOutputTokens, r.sampling.temperature, r.input.kind])).toEqual([
      [3, 0, 'chat'],
      [2, 0, 'chat'],
    ]);
    expect(created[1].requests[0].outputSchema).toEqual({ type: 'object' });
    await generator.close();
    await generator.close();
    expect(closed).toBe(2);
  });

  it('reports an unknown revision, an engine failure and an abort as errors, keeping the text so far', async () => {
    const generator = make({ a: revision('a') });
    expect(await generator.generate('ghost', ask('x'))).toMatchObject({ text: '', ttftMs: null, error: { code: 'model_not_found', message: expect.stringMatching(/^revision ghost cannot be replayed here: it is not in the configuration/) } });
    expect(await generator.generate('a', ask(JSON.stringify({ tokens: 5, failAfter: 2 })))).toMatchObject({ text: 't0 t1 ', error: { code: 'upstream_error' } });
    const abort = new AbortController();
    const pending = generator.generate('a', { ...ask(JSON.stringify({ tokens: 50, delayMs: 20 })), signal: abort.signal });
    setTimeout(() => abort.abort(), 30);
    expect(await pending).toMatchObject({ error: { code: 'deadline_exceeded' } });
    await generator.close();
  });

  it('does not keep an engine whose creation failed', async () => {
    let attempts = 0;
    const generator = createEngineEvalGenerator({
      resolveRevision: () => revision('a'),
      createEngine: async () => {
        attempts += 1;
        if (attempts === 1) throw new Error('model file missing');
        return createScriptedEngine();
      },
    });
    expect(await generator.generate('a', ask('x'))).toMatchObject({ error: { code: 'internal', message: 'the engine failed' } });
    expect(await generator.generate('a', ask(JSON.stringify({ tokens: 1 })))).toEqual({ text: 't0 ', ttftMs: expect.any(Number), totalMs: expect.any(Number) });
    await generator.close();
  });
});

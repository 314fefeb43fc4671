/**
 * The llama.cpp engine as an embedding revision, on the real stories260K model: one vector per
 * item (texts and token arrays), usage = the items' tokens and no output, the embedding
 * context only, and the semantic cache tier over it — a repeated prompt hits, a negated one
 * (0.99+ cosine on this model) is turned into a miss by the guard.
 */
import { createInMemorySemanticStore, createSemanticTier, cosineSimilarity, type SemanticLookupOutcome } from '@weir/cache';
import { decodeEmbeddingDeltas, type EngineEvent, isWeirError } from '@weir/core';
import { collectEngineEvents, engineRequest, tinyModelPath } from '@weir/testing';
import { createEngineEmbedder } from '../engine-embedder';
import { createLlamaCppEngine, type LlamaCppEngine } from './llamacpp-engine';

const textOf = (events: EngineEvent[]): string => events.map((e) => (e.type === 'delta' ? e.text : '')).join('');

describe('llama.cpp embedding revision (real stories260K model)', () => {
  let engine: LlamaCppEngine;
  beforeAll(async () => {
    engine = await createLlamaCppEngine({ kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences: 2, contextSize: 128, testTokenDelayMs: 0, embeddingOnly: true });
  });
  afterAll(() => engine.close());

  it('embeds each item, in order, deterministically, billing the items’ tokens and no output', async () => {
    const input = { kind: 'embedding' as const, items: ['Once upon a time', [1, 100, 200], 'Once upon a time'] };
    const { events } = await collectEngineEvents(engine, engineRequest(input, { maxOutputTokens: 0 }));
    const vectors = decodeEmbeddingDeltas(textOf(events));
    expect(vectors).toHaveLength(3);
    expect(vectors.every((v) => v.length === 64)).toBe(true);
    expect(Array.from(vectors[0])).toEqual(Array.from(vectors[2]));
    expect(cosineSimilarity(vectors[0], vectors[1])).toBeLessThan(0.999);
    const end = events.at(-1);
    expect(end).toMatchObject({ type: 'end', reason: 'stop', usage: { outputTokens: 0 }, usageSource: 'reported' });
    // BOS + the tokenizer's count for each text, the array's own length.
    const text = 1 + engine.tokenize('Once upon a time');
    expect(end?.type === 'end' && end.usage.inputTokens).toBe(text + 3 + text);
    expect(await engine.countInputTokens(input)).toBe(text + 3 + text);
  });

  it('refuses text generation, dimensions it cannot give, token ids outside the vocabulary and over-long items', async () => {
    const attempt = async (input: Parameters<typeof engineRequest>[0]) => {
      const { events, error } = await collectEngineEvents(engine, engineRequest(input, { maxOutputTokens: input.kind === 'embedding' ? 0 : 4 }));
      expect(events).toEqual([]);
      return isWeirError(error) ? { code: error.code, param: error.param } : error;
    };
    expect(await attempt({ kind: 'text', text: 'hello' })).toEqual({ code: 'invalid_request', param: 'model' });
    expect(await attempt({ kind: 'embedding', items: ['a'], dimensions: 32 })).toEqual({ code: 'invalid_request', param: 'dimensions' });
    expect(await attempt({ kind: 'embedding', items: [[1, 10_000_000]] })).toEqual({ code: 'invalid_request', param: 'input' });
    expect(await attempt({ kind: 'embedding', items: [Array.from({ length: 129 }, () => 5)] })).toEqual({ code: 'context_length_exceeded', param: 'input' });
  });

  it('backs the semantic tier: a repeated prompt hits, a negated one is a guarded miss', async () => {
    const embedder = createEngineEmbedder(engine, 'stories260k-embed@1');
    const outcomes: SemanticLookupOutcome[] = [];
    const tier = createSemanticTier({
      store: createInMemorySemanticStore(),
      embedderFor: (id) => (id === 'stories260k-embed@1' ? embedder : undefined),
      policyFor: () => ({ enabled: true, threshold: 0.97, embeddingRevision: 'stories260k-embed@1' }),
      metrics: { lookup: (o) => outcomes.push(o), embedding: () => undefined },
    });
    const partition = { tenantKey: 'acme~00000000000000a1', revisionId: 'stories260k@1', template: '', paramsKey: 'p' };
    const asked = 'Is the bridge open today?';
    const negated = 'Is the bridge not open today?';
    // The model finds the two nearly identical: the guard, not the threshold, must tell them apart.
    const [a, b] = await embedder.embed([asked, negated]);
    expect(cosineSimilarity(a, b)).toBeGreaterThan(0.97);

    expect(await tier.lookup({ partition, exactKey: 'k1', promptText: asked })).toBeUndefined();
    await tier.store({ partition, exactKey: 'k1', promptText: asked }, { modelRevision: 'stories260k@1', deltas: ['Yes.'], finishReason: 'stop', usage: { inputTokens: 8, outputTokens: 2, cachedInputTokens: 0 }, storedAtMs: 1 }, 60_000);
    const hit = await tier.lookup({ partition, exactKey: 'k2', promptText: asked });
    expect(hit?.answer.deltas).toEqual(['Yes.']);
    expect(hit?.similarity).toBeCloseTo(1, 5);
    expect(await tier.lookup({ partition, exactKey: 'k3', promptText: negated })).toBeUndefined();
    expect(outcomes).toEqual(['miss', 'hit', 'guarded_miss']);
  });
});

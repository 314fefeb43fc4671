/**
 * Embeddings on an OpenAI-compatible upstream (scripted): the request Weir sends to
 * `{baseUrl}/embeddings`, vectors by `index`, usage as reported (else Weir's count), `dimensions`
 * passed only for a revision that declares it, errors mapped like generations, abort.
 */
import { decodeEmbeddingDeltas, type EngineEvent, isWeirError } from '@weir/core';
import { collectEngineEvents, engineRequest, type ScriptedUpstream, startScriptedUpstream } from '@weir/testing';
import { createEngineEmbedder } from '../engine-embedder';
import { createOpenAICompatibleEngine, type OpenAICompatibleEngineOptions } from './openai-compatible-engine';

const specFor = (baseUrl: string, overrides: Partial<OpenAICompatibleEngineOptions> = {}): OpenAICompatibleEngineOptions => ({
  kind: 'openai-compatible',
  baseUrl,
  upstreamModel: 'text-embedding-3-small',
  api: 'chat',
  firstTokenTimeoutMs: 2000,
  idleTimeoutMs: 2000,
  maxConcurrency: 4,
  ...overrides,
});
const textOf = (events: EngineEvent[]): string => events.map((e) => (e.type === 'delta' ? e.text : '')).join('');
const reply = (vectors: number[][], usage?: object) => ({
  kind: 'json' as const,
  body: { object: 'list', data: vectors.map((embedding, index) => ({ object: 'embedding', index, embedding })).reverse(), model: 'm', ...(usage ? { usage } : {}) },
});

describe('OpenAI-compatible embeddings (scripted upstream)', () => {
  let upstream: ScriptedUpstream;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
  });
  afterAll(() => upstream.close());
  beforeEach(() => {
    upstream.requests.length = 0;
  });

  it('posts {model, input, encoding_format: float} to /embeddings and yields the vectors by index with the reported usage', async () => {
    upstream.setScript(() => reply([[1, 0], [0, 1]], { prompt_tokens: 9, total_tokens: 9 }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url), { env: {} });
    const { events, error } = await collectEngineEvents(engine, engineRequest({ kind: 'embedding', items: ['a', [3, 4]], dimensions: 2 }, { maxOutputTokens: 0 }));
    expect(error).toBeUndefined();
    expect(upstream.requests[0].path).toBe('/v1/embeddings');
    // `dimensions` is not passed: this revision does not declare variable dimensions.
    expect(upstream.requests[0].body).toEqual({ model: 'text-embedding-3-small', input: ['a', [3, 4]], encoding_format: 'float' });
    expect(decodeEmbeddingDeltas(textOf(events)).map((v) => Array.from(v))).toEqual([[1, 0], [0, 1]]);
    expect(events.at(-1)).toEqual({ type: 'end', reason: 'stop', usage: { inputTokens: 9, outputTokens: 0, cachedInputTokens: 0 }, usageSource: 'reported' });
  });

  it('passes dimensions through for a revision with variable dimensions; counts the input when no usage comes back', async () => {
    upstream.setScript(() => reply([[0.5, 0.5, 0.5]]));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url, { variableDimensions: true }), { env: {}, countTokens: (t) => t.length });
    const { events } = await collectEngineEvents(engine, engineRequest({ kind: 'embedding', items: ['abcd'], dimensions: 3 }, { maxOutputTokens: 0 }));
    expect((upstream.requests[0].body as { dimensions?: number }).dimensions).toBe(3);
    expect(events.at(-1)).toMatchObject({ type: 'end', reason: 'stop', usage: { inputTokens: 4, outputTokens: 0 }, usageSource: 'counted' });
  });

  it.each([
    ['a 400', { kind: 'error' as const, status: 400, body: { error: { message: 'bad', type: 'invalid_request_error' } } }, 'upstream_bad_request'],
    ['a 503', { kind: 'error' as const, status: 503, body: {} }, 'upstream_unavailable'],
    ['too few vectors', reply([[1, 2]]), 'upstream_error'],
    ['a malformed vector', { kind: 'json' as const, body: { data: [{ index: 0, embedding: ['x'] }, { index: 1, embedding: [1] }] } }, 'upstream_error'],
  ])('maps %s to the error code the generation path uses', async (_what, script, code) => {
    upstream.setScript(() => script);
    const engine = createOpenAICompatibleEngine(specFor(upstream.url), { env: {} });
    const { events, error } = await collectEngineEvents(engine, engineRequest({ kind: 'embedding', items: ['a', 'b'] }, { maxOutputTokens: 0 }));
    expect(events).toEqual([]);
    expect(isWeirError(error) && error.code).toBe(code);
  });

  it('ends aborted with nothing billed when stopped before the answer', async () => {
    upstream.setScript(() => ({ kind: 'sse', steps: [], hang: true }));
    const engine = createOpenAICompatibleEngine(specFor(upstream.url), { env: {} });
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 50);
    const { events } = await collectEngineEvents(engine, engineRequest({ kind: 'embedding', items: ['a'] }, { maxOutputTokens: 0, signal: abort.signal }));
    expect(events).toEqual([{ type: 'end', reason: 'aborted', usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 }, usageSource: 'counted' }]);
  });

  it('is what createEngineEmbedder embeds with', async () => {
    upstream.setScript(() => reply([[3, 4]], { prompt_tokens: 1 }));
    const embedder = createEngineEmbedder(createOpenAICompatibleEngine(specFor(upstream.url), { env: {} }), 'emb@1');
    const [v] = await embedder.embed(['hello']);
    expect(Array.from(v)).toEqual([3, 4]);
    expect(embedder.revisionId).toBe('emb@1');
  });
});

import { isWeirError } from '@weir/core';
import { tinyModelPath } from '@weir/testing';
import { createEngine } from './create-engine';

describe('createEngine', () => {
  it('creates an openai-compatible adapter', async () => {
    const engine = await createEngine({
      kind: 'openai-compatible',
      baseUrl: 'http://127.0.0.1:9/v1',
      upstreamModel: 'm',
      api: 'chat',
      firstTokenTimeoutMs: 1000,
      idleTimeoutMs: 1000,
      maxConcurrency: 3,
    });
    expect(engine.kind).toBe('openai-compatible');
    expect(engine.capacity.slots).toBe(3);
    await engine.close();
  });

  it('creates a llama.cpp adapter on the tiny model', async () => {
    const engine = await createEngine({ kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences: 1, contextSize: 128, testTokenDelayMs: 0 });
    expect(engine.kind).toBe('llamacpp');
    expect(engine.capacity).toEqual({ slots: 1, contextTokens: 128 });
    await engine.close();
  });

  it('rejects a llama.cpp spec without a model path', async () => {
    const error = await createEngine({ kind: 'llamacpp', threads: 1, sequences: 1, contextSize: 128, testTokenDelayMs: 0 }).catch((e: unknown) => e);
    expect(isWeirError(error) && error.code).toBe('engine_unavailable');
  });
});

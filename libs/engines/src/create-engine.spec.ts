import { isWeirError } from '@weir/core';
import { tinyModelPath } from '@weir/testing';
import { ANTHROPIC_DEFAULT_CONTEXT_TOKENS } from './anthropic/anthropic-engine';
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

  it('creates an anthropic adapter with the default context and the deps it is given', async () => {
    const warnings: object[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: (obj: object) => void warnings.push(obj), error: () => undefined };
    const engine = await createEngine(
      {
        kind: 'anthropic',
        baseUrl: 'http://127.0.0.1:9',
        upstreamModel: 'claude-up',
        apiKeyEnv: 'WEIR_UPSTREAM_TEST_ANTHROPIC',
        firstTokenTimeoutMs: 1000,
        idleTimeoutMs: 1000,
        maxConcurrency: 5,
      },
      { logger, anthropic: { env: {}, countTokens: (text) => text.length } },
    );
    expect(engine.kind).toBe('anthropic');
    expect(engine.capacity).toEqual({ slots: 5, contextTokens: ANTHROPIC_DEFAULT_CONTEXT_TOKENS });
    // The key variable is looked up in the given env (unset there: a warning naming it, never a value).
    expect(warnings).toEqual([{ apiKeyEnv: 'WEIR_UPSTREAM_TEST_ANTHROPIC' }]);
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

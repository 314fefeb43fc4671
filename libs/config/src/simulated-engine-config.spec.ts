import { stringify } from 'yaml';
import { ConfigError, parseConfig } from './index';

/** One revision served by a simulated replica; `engine` is merged into its engine block. */
function file(engine: Record<string, unknown>, contextWindow = 4096): string {
  return stringify({
    revisions: [
      {
        id: 'sim@1',
        model: 'sim',
        engine: { kind: 'simulated', ...engine },
        context_window: contextWindow,
        max_output_tokens: 1024,
        default_output_tokens: 256,
        pricing: { input_per_mtok: 0, output_per_mtok: 0 },
      },
    ],
    aliases: [{ name: 'sim', revision: 'sim@1' }],
  });
}

function errorOf(text: string): string {
  try {
    parseConfig(text, 'weir.yaml');
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('parseConfig: simulated engines', () => {
  it('reads every field', () => {
    const config = parseConfig(
      file({ prefill_tokens_per_second: 8000, decode_step_ms: [[1, 15], [8, 18], [64, 45]], kv_tokens: 131_072, max_sequences: 64, seed: 7 }),
      'weir.yaml',
    );
    expect(config.revisions[0].engine).toEqual({
      kind: 'simulated',
      prefillTokensPerSecond: 8000,
      decodeStepMs: [
        [1, 15],
        [8, 18],
        [64, 45],
      ],
      kvTokens: 131_072,
      maxSequences: 64,
      seed: 7,
    });
  });

  it('defaults to issue 5’s example profile', () => {
    expect(parseConfig(file({}), 'weir.yaml').revisions[0].engine).toEqual({
      kind: 'simulated',
      prefillTokensPerSecond: 10_000,
      decodeStepMs: [
        [1, 20],
        [32, 40],
      ],
      kvTokens: 65_536,
      maxSequences: 32,
      seed: 1,
    });
  });

  it.each([
    [{ prefill_tokens_per_second: 0 }, 'revisions[0].engine.prefill_tokens_per_second: expected a number > 0 (prompt tokens/s), got 0'],
    [{ decode_step_ms: [] }, 'revisions[0].engine.decode_step_ms: expected at least one [batch, ms] pair'],
    [{ decode_step_ms: [[0, 20]] }, 'revisions[0].engine.decode_step_ms[0][0]: expected a batch size, an integer >= 1, got 0'],
    [{ decode_step_ms: [[1, -5]] }, 'revisions[0].engine.decode_step_ms[0][1]: expected a step time in ms > 0, got -5'],
    [{ decode_step_ms: [[32, 40], [1, 20]] }, 'revisions[0].engine.decode_step_ms[1]: batch sizes must increase (1 after 32)'],
    [{ kv_tokens: 1.5 }, 'revisions[0].engine.kv_tokens: expected an integer >= 1, got 1.5'],
    [{ kv_tokens: 2048 }, 'revisions[0].engine.kv_tokens: must be >= context_window (2048 < 4096)'],
    [{ max_sequences: 0 }, 'revisions[0].engine.max_sequences: expected an integer from 1 to 4096, got 0'],
    [{ model_path: '/x.gguf' }, 'revisions[0].engine.model_path: unknown key'],
  ])('refuses %j, naming the field', (engine, expected) => {
    expect(errorOf(file(engine))).toContain(`weir.yaml: ${expected}`);
  });
});

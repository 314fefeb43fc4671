import { stringify } from 'yaml';
import { ConfigError, parseConfig } from './index';

/** One revision with `pricing` as given (the file's snake_case shape). */
function file(pricing: Record<string, unknown>): string {
  return stringify({
    revisions: [
      {
        id: 'claude@1',
        model: 'claude',
        engine: { kind: 'anthropic', base_url: 'https://api.anthropic.com', upstream_model: 'claude-sonnet-4-5' },
        context_window: 200_000,
        max_output_tokens: 8192,
        default_output_tokens: 1024,
        pricing,
      },
    ],
    aliases: [{ name: 'claude', revision: 'claude@1' }],
  });
}

describe('parseConfig: prices per token class', () => {
  it('reads every class price', () => {
    const config = parseConfig(
      file({ input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3, cache_write_input_per_mtok: 3.75, reasoning_per_mtok: 20 }),
      'weir.yaml',
    );
    expect(config.revisions[0].pricing).toEqual({ inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3, cacheWriteInputPerMTok: 3.75, reasoningPerMTok: 20 });
  });

  it('defaults cache reads and writes to the input price and reasoning to the output price', () => {
    expect(parseConfig(file({ input_per_mtok: 2, output_per_mtok: 8 }), 'weir.yaml').revisions[0].pricing).toEqual({
      inputPerMTok: 2,
      outputPerMTok: 8,
      cachedInputPerMTok: 2,
      cacheWriteInputPerMTok: 2,
      reasoningPerMTok: 8,
    });
  });

  it.each([
    ['cache_write_input_per_mtok', -1],
    ['reasoning_per_mtok', 'cheap'],
    ['reasoning_per_mtok', -0.5],
  ])('refuses %s = %p, naming the field', (field, value) => {
    let problems: readonly { path: string }[] = [];
    try {
      parseConfig(file({ input_per_mtok: 3, output_per_mtok: 15, [field]: value }), 'weir.yaml');
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems = err.problems;
    }
    expect(problems.map((p) => p.path)).toEqual([`revisions[0].pricing.${field}`]);
  });

  it('refuses an unknown price field (a typo of a class name)', () => {
    expect(() => parseConfig(file({ input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3 }), 'weir.yaml')).toThrow(ConfigError);
  });
});

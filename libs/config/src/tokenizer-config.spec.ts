import { stringify } from 'yaml';
import { ConfigError, parseConfig } from './index';

/** One revision with the given engine block. */
function file(engine: Record<string, unknown>): string {
  return stringify({
    revisions: [
      {
        id: 'r@1',
        model: 'r',
        engine,
        context_window: 8192,
        max_output_tokens: 1024,
        default_output_tokens: 256,
        pricing: { input_per_mtok: 1, output_per_mtok: 2 },
      },
    ],
    aliases: [{ name: 'r', revision: 'r@1' }],
  });
}

const openai = (extra: Record<string, unknown> = {}) => ({ kind: 'openai-compatible', base_url: 'https://api.openai.com/v1', upstream_model: 'gpt-4o-mini', ...extra });
const anthropic = (extra: Record<string, unknown> = {}) => ({ kind: 'anthropic', base_url: 'https://api.anthropic.com', upstream_model: 'claude-sonnet-4-5', ...extra });

function errorOf(text: string): string {
  try {
    parseConfig(text, 'weir.yaml');
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('parseConfig: a revision’s tokenizer (engine.tokenizer)', () => {
  it.each(['o200k_base', 'cl100k_base'])('reads %s on an openai-compatible and an anthropic engine', (name) => {
    expect(parseConfig(file(openai({ tokenizer: name })), 'weir.yaml').revisions[0].engine).toMatchObject({ kind: 'openai-compatible', tokenizer: name });
    expect(parseConfig(file(anthropic({ tokenizer: name })), 'weir.yaml').revisions[0].engine).toMatchObject({ kind: 'anthropic', tokenizer: name });
  });

  it('defaults to none, which leaves the field out', () => {
    expect(parseConfig(file(openai()), 'weir.yaml').revisions[0].engine).not.toHaveProperty('tokenizer');
    expect(parseConfig(file(openai({ tokenizer: 'none' })), 'weir.yaml').revisions[0].engine).not.toHaveProperty('tokenizer');
    expect(parseConfig(file(anthropic()), 'weir.yaml').revisions[0].engine).not.toHaveProperty('tokenizer');
  });

  it('refuses an unknown encoding, naming the ones it knows', () => {
    const message = errorOf(file(openai({ tokenizer: 'gpt2' })));
    expect(message).toContain('revisions[0].engine.tokenizer');
    expect(message).toContain('o200k_base');
    expect(message).toContain('cl100k_base');
  });

  it('refuses a tokenizer on a llama.cpp engine (it always counts with its own)', () => {
    expect(errorOf(file({ kind: 'llamacpp', model_path: '/models/m.gguf', tokenizer: 'o200k_base' }))).toContain('tokenizer');
  });
});

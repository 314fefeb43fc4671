import { stringify } from 'yaml';
import { ConfigError, parseConfig } from './index';

/**
 * One revision served by Anthropic's Messages API; `engine` replaces fields of its engine block
 * (undefined removes one), `revision` adds fields to the revision.
 */
function file(engine: Record<string, unknown>, revision: Record<string, unknown> = {}): string {
  const block: Record<string, unknown> = { kind: 'anthropic', base_url: 'https://api.anthropic.com', upstream_model: 'claude-sonnet-4-5', ...engine };
  for (const key of Object.keys(block)) if (block[key] === undefined) delete block[key];
  return stringify({
    revisions: [
      {
        id: 'claude@1',
        model: 'claude',
        engine: block,
        context_window: 200_000,
        max_output_tokens: 8192,
        default_output_tokens: 1024,
        pricing: { input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3 },
        ...revision,
      },
    ],
    aliases: [{ name: 'claude', revision: 'claude@1' }],
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

describe('parseConfig: anthropic engines', () => {
  it('reads every field', () => {
    const config = parseConfig(
      file({ api_key_env: 'ANTHROPIC_API_KEY', first_token_timeout_ms: 20_000, idle_timeout_ms: 10_000, max_concurrency: 32 }),
      'weir.yaml',
    );
    expect(config.revisions[0].engine).toEqual({
      kind: 'anthropic',
      baseUrl: 'https://api.anthropic.com',
      upstreamModel: 'claude-sonnet-4-5',
      apiKeyEnv: 'ANTHROPIC_API_KEY',
      firstTokenTimeoutMs: 20_000,
      idleTimeoutMs: 10_000,
      maxConcurrency: 32,
    });
  });

  it('reads the JSON form the same way', () => {
    const json = JSON.stringify({
      revisions: [
        {
          id: 'claude@1',
          model: 'claude',
          engine: { kind: 'anthropic', base_url: 'https://api.anthropic.com', upstream_model: 'claude-sonnet-4-5', api_key_env: 'ANTHROPIC_API_KEY' },
          context_window: 200_000,
          max_output_tokens: 8192,
          default_output_tokens: 1024,
          pricing: { input_per_mtok: 3, output_per_mtok: 15 },
        },
      ],
    });
    expect(parseConfig(json, 'weir.json').revisions[0].engine).toEqual(
      parseConfig(file({ api_key_env: 'ANTHROPIC_API_KEY' }), 'weir.yaml').revisions[0].engine,
    );
  });

  it('defaults like openai-compatible: 30 s timeouts, 16 concurrent requests, no key variable', () => {
    const engine = parseConfig(file({}), 'weir.yaml').revisions[0].engine;
    expect(engine).toEqual({
      kind: 'anthropic',
      baseUrl: 'https://api.anthropic.com',
      upstreamModel: 'claude-sonnet-4-5',
      firstTokenTimeoutMs: 30_000,
      idleTimeoutMs: 30_000,
      maxConcurrency: 16,
    });
    expect('apiKeyEnv' in engine).toBe(false);
  });

  it.each([
    ['a missing base_url', { base_url: undefined }, 'revisions[0].engine.base_url: required (an http:// or https:// URL)'],
    ['base_url: "api.anthropic.com"', { base_url: 'api.anthropic.com' }, 'revisions[0].engine.base_url: expected an http:// or https:// URL, got "api.anthropic.com"'],
    ['a missing upstream_model', { upstream_model: undefined }, 'revisions[0].engine.upstream_model: required (a non-empty string'],
    ['upstream_model: ""', { upstream_model: '' }, 'revisions[0].engine.upstream_model: expected a non-empty string of at most 200 characters, got ""'],
    ['api_key: "sk-ant-123"', { api_key: 'sk-ant-123' }, 'revisions[0].engine.api_key: unknown key: never put a secret in the config file; put it in an environment variable and name that variable in api_key_env'],
    ['apiKey: "sk-ant-123"', { apiKey: 'sk-ant-123' }, 'revisions[0].engine.apiKey: unknown key: never put a secret in the config file'],
    ['api_key_env: "sk-ant-123"', { api_key_env: 'sk-ant-123' }, 'revisions[0].engine.api_key_env: expected an environment variable name such as ANTHROPIC_API_KEY, got "sk-ant-123"'],
    ['first_token_timeout_ms: 0', { first_token_timeout_ms: 0 }, 'revisions[0].engine.first_token_timeout_ms: expected an integer >= 1, got 0'],
    ['first_token_timeout_ms: "30s"', { first_token_timeout_ms: '30s' }, 'revisions[0].engine.first_token_timeout_ms: expected an integer >= 1, got "30s"'],
    ['idle_timeout_ms: -1', { idle_timeout_ms: -1 }, 'revisions[0].engine.idle_timeout_ms: expected an integer >= 1, got -1'],
    ['idle_timeout_ms: 1.5', { idle_timeout_ms: 1.5 }, 'revisions[0].engine.idle_timeout_ms: expected an integer >= 1, got 1.5'],
    ['max_concurrency: 0', { max_concurrency: 0 }, 'revisions[0].engine.max_concurrency: expected an integer >= 1, got 0'],
    ['api: "chat"', { api: 'chat' }, 'revisions[0].engine.api: unknown key'],
    ['continuous_usage_stats: true', { continuous_usage_stats: true }, 'revisions[0].engine.continuous_usage_stats: unknown key'],
  ])('refuses %s, naming the field', (_label, engine, expected) => {
    expect(errorOf(file(engine))).toContain(`weir.yaml: ${expected}`);
  });

  it("refuses remote replicas: the API itself is the revision's one replica", () => {
    const doc = file({}, { replicas: [{ id: 'claude@1/0', base_url: 'http://127.0.0.1:9000/v1', slots: 4 }] });
    expect(errorOf(doc)).toContain('weir.yaml: revisions[0].replicas: not allowed for an anthropic engine: the revision is served by its engine.base_url');
  });

  it('lists every problem of the block, one per line', () => {
    const lines = errorOf(file({ base_url: undefined, api_key: 'sk-ant-123', idle_timeout_ms: 0 })).split('\n');
    expect(lines).toEqual(
      expect.arrayContaining([
        expect.stringContaining('weir.yaml: revisions[0].engine.base_url: required'),
        expect.stringContaining('weir.yaml: revisions[0].engine.api_key: unknown key: never put a secret'),
        expect.stringContaining('weir.yaml: revisions[0].engine.idle_timeout_ms: expected an integer >= 1, got 0'),
      ]),
    );
  });
});

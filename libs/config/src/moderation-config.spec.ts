import { parseConfig } from './parse-config';

const base = (tenant: Record<string, unknown>, defaults: Record<string, unknown> = {}) => ({
  revisions: [{ id: 'sim@1', model: 'sim', engine: { kind: 'simulated' }, context_window: 1024, max_output_tokens: 64, default_output_tokens: 16, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }],
  aliases: [{ name: 'sim', revision: 'sim@1' }],
  tenants: [{ id: 't', name: 'T', ...tenant }],
  defaults,
});

describe('moderation in the configuration file', () => {
  it('parses a tenant policy and declared engines, with defaults', () => {
    const config = parseConfig(
      JSON.stringify(base(
        { moderation: { input: { engine: 'oa', block_on: ['hate'] }, output: { engine: 'rules', window_chars: 200, overlap_chars: 32 }, rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }], patterns: [{ category: 'custom', pattern: '(?i)secret-\\d+' }] } } },
        { moderation_engines: [{ name: 'oa', kind: 'openai', base_url: 'https://api.openai.com/v1', api_key_env: 'OPENAI_API_KEY' }] },
      )),
      'c.json',
    );
    expect(config.tenants[0].moderation).toEqual({
      input: { engine: 'oa', blockOn: ['hate'], fail: 'closed', timeoutMs: 2_000 },
      output: { engine: 'rules', windowChars: 200, overlapChars: 32, fail: 'closed', timeoutMs: 2_000 },
      rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }], patterns: [{ category: 'custom', pattern: '(?i)secret-\\d+' }] },
    });
    expect(config.moderationEngines).toEqual([{ name: 'oa', kind: 'openai', baseUrl: 'https://api.openai.com/v1', apiKeyEnv: 'OPENAI_API_KEY', timeoutMs: 5_000 }]);
  });

  it('refuses unknown engines, overlap not below the window and patterns RE2 cannot compile, naming each field', () => {
    let message = '';
    try {
      parseConfig(JSON.stringify(base({ moderation: { input: { engine: 'nope' }, output: { engine: 'rules', window_chars: 32, overlap_chars: 32 }, rules: { patterns: [{ category: 'custom', pattern: '(?<=a)b' }] } } })), 'c.json');
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toContain("moderation.input.engine: 'nope' is not a moderation engine");
    expect(message).toContain('moderation.output.overlap_chars: 32 must be below window_chars (32)');
    expect(message).toMatch(/moderation\.rules\.patterns\[0\]\.pattern: does not compile with RE2/);
  });

  it('refuses a pattern that matches the empty string (it would flag every text), naming the field', () => {
    expect(() => parseConfig(JSON.stringify(base({ moderation: { input: { engine: 'rules' }, rules: { patterns: [{ category: 'violence', pattern: 'a*' }] } } })), 'c.json')).toThrow(
      /moderation\.rules\.patterns\[0\]\.pattern: matches the empty string/,
    );
  });
});

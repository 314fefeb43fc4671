/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
/**
 * The configuration fields the control plane publishes for the data plane (issue 7): tenant
 * `disabled`, `kill_switch`, `content_logging`, `redaction_profile`, and a revision's
 * `deprecation` with its cross-checks.
 */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

function revision(id: string, deprecation?: unknown): Record<string, any> {
  return {
    id,
    model: 'chat',
    engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'chat' },
    context_window: 4096,
    max_output_tokens: 1024,
    default_output_tokens: 256,
    pricing: { input_per_mtok: 1, output_per_mtok: 2 },
    ...(deprecation !== undefined ? { deprecation } : {}),
  };
}

function file(overrides: { revisions?: Record<string, any>[]; tenant?: Record<string, any> } = {}): Record<string, any> {
  return {
    revisions: overrides.revisions ?? [revision('chat@1'), revision('chat@2')],
    aliases: [{ name: 'chat', revision: 'chat@1' }],
    tenants: [{ id: 'acme', name: 'Acme', ...(overrides.tenant ?? {}) }],
  };
}

function problems(doc: Record<string, any>): string {
  try {
    parseConfig(JSON.stringify(doc), 'w.json');
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('tenant control fields', () => {
  it('default to off and leave the tenant spec unchanged', () => {
    const t = parseConfig(JSON.stringify(file()), 'w.json').tenants[0];
    expect(t).not.toHaveProperty('disabled');
    expect(t).not.toHaveProperty('killSwitch');
    expect(t).not.toHaveProperty('contentLogging');
    expect(t).not.toHaveProperty('redactionProfile');
  });

  it('read disabled, kill_switch, content_logging and redaction_profile (snake_case to camelCase)', () => {
    const t = parseConfig(JSON.stringify(file({ tenant: { disabled: true, kill_switch: true, content_logging: true, redaction_profile: 'strict' } })), 'w.json').tenants[0];
    expect(t).toMatchObject({ disabled: true, killSwitch: true, contentLogging: true, redactionProfile: 'strict' });
  });

  it('refuses non-boolean flags and a malformed profile name', () => {
    const msg = problems(file({ tenant: { disabled: 'yes', kill_switch: 1, redaction_profile: '' } }));
    expect(msg).toContain('tenants[0].disabled: expected true or false, got "yes"');
    expect(msg).toContain('tenants[0].kill_switch: expected true or false, got 1');
    expect(msg).toContain('tenants[0].redaction_profile: expected a name');
  });
});

describe('revision deprecation', () => {
  it('maps retires_on, replacement and announced_on (YAML unquoted dates too)', () => {
    const yaml = [
      'revisions:',
      ...[['chat@1', true], ['chat@2', false]].flatMap(([id, dep]) => [
        `  - id: ${id}`,
        '    model: chat',
        '    engine: { kind: openai-compatible, base_url: "http://127.0.0.1:8000/v1", upstream_model: chat }',
        '    context_window: 4096',
        '    max_output_tokens: 1024',
        '    default_output_tokens: 256',
        '    pricing: { input_per_mtok: 1, output_per_mtok: 2 }',
        ...(dep ? ['    deprecation: { retires_on: 2026-09-30, replacement: chat@2, announced_on: 2026-06-01 }'] : []),
      ]),
    ].join('\n');
    const cfg = parseConfig(yaml, 'w.yaml');
    expect(cfg.revisions[0].deprecation).toEqual({ retiresOn: '2026-09-30', replacement: 'chat@2', announcedOn: '2026-06-01' });
    expect(cfg.revisions[1]).not.toHaveProperty('deprecation');
  });

  it.each([
    ['an unknown replacement', [revision('chat@1', { retires_on: '2026-09-30', replacement: 'chat@9' })], 'revisions[0].deprecation.replacement: unknown revision "chat@9" (known: "chat@1")'],
    ['itself as replacement', [revision('chat@1', { retires_on: '2026-09-30', replacement: 'chat@1' })], 'revisions[0].deprecation.replacement: must name another revision'],
    [
      'a replacement that retires first',
      [revision('chat@1', { retires_on: '2026-09-30', replacement: 'chat@2' }), revision('chat@2', { retires_on: '2026-09-01', replacement: 'chat@1' })],
      'revisions[0].deprecation.replacement: revision "chat@2" retires on 2026-09-01, no later than this one (2026-09-30)',
    ],
    ['an announcement after the retirement', [revision('chat@1', { retires_on: '2026-09-30', replacement: 'chat@2', announced_on: '2026-10-01' }), revision('chat@2')], 'revisions[0].deprecation.announced_on: must be before retires_on'],
    ['an impossible date', [revision('chat@1', { retires_on: '2026-02-30', replacement: 'chat@2' }), revision('chat@2')], 'revisions[0].deprecation.retires_on: expected a date written YYYY-MM-DD (a UTC day), e.g. "2026-09-30", got "2026-02-30"'],
    ['a date with a time', [revision('chat@1', { retires_on: '2026-09-30T00:00:00Z', replacement: 'chat@2' }), revision('chat@2')], 'revisions[0].deprecation.retires_on: expected a date written YYYY-MM-DD'],
    ['no replacement', [revision('chat@1', { retires_on: '2026-09-30' }), revision('chat@2')], 'revisions[0].deprecation.replacement: required'],
    ['an unknown key', [revision('chat@1', { retires_on: '2026-09-30', replacement: 'chat@2', retire_on: '2026-09-30' }), revision('chat@2')], 'revisions[0].deprecation.retire_on: unknown key (did you mean "retires_on"?)'],
  ])('refuses %s with a clear message', (_name, revisions, expected) => {
    expect(problems(file({ revisions }))).toContain(expected);
  });

  it('accepts a chain of deprecations whose replacements retire later', () => {
    const cfg = parseConfig(
      JSON.stringify(
        file({
          revisions: [revision('chat@1', { retires_on: '2026-09-30', replacement: 'chat@2' }), revision('chat@2', { retires_on: '2027-03-31', replacement: 'chat@3' }), revision('chat@3')],
        }),
      ),
      'w.json',
    );
    expect(cfg.revisions.map((r) => r.deprecation?.replacement)).toEqual(['chat@2', 'chat@3', undefined]);
  });
});

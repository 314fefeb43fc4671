/* eslint-disable @typescript-eslint/no-explicit-any -- documents are built freely to make invalid cases */
/**
 * `redaction_profiles` and the tenant redaction fields (issue 15, item 5): profiles parse to
 * `PlatformConfig.redactionProfiles`, custom patterns are compiled as RE2 at load with errors that
 * name the field, and a tenant's `redaction_profile` must name a known profile.
 */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

function file(extra: Record<string, any> = {}, tenant: Record<string, any> = {}): string {
  return JSON.stringify({
    revisions: [
      {
        id: 'chat@1',
        model: 'chat',
        engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'chat' },
        context_window: 4096,
        max_output_tokens: 1024,
        default_output_tokens: 256,
        pricing: { input_per_mtok: 1, output_per_mtok: 2 },
      },
    ],
    aliases: [{ name: 'chat', revision: 'chat@1' }],
    tenants: [{ id: 'acme', name: 'Acme', ...tenant }],
    ...extra,
  });
}

function problems(text: string): string {
  try {
    parseConfig(text, 'w.json');
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('redaction_profiles', () => {
  it('parse into redactionProfiles, and a tenant may name one (or a built-in)', () => {
    const config = parseConfig(
      file(
        { redaction_profiles: { hr: { recognizers: ['email', 'ssn'], custom_patterns: [{ name: 'employee_id', pattern: 'EMP-[0-9]{6}' }], replacement: 'hash' } } },
        { content_logging: true, redaction_profile: 'hr', redact_upstream: true },
      ),
      'w.json',
    );
    expect(config.redactionProfiles).toEqual([{ name: 'hr', recognizers: ['email', 'ssn'], customPatterns: [{ name: 'employee_id', pattern: 'EMP-[0-9]{6}' }], replacement: 'hash' }]);
    expect(config.tenants[0]).toMatchObject({ contentLogging: true, redactionProfile: 'hr', redactUpstream: true });
    expect(parseConfig(file({}, { redaction_profile: 'default' }), 'w.json').tenants[0].redactionProfile).toBe('default');
    expect(parseConfig(file(), 'w.json')).not.toHaveProperty('redactionProfiles');
    expect(parseConfig(file(), 'w.json').tenants[0]).not.toHaveProperty('redactUpstream');
  });

  it.each([
    [{ p: { recognizers: ['email'], custom_patterns: [{ name: 'x', pattern: '(a)\\1' }] } }, 'redaction_profiles.p.custom_patterns[0].pattern: not a valid RE2 pattern'],
    [{ p: { recognizers: ['email'], custom_patterns: [{ name: 'x', pattern: '(?<=a)b' }] } }, 'redaction_profiles.p.custom_patterns[0].pattern: not a valid RE2 pattern'],
    [{ p: { recognizers: ['email'], custom_patterns: [{ name: 'x', pattern: '[0-9]*' }] } }, 'redaction_profiles.p.custom_patterns[0].pattern: pattern matches the empty string'],
    [{ p: { recognizers: ['email', 'passport'] } }, "redaction_profiles.p.recognizers[1]: unknown recognizer 'passport'"],
    [{ p: { recognizers: ['email'], replacement: 'mask' } }, "redaction_profiles.p.replacement: expected 'tag' or 'hash'"],
    [{ strict: { recognizers: ['email'] } }, "redaction_profiles.strict: 'strict' is a built-in profile"],
  ])('refuse %j with the field and what to fix', (profiles, message) => {
    expect(problems(file({ redaction_profiles: profiles }))).toContain(message);
  });

  it('refuse a tenant profile that does not exist, and redact_upstream without a profile', () => {
    const msg = problems(file({}, { redaction_profile: 'pii-basic' }));
    expect(msg).toContain("tenants[0].redaction_profile: unknown redaction profile \"pii-basic\"; use one of default, strict");
    expect(problems(file({}, { redact_upstream: true }))).toContain('tenants[0].redact_upstream: needs redaction_profile');
  });
});

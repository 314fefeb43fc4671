/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

const hosted = (id: string, capabilities?: Record<string, boolean>) => ({
  id,
  model: id.split('@')[0],
  engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: id },
  context_window: 4096,
  max_output_tokens: 1024,
  default_output_tokens: 256,
  pricing: { input_per_mtok: 1, output_per_mtok: 2 },
  ...(capabilities ? { capabilities } : {}),
});

/** chat (chat@1 90 %, chat@2 10 %), small; tenant acme with two use cases. */
function file(): Record<string, any> {
  return {
    revisions: [hosted('chat@1', { json_output: true }), hosted('chat@2', { json_output: true }), hosted('small@1'), hosted('big@1', { json_output: true })],
    aliases: [
      { name: 'chat', targets: [{ revision: 'chat@1', weight: 90 }, { revision: 'chat@2', weight: 10 }] },
      { name: 'small', revision: 'small@1' },
    ],
    redaction_profiles: { pii: { recognizers: ['email'] } },
    tenants: [
      {
        id: 'acme',
        name: 'Acme',
        content_logging: true,
        use_cases: [
          { name: 'support.summaries', model: 'chat', pin: 'chat@1', fallbacks: ['big@1'], limits: { tokens_per_minute: 20_000, monthly_budget_usd: 50 }, redaction_profile: 'pii' },
          { name: 'search', model: 'small' },
        ],
      },
      { id: 'globex', name: 'Globex', allowed_aliases: ['small'] },
    ],
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

describe('use cases in a tenant policy', () => {
  it('reads each use case: model chain, version pin, limits and budget, redaction profile', () => {
    const cfg = parseConfig(JSON.stringify(file()), 'w.json');
    expect(cfg.tenants[0].useCases).toEqual([
      { name: 'support.summaries', model: 'chat', pin: 'chat@1', fallbacks: ['big@1'], limits: { tokensPerMinute: 20_000, monthlyBudgetUsd: 50 }, redactionProfile: 'pii' },
      { name: 'search', model: 'small', limits: {} },
    ]);
    // None declared: none carried (the request path pays nothing for them).
    expect(cfg.tenants[1].useCases).toBeUndefined();
  });

  it.each([
    ['an unknown alias', (d: any) => (d.tenants[0].use_cases[1].model = 'nope'), /tenants\[0\]\.use_cases\[1\]\.model: unknown alias "nope"/],
    ['an alias the tenant may not use', (d: any) => d.tenants[1].use_cases = [{ name: 'x', model: 'chat' }], /tenants\[1\]\.use_cases\[0\]\.model: alias "chat" is not in this tenant's allowed_aliases/],
    ['an unknown pinned revision', (d: any) => (d.tenants[0].use_cases[0].pin = 'chat@9'), /use_cases\[0\]\.pin: unknown revision "chat@9"/],
    ['a fallback lacking a capability of the primary', (d: any) => (d.tenants[0].use_cases[0].fallbacks = ['small@1']), /use_cases\[0\]\.fallbacks\[0\]: revision "small@1" lacks json_output/],
    ['the pin as its own fallback', (d: any) => (d.tenants[0].use_cases[0].fallbacks = ['chat@1']), /use_cases\[0\]\.fallbacks\[0\]: revision "chat@1" is the pinned revision/],
    [
      'an embedding revision as a fallback of a generation chain',
      (d: any) => {
        d.revisions.push({ ...hosted('embed@1'), kind: 'embedding', embedding: { dimensions: 8 } });
        d.tenants[0].use_cases[1].fallbacks = ['embed@1'];
      },
      /use_cases\[1\]\.fallbacks\[0\]: revision "embed@1" is an embedding revision, but "small@1" is a generation revision: a fallback must serve the same kind/,
    ],
    ['a duplicate name', (d: any) => (d.tenants[0].use_cases[1].name = 'support.summaries'), /use_cases\[1\]\.name: duplicate use case "support.summaries"/],
    ['a bad name', (d: any) => (d.tenants[0].use_cases[1].name = 'has space'), /use_cases\[1\]\.name: .*use case of 1 to 64/],
    ['an unknown redaction profile', (d: any) => (d.tenants[0].use_cases[0].redaction_profile = 'nope'), /use_cases\[0\]\.redaction_profile: unknown redaction profile "nope"/],
    ['an unknown field', (d: any) => (d.tenants[0].use_cases[0].budget = 5), /use_cases\[0\]\.budget: unknown key/],
    ['a negative budget', (d: any) => (d.tenants[0].use_cases[0].limits.monthly_budget_usd = -1), /use_cases\[0\]\.limits\.monthly_budget_usd/],
    [
      'a route for the same alias and use case',
      (d: any) => (d.tenants[0].routes = [{ alias: 'chat', use_case: 'support.summaries', pin: 'chat@2' }]),
      /tenants\[0\]\.routes\[0\] also routes alias "chat" for use case "support.summaries"/,
    ],
  ])('refuses %s', (_what, mutate, expected) => {
    const doc = file();
    mutate(doc);
    expect(problems(doc)).toMatch(expected);
  });

  it('reads an app’s session caps; a use case or a tenant cannot have them', () => {
    const doc = file();
    doc.tenants[0].apps = [{ id: 'agents', name: 'Agents', limits: { session_max_tokens: 200_000, session_budget_usd: 5, session_idle_ttl_ms: 600_000 } }];
    expect(parseConfig(JSON.stringify(doc), 'w.json').tenants[0].apps[0].limits).toEqual({ sessionMaxTokens: 200_000, sessionBudgetUsd: 5, sessionIdleTtlMs: 600_000 });
    doc.tenants[0].use_cases[0].limits.session_max_tokens = 5;
    doc.tenants[0].limits = { session_budget_usd: 1 };
    const message = problems(doc);
    expect(message).toMatch(/tenants\[0\]\.use_cases\[0\]\.limits\.session_max_tokens: unknown key/);
    expect(message).toMatch(/tenants\[0\]\.limits\.session_budget_usd: unknown key/);
  });
});

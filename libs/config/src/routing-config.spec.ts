/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { capabilitiesOf } from '@weir/core';
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

/** Three hosted revisions: chat@1 and chat@2 (the canary) with tools, small@1 without. */
function file(): Record<string, any> {
  return {
    revisions: [hosted('chat@1', { tools: true }), hosted('chat@2', { tools: true, json_output: true }), hosted('small@1'), hosted('big@1', { tools: true, json_output: true })],
    aliases: [
      { name: 'chat', targets: [{ revision: 'chat@1', weight: 90 }, { revision: 'chat@2', weight: 10 }], fallbacks: ['big@1'] },
      { name: 'small', revision: 'small@1' },
    ],
    tenants: [
      {
        id: 'acme',
        name: 'Acme',
        routes: [
          { alias: 'chat', pin: 'chat@1' },
          { alias: 'chat', use_case: 'support.triage', pin: 'chat@2', fallbacks: ['big@1'] },
          { alias: 'small', fallbacks: ['chat@1'] },
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

describe('routing configuration: capabilities, fallback chains, pins', () => {
  it('reads capabilities over the engine defaults, alias fallbacks and tenant routes', () => {
    const cfg = parseConfig(JSON.stringify(file()), 'w.json');
    const byId = new Map(cfg.revisions.map((r) => [r.id, r]));
    expect(capabilitiesOf(byId.get('chat@2') as never)).toEqual({ streaming: true, tools: true, jsonOutput: true });
    // Nothing declared: the openai-compatible defaults (tools and JSON output must be declared).
    expect(byId.get('small@1')?.capabilities).toBeUndefined();
    expect(capabilitiesOf(byId.get('small@1') as never)).toEqual({ streaming: true, tools: false, jsonOutput: false });
    expect(cfg.aliases[0].fallbacks).toEqual(['big@1']);
    expect(cfg.aliases[1].fallbacks).toBeUndefined();
    expect(cfg.tenants[0].routes).toEqual([
      { alias: 'chat', pin: 'chat@1' },
      { alias: 'chat', useCase: 'support.triage', pin: 'chat@2', fallbacks: ['big@1'] },
      { alias: 'small', fallbacks: ['chat@1'] },
    ]);
    expect(cfg.tenants[1].routes).toBeUndefined();
  });

  it.each([
    ['an unknown fallback revision', (f: Record<string, any>) => (f.aliases[0].fallbacks = ['nope@1']), 'aliases[0].fallbacks[0]: unknown revision "nope@1"'],
    ['a fallback listed twice', (f: Record<string, any>) => (f.aliases[0].fallbacks = ['big@1', 'big@1']), 'aliases[0].fallbacks[1]: revision "big@1" is listed twice'],
    [
      'a fallback without a capability a target offers',
      (f: Record<string, any>) => (f.aliases[0].fallbacks = ['small@1']),
      'aliases[0].fallbacks[0]: revision "small@1" lacks tools, which "chat@1" offers',
    ],
    [
      "a tenant fallback without the pinned revision's capability",
      (f: Record<string, any>) => (f.tenants[0].routes[1].fallbacks = ['chat@1']),
      'tenants[0].routes[1].fallbacks[0]: revision "chat@1" lacks json_output, which "chat@2" offers',
    ],
    ['a route to an unknown alias', (f: Record<string, any>) => (f.tenants[0].routes[0].alias = 'ghost'), 'tenants[0].routes[0].alias: unknown alias "ghost"'],
    ['a route to an alias the tenant may not use', (f: Record<string, any>) => (f.tenants[1].routes = [{ alias: 'chat', pin: 'chat@1' }]), `tenants[1].routes[0].alias: alias "chat" is not in this tenant's allowed_aliases`],
    ['a pin to an unknown revision', (f: Record<string, any>) => (f.tenants[0].routes[0].pin = 'chat@9'), 'tenants[0].routes[0].pin: unknown revision "chat@9"'],
    ['a route with neither pin nor fallbacks', (f: Record<string, any>) => (f.tenants[0].routes[0] = { alias: 'chat' }), 'tenants[0].routes[0]: set pin (a revision id), fallbacks (revision ids), or both'],
    ['two routes for the same alias and use case', (f: Record<string, any>) => f.tenants[0].routes.push({ alias: 'chat', pin: 'chat@2' }), 'tenants[0].routes[3]: duplicate route for alias "chat" (also tenants[0].routes[0])'],
    ['a bad use case', (f: Record<string, any>) => (f.tenants[0].routes[1].use_case = 'has space'), 'tenants[0].routes[1].use_case: expected a use case of 1 to 64 letters, digits or . _ : -'],
    ["a fallback that is the alias's only revision", (f: Record<string, any>) => (f.aliases[1].fallbacks = ['small@1']), `aliases[1].fallbacks[0]: revision "small@1" is the alias's own revision`],
    ['a fallback that is the pinned revision', (f: Record<string, any>) => (f.tenants[0].routes[1].fallbacks = ['chat@2']), 'tenants[0].routes[1].fallbacks[0]: revision "chat@2" is the pinned revision'],
    ['a capability that is not a boolean', (f: Record<string, any>) => (f.revisions[2].capabilities = { tools: 'yes' }), 'revisions[2].capabilities.tools: expected true or false'],
  ])('reports %s with its path and what to fix', (_name, mutate, expected) => {
    const doc = file();
    mutate(doc);
    expect(problems(doc)).toContain(expected);
  });
});

describe('default capabilities by engine kind', () => {
  it('Anthropic revisions call tools unless declared otherwise; OpenAI-compatible ones must declare them', () => {
    const doc = file();
    doc.revisions.push({ ...hosted('claude@1'), engine: { kind: 'anthropic', base_url: 'https://api.anthropic.com', upstream_model: 'claude-sonnet-4-5' } });
    doc.revisions.push({ ...hosted('claude@2', { tools: false }), engine: { kind: 'anthropic', base_url: 'https://api.anthropic.com', upstream_model: 'claude-sonnet-4-5' } });
    const byId = new Map(parseConfig(JSON.stringify(doc), 'w.json').revisions.map((r) => [r.id, r]));
    expect(capabilitiesOf(byId.get('claude@1') as never)).toEqual({ streaming: true, tools: true, jsonOutput: false });
    expect(capabilitiesOf(byId.get('claude@2') as never).tools).toBe(false);
    expect(capabilitiesOf(byId.get('small@1') as never).tools).toBe(false);
  });
});

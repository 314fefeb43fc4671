import { type CacheRoute, canonicalJson, canonicalPromptOf, cacheQueryOf, exactKeyOf, keyMaterialOf, NON_OUTPUT_FIELDS, paramsKeyOf, promptTextOf } from './cache-key';

const messages = [
  { role: 'system', content: 'be brief' },
  { role: 'user', content: 'hello' },
];
const tool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };

/** A base body per route and, per output-changing parameter, a value different from the base. */
const ROUTES: Record<CacheRoute, { base: Record<string, unknown>; changes: Record<string, unknown>; prompt: Record<string, unknown> }> = {
  '/v1/chat/completions': {
    base: { model: 'm', messages, temperature: 0, top_p: 1, seed: 1, stop: ['x'], max_tokens: 10, max_completion_tokens: 10, tools: [tool], tool_choice: 'auto', parallel_tool_calls: true, response_format: { type: 'text' }, frequency_penalty: 0, presence_penalty: 0, logit_bias: {}, logprobs: false, top_logprobs: 0, modalities: ['text'] },
    changes: {
      temperature: 0.5,
      top_p: 0.9,
      seed: 2,
      stop: ['y'],
      max_tokens: 11,
      max_completion_tokens: 11,
      tools: [{ ...tool, function: { ...tool.function, name: 'other' } }],
      tool_choice: 'required',
      parallel_tool_calls: false,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } },
      frequency_penalty: null, // absent vs 0: a different key only loses hits, never serves a wrong one
      logit_bias: { '1': 0 },
      logprobs: true,
      top_logprobs: 1,
      modalities: ['text', 'audio'],
    },
    prompt: { messages: [{ role: 'user', content: 'hello!' }] },
  },
  '/v1/completions': {
    base: { model: 'm', prompt: 'once upon', temperature: 0, top_p: 1, seed: 1, stop: 'x', max_tokens: 10, frequency_penalty: 0, presence_penalty: 0, logit_bias: {}, echo: false, best_of: 1, logprobs: 0, suffix: null },
    changes: { temperature: 1, top_p: 0.5, seed: 7, stop: 'y', max_tokens: 20, presence_penalty: 0.1, logit_bias: { '2': 1 }, echo: true, best_of: 2, logprobs: 1, suffix: 'end' },
    prompt: { prompt: 'once upon a' },
  },
  '/v1/generations': {
    base: { model_alias: 'm', input: 'hi', temperature: 0, top_p: 1, seed: 1, stop: ['x'], max_output_tokens: 10 },
    changes: { temperature: 0.1, top_p: 0.2, seed: 3, stop: ['x', 'y'], max_output_tokens: 9 },
    prompt: { input: 'hi there' },
  },
  '/v1/responses': {
    base: { model: 'm', input: 'hi', instructions: 'be kind', temperature: 0, top_p: 1, max_output_tokens: 10, text: { format: { type: 'text' } }, max_tokens: 5, output_schema: { type: 'object' } },
    changes: { temperature: 0.3, top_p: 0.3, max_output_tokens: 11, text: { format: { type: 'json_schema', name: 'a', schema: {} } }, max_tokens: 6, output_schema: { type: 'array' } },
    prompt: { instructions: 'be unkind' },
  },
  '/v1/messages': {
    base: { model: 'm', messages: [{ role: 'user', content: 'hello' }], system: 'be brief', max_tokens: 10, temperature: 0, top_p: 1, stop_sequences: ['x'], tools: [{ name: 'a', input_schema: { type: 'object' } }], tool_choice: { type: 'auto' } },
    changes: { max_tokens: 11, temperature: 0.5, top_p: 0.5, stop_sequences: ['y'], tools: [{ name: 'b', input_schema: { type: 'object' } }], tool_choice: { type: 'any' } },
    prompt: { system: 'be long' },
  },
};

/** Fields that must never change the key, with a value to set them to. */
const IGNORED: Record<string, unknown> = {
  model: 'other-alias',
  model_alias: 'other-alias',
  use_case: 'support',
  stream: true,
  stream_options: { include_usage: true },
  priority: 'batch',
  service_tier: 'flex',
  deadline_ms: 5_000,
  request_id: 'r-1',
  store: false,
  metadata: { a: 'b' },
  prompt_cache_retention: '24h',
  safety_identifier: 'sid',
  prediction: { type: 'content', content: 'x' },
  n: 1,
  user: 'someone',
  weir_cache: 'no-cache',
  weir_prompt_template: 'faq@3',
};

describe('paramsKeyOf', () => {
  const rows = Object.entries(ROUTES).flatMap(([route, r]) => Object.entries(r.changes).map(([param, value]) => [route as CacheRoute, param, value] as const));
  it.each(rows)('%s: changing `%s` changes the key', (route, param, value) => {
    const { base } = ROUTES[route];
    expect(paramsKeyOf(route, { ...base, [param]: value })).not.toBe(paramsKeyOf(route, base));
  });

  const ignoredRows = (Object.keys(ROUTES) as CacheRoute[]).flatMap((route) => Object.entries(IGNORED).map(([param, value]) => [route, param, value] as const));
  it.each(ignoredRows)('%s: `%s` does not change the key', (route, param, value) => {
    const { base } = ROUTES[route];
    expect(paramsKeyOf(route, { ...base, [param]: value })).toBe(paramsKeyOf(route, base));
  });

  it('the ignored table is the whole list of non-output fields', () => {
    expect(new Set(Object.keys(IGNORED))).toEqual(NON_OUTPUT_FIELDS);
  });

  it.each(Object.keys(ROUTES) as CacheRoute[])('%s: `prompt_cache_key` changes the key (it may carry a per-user value)', (route) => {
    const { base } = ROUTES[route];
    expect(paramsKeyOf(route, { ...base, prompt_cache_key: 'alice' })).not.toBe(paramsKeyOf(route, base));
    expect(paramsKeyOf(route, { ...base, prompt_cache_key: 'alice' })).not.toBe(paramsKeyOf(route, { ...base, prompt_cache_key: 'bob' }));
  });

  it('the route is part of the key (the wire shape differs)', () => {
    const body = { model: 'm', temperature: 0 };
    const keys = new Set((Object.keys(ROUTES) as CacheRoute[]).map((r) => paramsKeyOf(r, body)));
    expect(keys.size).toBe(Object.keys(ROUTES).length);
  });

  it('an unknown future field changes the key by default', () => {
    const { base } = ROUTES['/v1/chat/completions'];
    expect(paramsKeyOf('/v1/chat/completions', { ...base, some_new_sampling_knob: 3 })).not.toBe(paramsKeyOf('/v1/chat/completions', base));
  });

  it('is order-independent at every depth, and null is absent', () => {
    const a = { temperature: 0, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { b: 1, a: 2 } } }, seed: null };
    const b = { response_format: { json_schema: { schema: { a: 2, b: 1 }, name: 'x' }, type: 'json_schema' }, temperature: 0 };
    expect(paramsKeyOf('/v1/chat/completions', a)).toBe(paramsKeyOf('/v1/chat/completions', b));
  });

  it('the prompt is not in paramsKey', () => {
    const r = ROUTES['/v1/chat/completions'];
    expect(paramsKeyOf('/v1/chat/completions', { ...r.base, ...r.prompt })).toBe(paramsKeyOf('/v1/chat/completions', r.base));
  });
});

describe('exact key', () => {
  const partition = { tenantKey: 'acme~0000000000000001', revisionId: 'rev-a', template: '', paramsKey: 'p'.repeat(64) };

  it.each(Object.keys(ROUTES) as CacheRoute[])('%s: a different prompt is a different exact key', (route) => {
    const r = ROUTES[route];
    const a = exactKeyOf(partition, canonicalPromptOf(route, r.base));
    const b = exactKeyOf(partition, canonicalPromptOf(route, { ...r.base, ...r.prompt }));
    expect(a).not.toBe(b);
  });

  it.each([['tenantKey', 'acme~0000000000000002'], ['revisionId', 'rev-b'], ['template', 'faq@1'], ['paramsKey', 'q'.repeat(64)]] as const)('a different %s is a different exact key', (field, value) => {
    expect(exactKeyOf({ ...partition, [field]: value }, '{}')).not.toBe(exactKeyOf(partition, '{}'));
  });

  it('length prefixes keep field boundaries: moving text between fields changes the key', () => {
    expect(exactKeyOf({ ...partition, template: 'a@1', revisionId: 'rev' }, 'x')).not.toBe(exactKeyOf({ ...partition, template: '1', revisionId: 'rev@a' }, 'x'));
  });

  it('a one-string prompt array keys as the string on /v1/completions', () => {
    expect(canonicalPromptOf('/v1/completions', { prompt: ['abc'] })).toBe(canonicalPromptOf('/v1/completions', { prompt: 'abc' }));
  });

  it('cacheQueryOf puts the tenant, revision and template in the partition', () => {
    const m = keyMaterialOf('/v1/chat/completions', { model: 'm', messages, temperature: 0 }, 'faq@2');
    const q = cacheQueryOf(m, 'acme~1', 'rev-a', { kind: 'chat', messages: messages.map((x) => ({ role: x.role as 'user', content: x.content })) });
    expect(q.partition).toEqual({ tenantKey: 'acme~1', revisionId: 'rev-a', template: 'faq@2', paramsKey: paramsKeyOf('/v1/chat/completions', { model: 'x', messages: [], temperature: 0 }) });
    expect(q.exactKey).toMatch(/^[0-9a-f]{64}$/);
    expect(q.promptText).toBe('system: be brief\nuser: hello');
    // A copy still carries it (the semantic tier may spread the query).
    expect({ ...q }.promptText).toBe('system: be brief\nuser: hello');
  });
});

describe('canonicalJson and promptTextOf', () => {
  it('sorts keys and keeps array order', () => {
    expect(canonicalJson({ b: [2, 1], a: { d: 1, c: null } })).toBe('{"a":{"d":1},"b":[2,1]}');
  });
  it('normalises whitespace in the prompt text', () => {
    expect(promptTextOf({ kind: 'text', text: '  a \n\t b ' })).toBe('a b');
  });
});

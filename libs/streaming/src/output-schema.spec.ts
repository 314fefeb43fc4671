import { isWeirError } from '@weir/core';
import { compileOutputSchema, judgeOutput, loadOutputSchema, MAX_OUTPUT_SCHEMA_BYTES, OUTPUT_SCHEMA_DIALECT } from './output-schema';
import { createSchemaWorker, MAX_PATTERN_PROGRAM } from './schema-worker';

const PERSON = { type: 'object', properties: { name: { type: 'string', maxLength: 20 }, age: { type: 'integer', minimum: 0 } }, required: ['name'], additionalProperties: false };

function refusal(schema: unknown, param?: string): { param?: string; message: string } {
  try {
    compileOutputSchema(schema, param);
  } catch (e) {
    if (isWeirError(e) && e.code === 'invalid_request') return { param: e.param, message: e.message };
    throw e;
  }
  throw new Error('accepted');
}

describe('compileOutputSchema', () => {
  it('accepts a draft 2020-12 schema (with or without $schema) and validates outputs', () => {
    for (const schema of [PERSON, { ...PERSON, $schema: OUTPUT_SCHEMA_DIALECT }, { ...PERSON, $schema: `${OUTPUT_SCHEMA_DIALECT}#` }]) {
      const compiled = compileOutputSchema(schema);
      expect(compiled.schema).toBe(schema);
      expect(compiled.check('{"name": "Ann", "age": 3}')).toEqual({ ok: true, value: { name: 'Ann', age: 3 } });
    }
  });

  it.each<[string, string, RegExp]>([
    ['not JSON', 'Once upon a time', /^the output \(16 bytes\) is not a complete JSON document$/],
    ['empty', '  ', /^the output is empty/],
    ['cut short', '{"name": "An', /not a complete JSON document/],
    ['a wrong type', '{"name": 5}', /`\/name` must be string/],
    ['a missing property', '{}', /`\/` must have required property 'name'/],
    ['an extra property', '{"name": "A", "secret": 1}', /`\/` must NOT have additional properties/],
    ['a number below the minimum', '{"name": "A", "age": -1}', /`\/age` must be >= 0/],
  ])('fails %s, naming paths and never quoting the output', (_name, text, message) => {
    const result = compileOutputSchema(PERSON).check(text);
    expect(result.ok).toBe(false);
    const m = (result as { message: string }).message;
    expect(m).toMatch(message);
    expect(m).not.toMatch(/Once|secret|An"/);
  });

  it('refuses a schema nested deeper than the limit with a 400, never a 500 (ajv would overflow its stack)', () => {
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 1_000; i++) deep = { type: 'array', items: deep };
    // So deep that serialising it would overflow the stack: still a 400 naming the limit.
    let deeper: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 200_000; i++) deeper = { type: 'array', items: deeper };
    expect(() => compileOutputSchema(deeper)).toThrow(expect.objectContaining({ code: 'invalid_request', message: expect.stringContaining('nests more than') }));
    expect(() => compileOutputSchema(deep)).toThrow(expect.objectContaining({ code: 'invalid_request', param: 'output_schema', message: expect.stringContaining('nests more than') }));
    let fine: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 20; i++) fine = { type: 'array', items: fine };
    expect(compileOutputSchema(fine).check(JSON.stringify([[[[[[[[[[[[[[[[[[[['x']]]]]]]]]]]]]]]]]]]])).ok).toBe(true);
  });

  it('lists at most 5 failures and counts the rest', () => {
    const schema = { type: 'object', properties: Object.fromEntries(['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((k) => [k, { type: 'string' }])) };
    const result = compileOutputSchema(schema).check(JSON.stringify({ a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1 }));
    expect((result as { message: string }).message).toMatch(/`\/e` must be string \(and 2 more\)$/);
  });

  it.each<[string, unknown, RegExp]>([
    ['an array', [], /must be a JSON Schema object/],
    ['null', null, /must be a JSON Schema object/],
    ['a meta-schema failure', { type: 'objec' }, /`my_schema` is not a usable JSON Schema: my_schema\/type must be equal to one of the allowed values/],
    ['an unknown keyword (a typo)', { type: 'object', requried: ['a'] }, /unknown keyword: "requried"/],
    ['an unsupported dialect (draft-04)', { $schema: 'http://json-schema.org/draft-04/schema#' }, /names no supported draft; use one of "http:\/\/json-schema.org\/draft-07\/schema#"/],
    ['a bad pattern', { type: 'string', pattern: '((' }, /the pattern "\(\(" is not supported: error parsing regexp: missing closing \)/],
    ['an unresolvable $ref', { $ref: '#/$defs/missing' }, /can't resolve reference/],
    ['a schema over the size cap', { type: 'string', description: 'x'.repeat(MAX_OUTPUT_SCHEMA_BYTES) }, /is 655\d\d bytes; at most 65536 are accepted/],
  ])('refuses %s as invalid_request naming the parameter', (_name, schema, message) => {
    const r = refusal(schema, 'my_schema');
    expect(r.param).toBe('my_schema');
    expect(r.message).toMatch(message);
  });

  it('keeps schemas apart: two schemas with the same $id compile independently', () => {
    const a = compileOutputSchema({ $id: 'https://example.com/s', type: 'string' });
    const b = compileOutputSchema({ $id: 'https://example.com/s', type: 'integer' });
    expect(a.check('"x"').ok).toBe(true);
    expect(b.check('"x"').ok).toBe(false);
    expect(b.check('3').ok).toBe(true);
    // A schema cannot replace the meta-schema either.
    expect(refusal({ $id: OUTPUT_SCHEMA_DIALECT, type: 'string' }).message).toMatch(/usable JSON Schema/);
    expect(compileOutputSchema(PERSON).check('{"name":"A"}').ok).toBe(true);
  });
});

describe('patterns run on RE2 (issue 14: no pattern can backtrack on the main thread)', () => {
  // On a backtracking engine each of these takes longer than the test's timeout (exponential in the run of `a`s).
  const evil = 'a'.repeat(5_000) + '!';
  it.each<[string, object, string, boolean]>([
    ['pattern ^(a+)+$', { type: 'string', pattern: '^(a+)+$' }, JSON.stringify(evil), false],
    ['pattern (a|a)*b', { type: 'string', pattern: '(a|a)*b' }, JSON.stringify(evil), false],
    ['pattern ^(a|aa)*$ on a match', { type: 'string', pattern: '^(a|aa)*$' }, JSON.stringify('a'.repeat(5_000)), true],
    ['patternProperties ^(a+)+$', { type: 'object', patternProperties: { '^(a+)+$': { type: 'integer' } }, additionalProperties: false }, JSON.stringify({ [evil]: 1 }), false],
    ['propertyNames with a pattern', { type: 'object', propertyNames: { pattern: '^(x+x+)+y$' } }, JSON.stringify({ ['x'.repeat(5_000)]: 1 }), false],
  ])('checks %s against a long output and answers', (_name, schema, text, ok) => {
    expect(compileOutputSchema(schema).check(text).ok).toBe(ok);
  });

  it('keeps ECMA-262 syntax that RE2 runs (classes, \\d, \\p{L}, \\u escapes, named groups)', () => {
    const schema = { type: 'object', properties: { id: { type: 'string', pattern: '^(?<cc>[A-Z]{2})-\\d{4}$' }, name: { type: 'string', pattern: '^\\p{L}+$' }, u: { type: 'string', pattern: '^\\u0041+$' } } };
    const compiled = compileOutputSchema(schema);
    expect(compiled.check(JSON.stringify({ id: 'AB-1234', name: 'Zoë', u: 'AAA' }))).toEqual({ ok: true, value: { id: 'AB-1234', name: 'Zoë', u: 'AAA' } });
    expect(compiled.check(JSON.stringify({ id: 'ab-1234' }))).toMatchObject({ ok: false, message: expect.stringContaining('`/id` must match pattern') });
  });

  it.each<[string, string, RegExp]>([
    ['a lookahead', '^(?=a)a$', /not supported.*RE2, which has no lookaround or backreferences/],
    ['a backreference', '^(a)\\1$', /not supported.*RE2/],
    ['a huge repetition', '(a|b)*a(a|b){1000}$', new RegExp(`too complex \\(3008 RE2 instructions, at most ${MAX_PATTERN_PROGRAM}\\)`)],
  ])('refuses %s with a 400 naming the pattern', (_name, pattern, message) => {
    for (const schema of [{ type: 'string', pattern }, { type: 'object', patternProperties: { [pattern]: {} } }]) {
      const r = refusal(schema, 'response_format.json_schema.schema');
      expect(r.param).toBe('response_format.json_schema.schema');
      expect(r.message).toMatch(message);
    }
  });

  it('compiles and checks a tenant schema on the worker alike (loadOutputSchema), refusing the same patterns with a 400', async () => {
    const loaded = await loadOutputSchema({ type: 'string', pattern: '^(a+)+$' }, 'text.format.schema');
    await expect(loaded.check(JSON.stringify('a'.repeat(5_000) + '!'))).resolves.toEqual({ ok: false, message: expect.stringContaining('must match pattern') });
    await expect(loaded.check(JSON.stringify('aaa'))).resolves.toEqual({ ok: true, value: 'aaa' });
    await expect(loadOutputSchema({ type: 'string', pattern: '^(?=a)' }, 'text.format.schema')).rejects.toMatchObject({
      code: 'invalid_request',
      param: 'text.format.schema',
      message: expect.stringMatching(/not supported.*RE2/),
    });
  });
});

describe('judgeOutput', () => {
  const schema = compileOutputSchema({ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] });
  const outcome = (finishReason: 'stop' | 'tool_calls' | 'length') => ({
    finishReason,
    usage: { inputTokens: 1, outputTokens: 2, cachedInputTokens: 0 },
    costNanoUsd: 3,
    modelRevision: 'm@1',
    timings: { queueMs: 0, ttftMs: 1, totalMs: 2 },
  });

  it('passes a matching document, turns a mismatch into output_invalid keeping usage and cost', async () => {
    expect(await judgeOutput(outcome('stop'), '{"a":1}', schema)).toEqual({ outcome: outcome('stop'), value: { a: 1 } });
    const bad = (await judgeOutput(outcome('stop'), '{"a":"x"}', schema)).outcome;
    expect(bad).toMatchObject({ finishReason: 'error', error: { code: 'output_invalid' }, usage: { outputTokens: 2 }, costNanoUsd: 3 });
  });

  it('leaves a tool-call answer alone: the format governs text content only (as OpenAI does)', async () => {
    expect(await judgeOutput(outcome('tool_calls'), '', schema)).toEqual({ outcome: outcome('tool_calls') });
  });
});

describe('loadOutputSchema: a queue per tenant on the schema worker', () => {
  it('answers a tenant with too many schemas being compiled with a 429 rate_limited and a Retry-After, and still serves the others', async () => {
    const worker = createSchemaWorker({ compileDelayMs: 200, maxQueuedPerTenant: 2 });
    try {
      const schemaN = (n: number) => ({ type: 'object', properties: { [`salt_${n}_${Date.now()}`]: { type: 'string' } } });
      const queued = [loadOutputSchema(schemaN(1), 'output_schema', { worker, tenant: 'acme~1' }), loadOutputSchema(schemaN(2), 'output_schema', { worker, tenant: 'acme~1' })];
      await expect(loadOutputSchema(schemaN(3), 'text.format.schema', { worker, tenant: 'acme~1' })).rejects.toMatchObject({
        code: 'rate_limited',
        retryable: true,
        retryAfterMs: 1_000,
        message: expect.stringMatching(/too many schemas being compiled for this tenant; retry shortly/i),
      });
      const other = await loadOutputSchema(schemaN(4), 'output_schema', { worker, tenant: 'globex~2' });
      expect(await other.check('{}')).toEqual({ ok: true, value: {} });
      for (const loaded of await Promise.all(queued)) expect(await loaded.check('{}')).toEqual({ ok: true, value: {} });
    } finally {
      await worker.close();
    }
  });
});

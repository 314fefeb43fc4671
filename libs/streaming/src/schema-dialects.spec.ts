/**
 * JSON Schema drafts 07, 2019-09 and 2020-12 (issue 16 part 3): which `$schema` values are read
 * as which draft, and that each schema is validated with its own draft's semantics — on the
 * calling thread (`compileOutputSchema`) and on the schema worker (`loadOutputSchema`), with the
 * worker's protections (RE2 patterns, size and depth limits) in every draft.
 */
import { isWeirError } from '@weir/core';
import { compileOutputSchema, loadOutputSchema, MAX_OUTPUT_SCHEMA_DEPTH } from './output-schema';
import { ACCEPTED_DIALECTS_TEXT, schemaDialectOf, SCHEMA_DIALECT_URIS } from './schema-dialects';
import { createSchemaWorker, type SchemaWorker } from './schema-worker';

const D7 = 'http://json-schema.org/draft-07/schema#';
const D2019 = 'https://json-schema.org/draft/2019-09/schema';
const D2020 = 'https://json-schema.org/draft/2020-12/schema';

/** The refusal's message, or throws when the schema is accepted. */
function refusal(schema: unknown): string {
  try {
    compileOutputSchema(schema, 'text.format.schema');
  } catch (e) {
    if (isWeirError(e) && e.code === 'invalid_request') {
      expect(e.param).toBe('text.format.schema');
      return e.message;
    }
    throw e;
  }
  throw new Error('accepted');
}

/** Whether each output matches the (accepted) schema. */
function verdicts(schema: object, outputs: string[]): boolean[] {
  const compiled = compileOutputSchema(schema);
  return outputs.map((o) => compiled.check(o).ok);
}

describe('schemaDialectOf', () => {
  it.each([
    [undefined, '2020-12'],
    [D7, 'draft-07'],
    ['http://json-schema.org/draft-07/schema', 'draft-07'],
    ['https://json-schema.org/draft-07/schema#', 'draft-07'],
    ['https://json-schema.org/draft-07/schema', 'draft-07'],
    [D2019, '2019-09'],
    [`${D2019}#`, '2019-09'],
    ['http://json-schema.org/draft/2019-09/schema', '2019-09'],
    [D2020, '2020-12'],
    [`${D2020}#`, '2020-12'],
    ['http://json-schema.org/draft/2020-12/schema#', '2020-12'],
  ])('reads $schema %s as %s', (uri, dialect) => {
    expect(schemaDialectOf(uri === undefined ? {} : { $schema: uri })).toBe(dialect);
  });

  it.each([
    ['draft-04', 'http://json-schema.org/draft-04/schema#'],
    ['draft-06', 'http://json-schema.org/draft-06/schema#'],
    ['a custom meta-schema', 'https://example.com/my-meta'],
    ['another fragment', 'http://json-schema.org/draft-07/schema#/definitions'],
    ['another case', 'HTTP://JSON-SCHEMA.ORG/DRAFT-07/SCHEMA#'],
    ['a number', 7],
    ['null', null],
  ])('reads %s as no supported draft', (_name, uri) => {
    expect(schemaDialectOf({ $schema: uri })).toBeUndefined();
  });

  it('lists the canonical URIs and the variants clients send', () => {
    for (const uri of Object.values(SCHEMA_DIALECT_URIS)) expect(ACCEPTED_DIALECTS_TEXT).toContain(`"${uri}"`);
    expect(ACCEPTED_DIALECTS_TEXT).toMatch(/http or https, with or without a trailing "#"/);
  });
});

describe('each draft validates with its own semantics', () => {
  it('accepts every spelling of each draft', () => {
    for (const uri of [D7, 'https://json-schema.org/draft-07/schema', D2019, `http://json-schema.org/draft/2019-09/schema#`, D2020, `${D2020}#`]) {
      expect(verdicts({ $schema: uri, type: 'string', maxLength: 2 }, ['"ab"', '"abc"'])).toEqual([true, false]);
    }
  });

  it('refuses an unknown $schema with a 400 listing the accepted URIs', () => {
    const message = refusal({ $schema: 'http://json-schema.org/draft-04/schema#', type: 'string' });
    expect(message).toContain('`text.format.schema` is not a usable JSON Schema: its `$schema` ("http://json-schema.org/draft-04/schema#") names no supported draft');
    expect(message).toContain(ACCEPTED_DIALECTS_TEXT);
    expect(refusal({ $schema: 4, type: 'string' })).toMatch(/its `\$schema` \(a number\) names no supported draft/);
  });

  it('draft-07: `definitions` + `$ref` and `dependencies` hold', () => {
    const schema = {
      $schema: D7,
      type: 'object',
      properties: { card: { $ref: '#/definitions/digits' }, billing: { type: 'string' } },
      dependencies: { card: ['billing'] },
      definitions: { digits: { type: 'string', pattern: '^[0-9]{4}$' } },
    };
    expect(verdicts(schema, ['{"card":"1234","billing":"x"}', '{"card":"1234"}', '{"card":"12a4","billing":"x"}', '{}'])).toEqual([true, false, false, true]);
  });

  it('`items` as an array is a tuple in draft-07 and 2019-09 (with `additionalItems`), and refused in 2020-12', () => {
    for (const uri of [D7, D2019]) {
      const tuple = { $schema: uri, type: 'array', items: [{ type: 'string' }, { type: 'integer' }], additionalItems: false };
      expect(verdicts(tuple, ['["a",1]', '[1,"a"]', '["a",1,2]'])).toEqual([true, false, false]);
    }
    expect(refusal({ $schema: D2020, type: 'array', items: [{ type: 'string' }] })).toMatch(/text\.format\.schema\/items must be object,boolean/);
    expect(refusal({ type: 'array', items: [{ type: 'string' }] })).toMatch(/items must be object,boolean/);
  });

  it('`prefixItems` is a tuple in 2020-12 (the default), and an unknown keyword before it', () => {
    for (const schema of [{ $schema: D2020, type: 'array', prefixItems: [{ type: 'string' }], items: false }, { type: 'array', prefixItems: [{ type: 'string' }], items: false }]) {
      expect(verdicts(schema, ['["a"]', '[1]', '["a","b"]'])).toEqual([true, false, false]);
    }
    for (const uri of [D7, D2019]) expect(refusal({ $schema: uri, type: 'array', prefixItems: [{ type: 'string' }] })).toMatch(/unknown keyword: "prefixItems"/);
  });

  it('`$recursiveAnchor`/`$recursiveRef` recurse in 2019-09; draft-07 does not know them, 2020-12 refuses the anchor', () => {
    const tree = (uri: string) => ({ $schema: uri, $recursiveAnchor: true, type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $recursiveRef: '#' } } }, required: ['v'] });
    expect(verdicts(tree(D2019), ['{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}', '{"v":1,"kids":[{"v":2,"kids":[{"v":"x"}]}]}', '{"v":1,"kids":[{}]}'])).toEqual([true, false, false]);
    expect(refusal(tree(D7))).toMatch(/unknown keyword: "\$recursiveAnchor"/);
    expect(refusal(tree(D2020))).toMatch(/text\.format\.schema\/\$recursiveAnchor must be string/);
  });

  it('`$dynamicRef` recurses in 2020-12, and is an unknown keyword in draft-07', () => {
    const tree = (uri: string) => ({ $schema: uri, $dynamicAnchor: 'node', type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $dynamicRef: '#node' } } }, required: ['v'] });
    expect(verdicts(tree(D2020), ['{"v":1,"kids":[{"v":2}]}', '{"v":1,"kids":[{"v":"x"}]}'])).toEqual([true, false]);
    expect(refusal(tree(D7))).toMatch(/unknown keyword: "\$dynamicAnchor"/);
  });

  it('what the zod helpers send (draft-07, strict, nullable unions, definitions) validates', () => {
    const schema = {
      $schema: D7,
      type: 'object',
      properties: {
        name: { type: 'string' },
        age: { anyOf: [{ type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 }, { type: 'null' }] },
        nick: { type: ['string', 'null'] },
        root: { $ref: '#/definitions/__schema0' },
      },
      required: ['name', 'age', 'nick', 'root'],
      additionalProperties: false,
      definitions: { __schema0: { type: 'object', properties: { v: { type: 'string' }, children: { type: 'array', items: { $ref: '#/definitions/__schema0' } } }, required: ['v', 'children'], additionalProperties: false } },
    };
    const good = '{"name":"Ann","age":null,"nick":null,"root":{"v":"a","children":[{"v":"b","children":[]}]}}';
    const badNested = '{"name":"Ann","age":3,"nick":"x","root":{"v":"a","children":[{"v":"b"}]}}';
    const extra = '{"name":"Ann","age":3,"nick":"x","root":{"v":"a","children":[]},"more":1}';
    expect(verdicts(schema, [good, badNested, extra])).toEqual([true, false, false]);
  });

  it('keeps the protections in every draft: RE2 patterns, the depth limit', () => {
    for (const uri of [D7, D2019, D2020]) {
      expect(refusal({ $schema: uri, type: 'string', pattern: '^(?=a)a$' })).toMatch(/is not supported: .*RE2/);
      let deep: object = { type: 'string' };
      for (let i = 0; i < MAX_OUTPUT_SCHEMA_DEPTH; i++) deep = { type: 'array', items: deep };
      expect(refusal({ $schema: uri, ...deep })).toMatch(/nests more than 64 levels/);
      // A catastrophic pattern matches in linear time (RE2), so the check answers.
      expect(verdicts({ $schema: uri, type: 'string', pattern: '^(a|aa)*$' }, [JSON.stringify(`${'a'.repeat(5_000)}b`)])).toEqual([false]);
    }
  });
});

describe('each draft on the schema worker', () => {
  let worker: SchemaWorker;
  beforeAll(() => {
    worker = createSchemaWorker();
  });
  afterAll(() => worker.close());

  it('compiles and checks draft-07, 2019-09 and 2020-12 schemas with their own semantics', async () => {
    const d7 = await loadOutputSchema({ $schema: D7, type: 'array', items: [{ type: 'string' }], additionalItems: false }, 'output_schema', { worker });
    expect(await d7.check('["a"]')).toEqual({ ok: true, value: ['a'] });
    expect(await d7.check('["a","b"]')).toMatchObject({ ok: false, message: expect.stringMatching(/must NOT have more than 1 items/) });
    const d2019 = await loadOutputSchema({ $schema: `${D2019}#`, $recursiveAnchor: true, type: 'object', properties: { k: { $recursiveRef: '#' }, v: { type: 'integer' } } }, 'output_schema', { worker });
    expect(await d2019.check('{"k":{"k":{"v":1}}}')).toMatchObject({ ok: true });
    expect(await d2019.check('{"k":{"k":{"v":"x"}}}')).toMatchObject({ ok: false, message: expect.stringMatching(/`\/k\/k\/v` must be integer/) });
    const d2020 = await loadOutputSchema({ $schema: D2020, type: 'array', prefixItems: [{ type: 'integer' }] }, 'output_schema', { worker });
    expect(await d2020.check('[1,"free"]')).toMatchObject({ ok: true });
    expect(await d2020.check('["x"]')).toMatchObject({ ok: false });
  });

  it('refuses what a draft does not know, naming the parameter', async () => {
    await expect(loadOutputSchema({ $schema: D7, type: 'array', prefixItems: [{ type: 'integer' }] }, 'response_format.json_schema.schema', { worker })).rejects.toMatchObject({
      code: 'invalid_request',
      param: 'response_format.json_schema.schema',
      message: expect.stringMatching(/unknown keyword: "prefixItems"/),
    });
    await expect(loadOutputSchema({ $schema: 'http://json-schema.org/draft-06/schema#', type: 'string' }, 'output_schema', { worker })).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringMatching(/names no supported draft/),
    });
  });

  it('caches by the schema text, $schema included: the same body in two drafts compiles twice, each with its own semantics', async () => {
    const body = { type: 'array', items: [{ type: 'string' }] };
    const d7 = await loadOutputSchema({ $schema: D7, ...body }, 'output_schema', { worker });
    expect(await d7.check('["a", 1]')).toMatchObject({ ok: true });
    await expect(loadOutputSchema(body, 'output_schema', { worker })).rejects.toMatchObject({ message: expect.stringMatching(/items must be object,boolean/) });
    expect(await d7.check('[1]')).toMatchObject({ ok: false, message: expect.stringMatching(/`\/0` must be string/) });
  });

  it('stops a draft-07 check that runs past its time limit, as for any draft', async () => {
    const slow = createSchemaWorker({ checkTimeoutMs: 300 });
    try {
      // RE2 matches in linear time, but this program defeats its DFA: 200 strings of 16 KiB take seconds.
      let seed = 1;
      const ab = () => Array.from({ length: 16_384 }, () => ((seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) % 1_024 < 512 ? 'a' : 'b')).join('');
      const schema = { $schema: D7, type: 'array', items: { type: 'string', pattern: '(a|b)*a(a|b){200}$' } };
      const loaded = await loadOutputSchema(schema, 'output_schema', { worker: slow });
      expect(await loaded.check(JSON.stringify(Array.from({ length: 200 }, ab)))).toEqual({ ok: false, message: 'checking the output against its schema took longer than 300 ms' });
    } finally {
      await slow.close();
    }
  });

  it('guards a compile job that bypassed the gateway screen (an unknown $schema reaching the worker)', async () => {
    expect(await worker.compile(JSON.stringify({ $schema: 'https://example.com/meta', type: 'string' }), 'output_schema')).toEqual({ ok: false, message: expect.stringMatching(/names no supported draft; use one of/) });
  });
});

/**
 * `toGrammarSchema` on the drafts clients send (issue 16 part 3): draft-07 schemas as the openai
 * SDK's zod helpers and the AI SDK emit them (`definitions` + `#/definitions/…`, `anyOf` with
 * `null`, tuples as an `items` array) become node-llama-cpp's `$defs`/`prefixItems` forms; what
 * the grammar cannot express in draft-07 or 2019-09 (`dependencies`, `$recursiveRef`) is refused
 * with the node's pointer.
 */
import { toGrammarSchema, UnsupportedSchemaError } from './json-schema-grammar';

const D7 = 'http://json-schema.org/draft-07/schema#';

/** What `zodResponseFormat(z.object({root: Node, other: Node}))` sends (openai 6.49, zod 4), Node recursive. */
const ZOD_TREE = {
  $schema: D7,
  type: 'object',
  properties: { root: { $ref: '#/definitions/__schema0' }, other: { $ref: '#/definitions/__schema0' } },
  required: ['root', 'other'],
  additionalProperties: false,
  definitions: {
    __schema0: {
      type: 'object',
      properties: { v: { type: 'string' }, children: { type: 'array', items: { $ref: '#/definitions/__schema0' } } },
      required: ['v', 'children'],
      additionalProperties: false,
    },
  },
};

function refusedAt(schema: object): { pointer: string; message: string } {
  try {
    toGrammarSchema(schema);
  } catch (e) {
    expect(e).toBeInstanceOf(UnsupportedSchemaError);
    return { pointer: (e as UnsupportedSchemaError).pointer, message: (e as Error).message };
  }
  throw new Error('converted');
}

describe('toGrammarSchema on draft-07 and 2019-09 schemas', () => {
  it('reads draft-07 `definitions` as `$defs` and rewrites `#/definitions/…` references (the zod helpers’ recursive schema)', () => {
    expect(toGrammarSchema(ZOD_TREE)).toEqual({
      type: 'object',
      properties: { root: { $ref: '#/$defs/__schema0' }, other: { $ref: '#/$defs/__schema0' } },
      additionalProperties: false,
      $defs: {
        __schema0: { type: 'object', properties: { v: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/__schema0' } } }, additionalProperties: false },
      },
    });
  });

  it('keeps the zod helpers’ nullable unions and strict objects', () => {
    const person = {
      $schema: D7,
      type: 'object',
      properties: {
        name: { type: 'string' },
        age: { anyOf: [{ type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 }, { type: 'null' }] },
        nick: { type: ['string', 'null'] },
      },
      required: ['name', 'age', 'nick'],
      additionalProperties: false,
    };
    expect(toGrammarSchema(person)).toEqual({
      type: 'object',
      properties: { name: { type: 'string' }, age: { oneOf: [{ type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 }, { type: 'null' }] }, nick: { type: ['string', 'null'] } },
      additionalProperties: false,
    });
  });

  it('merges `definitions` and `$defs` on one node', () => {
    expect(toGrammarSchema({ type: 'object', properties: { a: { $ref: '#/definitions/a' }, b: { $ref: '#/$defs/b' } }, definitions: { a: { type: 'string' } }, $defs: { b: { type: 'integer' } } })).toEqual({
      type: 'object',
      properties: { a: { $ref: '#/$defs/a' }, b: { $ref: '#/$defs/b' } },
      $defs: { a: { type: 'string' }, b: { type: 'integer' } },
    });
  });

  it.each<[string, object, object]>([
    ['without additionalItems (more items of any kind)', { type: 'array', items: [{ type: 'string' }, { type: 'integer' }] }, { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }] }],
    ['with additionalItems false (no more items)', { type: 'array', items: [{ type: 'string' }], additionalItems: false, maxItems: 9 }, { type: 'array', prefixItems: [{ type: 'string' }], maxItems: 1 }],
    ['with an additionalItems schema', { items: [{ type: 'string' }], additionalItems: { type: 'boolean' } }, { type: 'array', prefixItems: [{ type: 'string' }], items: { type: 'boolean' } }],
    ['additionalItems beside one items schema (ignored, as the drafts say)', { type: 'array', items: { type: 'string' }, additionalItems: false }, { type: 'array', items: { type: 'string' } }],
  ])('turns a draft-07 / 2019-09 tuple %s into prefixItems', (_name, input, expected) => {
    expect(toGrammarSchema(input)).toEqual(expected);
  });

  it('drops 2019-09’s $recursiveAnchor (an annotation without $recursiveRef)', () => {
    expect(toGrammarSchema({ $schema: 'https://json-schema.org/draft/2019-09/schema', $recursiveAnchor: true, type: 'string' })).toEqual({ type: 'string' });
  });

  it.each<[string, object, string, RegExp]>([
    ['draft-07 dependencies', { type: 'object', properties: { a: { type: 'string' } }, dependencies: { a: ['b'] } }, '', /`dependencies` cannot be expressed/],
    ['2019-09 $recursiveRef', { $recursiveAnchor: true, type: 'object', properties: { k: { $recursiveRef: '#' } } }, '/properties/k', /`\$recursiveRef` cannot be expressed/],
    ['a $ref to the root (zod’s z.lazy at the top)', { type: 'object', properties: { k: { $ref: '#' } } }, '/properties/k', /must point at `#\/\$defs\/<name>` \(or `#\/definitions\/<name>`\)/],
    ['one name in both $defs and definitions', { type: 'string', $defs: { a: { type: 'string' } }, definitions: { a: { type: 'integer' } } }, '', /`\$defs` and `definitions` both define `a`/],
    ['a tuple item that accepts anything', { type: 'array', items: [{ type: 'string' }, {}] }, '/items/1', /any value/],
  ])('refuses %s with the pointer of the node', (_name, schema, pointer, message) => {
    const refused = refusedAt(schema);
    expect(refused.pointer).toBe(pointer);
    expect(refused.message).toMatch(message);
  });
});

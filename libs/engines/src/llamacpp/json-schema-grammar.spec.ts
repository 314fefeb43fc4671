import { llamaLogLine } from './llamacpp-engine';
import { toGrammarSchema, UnsupportedSchemaError } from './json-schema-grammar';

describe('toGrammarSchema', () => {
  it.each<[string, object, object]>([
    ['keeps a schema node-llama-cpp reads as is (dropping annotations and required)', { $schema: 'https://json-schema.org/draft/2020-12/schema', title: 'P', type: 'object', properties: { name: { type: 'string', maxLength: 20 } }, required: ['name'], additionalProperties: false }, { type: 'object', properties: { name: { type: 'string', maxLength: 20 } }, additionalProperties: false }],
    ['anyOf becomes oneOf', { anyOf: [{ type: 'string' }, { type: 'null' }] }, { oneOf: [{ type: 'string' }, { type: 'null' }] }],
    ['properties without type are an object', { properties: { a: { type: 'integer' } } }, { type: 'object', properties: { a: { type: 'integer' } } }],
    ['items without type are an array', { items: { type: 'number' } }, { type: 'array', items: { type: 'number' } }],
    ['a type list naming object becomes oneOf per type', { type: ['object', 'null'], properties: { a: { const: 1 } } }, { oneOf: [{ type: 'object', properties: { a: { const: 1 } } }, { type: 'null', properties: { a: { const: 1 } } }] }],
    ['a format the grammar lacks is dropped (validated afterwards)', { type: 'string', format: 'email' }, { type: 'string' }],
    ['a date format is kept', { type: 'string', format: 'date' }, { type: 'string', format: 'date' }],
    ['$defs and #/$defs refs are kept', { type: 'object', properties: { p: { $ref: '#/$defs/p' } }, $defs: { p: { type: 'boolean' } } }, { type: 'object', properties: { p: { $ref: '#/$defs/p' } }, $defs: { p: { type: 'boolean' } } }],
  ])('%s', (_name, input, expected) => {
    expect(toGrammarSchema(input)).toEqual(expected);
  });

  it.each<[string, object, string, RegExp]>([
    ['allOf', { type: 'object', properties: { a: { allOf: [{ type: 'string' }] } } }, '/properties/a', /allOf/],
    ['a node that accepts anything', { type: 'object', properties: { a: {} } }, '/properties/a', /any value/],
    ['a node with only constraints', { type: 'array', items: { minimum: 1 } }, '/items', /any value/],
    ['a remote $ref', { $ref: 'https://example.com/s.json' }, '', /\$ref/],
    ['not', { not: { type: 'null' } }, '', /`not`/],
    ['false', { type: 'object', properties: { 'a/b': false } }, '/properties/a~1b', /no value/],
    // llama.cpp fails on huge repetitions and prints the whole grammar (quoting the schema) to stderr.
    ['a huge minLength', { type: 'object', properties: { ssn: { type: 'string', minLength: 1_000_000 } } }, '/properties/ssn', /`minLength` 1000000 is above 1000, the largest the llama.cpp grammar accepts/],
    ['a huge maxItems', { type: 'array', items: { type: 'integer' }, maxItems: 5_000 }, '', /^at its root: `maxItems` 5000 is above 1000, the largest the llama.cpp grammar accepts/],
    ['an empty schema at the root', {}, '', /^at its root: accepts any value/],
  ])('refuses %s with the pointer of the node', (_name, input, pointer, message) => {
    let error: unknown;
    try {
      toGrammarSchema(input);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(UnsupportedSchemaError);
    expect((error as UnsupportedSchemaError).pointer).toBe(pointer);
    expect((error as Error).message).toMatch(message);
  });
});

describe('llamaLogLine', () => {
  it('keeps the first line of a llama.cpp message, and never a grammar (it quotes the request schema)', () => {
    expect(llamaLogLine('failed to load model\nmore detail')).toBe('failed to load model');
    const line = llamaLogLine('parse: error parsing grammar: number of repetitions exceeds sane defaults\n\nroot ::= "{" "\\"patient_ssn_123\\"" ...');
    expect(line).not.toContain('patient_ssn_123');
    expect(line).toContain('grammar withheld');
    expect(llamaLogLine('x'.repeat(500))).toHaveLength(201);
  });
});

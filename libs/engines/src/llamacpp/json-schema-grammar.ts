/**
 * From a request's JSON Schema (`EngineRequest.outputSchema`, draft-07, 2019-09 or 2020-12,
 * already validated by the gateway with the draft it declares) to the schema node-llama-cpp 3.21.1 turns into a GBNF grammar
 * (`llama.createGrammarForJsonSchema`, its `GbnfJsonSchema` subset). Pure: no I/O.
 *
 * node-llama-cpp reads a node by its first matching form — `$ref` (`#/$defs/…` only), `oneOf`,
 * `const`, `enum`, `type: "object"` (`properties`, `additionalProperties`, `min/maxProperties`),
 * `type: "array"` (`items`, `prefixItems`, `min/maxItems`), `type: "string"` (`min/maxLength`,
 * or `format` `date`/`time`/`date-time`), other `type`s — and reads anything else as `null`.
 * So a schema it would misread is rewritten or refused here rather than silently constraining
 * the output to something else:
 *
 * - rewritten (same set of documents, or a subset of the valid ones): `anyOf` → `oneOf` (the
 *   grammar is an alternation either way; the gateway validates the real semantics after);
 *   `properties` without `type` → `type: "object"`, `items`/`prefixItems` without `type` →
 *   `type: "array"`; a `type` list naming `object` or `array` → `oneOf` of one node per type;
 *   `$defs` on a node that node-llama-cpp would not read them from (a string or number node)
 *   are lifted to the root; draft-07's `definitions` are read as `$defs` and its
 *   `#/definitions/<name>` references as `#/$defs/<name>` (the form the openai SDK's zod helpers
 *   and the AI SDK send); the array form of `items` (draft-07 and 2019-09 tuples) becomes
 *   `prefixItems`, its `additionalItems` schema the `items` after them (`false`: no more items
 *   than the tuple's), and `additionalItems` beside a single `items` schema (which it does not
 *   constrain) is dropped; the annotations `title`, `$schema`, `$recursiveAnchor`, `$id`, `$comment`, `examples`,
 *   `default`, `deprecated`, `readOnly`, `writeOnly` are dropped; `required` is dropped (the
 *   grammar always writes every property, which satisfies any `required`).
 * - refused ({@link UnsupportedSchemaError} with the JSON Pointer of the node): keywords the
 *   grammar cannot express — `allOf`, `not`, `if`/`then`/`else`, `dependentSchemas`,
 *   `dependentRequired`, `patternProperties`, `propertyNames`, `unevaluatedProperties`,
 *   `unevaluatedItems`, `contains`, `$dynamicRef`, `$anchor`, `$recursiveRef` (2019-09) and
 *   `dependencies` (draft-07) — a `$ref` that is not `#/$defs/<name>` (or
 *   `#/definitions/<name>`), `$defs` and `definitions` on one node naming the same definition, and a node that accepts any value (`{}`, `true`, or no `type`/`const`/
 *   `enum`/`oneOf`/`anyOf`/`$ref`), which the grammar would read as `null`.
 * - refused too: a length, item or property bound above {@link MAX_GRAMMAR_REPETITION}.
 * - kept but not enforced by the grammar (the gateway's validation catches an output that
 *   breaks them, as `output_invalid`): `minimum`, `maximum`, `exclusiveMinimum`,
 *   `exclusiveMaximum`, `multipleOf`, `pattern`, `uniqueItems`, and `format` other than
 *   `date`/`time`/`date-time`.
 */

/** A schema node node-llama-cpp cannot express; `pointer` is its JSON Pointer in the request's schema. */
export class UnsupportedSchemaError extends Error {
  constructor(
    readonly pointer: string,
    reason: string,
  ) {
    super(`${pointer === '' ? 'at its root' : `at \`${pointer}\``}: ${reason}`);
    this.name = 'UnsupportedSchemaError';
  }
}

const REFUSED = [
  'allOf',
  'not',
  'if',
  'then',
  'else',
  'dependentSchemas',
  'dependentRequired',
  'patternProperties',
  'propertyNames',
  'unevaluatedProperties',
  'unevaluatedItems',
  'contains',
  '$dynamicRef',
  '$dynamicAnchor',
  '$anchor',
  '$recursiveRef',
  'dependencies',
];
const DROPPED = new Set(['title', '$schema', '$recursiveAnchor', '$id', '$comment', 'examples', 'default', 'deprecated', 'readOnly', 'writeOnly', 'required', 'contentMediaType', 'contentEncoding']);
const GRAMMAR_FORMATS = new Set(['date', 'time', 'date-time']);
/** Keywords that hold one subschema. */
const ONE = ['additionalProperties', 'items'];
/** Keywords that hold a list of subschemas. */
const MANY = ['prefixItems', 'oneOf', 'anyOf'];

type Node = Record<string, unknown>;

/**
 * The largest length, item or property count a grammar is built with. Each bound becomes a
 * repetition in the GBNF grammar; llama.cpp expands repetitions when it parses the grammar, and
 * one above its `MAX_REPETITION_THRESHOLD` (2,000 in the bundled llama.cpp) fails there —
 * printing the whole grammar (which quotes the schema's property names and enums) to the
 * process's stderr from native code — and a huge one exhausts memory. So every bound is
 * refused above 1,000 (half llama.cpp's limit, as margin) before any grammar is built.
 */
export const MAX_GRAMMAR_REPETITION = 1_000;
const BOUNDS = ['minLength', 'maxLength', 'minItems', 'maxItems', 'minProperties', 'maxProperties'];

const isObject = (v: unknown): v is Node => typeof v === 'object' && v !== null && !Array.isArray(v);

const escape = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * Rewrites `schema` for node-llama-cpp's grammar (see the module comment).
 * @throws UnsupportedSchemaError for a node the grammar cannot express.
 */
export function toGrammarSchema(schema: object): object {
  const lifted: Record<string, unknown> = {};
  const root = rewrite(schema, '', lifted, true) as Node;
  if (Object.keys(lifted).length === 0) return root;
  return { ...root, $defs: { ...lifted, ...((root.$defs as Node | undefined) ?? {}) } };
}

function rewrite(value: unknown, at: string, lifted: Record<string, unknown>, isRoot = false): unknown {
  if (value === true || (typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).every((k) => DROPPED.has(k) || k === 'description'))) {
    throw new UnsupportedSchemaError(at, 'accepts any value; the llama.cpp grammar needs a `type`, `const`, `enum`, `oneOf`/`anyOf` or `$ref` here');
  }
  if (value === false) throw new UnsupportedSchemaError(at, 'accepts no value (`false`)');
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UnsupportedSchemaError(at, 'is not a schema object');
  const node = value as Node;
  for (const k of REFUSED) {
    if (k in node) throw new UnsupportedSchemaError(at, `\`${k}\` cannot be expressed by the llama.cpp grammar`);
  }
  if (typeof node.$ref === 'string' && !/^#\/(\$defs|definitions)\/[^/]+$/.test(node.$ref)) {
    throw new UnsupportedSchemaError(at, `\`$ref\` must point at \`#/$defs/<name>\` (or \`#/definitions/<name>\`) for the llama.cpp grammar (got another form)`);
  }
  if (isObject(node.$defs) && isObject(node.definitions)) {
    const both = Object.keys(node.definitions).find((name) => Object.hasOwn(node.$defs as Node, name));
    if (both !== undefined) throw new UnsupportedSchemaError(at, `\`$defs\` and \`definitions\` both define \`${both}\`; keep one`);
  }

  for (const k of BOUNDS) {
    const bound = node[k];
    if (typeof bound === 'number' && bound > MAX_GRAMMAR_REPETITION) {
      throw new UnsupportedSchemaError(at, `\`${k}\` ${bound} is above ${MAX_GRAMMAR_REPETITION}, the largest the llama.cpp grammar accepts; lower it to ${MAX_GRAMMAR_REPETITION} or less`);
    }
  }

  const out: Node = {};
  for (const [k, v] of Object.entries(node)) {
    if (DROPPED.has(k)) continue;
    if (k === '$ref' && typeof v === 'string') {
      out.$ref = v.replace(/^#\/definitions\//, '#/$defs/');
    } else if (k === 'items' && Array.isArray(v)) {
      // A draft-07 / 2019-09 tuple: its items, then `additionalItems` (any item when absent).
      out.prefixItems = v.map((s, i) => rewrite(s, `${at}/items/${i}`, lifted));
      const more = node.additionalItems;
      if (more === false) out.maxItems = Math.min(typeof node.maxItems === 'number' ? node.maxItems : v.length, v.length);
      else if (more !== undefined && more !== true) out.items = rewrite(more, `${at}/additionalItems`, lifted);
    } else if (k === 'additionalItems' || (k === 'maxItems' && Array.isArray(node.items) && node.additionalItems === false)) {
      continue; // read with the tuple above; beside a single `items` schema it constrains nothing
    } else if (k === 'definitions' || k === '$defs') {
      const defs = Object.fromEntries(Object.entries(v as Node).map(([name, s]) => [name, rewrite(s, `${at}/${k}/${escape(name)}`, lifted)]));
      out.$defs = { ...((out.$defs as Node | undefined) ?? {}), ...defs };
    } else if (k === 'anyOf') {
      out.oneOf = (v as unknown[]).map((s, i) => rewrite(s, `${at}/anyOf/${i}`, lifted));
    } else if (MANY.includes(k)) {
      out[k] = (v as unknown[]).map((s, i) => rewrite(s, `${at}/${k}/${i}`, lifted));
    } else if (ONE.includes(k)) {
      // `additionalProperties: true|false` keep their meaning in node-llama-cpp.
      out[k] = typeof v === 'boolean' && k === 'additionalProperties' ? v : rewrite(v, `${at}/${k}`, lifted);
    } else if (k === 'properties') {
      out.properties = Object.fromEntries(Object.entries(v as Node).map(([name, s]) => [name, rewrite(s, `${at}/properties/${escape(name)}`, lifted)]));
    } else if (k === 'format' && !GRAMMAR_FORMATS.has(String(v))) {
      continue; // validated afterwards; the grammar would otherwise read the node as a bare string
    } else {
      out[k] = v;
    }
  }
  if (out.type === undefined && out.oneOf === undefined && out.$ref === undefined && !('const' in out) && out.enum === undefined) {
    if (out.properties !== undefined || out.additionalProperties !== undefined) out.type = 'object';
    else if (out.items !== undefined || out.prefixItems !== undefined) out.type = 'array';
    else throw new UnsupportedSchemaError(at, 'accepts any value; the llama.cpp grammar needs a `type`, `const`, `enum`, `oneOf`/`anyOf` or `$ref` here');
  }
  // node-llama-cpp reads `$defs` only on object, array and oneOf nodes (and the root): lift others.
  if (out.$defs !== undefined && !isRoot && out.type !== 'object' && out.type !== 'array' && out.oneOf === undefined) {
    Object.assign(lifted, out.$defs);
    delete out.$defs;
  }
  if (Array.isArray(out.type) && out.type.some((t) => t === 'object' || t === 'array')) {
    const { type, ...rest } = out;
    return { oneOf: (type as string[]).map((t) => ({ ...rest, type: t })), ...(rest.$defs !== undefined ? { $defs: rest.$defs } : {}) };
  }
  return out;
}

/**
 * The JSON Schema dialects (drafts) a structured-output schema may declare in `$schema`, and how
 * a declared URI is read (issue 16 part 3). Clients send them as their libraries emit them: the
 * `openai` SDK's zod helpers, the AI SDK and LangChain emit
 * `"$schema": "http://json-schema.org/draft-07/schema#"`; others 2019-09 or 2020-12, with or
 * without the trailing `#`, over `http` or `https`. Each schema is validated with the semantics
 * of the draft it declares (ajv's class of that draft); an absent `$schema` means 2020-12.
 */

/** A JSON Schema draft Weir validates with its own semantics. */
export type SchemaDialect = 'draft-07' | '2019-09' | '2020-12';

/** The dialect of a schema without `$schema`. */
export const DEFAULT_SCHEMA_DIALECT: SchemaDialect = '2020-12';

/** Each dialect's canonical meta-schema URI (as its specification writes it). */
export const SCHEMA_DIALECT_URIS: Readonly<Record<SchemaDialect, string>> = Object.freeze({
  'draft-07': 'http://json-schema.org/draft-07/schema#',
  '2019-09': 'https://json-schema.org/draft/2019-09/schema',
  '2020-12': 'https://json-schema.org/draft/2020-12/schema',
});

/**
 * A `$schema` URI without its scheme (`http://` or `https://`) and without a trailing `#`: the
 * form {@link SCHEMA_DIALECT_KEYS} is keyed by. Any other difference (case, a path suffix, a
 * fragment other than the empty one) is another URI.
 */
export function dialectKeyOf(uri: string): string {
  return uri.replace(/^https?:\/\//, '').replace(/#$/, '');
}

/** The dialect of each accepted `$schema` URI, keyed by {@link dialectKeyOf}. */
export const SCHEMA_DIALECT_KEYS: Readonly<Record<string, SchemaDialect>> = Object.freeze(
  Object.fromEntries(Object.entries(SCHEMA_DIALECT_URIS).map(([dialect, uri]) => [dialectKeyOf(uri), dialect as SchemaDialect])),
);

/**
 * The accepted `$schema` values, listed for an error message: each canonical URI, and that
 * `http`/`https` and a trailing `#` may differ.
 */
export const ACCEPTED_DIALECTS_TEXT = `${Object.values(SCHEMA_DIALECT_URIS)
  .map((uri) => `"${uri}"`)
  .join(', ')} (over http or https, with or without a trailing "#")`;

/**
 * The dialect `schema` declares: {@link DEFAULT_SCHEMA_DIALECT} without `$schema`, the draft its
 * `$schema` names, or undefined for a `$schema` that names none of them (not a string, draft-04,
 * draft-06, a custom meta-schema…).
 */
export function schemaDialectOf(schema: object): SchemaDialect | undefined {
  const declared = (schema as { $schema?: unknown }).$schema;
  if (declared === undefined) return DEFAULT_SCHEMA_DIALECT;
  if (typeof declared !== 'string') return undefined;
  return Object.hasOwn(SCHEMA_DIALECT_KEYS, dialectKeyOf(declared)) ? SCHEMA_DIALECT_KEYS[dialectKeyOf(declared)] : undefined;
}

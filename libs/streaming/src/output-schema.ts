/**
 * `output_schema` on `POST /v1/responses`: the JSON Schema a request's output must match,
 * checked with ajv when the request arrives — with the draft its `$schema` declares (draft-07,
 * 2019-09 or 2020-12, the default; see `schema-dialects.ts`) — and every final output validated
 * against it. A tenant's schema is compiled and checked on the schema worker
 * (`schema-worker.ts`, issue 14), never on the thread that serves requests. An output that is not JSON, or does not match, is never passed on as a success:
 * it ends as `output_invalid` with the failing paths summarised (never the output text).
 */
import { type GenerationOutcome, WeirError } from '@weir/core';
import { ACCEPTED_DIALECTS_TEXT, DEFAULT_SCHEMA_DIALECT, SCHEMA_DIALECT_URIS, schemaDialectOf } from './schema-dialects';
import { localSchemaEngine, type SchemaCheckResult, type SchemaWorker, schemaWorker } from './schema-worker';

/** Largest accepted `output_schema`, as compact JSON (bytes). */
export const MAX_OUTPUT_SCHEMA_BYTES = 64 * 1024;

/** Deepest nesting of objects and arrays accepted in an output schema (a deeper one is refused before ajv, whose recursion it would overflow). */
export const MAX_OUTPUT_SCHEMA_DEPTH = 64;

/** Nesting depth of a JSON value (objects and arrays), stopping once past `limit`. */
function depthOf(value: unknown, limit: number, depth = 0): number {
  if (value === null || typeof value !== 'object') return depth;
  if (depth > limit) return depth;
  let deepest = depth + 1;
  for (const child of Array.isArray(value) ? value : Object.values(value as Record<string, unknown>)) {
    deepest = Math.max(deepest, depthOf(child, limit, depth + 1));
    if (deepest > limit) break;
  }
  return deepest;
}

/** The dialect of a schema without `$schema` (draft 2020-12); draft-07 and 2019-09 are accepted too (`SCHEMA_DIALECT_URIS`). */
export const OUTPUT_SCHEMA_DIALECT = SCHEMA_DIALECT_URIS[DEFAULT_SCHEMA_DIALECT];

/** Compiled schemas kept (by their JSON text), most recently used last. */
const CACHE_SIZE = 256;

/** Schemas (by their JSON text) the worker compiled: a repeat skips the round trip. Most recently used last. */
const known = new Map<string, true>();

/** The outcome of checking one output against its schema. */
export type OutputCheck = SchemaCheckResult;

/** A request's validated `output_schema`, checked on the calling thread (operators' schemas). */
export interface OutputSchema {
  /** The schema as the client sent it (passed on to the engine as `EngineRequest.outputSchema`). */
  readonly schema: object;
  /**
   * Parses `text` as JSON and validates it. Failure messages name the JSON Pointer paths of
   * the first 5 failures (`MAX_LISTED_ERRORS`) and what each must satisfy; they never quote
   * the output.
   */
  check(text: string): OutputCheck;
}

/** A tenant's validated `output_schema`, checked on the schema worker (see `schema-worker.ts`). */
export interface LoadedOutputSchema {
  /** The schema as the client sent it (passed on to the engine as `EngineRequest.outputSchema`). */
  readonly schema: object;
  /** As {@link OutputSchema.check}, on the worker; a check over its time limit fails saying so. Never rejects. */
  check(text: string): Promise<OutputCheck>;
}

/**
 * The checks that cost little and need no compiler: a JSON object, at most
 * {@link MAX_OUTPUT_SCHEMA_DEPTH} deep and {@link MAX_OUTPUT_SCHEMA_BYTES} long, of a
 * supported dialect. Returns the schema's compact JSON text (the key of every cache).
 */
function screen(schema: unknown, bad: (why: string) => WeirError): string {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) throw bad('it must be a JSON Schema object, e.g. {"type": "object", "properties": {…}}.');
  // Depth first: serialising a schema nested thousands deep would overflow the stack (a 500).
  if (depthOf(schema, MAX_OUTPUT_SCHEMA_DEPTH) > MAX_OUTPUT_SCHEMA_DEPTH) throw bad(`it nests more than ${MAX_OUTPUT_SCHEMA_DEPTH} levels of objects and arrays; flatten it.`);
  const key = JSON.stringify(schema);
  const bytes = Buffer.byteLength(key);
  if (bytes > MAX_OUTPUT_SCHEMA_BYTES) throw bad(`it is ${bytes} bytes; at most ${MAX_OUTPUT_SCHEMA_BYTES} are accepted.`);
  if (schemaDialectOf(schema) === undefined) {
    const declared = (schema as { $schema?: unknown }).$schema;
    const shown = typeof declared === 'string' ? JSON.stringify(declared.length > 100 ? `${declared.slice(0, 100)}…` : declared) : `a ${declared === null ? 'null' : typeof declared}`;
    throw bad(`its \`$schema\` (${shown}) names no supported draft; use one of ${ACCEPTED_DIALECTS_TEXT}, or remove \`$schema\` (2020-12).`);
  }
  return key;
}

const refusal = (paramName: string) => (why: string) => new WeirError('invalid_request', `\`${paramName}\` is not a usable JSON Schema: ${why}`, { param: paramName });

/** `Retry-After` (ms) of a compilation refused because its tenant has too many waiting. */
export const SCHEMA_BUSY_RETRY_AFTER_MS = 1_000;

/** Options of {@link loadOutputSchema}. */
export interface LoadOutputSchemaOptions {
  /** The caller's internal tenant id (`tenantKeyOf(caller)`): the worker's queue the compilation and checks wait in. Default `''` (one shared queue). */
  tenant?: string;
  /** Default: the process's {@link schemaWorker}. */
  worker?: SchemaWorker;
  /** Whether the tenant's cap on waiting jobs applies (default true; the relay, compiling for an admitted generation, passes false). */
  capped?: boolean;
}

/**
 * The cheap checks of a tenant's schema (no compiler, on the calling thread, linear in its
 * size): a JSON object, at most {@link MAX_OUTPUT_SCHEMA_DEPTH} deep and
 * {@link MAX_OUTPUT_SCHEMA_BYTES} long, of a supported dialect (draft-07, 2019-09 or 2020-12). Run it before anything that walks
 * the schema (the llama.cpp grammar check) and before {@link loadOutputSchema}.
 * @throws WeirError `invalid_request` (`param`: `paramName`) saying what to fix.
 */
export function screenOutputSchema(schema: unknown, paramName = 'output_schema'): object {
  screen(schema, refusal(paramName));
  return schema as object;
}

/**
 * Validates a tenant's `output_schema` and compiles it on the schema worker, so that no schema
 * holds the event loop (compiled schemas are cached by their JSON text, {@link CACHE_SIZE} of
 * them; each compiles in its own ajv instance of its draft's class, so a `$id` in one schema never clashes with
 * another's). `pattern` and `patternProperties` run on RE2 (linear time). The compilation and
 * the output checks wait in the tenant's own queue on the worker (`options.tenant`). Callers
 * run the capability checks of the route (what its engine can constrain) before this, so a
 * schema that would be refused anyway costs no compilation.
 * @throws WeirError `invalid_request` (`param`: `paramName`) when it is not a JSON object, is
 *   larger than {@link MAX_OUTPUT_SCHEMA_BYTES} or deeper than {@link MAX_OUTPUT_SCHEMA_DEPTH},
 *   names a `$schema` other than draft-07, 2019-09 or 2020-12 (an absent one means 2020-12),
 *   fails its draft's meta-schema, cannot be compiled (an
 *   unknown keyword, an unresolvable `$ref`, a pattern RE2 cannot run: lookaround,
 *   backreferences, over `MAX_PATTERN_PROGRAM` instructions), or takes longer than the worker's
 *   compile limit (2 s); the message carries the reason.
 * @throws WeirError `rate_limited` (429, `Retry-After` {@link SCHEMA_BUSY_RETRY_AFTER_MS}) when
 *   the tenant already has `DEFAULT_MAX_QUEUED_PER_TENANT` schema jobs waiting or running.
 */
export async function loadOutputSchema(schema: unknown, paramName = 'output_schema', options: LoadOutputSchemaOptions = {}): Promise<LoadedOutputSchema> {
  const bad = refusal(paramName);
  const key = screen(schema, bad);
  const worker = options.worker ?? schemaWorker();
  const tenant = options.tenant ?? '';
  if (known.has(key)) known.delete(key);
  else {
    const compiled = await worker.compile(key, paramName, tenant, options.capped === false ? { capped: false } : undefined);
    if (!compiled.ok) {
      if (compiled.busy) {
        throw new WeirError('rate_limited', 'Too many schemas being compiled for this tenant; retry shortly.', { retryable: true, retryAfterMs: SCHEMA_BUSY_RETRY_AFTER_MS, param: paramName });
      }
      throw bad(`${compiled.message}.`);
    }
  }
  known.set(key, true);
  if (known.size > CACHE_SIZE) known.delete(known.keys().next().value as string);
  return { schema: schema as object, check: (text) => worker.check(key, text, tenant) };
}

/**
 * As {@link loadOutputSchema}, on the calling thread (RE2 patterns included): for schemas an
 * operator writes (the control plane's evaluation scorers), never for a tenant's request.
 * @throws WeirError `invalid_request`, as {@link loadOutputSchema} (no time limit).
 */
export function compileOutputSchema(schema: unknown, paramName = 'output_schema'): OutputSchema {
  const bad = refusal(paramName);
  const key = screen(schema, bad);
  const engine = localSchemaEngine();
  const compiled = engine.run({ id: 0, op: 'compile', key, paramName });
  if (!compiled.ok) throw bad(`${compiled.message}.`);
  return { schema: schema as object, check: (text) => engine.run({ id: 0, op: 'check', key, text }) as OutputCheck };
}

/**
 * What ended a generation before its document could be complete, said in an `output_invalid`
 * message so the caller knows what to change.
 */
const CUT_SHORT: Partial<Record<GenerationOutcome['finishReason'], (o: GenerationOutcome) => string>> = {
  length: (o) => `the output reached its limit (${o.usage.outputTokens} tokens) before the document was complete; raise the output limit. `,
  deadline: () => 'the deadline cut the output before the document was complete. ',
  cancelled: () => 'the generation was cancelled before the document was complete. ',
  content_filter: () => 'moderation cut the output. ',
};

/**
 * Judges a finished generation's output against its schema: an output that is not JSON
 * matching the schema turns a non-error end into `finishReason: 'error'` with error code
 * `output_invalid` (usage and cost stay those measured: the tokens were produced and are
 * billed). Without a schema, after an error, or for a tool-call answer (the format governs text
 * content only, as in OpenAI's API), the outcome is returned unchanged. A {@link LoadedOutputSchema}
 * is checked on the schema worker, so a slow check never holds the event loop. The
 * streaming relay calls it once per generation, before the usage record and the end event, so
 * the ledger, repeats and `/v1/generations/{id}/events` replays all carry the same verdict.
 * @returns the (possibly changed) outcome, and the parsed document when it matched.
 */
export async function judgeOutput(
  outcome: GenerationOutcome,
  text: string,
  schema: Pick<OutputSchema, 'check'> | LoadedOutputSchema | undefined,
): Promise<{ outcome: GenerationOutcome; value?: unknown }> {
  // A tool-call answer has no document to check: like OpenAI, the format applies to text content.
  if (!schema || outcome.finishReason === 'error' || outcome.finishReason === 'tool_calls') return { outcome };
  const checked = await schema.check(text);
  if (checked.ok) return { outcome, value: checked.value };
  return {
    outcome: {
      ...outcome,
      finishReason: 'error',
      error: { code: 'output_invalid', message: `The model's output is not valid against the schema: ${CUT_SHORT[outcome.finishReason]?.(outcome) ?? ''}${checked.message}.` },
    },
  };
}

/**
 * `output_schema` on `POST /v1/responses`: the JSON Schema a request's output must match,
 * checked with ajv (draft 2020-12) when the request arrives, and every final output validated
 * against it. An output that is not JSON, or does not match, is never passed on as a success:
 * it ends as `output_invalid` with the failing paths summarised (never the output text).
 */
import Ajv2020, { type ErrorObject, type Options, type ValidateFunction } from 'ajv/dist/2020';
import { RE2JS } from 're2js';
import { type GenerationOutcome, WeirError } from '@weir/core';

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

/** The one dialect accepted in `$schema` (an absent `$schema` means this one). */
export const OUTPUT_SCHEMA_DIALECT = 'https://json-schema.org/draft/2020-12/schema';

/** Compiled schemas kept (by their JSON text), most recently used last. */
const CACHE_SIZE = 256;

/** Validation errors listed in an `output_invalid` message. */
const MAX_LISTED_ERRORS = 5;

/**
 * Largest compiled program of one `pattern` or `patternProperties` key (RE2 instructions). RE2
 * matches in time linear in the text, times (at worst) the program's size: `^[A-Z]{2}-\d{4}$` is
 * 11 instructions, an e-mail pattern about 320; `(a|b)*a(a|b){1000}` (3,008) is refused.
 */
export const MAX_PATTERN_PROGRAM = 1_000;

/**
 * Time (ms) one output's check may spend in pattern matching before it stops: the output then
 * ends as `output_invalid` saying so (never passed as matching). Each match is linear-time, so
 * the main thread is held at most this long plus one match (see docs/performance.md, issue 14).
 */
export const PATTERN_BUDGET_MS = 25;

/** Thrown by a pattern's `test` once the check it belongs to has spent {@link PATTERN_BUDGET_MS}. */
class PatternBudgetExceeded extends Error {}

/** The pattern-matching time spent by the check running now (checks are synchronous, so one at a time). */
const budget = { startedAt: 0, spentMs: 0, now: () => performance.now() };

/**
 * JSON Schema's ECMA-262 patterns on RE2 (re2js, pure JavaScript): matching takes time linear in
 * the text, so no pattern a client sends (`^(a+)+$`, `(a|a)*b`) can backtrack exponentially on
 * the gateway's main thread. Syntax RE2 cannot run in linear time (lookaround, backreferences)
 * fails to compile, which `compileOutputSchema` reports as a 400 naming the pattern.
 */
function re2RegExp(pattern: string, flags: string): { test(text: string): boolean; toString(): string } {
  // ajv asks for `u` only; RE2 always matches Unicode code points.
  if (flags !== '' && flags !== 'u') throw new Error(`the pattern flags '${flags}' are not supported`);
  let re: RE2JS;
  try {
    re = RE2JS.compile(RE2JS.translateRegExp(pattern));
  } catch (err) {
    throw new Error(`the pattern ${JSON.stringify(pattern)} is not supported: ${err instanceof Error ? err.message : String(err)} (Weir matches patterns with RE2, which has no lookaround or backreferences)`);
  }
  const size = re.programSize();
  if (size > MAX_PATTERN_PROGRAM) {
    throw new Error(`the pattern ${JSON.stringify(pattern.length > 80 ? `${pattern.slice(0, 80)}…` : pattern)} is too complex (${size} RE2 instructions, at most ${MAX_PATTERN_PROGRAM}); use smaller repetition counts`);
  }
  return {
    // ajv shares compiled patterns by this key: it must differ per pattern.
    toString: () => `/${pattern}/${flags}`,
    test(text: string): boolean {
      if (budget.spentMs > PATTERN_BUDGET_MS) throw new PatternBudgetExceeded();
      const started = budget.now();
      try {
        return re.test(text);
      } finally {
        budget.spentMs += budget.now() - started;
      }
    },
  };
}
re2RegExp.code = 're2js';

/**
 * ajv's options: unknown keywords are errors (a typo such as `requried` would otherwise be
 * ignored and constrain nothing); `format` is an annotation, as draft 2020-12 specifies by
 * default (not validated, so no format's own regular expression ever runs on an output); every
 * error is collected so the message can list the paths; `pattern` and `patternProperties` run
 * on RE2 ({@link re2RegExp}).
 */
const AJV_OPTIONS: Options = {
  strict: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  allErrors: true,
  validateFormats: false,
  logger: false,
  code: { regExp: re2RegExp },
};

/** Checks schemas against the 2020-12 meta-schema; registers nothing, so it is shared. */
let metaValidator: Ajv2020 | undefined;
const compiled = new Map<string, ValidateFunction>();

/** The outcome of checking one output against its schema. */
export type OutputCheck = { ok: true; value: unknown } | { ok: false; message: string };

/** A request's validated `output_schema`. */
export interface OutputSchema {
  /** The schema as the client sent it (passed on to the engine as `EngineRequest.outputSchema`). */
  readonly schema: object;
  /**
   * Parses `text` as JSON and validates it. Failure messages name the JSON Pointer paths of
   * the first {@link MAX_LISTED_ERRORS} failures and what each must satisfy; they never quote
   * the output.
   */
  check(text: string): OutputCheck;
}

/**
 * Validates a request's `output_schema` and compiles it (compiled schemas are cached by their
 * JSON text, {@link CACHE_SIZE} of them; each compiles in its own ajv instance, so a `$id` in
 * one schema never clashes with another's).
 * @throws WeirError `invalid_request` (`param`: `paramName`) when it is not a JSON object, is
 *   larger than {@link MAX_OUTPUT_SCHEMA_BYTES}, names another `$schema` dialect, fails the
 *   2020-12 meta-schema, or cannot be compiled (an unknown keyword, an unresolvable `$ref`, a
 *   bad `pattern`); the message carries ajv's reason.
 */
export function compileOutputSchema(schema: unknown, paramName = 'output_schema'): OutputSchema {
  const bad = (why: string) => new WeirError('invalid_request', `\`${paramName}\` is not a usable JSON Schema: ${why}`, { param: paramName });
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) throw bad('it must be a JSON Schema object, e.g. {"type": "object", "properties": {…}}.');
  // Depth first: serialising a schema nested thousands deep would overflow the stack (a 500).
  if (depthOf(schema, MAX_OUTPUT_SCHEMA_DEPTH) > MAX_OUTPUT_SCHEMA_DEPTH) throw bad(`it nests more than ${MAX_OUTPUT_SCHEMA_DEPTH} levels of objects and arrays; flatten it.`);
  const key = JSON.stringify(schema);
  const bytes = Buffer.byteLength(key);
  if (bytes > MAX_OUTPUT_SCHEMA_BYTES) throw bad(`it is ${bytes} bytes; at most ${MAX_OUTPUT_SCHEMA_BYTES} are accepted.`);
  const dialect = (schema as { $schema?: unknown }).$schema;
  if (dialect !== undefined && String(dialect).replace(/#$/, '') !== OUTPUT_SCHEMA_DIALECT) {
    throw bad(`only draft 2020-12 is supported; remove \`$schema\` or set it to "${OUTPUT_SCHEMA_DIALECT}".`);
  }
  let validate = compiled.get(key);
  if (validate) compiled.delete(key);
  else {
    metaValidator ??= new Ajv2020(AJV_OPTIONS);
    let valid: boolean;
    try {
      // The meta-schema's own patterns (`$anchor`, …) run on RE2 too, with a fresh budget.
      budget.spentMs = 0;
      valid = metaValidator.validateSchema(schema) as boolean;
    } catch (err) {
      // A pathological schema (recursion) must be a 400, never a 500.
      throw bad(`it could not be checked (${err instanceof Error ? err.message : String(err)}).`);
    }
    if (!valid) throw bad(`${metaValidator.errorsText(metaValidator.errors, { dataVar: paramName })}.`);
    try {
      validate = new Ajv2020({ ...AJV_OPTIONS, validateSchema: false }).compile(schema);
    } catch (err) {
      throw bad(`${err instanceof Error ? err.message : String(err)}.`);
    }
  }
  compiled.set(key, validate);
  if (compiled.size > CACHE_SIZE) compiled.delete(compiled.keys().next().value as string);
  const check = validate;
  return {
    schema,
    check(text) {
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        // JSON.parse's message quotes the text: say only where it broke down.
        return { ok: false, message: text.trim() === '' ? 'the output is empty, not a JSON document' : `the output (${Buffer.byteLength(text)} bytes) is not a complete JSON document` };
      }
      budget.spentMs = 0;
      let valid: boolean;
      try {
        valid = check(value) as boolean;
      } catch (err) {
        if (!(err instanceof PatternBudgetExceeded)) throw err;
        return { ok: false, message: `the output could not be checked against its schema's patterns within ${PATTERN_BUDGET_MS} ms (RE2 matching); simplify the patterns or bound the strings with \`maxLength\`` };
      }
      if (valid) return { ok: true, value };
      return { ok: false, message: `the output does not match \`output_schema\`: ${summarize(check.errors ?? [])}` };
    },
  };
}

/** `/path` must …; …: the JSON Pointer of each failure and ajv's requirement, never the value. */
function summarize(errors: ErrorObject[]): string {
  const listed = errors.slice(0, MAX_LISTED_ERRORS).map((e) => `\`${e.instancePath || '/'}\` ${e.message ?? `fails \`${e.keyword}\``}`);
  const more = errors.length > MAX_LISTED_ERRORS ? ` (and ${errors.length - MAX_LISTED_ERRORS} more)` : '';
  return `${listed.join('; ')}${more}`;
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
 * content only, as in OpenAI's API), the outcome is returned unchanged. The
 * streaming relay calls it once per generation, before the usage record and the end event, so
 * the ledger, repeats and `/v1/generations/{id}/events` replays all carry the same verdict.
 * @returns the (possibly changed) outcome, and the parsed document when it matched.
 */
export function judgeOutput(outcome: GenerationOutcome, text: string, schema: OutputSchema | undefined): { outcome: GenerationOutcome; value?: unknown } {
  // A tool-call answer has no document to check: like OpenAI, the format applies to text content.
  if (!schema || outcome.finishReason === 'error' || outcome.finishReason === 'tool_calls') return { outcome };
  const checked = schema.check(text);
  if (checked.ok) return { outcome, value: checked.value };
  return {
    outcome: {
      ...outcome,
      finishReason: 'error',
      error: { code: 'output_invalid', message: `The model's output is not valid against the schema: ${CUT_SHORT[outcome.finishReason]?.(outcome) ?? ''}${checked.message}.` },
    },
  };
}

/**
 * The one error serializer every Weir logger uses (issue 14, part 10): an error becomes
 * metadata only — its class, code, a scrubbed message, stack frames without the message, and an
 * allowlist of fields that name things rather than quote them (SQLSTATE, constraint, table,
 * HTTP status, syscall). Everything else an error may carry is dropped: a database driver's
 * `detail`, `where`, `hint`, `query`, `params`/`parameters` and `internalQuery` (PGlite attaches
 * the query's parameters to the error), an HTTP client's response `body` and `headers`, a
 * validator's `errors`/`issues` with the data they quote, and any other own property.
 *
 * Messages are not trusted either, because libraries quote their input in them:
 * - PostgreSQL / PGlite errors (a 5-character SQLSTATE in `code` plus a `severity`) get a fixed
 *   text per SQLSTATE ({@link SQLSTATE_TEXT}), never the server's message (`invalid input
 *   syntax for type integer: "<the value>"`).
 * - zod (`ZodError`) and ajv (`ValidationError`) errors get `validation failed` and their
 *   issue codes / keywords; the message, paths and params (which can hold data) are dropped.
 * - Every other message has its quoted spans (`"…"`, `'…'`, `` `…` ``, `“…”`) replaced by
 *   `"…"` (V8's `JSON.parse` errors quote the text they choke on; drivers quote values), is cut
 *   at {@link MAX_MESSAGE_CHARS}, and keeps its first line only.
 *
 * Weir's own errors put upstream bodies and frames in properties (never in messages), so the
 * allowlist drops them; see `@weir/engines` `upstream-errors.ts`.
 *
 * What is left of a message then goes through PII redaction (`@weir/redaction`, the built-in
 * `default` profile: e-mail addresses, phone and card numbers, IBANs, SSNs, IP addresses, keys
 * and high-entropy tokens become `[REDACTED:<TYPE>]`), since an unquoted value can still sit in
 * a message (`connect ECONNREFUSED 10.0.0.7:5432`, `no user jane@example.com`). A redaction that
 * fails withholds the message (fail closed).
 */
import { compileProfiles, createRedactor, type Redactor } from '@weir/redaction';

/** The redactor of error messages: the built-in `default` profile, over at most a message's length. */
const messageRedactor: Redactor | undefined = (() => {
  const compiled = compileProfiles();
  const profile = compiled.ok ? compiled.profiles.get('default') : undefined;
  return profile ? createRedactor(profile, { maxChars: 1024, budgetMs: 250 }) : undefined;
})();

/** The text a message is replaced with when its redaction fails. */
export const WITHHELD_MESSAGE = 'message withheld (redaction failed)';

/** The shape an error is logged as (under `err`, or any field holding an `Error`). */
export interface SerializedError {
  /** The error's class (`DatabaseError`, `WeirError`, `TypeError`, …) or its `name`. */
  type: string;
  /** The scrubbed message (see the module comment). */
  message: string;
  /** A string code when the error has one: SQLSTATE, `ECONNREFUSED`, `UND_ERR_SOCKET`, a Weir code. */
  code?: string;
  /** Stack frames only (`    at …` lines, at most {@link MAX_FRAMES}), joined by `\n`; never the message. */
  stack?: string;
  /** The cause chain, serialized the same way (at most {@link MAX_CAUSE_DEPTH} deep). */
  cause?: SerializedError;
  /** An `AggregateError`'s first errors (at most 5), serialized the same way. */
  errors?: SerializedError[];
  /** Allowlisted metadata fields ({@link KEPT_FIELDS}). */
  [field: string]: unknown;
}

/** Longest message kept (characters). */
export const MAX_MESSAGE_CHARS = 300;
/** Most stack frames kept. */
export const MAX_FRAMES = 12;
/** Deepest cause chain followed. */
export const MAX_CAUSE_DEPTH = 3;

/**
 * Fields copied from an error when they hold a short identifier-like string, a finite number or
 * a boolean: names of things (constraint, table, column, schema, data type, routine, syscall),
 * HTTP status, Weir's flags. Anything not listed is dropped.
 */
export const KEPT_FIELDS: readonly string[] = [
  // PostgreSQL: which object, never which value.
  'severity',
  'constraint',
  'table',
  'column',
  'schema',
  'dataType',
  'routine',
  // Node / undici / HTTP.
  'errno',
  'syscall',
  'status',
  'statusCode',
  // Weir's errors.
  'retryable',
  'param',
  'retryAfterMs',
];

/**
 * Fixed texts for the SQLSTATEs Weir meets (PostgreSQL Appendix A); other codes get their
 * class's text, then `database error`. The server's own message is never logged: it quotes
 * values (`invalid input syntax for type integer: "…"`, `Key (k)=(…) already exists`).
 */
export const SQLSTATE_TEXT: Readonly<Record<string, string>> = {
  '23505': 'unique constraint violated',
  '23503': 'foreign key constraint violated',
  '23502': 'not-null constraint violated',
  '23514': 'check constraint violated',
  '23P01': 'exclusion constraint violated',
  '22P02': 'invalid text representation',
  '22001': 'value too long for its column',
  '22003': 'numeric value out of range',
  '22007': 'invalid datetime format',
  '22008': 'datetime field overflow',
  '22012': 'division by zero',
  '22021': 'invalid byte sequence for the encoding',
  '22P05': 'untranslatable character',
  '25P02': 'current transaction is aborted',
  '40001': 'serialization failure',
  '40P01': 'deadlock detected',
  '42601': 'syntax error',
  '42501': 'insufficient privilege',
  '42703': 'undefined column',
  '42P01': 'undefined table',
  '42883': 'undefined function',
  '53300': 'too many connections',
  '55P03': 'lock not available',
  '57014': 'query cancelled (statement timeout or cancel request)',
  '57P01': 'server shutting down (admin shutdown)',
  '3D000': 'database does not exist',
  '28P01': 'password authentication failed',
  '28000': 'invalid authorization specification',
};

const SQLSTATE_CLASS_TEXT: Readonly<Record<string, string>> = {
  '08': 'connection exception',
  '22': 'data exception',
  '23': 'integrity constraint violation',
  '25': 'invalid transaction state',
  '28': 'invalid authorization',
  '40': 'transaction rollback',
  '42': 'syntax error or access rule violation',
  '53': 'insufficient resources',
  '54': 'program limit exceeded',
  '55': 'object not in prerequisite state',
  '57': 'operator intervention',
  '58': 'system error',
  XX: 'internal error',
};

const SQLSTATE = /^[0-9A-Z]{5}$/;
/** Codes and names worth keeping: identifier-like, short. */
const IDENTIFIER = /^[A-Za-z0-9_.:$-]{1,64}$/;
/** A single quote at a word edge (so the apostrophe in "can't" is not a quote). */
const EDGE_SINGLE = /(?<![\p{L}\p{N}])'|'(?![\p{L}\p{N}])/gu;
/** Quoted spans, once every kind of quote occurs an even number of times. Not across lines. */
const QUOTED = /"[^"\n]*"|`[^`\n]*`|(?<![\p{L}\p{N}])'[^\n]*?'(?![\p{L}\p{N}])/gu;
const PLACEHOLDER = '"…"';
const FRAME = /^ {4}at .{1,300}$/;

/**
 * A message with its quoted spans replaced by `"…"`, its first line only, at most
 * {@link MAX_MESSAGE_CHARS} characters. When a kind of quote occurs an odd number of times the
 * spans cannot be paired safely (a quoted value may itself hold a quote), so the message is cut
 * at that kind's first quote. V8's JSON syntax errors (which quote the text they choke on) get a
 * fixed text.
 */
export function scrubErrorMessage(message: string): string {
  let line = (message.split('\n', 1)[0] ?? '').replace(/[“”«»]/g, '"');
  if (/\bJSON\b/.test(line) && /Unexpected|is not valid JSON|in JSON at position/.test(line)) return 'invalid JSON';
  for (let pass = 0; pass < 3; pass += 1) {
    const firstOdd = [oddFirst(line, /"/g), oddFirst(line, /`/g), oddFirst(line, EDGE_SINGLE)].filter((i) => i >= 0);
    if (firstOdd.length === 0) break;
    line = line.slice(0, Math.min(...firstOdd)) + PLACEHOLDER;
  }
  let out = line.replace(QUOTED, PLACEHOLDER);
  if (out.length > MAX_MESSAGE_CHARS) out = `${out.slice(0, MAX_MESSAGE_CHARS)}…`;
  const redacted = messageRedactor?.redact(out);
  return redacted?.ok ? redacted.text : WITHHELD_MESSAGE;
}

/** The index of the first match of `re` when it matches an odd number of times, else -1. */
function oddFirst(text: string, re: RegExp): number {
  let count = 0;
  let first = -1;
  for (const m of text.matchAll(re)) {
    if (count === 0) first = m.index ?? 0;
    count += 1;
  }
  return count % 2 === 1 ? first : -1;
}

/** True for a PostgreSQL (pg, PGlite) error: a SQLSTATE `code` and a `severity`. */
function isDatabaseError(e: Record<string, unknown>): boolean {
  return typeof e.code === 'string' && SQLSTATE.test(e.code) && typeof e.severity === 'string';
}

function sqlStateText(code: string): string {
  return SQLSTATE_TEXT[code] ?? SQLSTATE_CLASS_TEXT[code.slice(0, 2)] ?? 'database error';
}

/** The keywords / codes of a validator's error list (ajv `errors[].keyword`, zod `issues[].code`), deduplicated. */
function validationCodes(list: unknown, field: 'keyword' | 'code'): string[] {
  if (!Array.isArray(list)) return [];
  const codes = new Set<string>();
  for (const item of list.slice(0, 20)) {
    const v = (item as Record<string, unknown> | null)?.[field];
    if (typeof v === 'string' && IDENTIFIER.test(v)) codes.add(v);
  }
  return [...codes];
}

function typeOf(err: Error): string {
  const ctor = (Object.getPrototypeOf(err) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  // Minified classes (PGlite's `O`) say nothing: prefer a meaningful `name`.
  const name = typeof err.name === 'string' && IDENTIFIER.test(err.name) ? err.name : undefined;
  if (typeof ctor === 'string' && ctor.length > 2 && IDENTIFIER.test(ctor)) return ctor;
  return name ?? 'Error';
}

/** Stack frames only: the header (`Name: message`, however many lines) is cut off by its exact text. */
function framesOf(err: Error, type: string): string | undefined {
  const stack = typeof err.stack === 'string' ? err.stack : undefined;
  if (!stack) return undefined;
  const message = typeof err.message === 'string' ? err.message : '';
  const names = new Set([String(err.name), type, 'Error']);
  let rest: string | undefined;
  for (const n of names) {
    const header = message ? `${n}: ${message}` : n;
    if (stack.startsWith(header)) {
      rest = stack.slice(header.length);
      break;
    }
  }
  // A stack whose header is not the current message (the message changed after capture)
  // cannot be told apart from its frames safely: drop it.
  if (rest === undefined) return undefined;
  const frames = rest
    .split('\n')
    .filter((line) => FRAME.test(line))
    .slice(0, MAX_FRAMES);
  return frames.length > 0 ? frames.join('\n') : undefined;
}

/**
 * Serializes an error as metadata only (see the module comment). Non-errors are described by
 * their type (`{type: 'string', message: 'non-error thrown'}`): a thrown string may be anything.
 * Never throws.
 */
export function serializeError(value: unknown, depth = 0): SerializedError {
  try {
    return serializeUnchecked(value, depth);
  } catch {
    return { type: 'Error', message: 'unserializable error' };
  }
}

function serializeUnchecked(value: unknown, depth: number): SerializedError {
  if (!(value instanceof Error)) {
    if (value !== null && typeof value === 'object' && typeof (value as { message?: unknown }).message === 'string') {
      // An error-like object (a rejected plain object): same rules, no stack.
      const e = value as Record<string, unknown>;
      const out: SerializedError = { type: 'object', message: scrubErrorMessage(String(e.message)) };
      if (typeof e.code === 'string' && IDENTIFIER.test(e.code)) out.code = e.code;
      return out;
    }
    return { type: value === null ? 'null' : typeof value, message: 'non-error thrown' };
  }
  const e = value as unknown as Record<string, unknown>;
  const type = typeOf(value);
  const out: SerializedError = { type, message: '' };
  const code = typeof e.code === 'string' && IDENTIFIER.test(e.code) ? e.code : undefined;
  if (isDatabaseError(e)) {
    out.message = sqlStateText(e.code as string);
  } else if (value.name === 'ZodError' || Array.isArray(e.issues)) {
    const codes = validationCodes(e.issues, 'code');
    out.message = `validation failed${codes.length > 0 ? `: ${codes.join(', ')}` : ''}`;
  } else if (Array.isArray(e.errors) && (e.ajv === true || e.validation === true)) {
    const keywords = validationCodes(e.errors, 'keyword');
    out.message = `validation failed${keywords.length > 0 ? `: ${keywords.join(', ')}` : ''}`;
  } else {
    out.message = scrubErrorMessage(typeof value.message === 'string' ? value.message : '');
  }
  if (code !== undefined) out.code = code;
  for (const field of KEPT_FIELDS) {
    const v = e[field];
    if (typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v)) || (typeof v === 'string' && IDENTIFIER.test(v))) out[field] = v;
  }
  const stack = framesOf(value, type);
  if (stack) out.stack = stack;
  if (depth < MAX_CAUSE_DEPTH && value.cause !== undefined) out.cause = serializeError(value.cause, depth + 1);
  if (depth < MAX_CAUSE_DEPTH && value instanceof AggregateError && Array.isArray(value.errors)) {
    out.errors = value.errors.slice(0, 5).map((inner) => serializeError(inner, depth + 1));
  }
  return out;
}

import { isSpanContextValid, trace } from '@opentelemetry/api';
import { pino, type DestinationStream, type Level, type Logger } from 'pino';
import { serializeError, type SerializedError } from './error-serializer';

/**
 * Weir's structured logger (pino, JSON lines).
 *
 * The rule: callers never pass prompt or output text, request bodies, headers or secrets to
 * a logger; they log metadata only (tenant, app, revision, token counts, cost, latency,
 * status, generation id, trace id), per ARCHITECTURE.md §5. Redaction is a defence in depth
 * for mistakes, not a licence: the value of any field named in {@link REDACTED_KEYS} is
 * replaced with `[redacted]`, at the top level (pino `redact`, {@link REDACT_PATHS}) and at any
 * depth in plain objects and arrays ({@link redactDeep}), in log calls and in child bindings. It cannot see text inside a message string.
 *
 * Errors are logged as metadata only, wherever they appear in a log call (`err`, `error`,
 * `cause`, nested, `logger.error(err)`, child bindings): {@link serializeError} keeps the class,
 * code, a scrubbed message, stack frames and an allowlist of naming fields (SQLSTATE,
 * constraint, table, status), and drops a driver's `detail`/`where`/`hint`/`query`/`params`,
 * a response `body`, a validator's data (issue 14, part 10).
 */

/** Field names whose values are always redacted: text-bearing fields, then secrets. */
export const REDACTED_KEYS: readonly string[] = [
  // Prompt and output text in any API shape.
  'input',
  'inputs',
  'messages',
  'prompt',
  'prompts',
  'text',
  'content',
  'output',
  'outputs',
  'completion',
  'choices',
  'delta',
  'instructions',
  'system',
  'suffix',
  'body',
  'arguments',
  // Credentials and secrets.
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'api-key',
  'apiKey',
  'api_key',
  'plaintext',
  'secret',
  'password',
  'token',
  'accessToken',
  'access_token',
  'databaseUrl',
  'DATABASE_URL',
  'connectionString',
];

const CENSOR = '[redacted]';
const KEY_SET = new Set(REDACTED_KEYS.map((k) => k.toLowerCase()));
/** How deep the walk goes; log objects are small, flat metadata. */
const MAX_DEPTH = 8;

/**
 * pino `redact` paths: every {@link REDACTED_KEYS} entry at the top level, plus the header
 * paths that hold credentials. pino's wildcard paths cost ~10 µs per line each level deep, so
 * nested fields are covered by {@link redactDeep} instead (one pass, about 1 µs per line).
 */
export const REDACT_PATHS: readonly string[] = [
  ...REDACTED_KEYS.map((key) => (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? key : `["${key}"]`)),
  '*.authorization',
  'headers.authorization',
  'headers.cookie',
  'headers["x-api-key"]',
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
];

/** Fields that conventionally hold an error, at any depth: serialized even when not an `Error` instance. */
const ERROR_KEYS = new Set(['err', 'error', 'cause']);

/** Outputs of {@link serializeError} made here: already metadata, never serialized twice. */
const SERIALIZED = new WeakSet<object>();

function serialized(error: unknown): SerializedError {
  const out = serializeError(error);
  SERIALIZED.add(out);
  return out;
}

/**
 * A pino serializer for the fields that conventionally hold an error (`err`, `error`,
 * `cause`): an `Error`, or an error-like object with a string `message` (a rejected plain
 * object), becomes {@link serializeError}'s metadata; anything else passes through.
 */
function errorField(value: unknown): unknown {
  if (value instanceof Error) return serialized(value);
  if (value !== null && typeof value === 'object' && !SERIALIZED.has(value) && typeof (value as { message?: unknown }).message === 'string') return serialized(value);
  return value;
}

/**
 * Returns `value` with every field named in {@link REDACTED_KEYS} (compared case-insensitively)
 * replaced by `[redacted]`, at any depth up to 8, in plain objects and arrays, and every `Error`
 * (and any error-like object under `err`, `error` or `cause`) replaced by its
 * {@link serializeError} metadata. Copy-on-write: the caller's objects are never
 * modified. Other class instances are not walked.
 */
export function redactDeep<T>(value: T, depth = 0): T {
  if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return value;
  if (value instanceof Error) return serialized(value) as T;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    value.forEach((item: unknown, i) => {
      const r = redactDeep(item, depth + 1);
      if (r !== item) (out ??= value.slice())[i] = r;
    });
    return (out ?? value) as T;
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  const record = value as Record<string, unknown>;
  let out: Record<string, unknown> | undefined;
  for (const key of Object.keys(record)) {
    const v = record[key];
    const r = KEY_SET.has(key.toLowerCase()) ? CENSOR : ERROR_KEYS.has(key) ? errorField(v) : redactDeep(v, depth + 1);
    if (r !== v) (out ??= { ...record })[key] = r;
  }
  return (out ?? value) as T;
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** The component name, logged as `name` on every line (e.g. `gateway`). */
  name: string;
  /** Minimum level; default `info`. `silent` turns logging off. */
  level?: Level | 'silent';
  /** Where lines go; default stdout. Tests pass a stream to capture them. */
  destination?: DestinationStream;
}

/** A Weir logger (pino's `Logger`). */
export type WeirLogger = Logger;

/**
 * Creates a JSON logger with Weir's redaction list applied (see {@link REDACTED_KEYS}), and
 * `trace_id`/`span_id` from the active OpenTelemetry span on every line logged inside one.
 * Create one per process and derive per-component loggers with `logger.child({...})`.
 */
export function createLogger(options: LoggerOptions): WeirLogger {
  const logger = pino(
    {
      name: options.name,
      level: options.level ?? 'info',
      redact: { paths: [...REDACT_PATHS], censor: CENSOR },
      formatters: { log: (fields) => redactDeep(fields) },
      serializers: { err: errorField, error: errorField, cause: errorField },
      hooks: {
        // pino takes an error's raw message as the line's `msg` when none is given
        // (`logger.error(err)`, `logger.warn({err})`): give it the scrubbed one instead.
        logMethod(args, method) {
          const first: unknown = args[0];
          const hasMessage = typeof args[1] === 'string';
          if (first instanceof Error) {
            const rest = hasMessage ? args.slice(1) : [serialized(first).message];
            return method.apply(this, [{ err: first }, ...rest] as unknown as Parameters<typeof method>);
          }
          if (!hasMessage && first !== null && typeof first === 'object') {
            const f = first as { err?: unknown; msg?: unknown };
            const error = f.err;
            if (f.msg === undefined && error !== undefined && error !== null && typeof error === 'object') {
              return method.apply(this, [first, (errorField(error) as { message?: string }).message ?? 'error'] as unknown as Parameters<typeof method>);
            }
          }
          return method.apply(this, args);
        },
      },
      // Correlate logs with traces: the active OpenTelemetry span's ids, when there is one.
      mixin() {
        const span = trace.getActiveSpan()?.spanContext();
        return span && isSpanContextValid(span) ? { trace_id: span.traceId, span_id: span.spanId } : {};
      },
    },
    options.destination,
  );
  // pino applies no formatter to child bindings, so redact them on the way in. Children are
  // created with Object.create(parent), so every descendant inherits this `child`.
  const pinoChild = logger.child;
  logger.child = function child(this: WeirLogger, bindings: Parameters<WeirLogger['child']>[0], childOptions?: Parameters<WeirLogger['child']>[1]) {
    return pinoChild.call(this, redactDeep(bindings), childOptions);
  } as WeirLogger['child'];
  return logger;
}

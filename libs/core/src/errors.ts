/**
 * Weir's one error type. Expected outcomes (a rejection by a limiter, an unknown alias) are
 * returned as discriminated unions where a caller must branch; faults and request errors that
 * end a request are thrown as `WeirError`. Every boundary (HTTP, gRPC, NATS) maps `code`
 * through one exhaustive table, so adding a code is a compile error until every table has it.
 */

import type { TokenUsage } from './generation';
import type { UsageSource } from './settlement';

/** The closed set of error codes. The HTTP mapping lives in `@weir/gateway` (`http-errors.ts`). */
export const WEIR_ERROR_CODES = [
  'invalid_request',
  'invalid_json',
  'payload_too_large',
  'unsupported_media_type',
  'authentication_failed',
  'permission_denied',
  /** The caller's tenant is disabled (a revocation or the configuration): 403. */
  'tenant_disabled',
  'model_not_found',
  /** The revision the request resolves to was retired; the message names its replacement. */
  'model_retired',
  'not_found',
  'method_not_allowed',
  'conflict',
  'context_length_exceeded',
  'output_limit_exceeded',
  'rate_limited',
  'concurrency_limited',
  'budget_exhausted',
  'queue_full',
  'deadline_unmeetable',
  'deadline_exceeded',
  'upstream_error',
  'upstream_timeout',
  'upstream_unavailable',
  'upstream_bad_request',
  'engine_unavailable',
  'shutting_down',
  /** This service's configuration snapshot is older than the allowed maximum (fail closed): 503. */
  'config_stale',
  /** The caller's tenant is stopped by its kill switch: 503 until an operator lifts it. */
  'kill_switch',
  'output_invalid',
  /** Moderation blocked the request's input (400); output cut mid-stream is a finish reason, not this error. */
  'content_filter',
  'internal',
] as const;

/** One of {@link WEIR_ERROR_CODES}. */
export type WeirErrorCode = (typeof WEIR_ERROR_CODES)[number];

/** Options for {@link WeirError}. */
export interface WeirErrorOptions {
  /** Whether the same request may succeed if retried later. Default: false. */
  retryable?: boolean;
  /** The request field at fault, in the client's naming (for OpenAI's `param`). */
  param?: string;
  /** A hint for `Retry-After` (ms). */
  retryAfterMs?: number;
  /** The underlying fault; logged, never sent on the wire. */
  cause?: unknown;
  /** What the failed generation had produced, as its engine adapter counted it (see {@link WeirError.produced}). */
  produced?: ProducedUsage;
}

/**
 * The tokens a generation had produced when it failed, and how they were counted (issue 13):
 * an engine adapter that fails after receiving output attaches them to its error, so the relay
 * bills what was produced (the upstream's own count, or the revision's tokenizer over the text
 * received) rather than one token per delta. Never sent on the wire.
 */
export interface ProducedUsage {
  usage: TokenUsage;
  source: UsageSource;
}

/**
 * A Weir error: `code` from a closed set, a public `message` safe to send to the client (it
 * never contains prompt text or secrets), and a `cause` kept for logs only.
 */
export class WeirError extends Error {
  readonly code: WeirErrorCode;
  readonly retryable: boolean;
  readonly param?: string;
  readonly retryAfterMs?: number;
  /**
   * Set by engine adapters on a generation failure: what had been produced before it (tokens
   * and how they were counted). Absent on every other error. Not part of the public error.
   */
  readonly produced?: ProducedUsage;

  constructor(code: WeirErrorCode, message: string, options: WeirErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'WeirError';
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.param = options.param;
    this.retryAfterMs = options.retryAfterMs;
    if (options.produced !== undefined) this.produced = options.produced;
  }
}

/**
 * The same error with `produced` attached (a new `WeirError` of the same code, message, flags
 * and cause): how an engine adapter tells the relay what a failed generation had produced.
 */
export function withProduced(error: WeirError, produced: ProducedUsage): WeirError {
  return new WeirError(error.code, error.message, {
    retryable: error.retryable,
    ...(error.param !== undefined ? { param: error.param } : {}),
    ...(error.retryAfterMs !== undefined ? { retryAfterMs: error.retryAfterMs } : {}),
    ...(error.cause !== undefined ? { cause: error.cause } : {}),
    produced,
  });
}

/** True when `value` is a {@link WeirError}. */
export function isWeirError(value: unknown): value is WeirError {
  return value instanceof WeirError;
}

/**
 * Wraps any thrown value as a {@link WeirError}: a WeirError passes through, anything else
 * becomes `internal` with a generic public message and the original as `cause`.
 */
export function toWeirError(value: unknown): WeirError {
  if (value instanceof WeirError) return value;
  return new WeirError('internal', 'internal error', { cause: value });
}

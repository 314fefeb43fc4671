/**
 * The one table mapping Weir error codes to gRPC statuses, and the trailers that carry the
 * exact code across. A failed call's status is `GRPC_STATUS_BY_WEIR_CODE[code]` with the
 * public message as `details`; its trailers hold `weir-error-code` (the code, text) and
 * `weir-error-bin` (`weir.common.v1.WeirErrorDetail`: code, message, retry_after_ms,
 * retryable, param), so `WeirError` round-trips exactly. The cause never goes on the wire.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { WEIR_ERROR_CODES, WeirError, type WeirErrorCode, toWeirError } from '@weir/core';
import { commonV1 } from '@weir/proto';

/** Trailer with the Weir error code as text (readable in any gRPC tool). */
export const WEIR_ERROR_CODE_KEY = 'weir-error-code';
/** Binary trailer with the whole `weir.common.v1.WeirErrorDetail`. */
export const WEIR_ERROR_DETAIL_KEY = 'weir-error-bin';

/**
 * Weir code → gRPC status. Exhaustive: adding a code to `WEIR_ERROR_CODES` fails to compile
 * until it is mapped here. Statuses follow the gRPC status-code guide; only `UNAVAILABLE`
 * makes the clients retry (idempotent calls only), so nothing a retry cannot fix maps to it
 * except the four "try again elsewhere/later" codes (a stale configuration is one: another
 * replica may hold a fresh snapshot).
 */
export const GRPC_STATUS_BY_WEIR_CODE: Record<WeirErrorCode, grpc.status> = {
  invalid_request: grpc.status.INVALID_ARGUMENT,
  invalid_json: grpc.status.INVALID_ARGUMENT,
  payload_too_large: grpc.status.INVALID_ARGUMENT,
  unsupported_media_type: grpc.status.INVALID_ARGUMENT,
  authentication_failed: grpc.status.UNAUTHENTICATED,
  permission_denied: grpc.status.PERMISSION_DENIED,
  tenant_disabled: grpc.status.PERMISSION_DENIED,
  model_not_found: grpc.status.NOT_FOUND,
  model_retired: grpc.status.NOT_FOUND,
  not_found: grpc.status.NOT_FOUND,
  method_not_allowed: grpc.status.UNIMPLEMENTED,
  conflict: grpc.status.ALREADY_EXISTS,
  context_length_exceeded: grpc.status.INVALID_ARGUMENT,
  output_limit_exceeded: grpc.status.INVALID_ARGUMENT,
  rate_limited: grpc.status.RESOURCE_EXHAUSTED,
  concurrency_limited: grpc.status.RESOURCE_EXHAUSTED,
  budget_exhausted: grpc.status.RESOURCE_EXHAUSTED,
  queue_full: grpc.status.RESOURCE_EXHAUSTED,
  deadline_unmeetable: grpc.status.RESOURCE_EXHAUSTED,
  deadline_exceeded: grpc.status.DEADLINE_EXCEEDED,
  upstream_error: grpc.status.UNKNOWN,
  upstream_timeout: grpc.status.DEADLINE_EXCEEDED,
  upstream_unavailable: grpc.status.UNAVAILABLE,
  upstream_bad_request: grpc.status.FAILED_PRECONDITION,
  engine_unavailable: grpc.status.UNAVAILABLE,
  shutting_down: grpc.status.UNAVAILABLE,
  config_stale: grpc.status.UNAVAILABLE,
  kill_switch: grpc.status.FAILED_PRECONDITION,
  output_invalid: grpc.status.INTERNAL,
  content_filter: grpc.status.INVALID_ARGUMENT,
  internal: grpc.status.INTERNAL,
};

const KNOWN_CODES: ReadonlySet<string> = new Set(WEIR_ERROR_CODES);

/** True when `code` is one of `WEIR_ERROR_CODES`. */
export function isWeirErrorCode(code: string): code is WeirErrorCode {
  return KNOWN_CODES.has(code);
}

/**
 * The grpc-js error object a server sends for any thrown value: a `WeirError` keeps its
 * code, message and hints; anything else becomes `internal` with a generic message.
 */
export function toGrpcError(error: unknown): Partial<grpc.StatusObject> & { code: grpc.status; details: string } {
  const weir = toWeirError(error);
  const metadata = new grpc.Metadata();
  metadata.set(WEIR_ERROR_CODE_KEY, weir.code);
  const detail = create(commonV1.WeirErrorDetailSchema, {
    code: weir.code,
    message: weir.message,
    retryAfterMs: weir.retryAfterMs === undefined ? undefined : Math.max(0, Math.round(weir.retryAfterMs)),
    retryable: weir.retryable,
    param: weir.param,
  });
  metadata.set(WEIR_ERROR_DETAIL_KEY, Buffer.from(toBinary(commonV1.WeirErrorDetailSchema, detail)));
  return { code: GRPC_STATUS_BY_WEIR_CODE[weir.code], details: weir.message, metadata };
}

function isServiceError(error: unknown): error is grpc.ServiceError {
  return typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'number' && 'details' in error;
}

function weirDetailOf(metadata: grpc.Metadata | undefined): commonV1.WeirErrorDetail | undefined {
  const raw = metadata?.get(WEIR_ERROR_DETAIL_KEY)[0];
  if (raw instanceof Buffer) {
    try {
      const detail = fromBinary(commonV1.WeirErrorDetailSchema, raw);
      if (isWeirErrorCode(detail.code)) return detail;
    } catch {
      // A malformed trailer falls back to the text code below.
    }
  }
  return undefined;
}

/** The Weir code a failed call carried in its trailers, if any. */
export function weirCodeOf(error: grpc.ServiceError): WeirErrorCode | undefined {
  const detail = weirDetailOf(error.metadata);
  if (detail) return detail.code as WeirErrorCode;
  const text = error.metadata?.get(WEIR_ERROR_CODE_KEY)[0];
  return typeof text === 'string' && isWeirErrorCode(text) ? text : undefined;
}

/**
 * Turns a failed call into a `WeirError` (the gRPC error is its `cause`). With Weir trailers
 * the code, message and hints are exactly the server's. Without them the failure is the
 * transport's, named after `service` (e.g. `router`):
 * - `UNAVAILABLE` → `upstream_unavailable` (retryable, `Retry-After` 1 s; 503 at the edge);
 * - `CANCELLED` (not asked for by the caller: the server went away mid-call) →
 *   `upstream_unavailable` too;
 * - `DEADLINE_EXCEEDED` → `upstream_timeout` (retryable; the call's own deadline fired);
 * - anything else → `internal`.
 * A non-gRPC value goes through `toWeirError`.
 */
export function fromGrpcError(error: unknown, service: string): WeirError {
  if (!isServiceError(error)) return toWeirError(error);
  const detail = weirDetailOf(error.metadata);
  if (detail) {
    return new WeirError(detail.code as WeirErrorCode, detail.message, {
      retryable: detail.retryable,
      retryAfterMs: detail.retryAfterMs,
      param: detail.param,
      cause: error,
    });
  }
  const code = weirCodeOf(error);
  if (code) return new WeirError(code, error.details, { cause: error });
  switch (error.code) {
    // Public messages name the service but never its address or the transport's text (those
    // stay in `cause`, for logs).
    case grpc.status.UNAVAILABLE:
      return new WeirError('upstream_unavailable', `the ${service} service is unavailable; retry shortly`, { retryable: true, retryAfterMs: 1_000, cause: error });
    case grpc.status.CANCELLED:
      return new WeirError('upstream_unavailable', `the ${service} service went away during the call; retry shortly`, { retryable: true, retryAfterMs: 1_000, cause: error });
    case grpc.status.DEADLINE_EXCEEDED:
      return new WeirError('upstream_timeout', `the ${service} service did not answer in time; retry shortly`, { retryable: true, retryAfterMs: 1_000, cause: error });
    default:
      return new WeirError('internal', `the ${service} service failed (gRPC ${grpc.status[error.code] ?? error.code})`, { cause: error });
  }
}

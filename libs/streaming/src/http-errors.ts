/**
 * The one table mapping Weir error codes to HTTP statuses and OpenAI error types
 * (ARCHITECTURE.md §3 and §8; CONVENTIONS.md §2: the status decides the SDK's error class
 * and whether it retries). Exhaustive: a new code fails to compile until it is mapped here.
 */
import type { WeirErrorCode } from '@weir/core';

/** How one error code goes on the wire. */
export interface HttpErrorMapping {
  status: number;
  /** OpenAI's `error.type`. */
  type: string;
}

export const HTTP_ERRORS: Record<WeirErrorCode, HttpErrorMapping> = {
  invalid_request: { status: 400, type: 'invalid_request_error' },
  invalid_json: { status: 400, type: 'invalid_request_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  authentication_failed: { status: 401, type: 'authentication_error' },
  permission_denied: { status: 403, type: 'permission_error' },
  tenant_disabled: { status: 403, type: 'permission_error' },
  model_not_found: { status: 404, type: 'invalid_request_error' },
  /**
   * A retired revision is a 404 like OpenAI's own answer for a shut-down model (code
   * `model_not_found` there): the SDKs raise `NotFoundError` and do not retry (CONVENTIONS.md
   * §2). 410 Gone would be more exact HTTP, but the SDKs map no class to it (a bare `APIError`).
   */
  model_retired: { status: 404, type: 'invalid_request_error' },
  not_found: { status: 404, type: 'not_found_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  conflict: { status: 409, type: 'invalid_request_error' },
  context_length_exceeded: { status: 400, type: 'invalid_request_error' },
  output_limit_exceeded: { status: 400, type: 'invalid_request_error' },
  rate_limited: { status: 429, type: 'rate_limit_error' },
  concurrency_limited: { status: 429, type: 'rate_limit_error' },
  budget_exhausted: { status: 429, type: 'insufficient_quota' },
  queue_full: { status: 503, type: 'server_error' },
  deadline_unmeetable: { status: 503, type: 'server_error' },
  deadline_exceeded: { status: 504, type: 'timeout_error' },
  upstream_error: { status: 502, type: 'server_error' },
  upstream_timeout: { status: 504, type: 'timeout_error' },
  upstream_unavailable: { status: 503, type: 'server_error' },
  upstream_bad_request: { status: 502, type: 'server_error' },
  engine_unavailable: { status: 503, type: 'server_error' },
  shutting_down: { status: 503, type: 'server_error' },
  /** Fail closed: the configuration snapshot is too old to trust its allow decisions (retryable, `Retry-After`). */
  config_stale: { status: 503, type: 'server_error' },
  /** An operator stopped the tenant's traffic; sent with `x-should-retry: false` (retrying cannot lift it). */
  kill_switch: { status: 503, type: 'server_error' },
  /** The model's output is not JSON matching the request's `output_schema` (its tokens are still billed). */
  output_invalid: { status: 502, type: 'server_error' },
  /** Input moderation blocked the request before any output (never retried as is: `x-should-retry: false`). */
  content_filter: { status: 400, type: 'invalid_request_error' },
  internal: { status: 500, type: 'server_error' },
};

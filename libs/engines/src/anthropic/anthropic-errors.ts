import { WeirError } from '@weir/core';
import { UpstreamResponseError, upstreamStatusError } from '../openai-compatible/upstream-errors';

/**
 * How Anthropic's failures map to Weir error codes. HTTP statuses follow the shared upstream
 * table (`upstreamStatusError` in `openai-compatible/upstream-errors.ts`), which reads
 * Anthropic's body `{"type":"error","error":{"type","message"}}` as well; the public message
 * names the status and the error type, never the upstream's message (it may echo prompt text:
 * that goes to `cause`). Error types: docs.anthropic.com "Errors" and anthropic-sdk-typescript
 * `src/core/error.ts`.
 *
 * | upstream outcome                                              | Weir code                 | retryable |
 * |---------------------------------------------------------------|---------------------------|-----------|
 * | 400 `invalid_request_error` "prompt is too long: N tokens > M maximum" | `context_length_exceeded` (param `input`) | no |
 * | 400, 404, 413 (`invalid_request_error`, `not_found_error`, `request_too_large`) | `upstream_bad_request` | no |
 * | 401, 403 (`authentication_error`, `permission_error`: Weir's credential) | `upstream_error` | no |
 * | 429 `rate_limit_error`, 5xx incl. 529 `overloaded_error`      | `upstream_unavailable`    | yes (`retry-after` honoured) |
 * | any other non-200 status (402 `billing_error`, …)             | `upstream_error`          | no        |
 * | `error` event before any text (overloaded, rate limit, api, timeout) | `upstream_unavailable` | yes |
 * | any other `error` event (after text began, or another type)   | `upstream_error`          | no        |
 * | connection failures, timeouts                                 | as the OpenAI-compatible adapter | |
 */
export function anthropicStatusError(
  status: number,
  body: string,
  headers: Record<string, string | string[] | undefined>,
): WeirError {
  const info = parseAnthropicError(body);
  if (status === 400 && info.type === 'invalid_request_error' && PROMPT_TOO_LONG.test(info.message ?? '')) {
    return new WeirError('context_length_exceeded', 'the prompt is longer than the model context', {
      param: 'input',
      cause: new UpstreamResponseError(`upstream HTTP ${status}`, status, body),
    });
  }
  return upstreamStatusError(status, body, headers);
}

/**
 * The API's message for an input over the context window, e.g. `prompt is too long: 207791
 * tokens > 200000 maximum` (it carries no machine-readable code, unlike OpenAI's
 * `context_length_exceeded`).
 */
const PROMPT_TOO_LONG = /^prompt is too long\b/i;

/** Error types of a transient upstream condition: worth retrying while nothing was delivered. */
const TRANSIENT_TYPES = new Set(['overloaded_error', 'rate_limit_error', 'api_error', 'timeout_error']);

/**
 * Maps an `error` event's `error` object (`{type, message}`) received after the 200 headers.
 * Before any text was delivered a transient type is `upstream_unavailable` (retryable: the
 * request can go elsewhere unchanged); otherwise `upstream_error`.
 */
export function anthropicStreamError(error: unknown, outputStarted: boolean): WeirError {
  const info = parseAnthropicErrorObject(error);
  const detail = info.type ? ` (${info.type})` : '';
  const cause = new UpstreamResponseError('upstream error event', undefined, JSON.stringify(error ?? null));
  if (!outputStarted && info.type !== undefined && TRANSIENT_TYPES.has(info.type)) {
    return new WeirError('upstream_unavailable', `upstream reported an error before any output${detail}`, { retryable: true, cause });
  }
  return new WeirError('upstream_error', `upstream reported an error mid-stream${detail}`, { cause });
}

interface AnthropicErrorInfo {
  type?: string;
  message?: string;
}

function parseAnthropicError(body: string): AnthropicErrorInfo {
  try {
    return parseAnthropicErrorObject((JSON.parse(body) as { error?: unknown }).error);
  } catch {
    return {};
  }
}

function parseAnthropicErrorObject(error: unknown): AnthropicErrorInfo {
  if (typeof error !== 'object' || error === null) return {};
  const e = error as Record<string, unknown>;
  return {
    type: typeof e.type === 'string' && e.type.length <= 100 ? e.type : undefined,
    message: typeof e.message === 'string' ? e.message : undefined,
  };
}

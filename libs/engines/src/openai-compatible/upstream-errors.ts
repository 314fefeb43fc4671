import { WeirError } from '@weir/core';

/**
 * The `cause` of an upstream failure: what the upstream said, kept for a debugger but out of
 * the logs. The message names only the status or the frame kind; the upstream's body (which
 * may echo prompt text) is in {@link UpstreamResponseError.body}, a property `@weir/telemetry`'s
 * error serializer drops (issue 14, part 10).
 */
export class UpstreamResponseError extends Error {
  /** The HTTP status, or undefined for an in-band error frame. */
  readonly status: number | undefined;
  /** The upstream's body or error frame as text, at most 2,000 characters. Never logged. */
  readonly body: string;

  constructor(message: string, status: number | undefined, body: string) {
    super(message);
    this.name = 'UpstreamResponseError';
    this.status = status;
    this.body = body.slice(0, 2000);
  }
}

/**
 * How an OpenAI-compatible upstream's failures map to Weir error codes. One table, used by
 * the adapter only; the public message names the status and the upstream's `error.code`/
 * `error.type` (never its message, which may echo prompt text: the body goes to `cause`, an
 * {@link UpstreamResponseError} whose message does not carry it).
 *
 * | upstream outcome                                   | Weir code                  | retryable |
 * |----------------------------------------------------|----------------------------|-----------|
 * | 400/404/413/422 with `code: context_length_exceeded` | `context_length_exceeded` (param `input`) | no |
 * | 400, 404, 413, 422                                 | `upstream_bad_request`     | no        |
 * | 401, 403 (misconfigured credential)                | `upstream_error`           | no        |
 * | 408, 429, 5xx                                      | `upstream_unavailable`     | yes (`retry-after` honoured) |
 * | any other non-200 status                           | `upstream_error`           | no        |
 * | connection refused/reset/closed before any output  | `upstream_unavailable`     | yes       |
 * | connection reset/closed after output began         | `upstream_error`           | no        |
 * | in-band `data: {"error":{…}}` frame                | `upstream_error`           | no        |
 * | stream ended without `finish_reason`               | `upstream_error`           | no        |
 * | no first token within `firstTokenTimeoutMs`        | `upstream_timeout`         | yes       |
 * | silent for `idleTimeoutMs` after output began      | `upstream_timeout`         | no        |
 */
export function upstreamStatusError(
  status: number,
  body: string,
  headers: Record<string, string | string[] | undefined>,
): WeirError {
  const info = parseErrorBody(body);
  const detail = [info.code, info.type].filter(Boolean).join('/');
  const message = `upstream answered HTTP ${status}${detail ? ` (${detail})` : ''}`;
  const cause = new UpstreamResponseError(`upstream HTTP ${status}`, status, body);
  if (status === 400 || status === 404 || status === 413 || status === 422) {
    if (info.code === 'context_length_exceeded') {
      return new WeirError('context_length_exceeded', 'the prompt is longer than the model context', {
        param: 'input',
        cause,
      });
    }
    return new WeirError('upstream_bad_request', message, { cause, param: info.param });
  }
  if (status === 401 || status === 403) {
    return new WeirError('upstream_error', `${message}: upstream credential rejected`, { cause });
  }
  // Only 408 and 429 among the 4xx: a retry (or a fallback before the first token) never
  // repeats a request the upstream refused for what it is (issue 6).
  if (status === 408 || status === 429 || status >= 500) {
    return new WeirError('upstream_unavailable', message, {
      retryable: true,
      retryAfterMs: retryAfterMs(headers),
      cause,
    });
  }
  return new WeirError('upstream_error', message, { cause });
}

/** Error-ish codes of undici/Node for a connection that failed or broke. */
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

/** True when `error` (or its `cause`) is a connection-level failure. */
export function isConnectionError(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 4; depth += 1) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && CONNECTION_CODES.has(code)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** Maps a connection failure: retryable before any output, not after. */
export function connectionError(error: unknown, outputStarted: boolean): WeirError {
  return outputStarted
    ? new WeirError('upstream_error', 'upstream connection broke mid-stream', { cause: error })
    : new WeirError('upstream_unavailable', 'upstream connection failed', { retryable: true, cause: error });
}

/** An in-band error frame (`data: {"error":{…}}`) after the 200 headers. */
export function inBandError(error: unknown): WeirError {
  const info = parseErrorObject(error);
  const detail = [info.code, info.type].filter(Boolean).join('/');
  return new WeirError('upstream_error', `upstream reported an error mid-stream${detail ? ` (${detail})` : ''}`, {
    cause: new UpstreamResponseError('upstream in-band error frame', undefined, JSON.stringify(error) ?? 'undefined'),
  });
}

interface ErrorInfo {
  code?: string;
  type?: string;
  param?: string;
}

function parseErrorBody(body: string): ErrorInfo {
  try {
    const parsed = JSON.parse(body) as { error?: unknown };
    return parseErrorObject(parsed.error);
  } catch {
    return {};
  }
}

function parseErrorObject(error: unknown): ErrorInfo {
  if (typeof error !== 'object' || error === null) return {};
  const e = error as Record<string, unknown>;
  const str = (v: unknown): string | undefined => (typeof v === 'string' && v.length <= 100 ? v : undefined);
  return { code: str(e.code), type: str(e.type), param: str(e.param) };
}

/** `retry-after-ms`, else `retry-after` (seconds or an HTTP date), in ms; undefined when absent. */
export function retryAfterMs(headers: Record<string, string | string[] | undefined>): number | undefined {
  const first = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);
  const ms = Number(first(headers['retry-after-ms']));
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const ra = first(headers['retry-after']);
  if (ra === undefined) return undefined;
  const seconds = Number(ra);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(ra);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/**
 * A small JSON client over Node's built-in fetch for the admin API (`<url>/admin/v1/…`, admin
 * token) and the data plane's `/v1/usage` (tenant API key). Errors the server sends in Weir's
 * OpenAI-shaped body (`{error: {message, code, …}}`) become {@link ApiError} with that message.
 */

/** The `fetch` the client uses (the global one by default; tests may pass their own). */
export type FetchFn = (url: string, init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal }) => Promise<Response>;

/** A request the server refused or could not answer; `message` is the server's (or says why there was no answer). */
export class ApiError extends Error {
  /** HTTP status, or 0 when no response arrived (connection refused, timeout, bad URL). */
  readonly status: number;
  /** The server's error `code` (e.g. `permission_denied`), or `unreachable` / `bad_response`. */
  readonly code: string;
  /** The server's `param`, when it named one. */
  readonly param: string | null;

  constructor(status: number, code: string, message: string, options: { param?: string | null; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.param = options.param ?? null;
  }
}

/** A JSON client bound to one base URL and bearer credential. */
export interface JsonClient {
  /**
   * Sends `method path` (path relative to the base, starting with `/`; `query` entries with
   * undefined values are left out) with `body` as JSON when given; `timeoutMs` overrides the
   * client's timeout for this request.
   * @returns the parsed JSON body of a 2xx response (undefined when empty).
   * @throws ApiError for a non-2xx response (the server's message), no response, or a body that is not JSON.
   */
  request<T = unknown>(method: string, path: string, options?: { body?: unknown; query?: Record<string, string | number | undefined>; timeoutMs?: number }): Promise<T>;
}

/** Options of {@link createJsonClient}. */
export interface JsonClientOptions {
  /** Base URL such as `http://127.0.0.1:8090/admin/v1` (a trailing `/` is ignored). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <credential>`; never printed. */
  credential: string;
  /** Where the address comes from, for the message when nothing answers. Default `the URL`. */
  addressHint?: string;
  /** Per-request timeout in ms. Default 30,000. */
  timeoutMs?: number;
  fetch?: FetchFn;
}

/** Creates a {@link JsonClient}. */
export function createJsonClient(options: JsonClientOptions): JsonClient {
  const base = options.baseUrl.replace(/\/+$/, '');
  const doFetch: FetchFn = options.fetch ?? ((url, init) => fetch(url, init));
  const defaultTimeoutMs = options.timeoutMs ?? 30_000;
  return {
    async request<T>(method: string, path: string, o: { body?: unknown; query?: Record<string, string | number | undefined>; timeoutMs?: number } = {}): Promise<T> {
      const timeoutMs = o.timeoutMs ?? defaultTimeoutMs;
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(o.query ?? {})) if (v !== undefined) params.set(k, String(v));
      const url = `${base}${path}${params.size > 0 ? `?${params}` : ''}`;
      const headers: Record<string, string> = { authorization: `Bearer ${options.credential}`, accept: 'application/json' };
      if (o.body !== undefined) headers['content-type'] = 'application/json';
      let res: Response;
      let text: string;
      try {
        res = await doFetch(url, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body), signal: AbortSignal.timeout(timeoutMs) });
        text = await res.text();
      } catch (cause) {
        const c = cause as { name?: string; message?: string; cause?: { code?: string; message?: string } };
        const why = c.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (c.cause?.code ?? c.cause?.message ?? c.message ?? String(cause));
        throw new ApiError(0, 'unreachable', `cannot reach ${base} (${why}); check ${options.addressHint ?? 'the URL'} and that the service is running`, { cause });
      }
      let body: unknown;
      try {
        body = text === '' ? undefined : JSON.parse(text);
      } catch (cause) {
        throw new ApiError(res.status, 'bad_response', `${method} ${path}: HTTP ${res.status} with a body that is not JSON; is ${base} the right URL?`, { cause });
      }
      if (res.ok) return body as T;
      const e = (body as { error?: { message?: unknown; code?: unknown; param?: unknown } } | undefined)?.error;
      if (e && typeof e.message === 'string') {
        throw new ApiError(res.status, typeof e.code === 'string' ? e.code : `http_${res.status}`, e.message, {
          param: typeof e.param === 'string' ? e.param : null,
        });
      }
      throw new ApiError(res.status, `http_${res.status}`, `${method} ${path}: HTTP ${res.status} without an error message; is ${base} the right URL?`);
    },
  };
}

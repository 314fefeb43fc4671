import type { IncomingMessage } from 'node:http';
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import { checkJsonText, DEFAULT_MAX_JSON_DEPTH, describeJsonProblem, formatBytes, WeirError } from '@weir/core';
import { addressKey, type AuthThrottle, createAuthThrottle, DEFAULT_CLIENT_LIMITS, normalizeAddress } from '@weir/service-runtime';
import { adminErrorResponse } from './admin-error';
import { authenticateAdmin } from './admin-auth';
import type { ControlPlane, ControlPlaneLogger } from './control-plane';
import type { AdminRequest } from './routes/context';
import { registerModelRoutes } from './routes/models';
import { registerRedactionRoutes } from './routes/redaction';
import { registerSystemRoutes } from './routes/system';
import { registerTenantRoutes } from './routes/tenants';
import { registerUseCaseRoutes } from './routes/use-cases';
import { registerUsageRoutes } from './routes/usage';

/** Options of {@link createAdminRouter}. */
export interface AdminRouterOptions {
  /** Largest accepted JSON body in bytes (after inflating). Default 1 MiB; larger is a 413. */
  maxBodyBytes?: number;
  /** Deepest nesting of arrays and objects in a JSON body. Default 64; deeper is a 400 (docs/security.md §3). */
  maxBodyDepth?: number;
}

/** Dependencies of {@link createAdminRouter}. */
export interface AdminRouterDeps {
  controlPlane: ControlPlane;
  logger?: ControlPlaneLogger;
  /**
   * More route registrations (e.g. capacity, evals), mounted after the token check and role
   * rule (a viewer may only GET) and before the 404 and error handler, so they answer in the
   * same error shape.
   */
  extraRoutes?: ReadonlyArray<(router: Router) => void>;
  /**
   * The throttle of failed admin authentication (docs/security.md §7). Default: one of the
   * router's own, {@link DEFAULT_CLIENT_LIMITS}' 20 failures per 60 s per client address, keyed
   * by the peer address (its sweep timer is unref'd and never stopped).
   */
  authFailures?: AdminAuthFailures;
}

/**
 * How the admin API throttles failed authentication: `throttle` counts failures per client key
 * (only per address: admin tokens' prefixes are not counted, so nobody can lock an operator
 * out by sending their token's public prefix) and `clientKey` names the client of a request —
 * the peer address (an IPv6 client's /64), or the forwarded client behind a trusted proxy
 * (`ClientGuard.clientKey`). Past the limit a client gets 429 `rate_limited` with `Retry-After`
 * (the rest of the window), whatever token it sends, before the token is looked up.
 */
export interface AdminAuthFailures {
  throttle: AuthThrottle;
  clientKey: (req: IncomingMessage) => string;
}

/** The key of a request's peer address (an IPv6 peer's /64), for routers served without a `ClientGuard`. */
const peerKey = (req: IncomingMessage): string => addressKey(normalizeAddress(req.socket.remoteAddress ?? ''));

/**
 * The admin API (express 5), to mount under `/admin/v1`: tenants, apps, API keys, policies,
 * kill switch, revisions, aliases, pools, defaults, snapshots, audit and admin tokens (routes
 * in docs/admin-api.md). Every request needs `Authorization: Bearer <admin token>` (401
 * otherwise; past `authFailures`' limit of failures from one client, 429 with `Retry-After`
 * whatever the token); a `viewer` token may only GET (403 on anything else). Errors are OpenAI-shaped
 * `{error: {message, type, param, code}}`.
 */
export function createAdminRouter(options: AdminRouterOptions, deps: AdminRouterDeps): Router {
  const router = express.Router();
  const { controlPlane: cp, logger } = deps;

  const failures = deps.authFailures ?? {
    throttle: createAuthThrottle({ limit: DEFAULT_CLIENT_LIMITS.authFailureLimit, windowMs: DEFAULT_CLIENT_LIMITS.authFailureWindowMs }),
    clientKey: peerKey,
  };

  router.use((req, _res, next) => {
    const { throttle } = failures;
    // Refused before the token is hashed or looked up: a guess past the limit costs one map read.
    const client = throttle.active ? failures.clientKey(req) : undefined;
    const refusal = client === undefined ? undefined : throttle.refusal(client, undefined, undefined);
    if (refusal) return next(adminRefusal(refusal));
    authenticateAdmin(cp.db, req.header('authorization')).then(
      (admin) => {
        (req as AdminRequest).admin = admin;
        if (admin.role !== 'admin' && req.method !== 'GET' && req.method !== 'HEAD') {
          next(new WeirError('permission_denied', `This token's role (${admin.role}) may only read; ${req.method} needs an admin token.`));
        } else next();
      },
      (err: unknown) => {
        if (err instanceof WeirError && err.code === 'authentication_failed') throttle.failed(client ?? failures.clientKey(req), undefined);
        next(err);
      },
    );
  });
  router.use(
    express.json({
      limit: options.maxBodyBytes ?? 1024 * 1024,
      strict: false,
      type: ['application/json', 'application/*+json'],
      verify: guardJsonBody(options.maxBodyDepth ?? DEFAULT_MAX_JSON_DEPTH),
    }),
  );
  router.use((req, _res, next) => {
    const hasBody = req.header('content-length') !== undefined && req.header('content-length') !== '0';
    if ((req.method === 'POST' || req.method === 'PUT' || req.method === 'PATCH') && hasBody && !req.is(['application/json', 'application/*+json'])) {
      next(new WeirError('unsupported_media_type', 'Send the body as JSON with `Content-Type: application/json`.'));
    } else next();
  });

  router.use((req, _res, next) => next(unstorableInput(req)));

  registerTenantRoutes(router, { cp, logger });
  registerUseCaseRoutes(router, { cp, logger });
  registerModelRoutes(router, { cp, logger });
  registerRedactionRoutes(router, { cp, logger });
  registerSystemRoutes(router, { cp, logger });
  registerUsageRoutes(router, { cp, logger });
  for (const register of deps.extraRoutes ?? []) register(router);

  router.use((req, _res, next) => next(new WeirError('not_found', `No admin route ${req.method} ${req.baseUrl}${req.path}; see docs/admin-api.md for the routes.`)));
  router.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const mapped = adminErrorResponse(fromBodyParserError(err));
    if (mapped.status >= 500) logger?.error({ err, method: req.method, path: req.path }, 'admin request failed');
    if (err instanceof WeirError && err.retryAfterMs !== undefined) res.setHeader('retry-after', String(Math.max(1, Math.ceil(err.retryAfterMs / 1000))));
    res.status(mapped.status).json(mapped.body);
  });
  return router;
}

/**
 * The throttle's 429 (worded for the `/v1` API's keys) reworded for the admin API: the same
 * `rate_limited` code, retryability and `retryAfterMs`, speaking of admin tokens.
 */
function adminRefusal(refusal: WeirError): WeirError {
  const retryAfterMs = refusal.retryAfterMs ?? 1000;
  return new WeirError('rate_limited', `Too many failed admin-token attempts from this client; retry in ${Math.max(1, Math.ceil(retryAfterMs / 1000))} s with a valid admin token.`, {
    retryable: true,
    retryAfterMs,
  });
}

/** What makes a string unstorable: a NUL character, or a lone UTF-16 surrogate. */
type StringProblem = 'nul' | 'surrogate';

/**
 * A lone surrogate: with the `u` flag a well-formed pair reads as one supplementary code point,
 * so only a high surrogate without its low half (or a low one without its high half) is `Cs`.
 */
const LONE_SURROGATE = /\p{Cs}/u;

function problemOf(s: string): StringProblem | undefined {
  if (s.includes('\u0000')) return 'nul';
  if (LONE_SURROGATE.test(s)) return 'surrogate';
  return undefined;
}

/**
 * Where in a JSON value the first unstorable string (value or key) is, as a path (`$.name`,
 * `$.routes[0]`, `$.policy[key]` for a key), with what is wrong with it; undefined when none.
 */
function unstorableStringIn(value: unknown, at: string, depth = 0): { at: string; problem: StringProblem } | undefined {
  if (typeof value === 'string') {
    const problem = problemOf(value);
    return problem ? { at, problem } : undefined;
  }
  if (value === null || typeof value !== 'object' || depth > 64) return undefined;
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const inKey = problemOf(k);
    if (inKey) return { at: `${at}[key]`, problem: inKey };
    const found = unstorableStringIn(v, Array.isArray(value) ? `${at}[${k}]` : `${at}.${k}`, depth + 1);
    if (found) return found;
  }
  return undefined;
}

const PROBLEM_TEXT: Record<StringProblem, string> = {
  nul: 'a NUL character (\\u0000), which cannot be stored; remove it',
  surrogate: 'a lone UTF-16 surrogate (such as \\ud800 without the low half of its pair), which is not valid Unicode and cannot be stored; remove it or send the whole character',
};

/** A `%` not followed by two hex digits. */
const BAD_PERCENT_HEX = /%(?![0-9a-fA-F]{2})/;

/**
 * What is wrong with the percent-encoding of a raw URL part: `hex` when a `%` is not followed by
 * two hex digits, `utf8` when the escapes are well-formed but the bytes they spell are not UTF-8
 * (`%ED%A0%80`, an encoded surrogate; `%80`; an overlong `%C0%AF`); undefined when it decodes.
 */
function percentProblem(raw: string): 'hex' | 'utf8' | undefined {
  try {
    decodeURIComponent(raw);
    return undefined;
  } catch {
    return BAD_PERCENT_HEX.test(raw) ? 'hex' : 'utf8';
  }
}

/** The first percent-encoding problem of a raw query string (after `?`), undefined when it decodes. */
function queryPercentProblem(originalUrl: string): 'hex' | 'utf8' | undefined {
  const q = originalUrl.indexOf('?');
  if (q < 0) return undefined;
  let found: 'hex' | 'utf8' | undefined;
  for (const pair of originalUrl.slice(q + 1).split('&')) {
    for (const part of pair.split('=')) {
      const problem = percentProblem(part);
      if (problem === 'hex') return 'hex';
      found ??= problem;
    }
  }
  return found;
}

/** The reason of a malformed percent-encoding, for the 400's message. */
const PERCENT_TEXT: Record<'hex' | 'utf8', string> = {
  hex: 'a malformed percent-encoding (a % must be followed by two hex digits)',
  utf8: 'a percent-encoding that is not UTF-8 (the bytes its %XX escapes spell are not a valid UTF-8 sequence)',
};

/**
 * Input Postgres cannot store or the router cannot decode, refused with a 400 before any
 * route: a malformed percent-encoding in the path or the query string, or a NUL character
 * (U+0000, which Postgres text never holds) or a lone UTF-16 surrogate (which Postgres json
 * refuses and text turns into U+FFFD) in the path, a query parameter, or a body string or key.
 * @returns the error (`invalid_request`, `param` naming the field when there is one), or undefined.
 */
function unstorableInput(req: Request): WeirError | undefined {
  const inPath = percentProblem(req.path);
  if (inPath) return new WeirError('invalid_request', `The path ${req.baseUrl}${req.path} has ${PERCENT_TEXT[inPath]}; encode ids with encodeURIComponent.`);
  const decodedPath = decodeURIComponent(req.path);
  if (decodedPath.includes('\u0000')) return new WeirError('invalid_request', 'The path contains a NUL character (%00), which no id may hold; remove it.');
  if (LONE_SURROGATE.test(decodedPath)) return new WeirError('invalid_request', 'The path contains a lone UTF-16 surrogate, which no id may hold; remove it.');
  const inQueryText = queryPercentProblem(req.originalUrl);
  if (inQueryText) return new WeirError('invalid_request', `The query string has ${PERCENT_TEXT[inQueryText]}; encode values with encodeURIComponent.`);
  const inQuery = unstorableStringIn(req.query, 'query');
  if (inQuery) {
    const param = inQuery.at.replace(/^query\.?/, '');
    return new WeirError('invalid_request', `The query parameter ${param} contains ${PROBLEM_TEXT[inQuery.problem]}.`, { param });
  }
  const inBody = unstorableStringIn(req.body, '$');
  if (inBody) return new WeirError('invalid_request', `The body's ${inBody.at} contains ${PROBLEM_TEXT[inBody.problem]}.`, { param: inBody.at.replace(/^\$\.?/, '') });
  return undefined;
}

/** The error body-parser passes on when {@link guardJsonBody} refuses a body. */
class JsonGuardError extends Error {
  readonly type = 'entity.json.guard';
  constructor(
    message: string,
    readonly param: string | undefined,
  ) {
    super(message);
  }
}

/** The error body-parser passes on when {@link guardJsonBody} refuses a body's charset. */
class JsonCharsetError extends Error {
  readonly type = 'entity.charset.guard';
  constructor(readonly charset: string) {
    super(`unsupported charset ${charset}`);
  }
}

/**
 * body-parser's `verify` hook: refuses, before the parse, a body in any charset but UTF-8 (415:
 * the scan below reads the bytes as UTF-8, so it must see the very text the parser decodes; a
 * UTF-16 body read as UTF-8 hides its quotes, keys and brackets from the scan), and a body nested
 * deeper than `maxDepth` or repeating a key in an object (`checkJsonText`), so nothing after it
 * walks such a value. `encoding` is the charset body-parser decodes with (lower-cased, `utf-8`
 * when `Content-Type` names none).
 */
function guardJsonBody(maxDepth: number): (req: unknown, res: unknown, buf: Buffer, encoding: string | null) => void {
  return (_req, _res, buf, encoding) => {
    if (encoding !== 'utf-8') throw new JsonCharsetError(String(encoding));
    // body-parser's decoder drops a leading byte-order mark; so does the text scanned here.
    const text = buf.toString('utf8');
    const problem = checkJsonText(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text, { maxDepth });
    if (!problem) return;
    const { message, param } = describeJsonProblem(problem);
    throw new JsonGuardError(message, param);
  };
}

/** body-parser's errors (they carry `type`) as Weir errors. */
function fromBodyParserError(err: unknown): unknown {
  const e = err as { type?: string; limit?: number; message?: string; param?: string; charset?: string };
  switch (e?.type) {
    case 'entity.charset.guard':
    case 'charset.unsupported':
      return new WeirError('unsupported_media_type', `The body's charset ${String(e.charset)} is not accepted: send the body as UTF-8 JSON (\`Content-Type: application/json\`, or with \`; charset=utf-8\`).`);
    case 'entity.json.guard':
      return new WeirError('invalid_request', String(e.message), e.param !== undefined ? { param: e.param } : {});
    case 'entity.parse.failed':
      return new WeirError('invalid_json', 'The request body is not valid JSON; check quoting and commas.');
    case 'entity.too.large':
      return new WeirError('payload_too_large', e.limit !== undefined ? `The request body exceeds ${formatBytes(e.limit)}, the most the admin API accepts; send less.` : 'The request body is larger than the admin API accepts; send less.');
    case 'encoding.unsupported':
      return new WeirError('unsupported_media_type', 'Unsupported Content-Encoding: send the body as JSON uncompressed, or as gzip, deflate or br.');
    default:
      return err;
  }
}

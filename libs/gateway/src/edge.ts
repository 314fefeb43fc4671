/**
 * The gateway's lean HTTP edge (`node:http`, no framework): the request as the routes see
 * it, the JSON body read once with a size limit, JSON answers, and a router by method and
 * path. Express stays for the admin API; on `/v1` its middleware stack, `req`/`res` decoration
 * and body-parser cost more CPU than the rest of a request's HTTP handling together.
 *
 * Behaviour kept from the express edge it replaces: paths match case-insensitively and with
 * or without one trailing slash; `HEAD` is answered by `GET` routes (Node sends no body);
 * path parameters are URL-decoded; the body is read only for a JSON media type
 * (`application/json`, `application/*+json`, any `utf-*` charset), `gzip`, `deflate` and `br`
 * bodies are inflated, an empty JSON body is `{}`, and any JSON value is parsed (so `null`
 * gets "must be a JSON object", not "invalid JSON").
 *
 * Bodies a parser chokes on are refused before anything walks them (docs/security.md §3): over
 * the size limit (413), nested deeper than the depth limit, or repeating a key in an object
 * (400s naming the limit or the key), by one linear scan beside the one `JSON.parse`
 * (`checkJsonText`, `@weir/core`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseQuery } from 'node:querystring';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { Readable } from 'node:stream';
import { type Caller, checkJsonText, DEFAULT_MAX_JSON_DEPTH, describeJsonProblem, formatBytes, WeirError } from '@weir/core';

/** A request on the edge. */
export interface EdgeRequest {
  readonly raw: IncomingMessage;
  /** Upper-case method as received. */
  readonly method: string;
  /** The path, without the query string (not decoded). */
  readonly path: string;
  /** The client's `x-request-id` when well-formed, else one Weir made. */
  readonly requestId: string;
  /** The route's pattern once matched (`/v1/generations/:id`), for logs. */
  routePath?: string;
  /** Decoded path parameters of the matched route. */
  params: Record<string, string>;
  /** The parsed JSON body (POST routes); undefined when the request had none. */
  body: unknown;
  /** Set by authentication. */
  caller?: Caller;
  /** A request header (lower-case name), the first value of a repeated one. */
  header(name: string): string | undefined;
  /** The query string, parsed (`node:querystring`: a repeated name is an array). */
  query(): Record<string, string | string[] | undefined>;
}

/** A request that passed authentication. */
export interface AuthedRequest extends EdgeRequest {
  caller: Caller;
}

/** Creates the edge's view of a request. */
export function edgeRequest(raw: IncomingMessage, requestId: string): EdgeRequest {
  const url = raw.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  let query: Record<string, string | string[] | undefined> | undefined;
  return {
    raw,
    method: raw.method ?? 'GET',
    path,
    requestId,
    params: {},
    body: undefined,
    header(name) {
      const v = raw.headers[name];
      return typeof v === 'string' ? v : v?.[0];
    },
    query() {
      query ??= q < 0 ? {} : (parseQuery(url.slice(q + 1)) as Record<string, string | string[] | undefined>);
      return query;
    },
  };
}

/** `application/json; charset=utf-8`, as express's `res.json` sends it. */
const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * Answers `body` as JSON with `status` (headers set earlier with `setHeader` are kept). The
 * body is stringified once, its length sent, and the response ended in one write.
 */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('content-type', JSON_TYPE);
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

/** Whether the request says it has a body (`Transfer-Encoding`, or a numeric `Content-Length`), as `type-is` decides. */
function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || !Number.isNaN(Number.parseInt(req.headers['content-length'] ?? '', 10));
}

/** The media type and charset of `Content-Type`, lower-cased; undefined when absent or malformed. */
function mediaType(header: string | undefined): { type: string; charset?: string } | undefined {
  if (header === undefined) return undefined;
  const semi = header.indexOf(';');
  const type = (semi < 0 ? header : header.slice(0, semi)).trim().toLowerCase();
  if (!/^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/.test(type)) return undefined;
  if (semi < 0) return { type };
  const m = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(header.slice(semi));
  const charset = m ? (m[1] ?? m[2]).toLowerCase() : undefined;
  return charset ? { type, charset } : { type };
}

function isJsonType(type: string): boolean {
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

/**
 * Reads and parses a JSON request body, at most `limit` bytes (after inflating) and nested at
 * most `maxDepth` levels of arrays and objects (default 64), with no key repeated in an object.
 * Resolves undefined when the request has no body or a non-JSON media type (the route then
 * decides); `{}` for an empty JSON body.
 *
 * @throws WeirError `payload_too_large` (413, over `limit`), `unsupported_media_type` (415: a
 *   charset that is not UTF, an unknown `Content-Encoding`), `invalid_json` (400),
 *   `invalid_request` (400: nested deeper than `maxDepth`; a duplicate key, `param` naming its
 *   path; a body that does not inflate as its `Content-Encoding` says, or that ended before its
 *   `Content-Length`).
 */
export async function readJsonBody(req: IncomingMessage, limit: number, maxDepth: number = DEFAULT_MAX_JSON_DEPTH): Promise<unknown> {
  if (!hasBody(req)) return undefined;
  const media = mediaType(req.headers['content-type']);
  if (!media || !isJsonType(media.type)) return undefined;
  // `utf8` is a common spelling of UTF-8, and US-ASCII a subset of it: both read as UTF-8.
  const declared = media.charset;
  const charset = declared === undefined || declared === 'utf8' || declared === 'us-ascii' ? 'utf-8' : declared;
  if (!charset.startsWith('utf-')) throw new WeirError('unsupported_media_type', `The body's charset ${charset} is not accepted: send the body as UTF-8 JSON.`);
  const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
  let source: Readable = req;
  if (encoding !== 'identity') {
    const inflate = encoding === 'gzip' ? createGunzip() : encoding === 'deflate' ? createInflate() : encoding === 'br' ? createBrotliDecompress() : undefined;
    if (!inflate) {
      req.resume();
      throw new WeirError('unsupported_media_type', 'Unsupported Content-Encoding: send the body uncompressed, or as gzip, deflate or br.');
    }
    source = req.pipe(inflate);
  } else {
    const declared = Number.parseInt(req.headers['content-length'] ?? '', 10);
    if (declared > limit) {
      req.resume();
      throw tooLarge(limit);
    }
  }
  const bytes = await readAll(req, source, limit, encoding === 'identity' ? Number.parseInt(req.headers['content-length'] ?? '', 10) : Number.NaN);
  if (bytes.length === 0) return {};
  let text: string;
  if (charset === 'utf-8') text = bytes.toString('utf8');
  else {
    try {
      text = new TextDecoder(charset).decode(bytes);
    } catch {
      throw new WeirError('unsupported_media_type', 'Send the body as UTF-8 JSON.');
    }
  }
  return parseJsonText(text, maxDepth);
}

/**
 * Parses a JSON body's text: too deep is refused before the parse, a syntax error wins over a
 * duplicate key (the scan does not validate syntax), and the parse runs once.
 * @throws WeirError `invalid_request` (too deep; duplicate key, with `param`), `invalid_json`.
 */
export function parseJsonText(text: string, maxDepth: number = DEFAULT_MAX_JSON_DEPTH): unknown {
  const problem = checkJsonText(text, { maxDepth });
  if (problem?.kind === 'too_deep') throw new WeirError('invalid_request', describeJsonProblem(problem).message);
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch {
    throw new WeirError('invalid_json', 'The request body is not valid JSON; check quoting and commas.');
  }
  if (problem) {
    const { message, param } = describeJsonProblem(problem);
    throw new WeirError('invalid_request', message, param !== undefined ? { param } : {});
  }
  return value;
}

function tooLarge(limit: number): WeirError {
  return new WeirError('payload_too_large', `The request body exceeds ${formatBytes(limit)}, the most this gateway accepts (\`defaults.max_body_bytes\`); send less input.`);
}

/** Collects `source` (the request, or its inflating stream) up to `limit` bytes. */
function readAll(req: IncomingMessage, source: Readable, limit: number, declared: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    let settled = false;
    const finish = (err: WeirError | undefined) => {
      if (settled) return;
      settled = true;
      source.off('data', onData);
      source.off('end', onEnd);
      source.off('error', onError);
      req.off('aborted', onAborted);
      if (err) {
        // Discard the rest of the body so the connection can serve the answer (and the next request).
        if (source !== req) req.unpipe(source as unknown as NodeJS.WritableStream);
        req.resume();
        reject(err);
      } else resolve(parts.length === 1 ? parts[0] : Buffer.concat(parts, size));
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        finish(tooLarge(limit));
        return;
      }
      parts.push(chunk);
    };
    const onEnd = () => {
      if (!Number.isNaN(declared) && size !== declared) finish(new WeirError('invalid_request', 'The request body was not received completely.'));
      else finish(undefined);
    };
    const onError = () => {
      finish(
        source === req
          ? new WeirError('invalid_request', 'The request body was not received completely.')
          : new WeirError('invalid_request', 'The request body could not be read as its Content-Encoding says; send it uncompressed or fix the header.'),
      );
    };
    const onAborted = () => finish(new WeirError('invalid_request', 'The request body was not received completely.'));
    source.on('data', onData);
    source.on('end', onEnd);
    source.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/** A route of the edge. */
export interface EdgeRoute<H> {
  method: 'GET' | 'POST' | 'DELETE';
  /** `/v1/generations/:id`: literal segments and `:name` parameters. */
  pattern: string;
  handler: H;
}

/** A route matched to a request: the handler and the decoded parameters. */
export interface EdgeMatch<H> {
  route: EdgeRoute<H>;
  params: Record<string, string>;
}

/** A router by method and path (see the module comment for how paths match). */
export interface EdgeRouter<H> {
  /** The route for `method` on `path`, if any (`HEAD` matches `GET` routes). */
  match(method: string, path: string): EdgeMatch<H> | undefined;
  /** The methods routes accept on `path` (for `405` and `Allow`); empty when the path is unknown. */
  allowed(path: string): string[];
}

/** Builds a router over `routes`; routes without parameters are found with one map lookup. */
export function createEdgeRouter<H>(routes: readonly EdgeRoute<H>[]): EdgeRouter<H> {
  const fixed = new Map<string, EdgeRoute<H>>();
  const withParams: { route: EdgeRoute<H>; segments: (string | null)[]; names: string[] }[] = [];
  for (const route of routes) {
    const segments = route.pattern.split('/');
    if (segments.every((s) => !s.startsWith(':'))) fixed.set(`${route.method} ${route.pattern.toLowerCase()}`, route);
    else {
      withParams.push({
        route,
        segments: segments.map((s) => (s.startsWith(':') ? null : s.toLowerCase())),
        names: segments.filter((s) => s.startsWith(':')).map((s) => s.slice(1)),
      });
    }
  }
  const normal = (path: string) => (path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path);
  const matchParams = (method: string, path: string): EdgeMatch<H> | undefined => {
    const parts = path.split('/');
    for (const c of withParams) {
      if (c.route.method !== method || c.segments.length !== parts.length) continue;
      const params: Record<string, string> = {};
      let k = 0;
      let ok = true;
      for (let i = 0; i < parts.length && ok; i++) {
        const want = c.segments[i];
        if (want === null) {
          if (parts[i] === '') ok = false;
          else params[c.names[k++]] = decode(parts[i]);
        } else if (parts[i].toLowerCase() !== want) ok = false;
      }
      if (ok) return { route: c.route, params };
    }
    return undefined;
  };
  return {
    match(method, rawPath) {
      const m = method === 'HEAD' ? 'GET' : method;
      const path = normal(rawPath);
      const route = fixed.get(`${m} ${path.toLowerCase()}`);
      if (route) return { route, params: {} };
      return withParams.length > 0 ? matchParams(m, path) : undefined;
    },
    allowed(rawPath) {
      const path = normal(rawPath);
      const out: string[] = [];
      for (const method of ['GET', 'POST', 'DELETE'] as const) if (fixed.has(`${method} ${path.toLowerCase()}`) || matchParams(method, path)) out.push(method);
      return out;
    },
  };
}

function decode(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

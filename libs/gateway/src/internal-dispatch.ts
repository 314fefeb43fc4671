/**
 * In-process requests through the gateway's own routes (the batch runner's way in, docs/batch.md):
 * the same route handler, validation, moderation, redaction, idempotency, admission (reserve and
 * settle), scheduling and ledger as a request from the network — without a socket, and with the
 * caller already known (the batch was created with an authenticated key; nothing here reads a
 * tenant from a body).
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Caller } from '@weir/core';
import type { AuthedRequest, EdgeRequest } from './edge';

/** A request made in-process (see {@link Gateway.dispatch}). */
export interface InternalRequest {
  method: 'POST' | 'GET';
  /** The route's path (`/v1/chat/completions`), without a query string. */
  path: string;
  /** The parsed JSON body (POST). */
  body?: unknown;
  /** Request headers, lower-case names (e.g. `idempotency-key`, `x-weir-priority`). */
  headers?: Record<string, string>;
}

/** The answer to an {@link InternalRequest}: status, headers (lower-case names) and the body parsed as JSON (undefined when not JSON). */
export interface InternalResponse {
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

/** A response object a route handler can answer on (the subset of `ServerResponse` the gateway's JSON routes use), capturing what it is told. */
class CapturedResponse extends EventEmitter {
  statusCode = 200;
  headersSent = false;
  writableEnded = false;
  writableFinished = false;
  private readonly headerMap = new Map<string, string>();
  private readonly chunks: Buffer[] = [];
  constructor(private readonly done: (r: InternalResponse) => void) {
    super();
  }
  setHeader(name: string, value: string | number | readonly string[]): this {
    this.headerMap.set(name.toLowerCase(), Array.isArray(value) ? value.join(', ') : String(value));
    return this;
  }
  getHeader(name: string): string | undefined {
    return this.headerMap.get(name.toLowerCase());
  }
  hasHeader(name: string): boolean {
    return this.headerMap.has(name.toLowerCase());
  }
  removeHeader(name: string): void {
    this.headerMap.delete(name.toLowerCase());
  }
  writeHead(status: number, headers?: Record<string, string | number>): this {
    this.statusCode = status;
    for (const [k, v] of Object.entries(headers ?? {})) this.setHeader(k, v);
    this.headersSent = true;
    return this;
  }
  flushHeaders(): void {
    this.headersSent = true;
  }
  write(chunk: string | Buffer): boolean {
    this.headersSent = true;
    this.chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    return true;
  }
  end(chunk?: string | Buffer): this {
    if (this.writableEnded) return this;
    if (chunk !== undefined) this.write(chunk);
    this.headersSent = this.writableEnded = this.writableFinished = true;
    const text = Buffer.concat(this.chunks).toString('utf8');
    let body: unknown;
    try {
      body = text === '' ? undefined : JSON.parse(text);
    } catch {
      body = undefined;
    }
    this.done({ status: this.statusCode, headers: Object.fromEntries(this.headerMap), body });
    this.emit('finish');
    this.emit('close');
    return this;
  }
}

/**
 * Runs `request` as `caller` through `handle` (the gateway's route runner) and resolves with what
 * the route answered. `handle` is given an authenticated edge request and a capturing response;
 * it must answer on the response (errors included).
 */
export function dispatchInternal(caller: Caller, request: InternalRequest, requestId: string, handle: (req: AuthedRequest, res: ServerResponse) => void): Promise<InternalResponse> {
  const headers = { ...(request.headers ?? {}), 'x-request-id': requestId };
  const raw = Object.assign(new EventEmitter(), { headers, method: request.method, url: request.path, resume: () => raw }) as unknown as IncomingMessage;
  return new Promise<InternalResponse>((resolve) => {
    const res = new CapturedResponse(resolve);
    res.setHeader('x-request-id', requestId);
    const req: EdgeRequest = {
      raw,
      method: request.method,
      path: request.path,
      requestId,
      params: {},
      body: request.body,
      caller,
      header: (name) => headers[name as keyof typeof headers],
      query: () => ({}),
    };
    handle(req as AuthedRequest, res as unknown as ServerResponse);
  });
}

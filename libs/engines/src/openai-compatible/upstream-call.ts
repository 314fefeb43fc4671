/**
 * One HTTP call to an upstream through undici's dispatcher, without a Node `Readable`: the
 * response body arrives as the Buffers undici's parser hands over, and the reader takes
 * everything that arrived since its last read at once. Compared with `undici.request()` this
 * saves, per call, the body stream, its async iterator (a promise per chunk) and — for a body
 * left unread after `[DONE]` — the `RequestAbortedError` (with its stack trace) that
 * destroying an unfinished stream builds; on a 50-chunk answer that was about a fifth of the
 * adapter's CPU.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { type Dispatcher, getGlobalDispatcher } from 'undici';

/** The status line and headers of an upstream response. */
export interface UpstreamHead {
  statusCode: number;
  /** Lower-case names; a repeated header is an array. */
  headers: IncomingHttpHeaders;
}

/** A call in flight (see {@link startUpstreamCall}). */
export interface UpstreamCall {
  /** Resolves with the final (≥ 200) status and headers; rejects with the call's error (connection refused, reset, abort reason). */
  readonly head: Promise<UpstreamHead>;
  /**
   * Every body chunk received since the last read (at least one), or `null` once the body
   * ended and all of it was read. Waits while nothing is buffered. Rejects with the call's
   * error (after the chunks received before it were read). One reader at a time.
   */
  read(): Promise<Buffer[] | null>;
  /** Whether the whole body was received (no abort is then needed). */
  readonly complete: boolean;
  /** Cuts the call (idempotent; a no-op once complete). Pending and later reads reject with `reason`. */
  abort(reason: Error): void;
}

/** What {@link startUpstreamCall} sends. */
export interface UpstreamRequest {
  /** Absolute URL (scheme, host, port, path). */
  url: URL;
  method: 'POST' | 'GET';
  headers: Record<string, string>;
  body?: string;
  /** Default: undici's global dispatcher (its keep-alive connection pools). */
  dispatcher?: Dispatcher;
}

/**
 * Above this many buffered, unread bytes the socket is paused until the reader catches up
 * (backpressure: a slow client must not make the gateway buffer a whole answer). 1 MiB.
 */
const HIGH_WATER_BYTES = 1024 * 1024;

/**
 * Starts a call. undici's own header and body timeouts are off: the adapter's watchdog times
 * the call (first token, idle) and aborts it.
 */
export function startUpstreamCall(request: UpstreamRequest): UpstreamCall {
  let controller: Dispatcher.DispatchController | undefined;
  let pendingAbort: Error | undefined;
  let failure: Error | undefined;
  let ended = false;
  let chunks: Buffer[] = [];
  let buffered = 0;
  let waiter: { resolve: (v: Buffer[] | null) => void; reject: (e: Error) => void } | undefined;
  let resolveHead!: (head: UpstreamHead) => void;
  let rejectHead!: (err: Error) => void;
  let headSettled = false;
  const head = new Promise<UpstreamHead>((resolve, reject) => {
    resolveHead = resolve;
    rejectHead = reject;
  });
  // A rejection nobody awaits (the reader already gave up) must not crash the process.
  head.catch(() => undefined);

  const wake = () => {
    const w = waiter;
    if (!w) return;
    if (chunks.length > 0) {
      waiter = undefined;
      const out = chunks;
      chunks = [];
      buffered = 0;
      if (controller?.paused) controller.resume();
      w.resolve(out);
    } else if (failure) {
      waiter = undefined;
      w.reject(failure);
    } else if (ended) {
      waiter = undefined;
      w.resolve(null);
    }
  };
  const fail = (err: Error) => {
    if (failure || ended) return;
    failure = err;
    if (!headSettled) {
      headSettled = true;
      rejectHead(err);
    }
    wake();
  };

  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c;
      if (pendingAbort) c.abort(pendingAbort);
    },
    onResponseStart(_c, statusCode, headers) {
      // 1xx informational responses precede the final one.
      if (statusCode < 200 || headSettled) return;
      headSettled = true;
      resolveHead({ statusCode, headers });
    },
    onResponseData(c, chunk) {
      if (failure) return;
      chunks.push(chunk);
      buffered += chunk.length;
      if (buffered > HIGH_WATER_BYTES && !waiter) c.pause();
      wake();
    },
    onResponseEnd() {
      if (failure) return;
      ended = true;
      wake();
    },
    onResponseError(_c, err) {
      fail(err);
    },
  };

  const dispatcher = request.dispatcher ?? getGlobalDispatcher();
  dispatcher.dispatch(
    {
      origin: request.url.origin,
      path: `${request.url.pathname}${request.url.search}`,
      method: request.method,
      headers: request.headers,
      ...(request.body !== undefined ? { body: request.body } : {}),
      headersTimeout: 0,
      bodyTimeout: 0,
    },
    handler,
  );

  return {
    head,
    read() {
      if (chunks.length > 0) {
        const out = chunks;
        chunks = [];
        buffered = 0;
        if (controller?.paused) controller.resume();
        return Promise.resolve(out);
      }
      if (failure) return Promise.reject(failure);
      if (ended) return Promise.resolve(null);
      return new Promise<Buffer[] | null>((resolve, reject) => {
        waiter = { resolve, reject };
      });
    },
    get complete() {
      return ended;
    },
    abort(reason) {
      if (ended || failure) return;
      if (controller) controller.abort(reason);
      else pendingAbort = reason;
      // undici reports the abort through onResponseError; until it does (or when the request is
      // still queued for a connection), readers learn it here.
      fail(reason);
    },
  };
}

/** Reads a call's body to its end (at most `maxBytes`, the rest dropped and the call cut) as UTF-8 text. */
export async function readUpstreamText(call: UpstreamCall, maxBytes: number): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for (let batch = await call.read(); batch !== null; batch = await call.read()) {
    for (const chunk of batch) {
      if (size + chunk.length > maxBytes) {
        parts.push(chunk.subarray(0, maxBytes - size));
        call.abort(new Error('upstream body over the read limit'));
        return Buffer.concat(parts).toString('utf8');
      }
      parts.push(chunk);
      size += chunk.length;
    }
  }
  return Buffer.concat(parts).toString('utf8');
}

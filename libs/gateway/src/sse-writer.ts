/**
 * Writes an SSE stream to a Node HTTP response: the headers SSE clients and proxies expect,
 * one flush per event, backpressure (waits for `drain` when the socket buffer is full),
 * comment heartbeats while idle, and a `closed` flag once the client is gone.
 */
import type { ServerResponse } from 'node:http';
import { formatSseComment } from '@weir/streaming';

/** An open SSE stream. */
export interface SseWriter {
  /** Writes framed text; resolves when it may write again (after `drain` if needed). */
  write(framed: string): Promise<void>;
  /** Ends the response. */
  end(): void;
  /** True once the client has gone away or the stream ended. */
  readonly closed: boolean;
}

/** Options of {@link openSse}. */
export interface SseWriterOptions {
  /** Idle time before a `: ping` comment (ms). Default 15,000. 0 disables. */
  heartbeatMs?: number;
  headers?: Record<string, string>;
}

/** Sends the SSE headers and returns a writer. */
export function openSse(res: ServerResponse, options: SseWriterOptions = {}): SseWriter {
  res.writeHead(200, {
    ...options.headers,
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  let closed = false;
  const heartbeatMs = options.heartbeatMs ?? 15_000;
  let heartbeat: NodeJS.Timeout | undefined;
  const arm = () => {
    if (heartbeatMs <= 0 || closed) return;
    if (heartbeat) heartbeat.refresh();
    else heartbeat = setTimeout(() => {
      heartbeat = undefined;
      if (!closed) res.write(formatSseComment('ping'));
      arm();
    }, heartbeatMs);
  };
  const stop = () => {
    closed = true;
    if (heartbeat) clearTimeout(heartbeat);
  };
  res.on('close', stop);
  arm();
  return {
    get closed() {
      return closed || res.destroyed;
    },
    async write(framed) {
      if (closed || res.destroyed) return;
      arm();
      if (res.write(framed)) return;
      await new Promise<void>((resolve) => {
        const done = () => {
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
    },
    end() {
      stop();
      if (!res.writableEnded) res.end();
    },
  };
}

/**
 * Writes an SSE stream to a Node HTTP response: the headers SSE clients and proxies expect,
 * events coalesced into one socket write per event-loop turn, backpressure (waits for `drain`
 * when the socket buffer is full), comment heartbeats while idle, and a `closed` flag once the
 * client is gone.
 *
 * Why coalesce: the deltas of one upstream read reach the writer in the same turn (one chain
 * of promise jobs); a `res.write` each was a chunk header and a `writev` system call per
 * event — on this platform's VMs the largest single cost of a streamed answer. Events are
 * appended to a string and written once, from a `process.nextTick` queued after the turn's
 * promise jobs ran; `end()` writes what is pending with the end of the response. Nothing waits
 * for a timer, so an event is on the wire before the process next waits for I/O.
 *
 * A client that stops reading cannot hold the stream for good: once the socket's buffer is full,
 * what is written waits (the reader awaits `drain`), heartbeats are skipped, and if the buffer
 * has not drained after `stallMs` the response is destroyed (its connection closed; the
 * generation is stopped as for any client that left). The timer runs only while the buffer is
 * full, so a stream that is read costs nothing more.
 */
import type { ServerResponse } from 'node:http';
import { formatSseComment } from '@weir/streaming';

/** An open SSE stream. */
export interface SseWriter {
  /**
   * Queues framed text for this turn's write. Returns undefined when more may be written at
   * once, or a promise that resolves once the socket drained (or the client left) when its
   * buffer is full: await it before writing more.
   */
  write(framed: string): Promise<void> | undefined;
  /** Writes what is pending and ends the response. */
  end(): void;
  /** True once the client has gone away or the stream ended. */
  readonly closed: boolean;
}

/** Options of {@link openSse}. */
export interface SseWriterOptions {
  /** Idle time before a `: ping` comment (ms). Default 15,000. 0 disables. */
  heartbeatMs?: number;
  headers?: Record<string, string>;
  /** How long the socket's buffer may stay full before the stream is ended and its connection closed (ms). Default 60,000. 0 disables. */
  stallMs?: number;
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
  let pending = '';
  let scheduled = false;
  /** Set while the socket's buffer is over its high-water mark: resolves on `drain` or `close`. */
  let draining: Promise<void> | undefined;
  const heartbeatMs = options.heartbeatMs ?? 15_000;
  const stallMs = options.stallMs ?? 60_000;
  let heartbeat: NodeJS.Timeout | undefined;
  // The heartbeat timer is refreshed at most once per turn (at the flush), not per event.
  const arm = () => {
    if (heartbeatMs <= 0 || closed) return;
    if (heartbeat) heartbeat.refresh();
    else heartbeat = setTimeout(() => {
      heartbeat = undefined;
      if (!closed && !res.destroyed && !draining) res.write(formatSseComment('ping'));
      arm();
    }, heartbeatMs);
  };
  const stop = () => {
    closed = true;
    if (heartbeat) clearTimeout(heartbeat);
  };
  const flush = () => {
    scheduled = false;
    if (pending.length === 0 || closed || res.destroyed) {
      pending = '';
      return;
    }
    const text = pending;
    pending = '';
    arm();
    if (res.write(text) || draining) return;
    draining = new Promise<void>((resolve) => {
      const stalled = stallMs > 0 ? setTimeout(() => res.destroy(), stallMs) : undefined;
      const done = () => {
        if (stalled) clearTimeout(stalled);
        res.off('drain', done);
        res.off('close', done);
        draining = undefined;
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
  };
  const schedule = () => process.nextTick(flush);
  res.on('close', stop);
  arm();
  return {
    get closed() {
      return closed || res.destroyed;
    },
    write(framed) {
      if (closed || res.destroyed) return undefined;
      pending += framed;
      if (!scheduled) {
        scheduled = true;
        // A tick queued from a promise job runs once every promise job of the turn ran (Node
        // drains the microtask queue before the next tick); queued from plain code it would
        // run first, hence the hop through a microtask.
        queueMicrotask(schedule);
      }
      return draining;
    },
    end() {
      const text = pending;
      pending = '';
      stop();
      if (res.writableEnded) return;
      if (text.length > 0 && !res.destroyed) res.end(text);
      else res.end();
    },
  };
}

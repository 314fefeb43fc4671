/**
 * `weir.mux.v1`: the split's per-request calls (Admit, Acquire, Release, Settle, Generate,
 * Stop…) as logical calls multiplexed on ONE long-lived gRPC bidi stream per client
 * connection, instead of one HTTP/2 stream per call. A grpc-js call costs a stream, headers,
 * a filter stack and a handful of objects on both sides; a logical call costs a small
 * hand-encoded frame (mux-frames.ts), and the frames of one event-loop turn share one gRPC
 * message (one HTTP/2 DATA frame, one syscall).
 *
 * Both ends keep grpc-js's call semantics, so the port clients and server bindings are the
 * same code whichever way a call travels:
 * - the client side ({@link MuxCalls}) offers `makeUnaryRequest` / `makeServerStreamRequest`
 *   with grpc-js's signatures and events (`data`, `error` with a `ServiceError`, `end`;
 *   `cancel()`), deadlines included (DEADLINE_EXCEEDED on the client's clock; the server is
 *   told to cancel);
 * - the server side gives each logical call to the service's own grpc-js handler through a
 *   call object with the fields and events those handlers use (`request`, `metadata`,
 *   `cancelled` + `'cancelled'`, `getDeadline()`, `write()` → backpressure of the shared
 *   stream + `'drain'`, `end()`, `emit('error', status)`, the unary callback).
 * - Statuses, Weir error trailers (`-bin` too) and trace context (`traceparent`,
 *   `tracestate`, only when tracing is on) travel in the frames.
 * - Cancel of one logical call (client `cancel()`, deadline) cancels only it.
 * - When the shared stream breaks (peer killed or restarting, connection lost), every logical
 *   call on it fails as a lost connection does today (UNAVAILABLE) and the server side sees
 *   each of its calls cancelled; the next call opens a new stream (grpc-js reconnects the
 *   channel with its backoff).
 * - A request over 1 MiB goes as a plain call (a message over the peer's size limit fails
 *   only its own call, never the shared stream).
 * - A server without the mux service (UNIMPLEMENTED) makes the client fall back to plain
 *   grpc-js calls for good, replaying the calls that were waiting on the refused stream.
 * - A server shutting down with a grace period answers new logical calls UNAVAILABLE and ends
 *   each stream once its calls are done, so `tryShutdown` completes.
 */
import { EventEmitter } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import { FRAME_CANCEL, FRAME_DATA, FRAME_START, FRAME_STATUS, type Frame, type MuxMetadata, NO_DEADLINE, decodeFrames, encodeFrame } from './mux-frames';

/** The gRPC path of the mux stream. */
export const MUX_PATH = '/weir.mux.v1.Mux/Call';

const identity = (b: Buffer) => b;

/** Longest delay `setTimeout` takes (a longer one fires at once): deadlines farther off get no timer. */
const MAX_TIMER_MS = 0x7fffffff;

/**
 * Requests larger than this (bytes) go as plain gRPC calls: a message over the peer's limit
 * (grpc-js: 4 MiB) fails the stream it travels on, and on the mux that would be every call's.
 */
const MUX_MAX_REQUEST_BYTES = 1024 * 1024;

/** Frames are coalesced into one gRPC message up to this size (bytes). */
const COALESCE_LIMIT = 256 * 1024;

/** The grpc-js definition of the mux service (raw bytes in, raw bytes out). */
export const MUX_SERVICE_DEFINITION: grpc.ServiceDefinition = {
  call: {
    path: MUX_PATH,
    requestStream: true,
    responseStream: true,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
    originalName: 'Call',
  },
};

// ---- shared helpers ------------------------------------------------------------------------

function metadataToMux(metadata: grpc.Metadata | undefined): MuxMetadata {
  if (!metadata) return [];
  const out: [string, string | Buffer][] = [];
  for (const [key, values] of Object.entries(metadata.toJSON())) for (const v of values) out.push([key, v]);
  return out;
}

function metadataFromMux(entries: MuxMetadata): grpc.Metadata {
  const metadata = new grpc.Metadata();
  for (const [k, v] of entries) metadata.add(k, v);
  return metadata;
}

/** A grpc-js style call error (as `callErrorFromStatus` builds it). */
export function serviceError(code: grpc.status, details: string, metadata: grpc.Metadata = new grpc.Metadata()): grpc.ServiceError {
  const error = new Error(`${code} ${grpc.status[code]}: ${details}`) as grpc.ServiceError;
  return Object.assign(error, { code, details, metadata });
}

/**
 * Frames queued during one event-loop turn, written as one gRPC message. Until `ready` (the
 * stream is up: the client waits for the server's response headers) frames are held here,
 * not in grpc-js's buffer, so a START's deadline is measured when it is really sent.
 */
class FrameWriter {
  private queue: Array<{ frame: Frame; deadlineAt?: number }> = [];
  private queuedBytes = 0;
  private scheduled = false;
  private waiting = false;
  /** True after a write the stream could not take at once, until it drains. */
  private blocked = false;

  constructor(
    private readonly write: (message: Buffer) => boolean,
    private readonly usable: () => boolean,
    public ready = true,
    /** Called when a writer that was told to wait may write again. */
    private readonly onDrain: () => void = () => undefined,
  ) {}

  /**
   * Queues `frame`; a START's deadline field is set at write time from `deadlineAt` (epoch ms).
   * Returns false when the writer wants the caller to wait for `onDrain` (the stream is
   * blocked, or a turn's frames exceed the coalescing limit), as `stream.write` does.
   */
  push(frame: Frame, deadlineAt?: number): boolean {
    this.queue.push(deadlineAt === undefined ? { frame } : { frame, deadlineAt });
    if (frame.type === FRAME_DATA) this.queuedBytes += frame.payload.length;
    if (this.ready && this.queuedBytes >= COALESCE_LIMIT) this.flush();
    else if (!this.scheduled && this.ready) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
    const ok = !this.blocked && this.queuedBytes < COALESCE_LIMIT;
    if (!ok) this.waiting = true;
    return ok;
  }

  /** The stream drained. */
  drained(): void {
    this.blocked = false;
    if (this.waiting && this.queuedBytes === 0) {
      this.waiting = false;
      this.onDrain();
    }
  }

  /** The stream is up: writes what waited. */
  markReady(): void {
    this.ready = true;
    this.flush();
  }

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.queue.length === 0 || !this.ready) return;
    const now = Date.now();
    const parts = this.queue.map(({ frame, deadlineAt }) => {
      if (deadlineAt !== undefined && frame.type === FRAME_START) frame.deadlineMs = Math.max(0, Math.min(NO_DEADLINE - 1, Math.ceil(deadlineAt - now)));
      return encodeFrame(frame);
    });
    this.queue = [];
    this.queuedBytes = 0;
    if (!this.usable()) return;
    // Several frames per gRPC message, but no message above COALESCE_LIMIT unless one frame
    // is (the peer's max message size bounds single calls as it did before the mux).
    let batch: Buffer[] = [];
    let size = 0;
    const send = () => {
      if (batch.length === 0) return;
      const message = batch.length === 1 ? batch[0] : Buffer.concat(batch, size);
      batch = [];
      size = 0;
      try {
        if (!this.write(message)) this.blocked = true;
      } catch {
        // The stream is closing: its own error/end handler fails what was on it.
      }
    };
    for (const part of parts) {
      if (size > 0 && size + part.length > COALESCE_LIMIT) send();
      batch.push(part);
      size += part.length;
    }
    send();
    if (!this.blocked && this.waiting) {
      // Everything queued went out and the stream took it: whoever waited may go on.
      this.waiting = false;
      setImmediate(this.onDrain);
    }
  };
}

// ---- server --------------------------------------------------------------------------------

/** A method a mux server can dispatch: its grpc-js definition and handler. */
export interface MuxRoute {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.UntypedHandleCall;
}

/** The server half: the bidi handler to register, plus shutdown hooks. */
export interface MuxServer {
  readonly handler: grpc.handleBidiStreamingCall<Buffer, Buffer>;
  /** Answers new logical calls UNAVAILABLE and ends each stream once its calls are done. */
  drain(): void;
  /** Cancels every logical call (the server is being cut). */
  cancelAll(): void;
  /** Open mux streams (tests, metrics). */
  streams(): number;
  /** Logical calls in flight across streams (tests, metrics). */
  calls(): number;
}

interface ServerStreamState {
  calls: Map<number, MuxServerCall>;
  writer: FrameWriter;
  finish(): void;
  closed: boolean;
}

/** One logical call as the service's grpc-js handler sees it. */
class MuxServerCall extends EventEmitter {
  cancelled = false;
  private finished = false;
  private timer: NodeJS.Timeout | undefined;
  readonly metadata: grpc.Metadata;

  constructor(
    private readonly state: ServerStreamState,
    private readonly id: number,
    readonly request: unknown,
    metadata: MuxMetadata,
    private deadline: number,
    private readonly path: string,
    private readonly serialize: (value: unknown) => Buffer,
    private readonly onDone: () => void,
  ) {
    super();
    this.metadata = metadataFromMux(metadata);
    if (Number.isFinite(deadline) && deadline - Date.now() <= MAX_TIMER_MS) {
      this.timer = setTimeout(() => this.expire(), Math.max(0, deadline - Date.now()));
      this.timer.unref?.();
    }
  }

  /** The call's deadline; once the call is cancelled (the caller gave up), the moment it was. */
  getDeadline(): grpc.Deadline {
    return Number.isFinite(this.deadline) ? new Date(this.deadline) : Infinity;
  }

  getPeer(): string {
    return 'mux';
  }

  getPath(): string {
    return this.path;
  }

  sendMetadata(): void {
    // Response headers do not cross the mux.
  }

  /** Writes one response message; false when the shared stream asks to wait for `'drain'`. */
  write(message: unknown): boolean {
    if (this.finished) return false;
    let payload: Buffer;
    try {
      payload = this.serialize(message);
    } catch (error) {
      this.fail(serviceError(grpc.status.INTERNAL, `could not serialize the response: ${String(error)}`));
      return false;
    }
    return this.state.writer.push({ type: FRAME_DATA, id: this.id, payload });
  }

  end(): void {
    this.status(grpc.status.OK, 'OK', []);
  }

  /** grpc-js handlers report a failed stream with `call.emit('error', status)`. */
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'error') {
      this.fail(args[0]);
      return true;
    }
    return super.emit(event, ...args);
  }

  /** The unary handlers' callback. */
  readonly callback = (error: unknown, value?: unknown): void => {
    if (error) {
      this.fail(error);
      return;
    }
    if (this.write(value)) this.end();
    else if (!this.finished) this.end();
  };

  fail(error: unknown): void {
    const e = (error ?? {}) as Partial<grpc.StatusObject> & { message?: string };
    const code = typeof e.code === 'number' ? e.code : grpc.status.UNKNOWN;
    this.status(code, e.details ?? e.message ?? 'Unknown error', metadataToMux(e.metadata));
  }

  private status(code: number, details: string, metadata: MuxMetadata): void {
    if (this.finished) return;
    this.finished = true;
    clearTimeout(this.timer);
    this.state.writer.push({ type: FRAME_STATUS, id: this.id, code, details, metadata });
    this.onDone();
  }

  private expire(): void {
    if (this.finished) return;
    this.status(grpc.status.DEADLINE_EXCEEDED, 'Deadline exceeded', []);
    this.cancelled = true;
    super.emit('cancelled', 'deadline');
  }

  /** The client cancelled, or the shared stream is gone. */
  cancel(): void {
    if (this.finished) return;
    this.finished = true;
    clearTimeout(this.timer);
    this.cancelled = true;
    this.deadline = Math.min(this.deadline, Date.now());
    this.onDone();
    super.emit('cancelled', 'cancelled');
  }
}

/** Builds the server half dispatching to `routes` (by method path). */
export function createMuxServer(routes: ReadonlyMap<string, MuxRoute>): MuxServer {
  const open = new Set<ServerStreamState>();
  let draining = false;

  const handler: grpc.handleBidiStreamingCall<Buffer, Buffer> = (stream) => {
    // Response headers at once: they tell the client the stream is up (see FrameWriter).
    stream.sendMetadata(new grpc.Metadata());
    const state: ServerStreamState = {
      calls: new Map(),
      closed: false,
      writer: new FrameWriter(
        (m) => stream.write(m),
        () => !state.closed,
        true,
        () => {
          for (const call of [...state.calls.values()]) call.emit('drain');
        },
      ),
      finish() {
        if (state.closed) return;
        state.writer.flush();
        state.closed = true;
        open.delete(state);
        try {
          stream.end();
        } catch {
          // Already gone.
        }
      },
    };
    open.add(state);
    stream.on('drain', () => state.writer.drained());

    const gone = () => {
      if (state.closed && state.calls.size === 0) return;
      state.closed = true;
      open.delete(state);
      for (const call of [...state.calls.values()]) call.cancel();
    };
    stream.on('cancelled', gone);
    stream.on('error', gone);
    // The client half-closed: it sends nothing more (it closes the connection).
    stream.on('end', () => {
      for (const call of [...state.calls.values()]) call.cancel();
      state.finish();
    });

    const start = (frame: Extract<Frame, { type: typeof FRAME_START }>) => {
      const route = routes.get(frame.path);
      const reply = (code: grpc.status, details: string) => state.writer.push({ type: FRAME_STATUS, id: frame.id, code, details, metadata: [] });
      if (draining) return reply(grpc.status.UNAVAILABLE, 'the server is shutting down');
      if (!route || route.definition.requestStream) return reply(grpc.status.UNIMPLEMENTED, `The server does not implement the method ${frame.path}`);
      if (state.calls.has(frame.id)) return reply(grpc.status.INTERNAL, `mux call id ${frame.id} is already in use`);
      let request: unknown;
      try {
        request = route.definition.requestDeserialize(frame.payload);
      } catch (error) {
        return reply(grpc.status.INTERNAL, `Error deserializing request: ${error instanceof Error ? error.message : String(error)}`);
      }
      const deadline = frame.deadlineMs === NO_DEADLINE ? Infinity : Date.now() + frame.deadlineMs;
      const call = new MuxServerCall(state, frame.id, request, frame.metadata, deadline, frame.path, route.definition.responseSerialize, () => {
        state.calls.delete(frame.id);
        if (draining && state.calls.size === 0) state.finish();
      });
      state.calls.set(frame.id, call);
      try {
        if (route.definition.responseStream) (route.handler as grpc.handleServerStreamingCall<unknown, unknown>)(call as unknown as grpc.ServerWritableStream<unknown, unknown>);
        else (route.handler as grpc.handleUnaryCall<unknown, unknown>)(call as unknown as grpc.ServerUnaryCall<unknown, unknown>, call.callback);
      } catch (error) {
        call.fail(serviceError(grpc.status.UNKNOWN, error instanceof Error ? error.message : String(error)));
      }
    };

    stream.on('data', (message: Buffer) => {
      try {
        decodeFrames(message, (frame) => {
          if (frame.type === FRAME_START) start(frame);
          else if (frame.type === FRAME_CANCEL) state.calls.get(frame.id)?.cancel();
        });
      } catch {
        // A peer that sends garbage loses its stream (and its calls).
        gone();
        stream.emit('error', serviceError(grpc.status.INTERNAL, 'malformed mux frame'));
      }
    });
  };

  return {
    handler,
    drain() {
      draining = true;
      for (const state of [...open]) if (state.calls.size === 0) state.finish();
    },
    cancelAll() {
      for (const state of [...open]) {
        state.closed = true;
        open.delete(state);
        for (const call of [...state.calls.values()]) call.cancel();
      }
    },
    streams: () => open.size,
    calls: () => [...open].reduce((n, s) => n + s.calls.size, 0),
  };
}

// ---- client --------------------------------------------------------------------------------

/** The two call shapes the port clients use, with grpc-js's signatures. */
export interface CallSurface {
  makeUnaryRequest<I, O>(
    path: string,
    serialize: (value: I) => Buffer,
    deserialize: (bytes: Buffer) => O,
    request: I,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
    callback: grpc.requestCallback<O>,
  ): { cancel(): void };
  makeServerStreamRequest<I, O>(
    path: string,
    serialize: (value: I) => Buffer,
    deserialize: (bytes: Buffer) => O,
    request: I,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
  ): MuxClientStream;
}

/** A server-streaming call: `data`, then `end` or one `error`. */
export interface MuxClientStream extends EventEmitter {
  cancel(): void;
}

/** The client half: {@link CallSurface} over one mux stream at a time, plus introspection. */
export interface MuxCalls extends CallSurface {
  /** Mux streams opened so far (tests: a restart opens a new one). */
  streamsOpened(): number;
  /** Logical calls in flight. */
  inFlight(): number;
  /** True once the peer refused the mux (UNIMPLEMENTED) and calls go as plain gRPC calls. */
  fellBack(): boolean;
  /** Fails what is in flight (CANCELLED) and ends the stream. */
  close(): void;
}

interface ClientCall {
  onData(payload: Buffer): void;
  onStatus(code: number, details: string, metadata: grpc.Metadata): void;
  /** Re-issues the call as a plain gRPC call (the peer has no mux). */
  replay(): void;
}

interface ClientStreamState {
  stream: grpc.ClientDuplexStream<Buffer, Buffer>;
  calls: Map<number, ClientCall>;
  writer: FrameWriter;
  dead: boolean;
  received: boolean;
}

function deadlineMsOf(options: grpc.CallOptions): number {
  const d = options.deadline;
  if (d === undefined) return Infinity;
  const at = d instanceof Date ? d.getTime() : d;
  return at;
}

/** Multiplexes the calls of `client` (one channel) on one bidi stream at a time. */
export function createMuxCalls(client: grpc.Client): MuxCalls {
  let current: ClientStreamState | undefined;
  let nextId = 1;
  let opened = 0;
  let fallback = false;
  let closed = false;

  const open = (): ClientStreamState => {
    if (current && !current.dead) return current;
    opened++;
    const stream = client.makeBidiStreamRequest<Buffer, Buffer>(MUX_PATH, identity, identity, new grpc.Metadata(), {});
    const state: ClientStreamState = {
      stream,
      calls: new Map(),
      dead: false,
      received: false,
      writer: new FrameWriter(
        (m) => stream.write(m),
        () => !state.dead,
        false,
      ),
    };
    current = state;
    stream.on('metadata', () => state.writer.markReady());
    const lost = (code: grpc.status, details: string) => {
      if (state.dead) return;
      state.dead = true;
      if (current === state) current = undefined;
      const calls = [...state.calls.values()];
      state.calls.clear();
      if (code === grpc.status.UNIMPLEMENTED && !state.received) {
        // The peer predates the mux: plain calls from now on, these included (none ran there).
        fallback = true;
        for (const call of calls) call.replay();
        return;
      }
      for (const call of calls) call.onStatus(code, details, new grpc.Metadata());
    };
    stream.on('data', (message: Buffer) => {
      state.received = true;
      try {
        decodeFrames(message, (frame) => {
          if (frame.type === FRAME_DATA) state.calls.get(frame.id)?.onData(frame.payload);
          else if (frame.type === FRAME_STATUS) {
            const call = state.calls.get(frame.id);
            if (!call) return;
            state.calls.delete(frame.id);
            call.onStatus(frame.code, frame.details, metadataFromMux(frame.metadata));
          }
        });
      } catch {
        stream.cancel();
        lost(grpc.status.INTERNAL, 'malformed mux frame from the peer');
      }
    });
    stream.on('drain', () => state.writer.drained());
    stream.on('error', (error: grpc.ServiceError) => {
      const code = error.code === grpc.status.UNIMPLEMENTED ? grpc.status.UNIMPLEMENTED : grpc.status.UNAVAILABLE;
      lost(code, `the connection to the peer was lost (${error.details ?? error.message})`);
    });
    // The server ended the stream (draining): calls still on it never ran there.
    stream.on('end', () => {
      lost(grpc.status.UNAVAILABLE, 'the peer closed the call stream (shutting down)');
      try {
        stream.end();
      } catch {
        // Already closed.
      }
    });
    return state;
  };

  /** Starts one logical call; `call` gets its data and status. Returns its cancel. */
  const startCall = (path: string, payload: Buffer, metadata: grpc.Metadata, options: grpc.CallOptions, call: ClientCall): ((status?: [grpc.status, string]) => void) => {
    const deadlineAt = deadlineMsOf(options);
    const state = open();
    const id = nextId;
    nextId = nextId >= 0xfffffffe ? 1 : nextId + 1;
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = () => {
      done = true;
      clearTimeout(timer);
      if (state.calls.get(id) === wrapped) state.calls.delete(id);
    };
    const wrapped: ClientCall = {
      onData: (p) => {
        if (!done) call.onData(p);
      },
      onStatus: (code, details, md) => {
        if (done) return;
        finish();
        call.onStatus(code, details, md);
      },
      replay: () => {
        if (done) return;
        finish();
        call.replay();
      },
    };
    const cancel = (status: [grpc.status, string] = [grpc.status.CANCELLED, 'Cancelled on client']) => {
      if (done) return;
      finish();
      if (!state.dead) state.writer.push({ type: FRAME_CANCEL, id });
      call.onStatus(status[0], status[1], new grpc.Metadata());
    };
    const remaining = deadlineAt - Date.now();
    if (remaining <= 0) {
      done = true;
      process.nextTick(() => call.onStatus(grpc.status.DEADLINE_EXCEEDED, 'Deadline exceeded', new grpc.Metadata()));
      return () => undefined;
    }
    state.calls.set(id, wrapped);
    const start: Frame = { type: FRAME_START, id, deadlineMs: NO_DEADLINE, path, metadata: metadataToMux(metadata), payload };
    if (Number.isFinite(remaining)) state.writer.push(start, deadlineAt);
    else state.writer.push(start);
    if (Number.isFinite(remaining) && remaining <= MAX_TIMER_MS) {
      // The server is told first (the CANCEL frame goes out in this turn's flush); the caller
      // hears of the deadline a turn later, as with grpc-js.
      timer = setTimeout(() => {
        if (done) return;
        finish();
        if (!state.dead) state.writer.push({ type: FRAME_CANCEL, id });
        setImmediate(() => call.onStatus(grpc.status.DEADLINE_EXCEEDED, 'Deadline exceeded', new grpc.Metadata()));
      }, remaining);
    }
    return cancel;
  };

  const failSoon = (fn: () => void) => process.nextTick(fn);

  const surface: MuxCalls = {
    makeUnaryRequest(path, serialize, deserialize, request, metadata, options, callback) {
      if (fallback || closed) return client.makeUnaryRequest(path, serialize, deserialize, request, metadata, options, callback);
      let payload: Buffer;
      try {
        payload = serialize(request);
      } catch (error) {
        failSoon(() => callback(serviceError(grpc.status.INTERNAL, `Request message serialization failure: ${String(error)}`)));
        return { cancel: () => undefined };
      }
      if (payload.length > MUX_MAX_REQUEST_BYTES) return client.makeUnaryRequest(path, serialize, deserialize, request, metadata, options, callback);
      let response: { value: unknown } | undefined;
      let plain: grpc.ClientUnaryCall | undefined;
      let settled = false;
      const cancel = startCall(path, payload, metadata, options, {
        onData(bytes) {
          try {
            response = { value: deserialize(bytes) };
          } catch (error) {
            cancel([grpc.status.INTERNAL, `Failed to parse server response: ${String(error)}`]);
          }
        },
        onStatus(code, details, md) {
          if (settled) return;
          settled = true;
          if (code !== grpc.status.OK) callback(serviceError(code, details, md));
          else if (!response) callback(serviceError(grpc.status.UNIMPLEMENTED, 'No message received'));
          else callback(null, response.value as never);
        },
        replay() {
          plain = client.makeUnaryRequest(path, serialize, deserialize, request, metadata, options, callback);
        },
      });
      return {
        cancel() {
          if (plain) plain.cancel();
          // grpc-js reports a cancel after the caller's synchronous code: so does the mux.
          else failSoon(() => cancel());
        },
      };
    },

    makeServerStreamRequest(path, serialize, deserialize, request, metadata, options) {
      const emitter = new EventEmitter() as MuxClientStream;
      if (fallback || closed) return client.makeServerStreamRequest(path, serialize, deserialize, request, metadata, options) as unknown as MuxClientStream;
      let payload: Buffer;
      try {
        payload = serialize(request);
      } catch (error) {
        emitter.cancel = () => undefined;
        failSoon(() => emitter.emit('error', serviceError(grpc.status.INTERNAL, `Request message serialization failure: ${String(error)}`)));
        return emitter;
      }
      if (payload.length > MUX_MAX_REQUEST_BYTES) return client.makeServerStreamRequest(path, serialize, deserialize, request, metadata, options) as unknown as MuxClientStream;
      let plain: grpc.ClientReadableStream<unknown> | undefined;
      const cancel = startCall(path, payload, metadata, options, {
        onData(bytes) {
          let value: unknown;
          try {
            value = deserialize(bytes);
          } catch (error) {
            cancel([grpc.status.INTERNAL, `Failed to parse server response: ${String(error)}`]);
            return;
          }
          emitter.emit('data', value);
        },
        onStatus(code, details, md) {
          if (code === grpc.status.OK) emitter.emit('end');
          else emitter.emit('error', serviceError(code, details, md));
        },
        replay() {
          const p = client.makeServerStreamRequest(path, serialize, deserialize, request, metadata, options);
          plain = p;
          p.on('data', (v: unknown) => emitter.emit('data', v));
          p.on('error', (e: unknown) => emitter.emit('error', e));
          p.on('end', () => emitter.emit('end'));
        },
      });
      emitter.cancel = () => {
        if (plain) plain.cancel();
        else failSoon(() => cancel());
      };
      return emitter;
    },

    streamsOpened: () => opened,
    inFlight: () => current?.calls.size ?? 0,
    fellBack: () => fallback,
    close() {
      closed = true;
      const state = current;
      current = undefined;
      if (!state) return;
      state.dead = true;
      const calls = [...state.calls.values()];
      state.calls.clear();
      for (const call of calls) call.onStatus(grpc.status.CANCELLED, 'Channel closed', new grpc.Metadata());
      state.stream.cancel();
    },
  };
  return surface;
}

/**
 * The mux (`weir.mux.v1`): logical calls on one long-lived stream keep grpc-js's per-call
 * semantics — interleaving, cancel of one call only, deadlines, statuses with trailers,
 * backpressure, a peer restart, graceful drain, and plain calls to a server without the mux.
 */
import * as grpc from '@grpc/grpc-js';
import { WeirError } from '@weir/core';
import { fromGrpcError, toGrpcError } from './grpc-errors';
import { MUX_PATH, createMuxCalls } from './mux';
import { FRAME_CANCEL, FRAME_DATA, FRAME_START, FRAME_STATUS, type Frame, decodeFrames, encodeFrame } from './mux-frames';
import { type RunningGrpcServer, startGrpcServer } from './grpc-server';
import type { GrpcServiceBinding } from './server-handlers';
import { eventually } from './test-support';
import { createSchedulerGrpcClient, createSchedulerGrpcServer } from './scheduler-grpc';
import { contractCallers } from '@weir/testing';
import { type SchedulerService, systemClock } from '@weir/core';

const raw = (b: Buffer) => b;
const text = (s: string) => Buffer.from(s);
const ECHO = '/test.Test/Echo';
const STREAM = '/test.Test/Stream';

/** What the test service saw: calls started, cancelled, finished. */
interface Seen {
  started: string[];
  cancelled: string[];
}

/**
 * A raw-bytes service: Echo answers its request after `delay:<ms>:` (or hangs on `hang`, fails
 * on `fail`); Stream sends `n` numbered messages one per `everyMs`, or until cancelled (`n` = 0),
 * or writes 64 KiB chunks honouring backpressure (`flood:<n>`).
 */
function testService(seen: Seen): GrpcServiceBinding {
  const definition: grpc.ServiceDefinition = {
    echo: { path: ECHO, requestStream: false, responseStream: false, requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw },
    stream: { path: STREAM, requestStream: false, responseStream: true, requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw },
  };
  const handlers: grpc.UntypedServiceImplementation = {
    echo: ((call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      const req = call.request.toString();
      seen.started.push(req);
      call.once('cancelled', () => seen.cancelled.push(req));
      if (req === 'hang') return;
      if (req === 'fail') return callback(toGrpcError(new WeirError('queue_full', 'full up', { retryable: true, retryAfterMs: 1_234 })));
      const m = /^delay:(\d+):(.*)$/.exec(req);
      if (m) setTimeout(() => callback(null, text(m[2])), Number(m[1]));
      else callback(null, call.request);
    }) as grpc.UntypedHandleCall,
    stream: ((call: grpc.ServerWritableStream<Buffer, Buffer>) => {
      const req = call.request.toString();
      seen.started.push(req);
      let stopped = false;
      call.once('cancelled', () => {
        stopped = true;
        seen.cancelled.push(req);
      });
      const flood = /^flood:(\d+)$/.exec(req);
      if (flood) {
        let i = 0;
        let blockedOnce = false;
        const pump = () => {
          while (!stopped && i < Number(flood[1])) {
            const ok = call.write(Buffer.alloc(64 * 1024, i++ % 256));
            if (!ok) {
              blockedOnce = true;
              call.once('drain', pump);
              return;
            }
          }
          if (!stopped) {
            call.write(text(blockedOnce ? 'blocked' : 'never-blocked'));
            call.end();
          }
        };
        pump();
        return;
      }
      const [n, everyMs] = req.split(':').map(Number);
      let i = 0;
      const tick = () => {
        if (stopped) return;
        if (n > 0 && i >= n) return call.end();
        call.write(text(`${req}#${i++}`));
        setTimeout(tick, everyMs);
      };
      tick();
    }) as grpc.UntypedHandleCall,
  };
  return { name: 'test.Test', definition, handlers, close: () => undefined };
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function serveTest(port = 0): Promise<{ server: RunningGrpcServer; seen: Seen }> {
  const seen: Seen = { started: [], cancelled: [] };
  const server = await startGrpcServer({ services: [testService(seen)], port });
  cleanups.push(() => server.close());
  return { server, seen };
}

function muxTo(address: string) {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 200 });
  const calls = createMuxCalls(client);
  cleanups.push(() => {
    calls.close();
    client.close();
  });
  return calls;
}

type Calls = ReturnType<typeof muxTo>;

function unary(calls: Calls, body: string, deadlineMs = 5_000): Promise<string> & { cancel(): void } {
  let handle: { cancel(): void } = { cancel: () => undefined };
  const p = new Promise<string>((resolve, reject) => {
    handle = calls.makeUnaryRequest(ECHO, raw, raw, text(body), new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (error, value) =>
      error ? reject(error) : resolve((value as Buffer).toString()),
    );
  });
  return Object.assign(p, { cancel: () => handle.cancel() });
}

function stream(calls: Calls, body: string) {
  const got: string[] = [];
  const call = calls.makeServerStreamRequest(STREAM, raw, raw, text(body), new grpc.Metadata(), { deadline: Date.now() + 10_000 });
  const done = new Promise<{ ok: true } | { ok: false; error: grpc.ServiceError }>((resolve) => {
    call.on('data', (b: Buffer) => got.push(b.length > 100 ? `<${b.length}:${b[0]}:${b[b.length - 1]}>` : b.toString()));
    call.on('end', () => resolve({ ok: true }));
    call.on('error', (error: grpc.ServiceError) => resolve({ ok: false, error }));
  });
  return { call, got, done };
}

describe('mux frames', () => {
  it('round-trips every frame type, several per message, binary and text metadata included', () => {
    const frames: Frame[] = [
      { type: FRAME_START, id: 7, deadlineMs: 1500, path: '/a.B/C', metadata: [['traceparent', '00-abc-def-01']], payload: text('hello') },
      { type: FRAME_CANCEL, id: 0xfffffffe },
      { type: FRAME_DATA, id: 3, payload: Buffer.alloc(0) },
      { type: FRAME_STATUS, id: 9, code: 8, details: 'full ✓', metadata: [['weir-error-code', 'queue_full'], ['weir-error-bin', Buffer.from([0, 1, 255])]] },
    ];
    const got: Frame[] = [];
    decodeFrames(Buffer.concat(frames.map(encodeFrame)), (f) => got.push(f));
    expect(got).toEqual(frames);
  });

  it('rejects a truncated message', () => {
    const whole = encodeFrame({ type: FRAME_DATA, id: 1, payload: text('abcdef') });
    expect(() => decodeFrames(whole.subarray(0, whole.length - 2), () => undefined)).toThrow(RangeError);
  });
});

describe('logical calls on one stream', () => {
  it('interleaves unary and streaming calls on a single stream, each answered with its own messages', async () => {
    const { server, seen } = await serveTest();
    const calls = muxTo(server.address);
    const a = stream(calls, '3:15');
    const b = stream(calls, '4:5');
    const replies = await Promise.all([unary(calls, 'delay:40:slow'), unary(calls, 'delay:1:fast'), unary(calls, 'plain')]);
    expect(replies).toEqual(['slow', 'fast', 'plain']);
    expect(await a.done).toEqual({ ok: true });
    expect(await b.done).toEqual({ ok: true });
    expect(a.got).toEqual(['3:15#0', '3:15#1', '3:15#2']);
    expect(b.got).toEqual(['4:5#0', '4:5#1', '4:5#2', '4:5#3']);
    expect(seen.started).toHaveLength(5);
    expect(calls.streamsOpened()).toBe(1);
    expect(calls.inFlight()).toBe(0);
  });

  it('cancels one call only: the server sees that call cancelled, the others go on', async () => {
    const { server, seen } = await serveTest();
    const calls = muxTo(server.address);
    const victim = stream(calls, '0:5');
    const survivor = stream(calls, '6:10');
    const hung = unary(calls, 'hang');
    await eventually(() => victim.got.length >= 2);
    victim.call.cancel();
    const ended = await victim.done;
    expect(ended.ok).toBe(false);
    expect(!ended.ok && ended.error.code).toBe(grpc.status.CANCELLED);
    expect(await eventually(() => seen.cancelled.includes('0:5'))).toBe(true);
    expect(await survivor.done).toEqual({ ok: true });
    expect(survivor.got).toHaveLength(6);
    expect(seen.cancelled).toEqual(['0:5']);
    hung.cancel();
    await expect(hung).rejects.toMatchObject({ code: grpc.status.CANCELLED });
    expect(await eventually(() => seen.cancelled.includes('hang'))).toBe(true);
    expect(await unary(calls, 'after')).toBe('after');
    expect(calls.streamsOpened()).toBe(1);
  });

  it('fails a call past its deadline with DEADLINE_EXCEEDED and cancels it on the server; the stream stays usable', async () => {
    const { server, seen } = await serveTest();
    const calls = muxTo(server.address);
    expect(await unary(calls, 'warm')).toBe('warm');
    const started = performance.now();
    await expect(unary(calls, 'hang', 100)).rejects.toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED });
    expect(performance.now() - started).toBeGreaterThanOrEqual(95);
    expect(await eventually(() => seen.cancelled.includes('hang'))).toBe(true);
    expect(await unary(calls, 'still')).toBe('still');
    expect(calls.streamsOpened()).toBe(1);
  });

  it('keeps a call whose deadline is weeks away (beyond what setTimeout takes) alive on both sides', async () => {
    const { server } = await serveTest();
    const calls = muxTo(server.address);
    const fortyDays = 40 * 24 * 3600 * 1000;
    expect(await unary(calls, 'delay:50:far', fortyDays)).toBe('far');
  });

  it('sends an oversized request as a plain call: over the peer limit it fails alone, the shared stream and its calls go on', async () => {
    const { server } = await serveTest();
    const calls = muxTo(server.address);
    const running = stream(calls, '8:10');
    await eventually(() => running.got.length >= 1);
    // 5 MiB: over grpc-js's default 4 MiB receive limit.
    const huge = 'delay:1:' + 'z'.repeat(5 * 1024 * 1024);
    await expect(unary(calls, huge)).rejects.toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
    expect(await running.done).toEqual({ ok: true });
    expect(running.got).toHaveLength(8);
    // 2 MiB: fits the limit, answered as a plain call.
    expect(await unary(calls, 'delay:1:' + 'y'.repeat(2 * 1024 * 1024))).toHaveLength(2 * 1024 * 1024);
    expect(calls.streamsOpened()).toBe(1);
  });

  it('carries an error status with its Weir trailers (binary detail included)', async () => {
    const { server } = await serveTest();
    const calls = muxTo(server.address);
    const error = await unary(calls, 'fail').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED, details: 'full up' });
    expect(fromGrpcError(error, 'test')).toMatchObject({ code: 'queue_full', message: 'full up', retryable: true, retryAfterMs: 1_234 });
  });

  it('answers a method the server does not host UNIMPLEMENTED, without losing the stream', async () => {
    const { server } = await serveTest();
    const calls = muxTo(server.address);
    const error = await new Promise((resolve) => calls.makeUnaryRequest('/test.Test/Nope', raw, raw, text('x'), new grpc.Metadata(), {}, (e) => resolve(e)));
    expect(error).toMatchObject({ code: grpc.status.UNIMPLEMENTED });
    expect(await unary(calls, 'ok')).toBe('ok');
    expect(calls.streamsOpened()).toBe(1);
  });

  it('honours backpressure: a flooding server waits for drain and every chunk arrives in order', async () => {
    const { server } = await serveTest();
    const calls = muxTo(server.address);
    const flood = stream(calls, 'flood:200');
    expect(await flood.done).toEqual({ ok: true });
    expect(flood.got).toHaveLength(201);
    expect(flood.got.slice(0, 200)).toEqual(Array.from({ length: 200 }, (_, i) => `<65536:${i % 256}:${i % 256}>`));
    // 12.5 MiB in one turn cannot fit HTTP/2's windows: the server had to wait at least once.
    expect(flood.got[200]).toBe('blocked');
  });
});

describe('peer restart and shutdown', () => {
  it('fails the calls in flight UNAVAILABLE when the peer dies, and reconnects on a new stream once it is back', async () => {
    const first = await serveTest();
    const port = first.server.port;
    const calls = muxTo(first.server.address);
    const inFlight = stream(calls, '0:5');
    const hung = unary(calls, 'hang');
    await eventually(() => inFlight.got.length >= 1);
    await first.server.close(); // cut at once
    const lost = await inFlight.done;
    expect(!lost.ok && lost.error.code).toBe(grpc.status.UNAVAILABLE);
    await expect(hung).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(first.seen.cancelled.sort()).toEqual(['0:5', 'hang']);
    // While it is down, new calls fail cleanly (no wedge).
    await expect(unary(calls, 'down', 2_000)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    const second = await serveTest(port);
    let reply: string | undefined;
    const until = Date.now() + 5_000;
    while (reply === undefined && Date.now() < until) {
      reply = await unary(calls, 'back').catch(() => undefined);
      if (reply === undefined) await new Promise((r) => setTimeout(r, 50));
    }
    expect(reply).toBe('back');
    expect(second.seen.started).toContain('back');
    expect(calls.streamsOpened()).toBeGreaterThanOrEqual(2);
  });

  it('drains on a graceful close: calls in flight finish, new ones are refused UNAVAILABLE, and the server stops without waiting out the grace', async () => {
    const { server } = await serveTest();
    const calls = muxTo(server.address);
    const slow = unary(calls, 'delay:150:done');
    await new Promise((r) => setTimeout(r, 30));
    const started = performance.now();
    const closing = server.close(10_000);
    await new Promise((r) => setTimeout(r, 20));
    await expect(unary(calls, 'late')).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(await slow).toBe('done');
    await closing;
    expect(performance.now() - started).toBeLessThan(5_000);
  });
});

describe('a server without the mux', () => {
  it('is served plain gRPC calls, the first ones (sent before the refusal) included', async () => {
    const seen: Seen = { started: [], cancelled: [] };
    const binding = testService(seen);
    const plain = new grpc.Server();
    plain.addService(binding.definition, binding.handlers);
    const port = await new Promise<number>((resolve, reject) => plain.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
    cleanups.push(() => plain.forceShutdown());
    const calls = muxTo(`127.0.0.1:${port}`);
    const s = stream(calls, '2:1');
    expect(await Promise.all([unary(calls, 'one'), unary(calls, 'two')])).toEqual(['one', 'two']);
    expect(await s.done).toEqual({ ok: true });
    expect(s.got).toEqual(['2:1#0', '2:1#1']);
    expect(calls.fellBack()).toBe(true);
    expect(await unary(calls, 'three')).toBe('three');
    expect(seen.started.sort()).toEqual(['2:1', 'one', 'three', 'two']);
    expect(MUX_PATH).toBe('/weir.mux.v1.Mux/Call');
  });
});

describe('the port clients', () => {
  const scheduler: SchedulerService = {
    acquire: async () => ({ ok: true, lease: { replicaId: 'r1', queueMs: 0, release: () => undefined } }),
  };
  const request = () => ({ caller: contractCallers.acme, revisionId: 'rev@1', tokens: 10, deadlineAt: systemClock.now() + 5_000, signal: new AbortController().signal });

  it('use one mux stream per connection by default, and plain calls with mux: false', async () => {
    const server = await startGrpcServer({ services: [createSchedulerGrpcServer(scheduler)] });
    cleanups.push(() => server.close());
    const muxed = createSchedulerGrpcClient({ address: server.address });
    cleanups.push(() => muxed.close());
    const results = await Promise.all([1, 2, 3].map(() => muxed.acquire(request())));
    expect(results).toEqual([1, 2, 3].map(() => expect.objectContaining({ ok: true })));
    expect(server.muxStreams()).toBe(1);
    muxed.close();
    expect(await eventually(() => server.muxStreams() === 0)).toBe(true);
    const plain = createSchedulerGrpcClient({ address: server.address, mux: false });
    cleanups.push(() => plain.close());
    expect((await plain.acquire(request())).ok).toBe(true);
    expect(server.muxStreams()).toBe(0);
  });
});

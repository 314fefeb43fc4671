import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { type GenerationOutcome, type RelayEvent, type RelayJob, type RelayService, type UsageRecord, createAsyncQueue, systemClock } from '@weir/core';
import { priceUsage } from '@weir/ledger';
import { relayV1 } from '@weir/proto';
import { createRelay } from '@weir/streaming';
import { collectRelayEvents, createScriptedEngine, freePort, relayJob, createRecordingSettlements } from '@weir/testing';
import { createRelayGrpcClient, createRelayGrpcServer, isRelayLost, makeGrpcServiceDefinition } from './index';
import { jobToWire } from './relay-grpc';
import { eventually, serve, stopEverythingAfterEach, track } from './test-support';

stopEverythingAfterEach();

function relayOver(engine = createScriptedEngine()) {
  const records: UsageRecord[] = [];
  const relay = createRelay({
    engineFor: (id) => (id === 'tiny@1/0' ? engine : undefined),
    settlements: createRecordingSettlements(records),
    clock: systemClock,
    cancelGraceMs: 50,
  });
  return { relay, records, engine };
}

describe('relay over gRPC', () => {
  it('answers a retryable engine_unavailable with zero usage, not a lost stream, when the relay is unreachable', async () => {
    const client = track(createRelayGrpcClient({ address: `127.0.0.1:${await freePort()}` }));
    const outcome = await client.start(relayJob({ tokens: 5 })).done;
    expect(outcome).toMatchObject({ finishReason: 'error', error: { code: 'engine_unavailable', retryAfterMs: 1_000 }, usage: { outputTokens: 0 }, costNanoUsd: 0 });
    expect(isRelayLost(outcome)).toBe(false);
  });

  it('ends with a synthetic relay-lost error carrying the tokens seen when the relay dies mid-stream', async () => {
    const { relay, records, engine } = relayOver();
    const server = await serve([createRelayGrpcServer(relay)]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const job = relayJob({ tokens: 400, delayMs: 5 });
    const handle = client.start(job);
    let killed = false;
    const events = await collectRelayEvents(handle, (i) => {
      if (i === 3 && !killed) {
        killed = true;
        void server.close(); // forceShutdown: the relay process is gone
      }
    });
    const end = events[events.length - 1];
    if (end.type !== 'end') throw new Error('no end event');
    const seen = events.filter((e) => e.type === 'delta').length;
    expect(seen).toBeGreaterThanOrEqual(4);
    expect(seen).toBeLessThan(400);
    const usage = { inputTokens: job.inputTokens, outputTokens: seen, cachedInputTokens: 0 };
    expect(end.outcome).toMatchObject({
      finishReason: 'error',
      usage,
      costNanoUsd: priceUsage(job.revision.pricing, usage),
      modelRevision: job.revision.id,
      error: { code: 'upstream_error' },
      relayLost: true,
    });
    expect(end.outcome.error?.message).toMatch(/relay was lost/);
    expect(end.outcome.timings.queueMs).toBe(job.queueMs);
    expect(end.outcome.timings.ttftMs).not.toBeNull();
    expect(isRelayLost(end.outcome)).toBe(true);
    expect(await handle.done).toEqual(end.outcome);
    // The relay side saw its caller vanish: it stopped the engine and billed on its own.
    expect(await eventually(() => records.length === 1)).toBe(true);
    expect(records[0].finishReason).toBe('cancelled');
    expect(engine.produced()).toBeLessThan(400);
  });

  it('ends as a deadline (relay-lost, internal), not an upstream error, when the relay goes silent past the deadline', async () => {
    // A hung relay (SIGSTOP): it takes the job and never answers.
    const hung: RelayService = { start: () => ({ events: createAsyncQueue<RelayEvent>(), done: new Promise<GenerationOutcome>(() => undefined), stop: () => undefined }) };
    const server = await serve([createRelayGrpcServer(hung)]);
    const client = track(createRelayGrpcClient({ address: server.address, streamMarginMs: 50 }));
    const now = systemClock.now();
    const outcome = await client.start(relayJob({ tokens: 5 }, { arrivedAt: now, deadlineAt: now + 100 })).done;
    expect(outcome).toMatchObject({ finishReason: 'deadline', relayLost: true, usage: { outputTokens: 0 }, costNanoUsd: 0 });
    expect(outcome.error).toBeUndefined();
  });

  it('marks a lost or unreachable relay as Weir\'s own failure (breakers ignore it)', async () => {
    const unreachable = track(createRelayGrpcClient({ address: `127.0.0.1:${await freePort()}` }));
    expect((await unreachable.start(relayJob({ tokens: 5 })).done).error).toMatchObject({ code: 'engine_unavailable', internal: true });
    const { relay } = relayOver();
    const server = await serve([createRelayGrpcServer(relay)]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const handle = client.start(relayJob({ tokens: 400, delayMs: 5 }));
    await collectRelayEvents(handle, (i) => {
      if (i === 2) void server.close();
    });
    expect((await handle.done).error).toMatchObject({ code: 'upstream_error', internal: true });
  });

  it('passes tool-call deltas through in order and ends with tool_calls', async () => {
    const { relay } = relayOver();
    const server = await serve([createRelayGrpcServer(relay)]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const handle = client.start(relayJob({ tokens: 1, toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }], argumentsChunk: 6 }));
    const events = await collectRelayEvents(handle);
    expect(events.slice(0, -1)).toEqual([
      { type: 'delta', text: 't0 ', tokens: 1 },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_1', name: 'get_weather', argumentsDelta: '' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '{"city' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '":"Par' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: 'is"}' }] },
    ]);
    expect(await handle.done).toMatchObject({ finishReason: 'tool_calls', usage: { outputTokens: 5 } });
  });

  it('is not relay-lost for a normal end', async () => {
    const server = await serve([createRelayGrpcServer(relayOver().relay)]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const outcome = await client.start(relayJob({ tokens: 2 })).done;
    expect(isRelayLost(outcome)).toBe(false);
    expect(outcome.relayLost).toBeUndefined();
  });

  it('delivers Stop to the running generation', async () => {
    const { relay } = relayOver();
    const binding = createRelayGrpcServer(relay);
    const server = await serve([binding]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const handle = client.start(relayJob({ tokens: 400, delayMs: 3 }));
    expect(await eventually(() => binding.running() === 1)).toBe(true);
    handle.stop('cancel_requested'); // nobody reads events: the stop still lands
    const outcome = await handle.done;
    expect(outcome.finishReason).toBe('cancelled');
    expect(outcome.usage.outputTokens).toBeLessThan(400);
    expect(await eventually(() => binding.running() === 0)).toBe(true);
  });

  it('applies a Stop that arrives before its Generate', async () => {
    const { relay, engine } = relayOver();
    const binding = createRelayGrpcServer(relay);
    const server = await serve([binding]);
    const job = relayJob({ tokens: 400, delayMs: 3 });
    const definition = makeGrpcServiceDefinition(relayV1.RelayService);
    const raw = new grpc.Client(server.address, grpc.credentials.createInsecure());
    track(raw);
    await new Promise<void>((resolve, reject) =>
      raw.makeUnaryRequest(
        definition.stop.path,
        definition.stop.requestSerialize,
        definition.stop.responseDeserialize,
        create(relayV1.StopRequestSchema, { generationId: job.generationId, cause: relayV1.StopCause.CANCEL_REQUESTED }),
        (error) => (error ? reject(error) : resolve()),
      ),
    );
    const client = track(createRelayGrpcClient({ address: server.address }));
    const outcome = await client.start(job).done;
    expect(outcome.finishReason).toBe('cancelled');
    expect(engine.produced()).toBeLessThan(10);
  });

  it('ends with the relay refusal, not relay-lost, when the relay rejects the job before streaming', async () => {
    const { relay } = relayOver();
    const server = await serve([createRelayGrpcServer(relay)]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const job = relayJob({ tokens: 400, delayMs: 3 });
    const first = client.start(job);
    await new Promise((r) => setTimeout(r, 30));
    const duplicate = await client.start(job).done;
    expect(duplicate).toMatchObject({ finishReason: 'error', error: { code: 'conflict' }, usage: { inputTokens: 0, outputTokens: 0 } });
    expect(isRelayLost(duplicate)).toBe(false);
    first.stop('cancel_requested');
    expect((await first.done).finishReason).toBe('cancelled');
  });

  it('stops the generation as client_disconnected when the gateway cancels the stream', async () => {
    let stopped: string | undefined;
    const { relay } = relayOver();
    const spying: RelayService = {
      start(job) {
        const handle = relay.start(job);
        return { ...handle, stop: (cause) => ((stopped = cause), handle.stop(cause)) };
      },
    };
    const binding = createRelayGrpcServer(spying);
    const server = await serve([binding]);
    const client = createRelayGrpcClient({ address: server.address });
    const handle = client.start(relayJob({ tokens: 400, delayMs: 3 }));
    expect(await eventually(() => binding.running() === 1)).toBe(true);
    client.close(); // the gateway process goes away
    expect(isRelayLost(await handle.done)).toBe(true);
    expect(await eventually(() => stopped === 'client_disconnected')).toBe(true);
    expect(await eventually(() => binding.running() === 0)).toBe(true);
  });
});

describe('relay frames and the money path over gRPC', () => {
  const end: GenerationOutcome = {
    finishReason: 'stop',
    usage: { inputTokens: 3, outputTokens: 40, cachedInputTokens: 0 },
    costNanoUsd: 7,
    modelRevision: 'tiny@1',
    timings: { queueMs: 0, ttftMs: 1, totalMs: 2 },
  };
  /** A relay whose engine produces `turns` bursts of `perTurn` deltas, each burst within one event-loop turn. */
  const bursty = (turns: number, perTurn: number, seen: RelayJob[] = []): RelayService => ({
    start(job) {
      seen.push(job);
      const events = createAsyncQueue<RelayEvent>();
      void (async () => {
        for (let t = 0; t < turns; t++) {
          for (let i = 0; i < perTurn; i++) events.push({ type: 'delta', text: `${t}.${i} `, tokens: 1 });
          await new Promise((r) => setTimeout(r, 5));
        }
        events.push({ type: 'end', outcome: end });
        events.end();
      })();
      return { events, done: Promise.resolve(end), stop: () => undefined };
    },
  });

  it('sends the deltas of one event-loop turn as one frame, in order, then the end', async () => {
    const server = await serve([createRelayGrpcServer(bursty(3, 20))]);
    const definition = makeGrpcServiceDefinition(relayV1.RelayService);
    const raw = track(new grpc.Client(server.address, grpc.credentials.createInsecure()));
    const frames: relayV1.GenerateResponse[] = [];
    await new Promise<void>((resolve, reject) => {
      const call = raw.makeServerStreamRequest(
        definition.generate.path,
        definition.generate.requestSerialize,
        definition.generate.responseDeserialize,
        create(relayV1.GenerateRequestSchema, { job: jobToWire(relayJob({ tokens: 1 }), systemClock) }),
      );
      call.on('data', (m: relayV1.GenerateResponse) => frames.push(m));
      call.on('end', resolve);
      call.on('error', reject);
    });
    // 60 tokens in three bursts: three delta frames (not 60), then the end.
    expect(frames.map((f) => f.event.case)).toEqual(['deltas', 'deltas', 'deltas', 'end']);
    const texts = frames.flatMap((f) => (f.event.case === 'deltas' ? f.event.value.deltas.map((d) => d.text) : []));
    expect(texts).toEqual(Array.from({ length: 60 }, (_, k) => `${Math.floor(k / 20)}.${k % 20} `));
  });

  it('hands a coalesced frame to the reader as the deltas it holds, counting each one', async () => {
    const server = await serve([createRelayGrpcServer(bursty(2, 25))]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const events = await collectRelayEvents(client.start(relayJob({ tokens: 1 })));
    expect(events.filter((e) => e.type === 'delta')).toHaveLength(50);
    expect(events[events.length - 1]).toEqual({ type: 'end', outcome: end });
  });

  it('carries the reservation a generation settles and a keyed request\'s retain spec to the relay', async () => {
    const seen: RelayJob[] = [];
    const server = await serve([createRelayGrpcServer(bursty(1, 1, seen))]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const reservation = { reservationId: 'rsv_a_1', worstCaseNano: 9_007_199_254, monthStartsOn: '2026-12-01', dayStartsOn: '2026-12-07', leaseIds: ['lse_1', 'lse_2'] };
    const retain = { key: 'order-7', bodySha256: 'c'.repeat(64), createdS: 1_800_000_000, retainUntilMs: Date.UTC(2026, 11, 8) };
    await client.start(relayJob({ tokens: 1 }, { reservation, retain })).done;
    await client.start(relayJob({ tokens: 1 })).done;
    expect(seen[0]).toMatchObject({ reservation, retain });
    expect(seen[1].reservation).toBeUndefined();
    expect(seen[1].retain).toBeUndefined();
  });
});

import { create } from '@bufbuild/protobuf';
import type * as grpc from '@grpc/grpc-js';
import { type SpanContext, SpanKind, context, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { type RelayService, type RouteResult, systemClock } from '@weir/core';
import { routerV1 } from '@weir/proto';
import { createRelay } from '@weir/streaming';
import { contractCallers, createScriptedEngine, relayJob, createRecordingSettlements } from '@weir/testing';
import {
  type GrpcServiceBinding,
  createRelayGrpcClient,
  createRelayGrpcServer,
  createRouterGrpcClient,
  createRouterGrpcServer,
  installTracing,
  makeGrpcServiceDefinition,
} from './index';
import { serve, stopEverythingAfterEach, track } from './test-support';

stopEverythingAfterEach();

const exporter = new InMemorySpanExporter();
const installed = installTracing({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = trace.getTracer('trace-context.spec');
const notFound: RouteResult = { ok: false, reason: 'model_not_found', message: 'no' };

/** A raw router binding that records the metadata each Resolve arrives with. */
function recordingRouter(seen: grpc.Metadata[]): GrpcServiceBinding {
  return {
    name: routerV1.RouterService.typeName,
    definition: makeGrpcServiceDefinition(routerV1.RouterService) as unknown as grpc.ServiceDefinition,
    handlers: {
      resolve: (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        seen.push(call.metadata);
        callback(null, create(routerV1.ResolveResponseSchema, { result: { case: 'modelNotFound', value: { message: 'no' } } }));
      },
      listAliases: () => undefined,
    },
    close: () => undefined,
  };
}

describe('W3C trace context over gRPC', () => {
  beforeEach(() => exporter.reset());

  it('installTracing is idempotent', () => {
    expect(installTracing()).toBe(installed);
  });

  it("sends the client's active span as traceparent", async () => {
    const seen: grpc.Metadata[] = [];
    const server = await serve([recordingRouter(seen)]);
    const client = track(createRouterGrpcClient({ address: server.address }));
    const span = tracer.startSpan('gateway request');
    await context.with(trace.setSpan(context.active(), span), () => client.resolve(contractCallers.acme, 'tiny', 'k'));
    span.end();
    const { traceId, spanId } = span.spanContext();
    expect(seen[0].get('traceparent')).toEqual([`00-${traceId}-${spanId}-01`]);
  });

  it('sends no traceparent without an active span', async () => {
    const seen: grpc.Metadata[] = [];
    const server = await serve([recordingRouter(seen)]);
    const client = track(createRouterGrpcClient({ address: server.address }));
    await client.resolve(contractCallers.acme, 'tiny', 'k');
    expect(seen[0].get('traceparent')).toEqual([]);
  });

  it('runs the server handler in a SERVER span that continues the caller trace', async () => {
    let inHandler: SpanContext | undefined;
    const server = await serve([
      createRouterGrpcServer({
        async resolve() {
          await new Promise((r) => setTimeout(r, 1)); // the context survives an await
          inHandler = trace.getActiveSpan()?.spanContext();
          return notFound;
        },
        listAliases: async () => [],
      }),
    ]);
    const client = track(createRouterGrpcClient({ address: server.address }));
    const outer = await tracer.startActiveSpan('gateway request', async (span) => {
      await client.resolve(contractCallers.acme, 'tiny', 'k');
      span.end();
      return span.spanContext();
    });
    const serverSpan = exporter.getFinishedSpans().find((s) => s.name === 'weir.router.v1.RouterService/Resolve');
    expect(serverSpan?.kind).toBe(SpanKind.SERVER);
    expect(serverSpan?.spanContext().traceId).toBe(outer.traceId);
    expect(serverSpan?.parentSpanContext?.spanId).toBe(outer.spanId);
    expect(serverSpan?.attributes).toMatchObject({ 'rpc.system': 'grpc', 'rpc.service': 'weir.router.v1.RouterService', 'rpc.method': 'Resolve' });
    expect(inHandler?.traceId).toBe(outer.traceId);
    expect(inHandler?.spanId).toBe(serverSpan?.spanContext().spanId);
  });

  it('carries the trace into the relay stream', async () => {
    let inRelay: string | undefined;
    const inner = createRelay({
      engineFor: () => createScriptedEngine(),
      settlements: createRecordingSettlements(),
      clock: systemClock,
    });
    const relay: RelayService = {
      start(job) {
        inRelay = trace.getActiveSpan()?.spanContext().traceId;
        return inner.start(job);
      },
    };
    const server = await serve([createRelayGrpcServer(relay)]);
    const client = track(createRelayGrpcClient({ address: server.address }));
    const traceId = await tracer.startActiveSpan('gateway request', async (span) => {
      await client.start(relayJob({ tokens: 2 })).done;
      span.end();
      return span.spanContext().traceId;
    });
    expect(inRelay).toBe(traceId);
  });
});

/**
 * Tracing costs nothing when no exporter is configured (issue 13, item 6): `installTracing`
 * registers nothing without span processors or `OTEL_EXPORTER_OTLP_ENDPOINT`, and then the gRPC
 * adapters create no spans, write no trace metadata and switch no context per call.
 */
import * as grpc from '@grpc/grpc-js';
import { context, trace } from '@opentelemetry/api';
import { injectTraceContext, installTracing, tracingActive } from './index';
import { runInServerSpan } from './trace-context';

describe('with no exporter configured', () => {
  it('installTracing registers nothing, and the adapters skip every trace step', async () => {
    expect(installTracing({}, {})).toEqual({});
    expect(tracingActive()).toBe(false);
    const metadata = new grpc.Metadata();
    injectTraceContext(metadata);
    expect(metadata.getMap()).toEqual({});
    // An incoming traceparent is not even read: the handler runs in the caller's context as is.
    const incoming = new grpc.Metadata();
    incoming.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    const before = context.active();
    const seen = await runInServerSpan('/weir.test.v1.T/M', incoming, undefined, async (span) => ({ valid: trace.isSpanContextValid(span.spanContext()), recording: span.isRecording(), same: context.active() === before, active: trace.getActiveSpan() }));
    expect(seen).toEqual({ valid: false, recording: false, same: true, active: undefined });
  });
});

/**
 * W3C Trace Context over gRPC metadata (CONVENTIONS.md §8): the client injects
 * `traceparent`/`tracestate` from the active OpenTelemetry context; the server extracts
 * them and runs the handler in that context, under a SERVER span. Both use the propagator
 * they are given, else the `@opentelemetry/api` global one — which does nothing until an
 * SDK or {@link installTracing} registers one, so library code never registers globals.
 */
import type * as grpc from '@grpc/grpc-js';
import {
  type Context,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
  context,
  propagation,
  trace,
} from '@opentelemetry/api';

/** Writes propagation fields into grpc-js metadata (keys are lowercase). */
export const metadataSetter: TextMapSetter<grpc.Metadata> = {
  set(metadata, key, value) {
    metadata.set(key, value);
  },
};

/**
 * Reads propagation fields from grpc-js metadata: every value of a key, as strings (the W3C
 * propagator takes the first `traceparent` and joins several `tracestate` values).
 */
export const metadataGetter: TextMapGetter<grpc.Metadata> = {
  get(metadata, key) {
    const values = metadata.get(key).filter((v): v is string => typeof v === 'string');
    return values.length === 0 ? undefined : values;
  },
  keys(metadata) {
    return Object.keys(metadata.getMap());
  },
};

/**
 * True when trace context is worth carrying: a propagator was given, or a real one is
 * registered globally (`installTracing` with somewhere to send spans, or an OpenTelemetry SDK).
 * With neither, the transports do no tracing work at all — no span objects, no metadata, no
 * context switches per call or message (issue 13, item 6: tracing costs nothing when off).
 */
export function tracingActive(propagator?: TextMapPropagator): boolean {
  return propagator !== undefined || propagation.fields().length > 0;
}

/** Injects the trace context of `ctx` (default: the active one) into `metadata`; nothing when tracing is off ({@link tracingActive}). */
export function injectTraceContext(metadata: grpc.Metadata, propagator?: TextMapPropagator, ctx?: Context): void {
  if (propagator) propagator.inject(ctx ?? context.active(), metadata, metadataSetter);
  else if (tracingActive()) propagation.inject(ctx ?? context.active(), metadata, metadataSetter);
}

/** The context carried by incoming `metadata` (ROOT plus the remote span context, if valid). */
export function extractTraceContext(metadata: grpc.Metadata, propagator?: TextMapPropagator): Context {
  return propagator ? propagator.extract(ROOT_CONTEXT, metadata, metadataGetter) : propagation.extract(ROOT_CONTEXT, metadata, metadataGetter);
}

const tracer = () => trace.getTracer('@weir/transport-grpc');

/** The span handlers get while tracing is off: one shared non-recording span, no ids. */
const INERT_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/**
 * Runs `handler` for one incoming call inside the caller's trace context, under a SERVER span
 * named after the method path. The span ends when the returned promise settles; a rejection
 * marks it as an error. While tracing is off ({@link tracingActive}) the handler runs directly,
 * with a shared inert span: no extraction, no span, no context switch.
 */
export function runInServerSpan<T>(
  path: string,
  metadata: grpc.Metadata,
  propagator: TextMapPropagator | undefined,
  handler: (span: Span) => Promise<T>,
): Promise<T> {
  if (!tracingActive(propagator)) return handler(INERT_SPAN);
  const parent = extractTraceContext(metadata, propagator);
  const [, service = '', method = ''] = path.split('/');
  return context.with(parent, () =>
    tracer().startActiveSpan(
      path.slice(1),
      { kind: SpanKind.SERVER, attributes: { 'rpc.system': 'grpc', 'rpc.service': service, 'rpc.method': method } },
      async (span) => {
        try {
          return await handler(span);
        } catch (error) {
          span.setStatus({ code: SpanStatusCode.ERROR });
          throw error;
        } finally {
          span.end();
        }
      },
    ),
  );
}

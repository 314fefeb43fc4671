/**
 * Process-wide tracing setup for service mains and tests: an AsyncLocalStorage context
 * manager (so the active span survives `await`), the W3C Trace Context propagator and a
 * `BasicTracerProvider`, registered as the `@opentelemetry/api` globals — only when spans have
 * somewhere to go (span processors given, or `OTEL_EXPORTER_OTLP_ENDPOINT` set). Otherwise
 * nothing is registered and tracing costs nothing: the gRPC and NATS adapters see no
 * propagator and skip spans and trace metadata entirely (`tracingActive`). Library code never
 * calls this; an app calls it once at start (or uses the OpenTelemetry Node SDK instead).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { AlwaysOffSampler, BasicTracerProvider, type SpanProcessor } from '@opentelemetry/sdk-trace-base';

/** Options of {@link installTracing}; used by the first call only. */
export interface InstallTracingOptions {
  /**
   * Where finished spans go (e.g. a BatchSpanProcessor with an OTLP exporter). Default: none,
   * and then spans are not sampled: they carry ids for propagation and log correlation only.
   */
  spanProcessors?: SpanProcessor[];
}

/** What {@link installTracing} registered. */
export interface InstalledTracing {
  /** The registered provider; absent when tracing is off (nothing was registered). */
  tracerProvider?: BasicTracerProvider;
}

let installed: InstalledTracing | undefined;

/**
 * Registers the globals once (when tracing is on, see above) and returns them; `env` is read
 * for `OTEL_EXPORTER_OTLP_ENDPOINT` (default `process.env`). Later calls return the first registration
 * unchanged (idempotent, options ignored). If another SDK registered globals first, the API
 * keeps those (it refuses to overwrite) and this still returns its provider.
 */
export function installTracing(options: InstallTracingOptions = {}, env: NodeJS.ProcessEnv = process.env): InstalledTracing {
  if (installed) return installed;
  const spanProcessors = options.spanProcessors ?? [];
  if (spanProcessors.length === 0 && !env.OTEL_EXPORTER_OTLP_ENDPOINT) {
    installed = {};
    return installed;
  }
  // With nowhere to send spans, record none: spans still get ids (so `traceparent` travels
  // and log lines carry trace ids) but skip attribute and event recording, a measured share
  // of the small services' CPU (docs/performance.md).
  const tracerProvider = new BasicTracerProvider({ spanProcessors, ...(spanProcessors.length === 0 ? { sampler: new AlwaysOffSampler() } : {}) });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(tracerProvider);
  installed = { tracerProvider };
  return installed;
}

/**
 * Process-wide tracing setup for service mains and tests: an AsyncLocalStorage context
 * manager (so the active span survives `await`), the W3C Trace Context propagator and a
 * `BasicTracerProvider`, registered as the `@opentelemetry/api` globals. Library code never
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
  tracerProvider: BasicTracerProvider;
}

let installed: InstalledTracing | undefined;

/**
 * Registers the globals once and returns them; later calls return the first registration
 * unchanged (idempotent, options ignored). If another SDK registered globals first, the API
 * keeps those (it refuses to overwrite) and this still returns its provider.
 */
export function installTracing(options: InstallTracingOptions = {}): InstalledTracing {
  if (installed) return installed;
  const spanProcessors = options.spanProcessors ?? [];
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

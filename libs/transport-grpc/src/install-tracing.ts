/**
 * Process-wide tracing setup for service mains and tests: an AsyncLocalStorage context
 * manager (so the active span survives `await`), the W3C Trace Context propagator and a
 * `BasicTracerProvider`, registered as the `@opentelemetry/api` globals. Library code never
 * calls this; an app calls it once at start (or uses the OpenTelemetry Node SDK instead).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, type SpanProcessor } from '@opentelemetry/sdk-trace-base';

/** Options of {@link installTracing}; used by the first call only. */
export interface InstallTracingOptions {
  /** Where finished spans go (e.g. a BatchSpanProcessor with an OTLP exporter). Default: none (spans are created and dropped). */
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
  const tracerProvider = new BasicTracerProvider({ spanProcessors: options.spanProcessors ?? [] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(tracerProvider);
  installed = { tracerProvider };
  return installed;
}

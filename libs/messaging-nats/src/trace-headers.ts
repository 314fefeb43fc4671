import { type Context, context, propagation, type TextMapGetter, type TextMapSetter } from '@opentelemetry/api';
import { headers as natsHeaders, type MsgHdrs } from '@nats-io/transport-node';

/**
 * W3C Trace Context over NATS headers (CONVENTIONS.md §8). NATS headers are case-sensitive
 * and case-preserving, so keys are written and read exactly as the propagator names them
 * (lowercase `traceparent` / `tracestate`). The globally registered propagator is used
 * (NodeSDK registers tracecontext + baggage); with none registered these are no-ops.
 */

const setter: TextMapSetter<MsgHdrs> = {
  set: (carrier, key, value) => carrier.set(key, value),
};

const getter: TextMapGetter<MsgHdrs | undefined> = {
  keys: (carrier) => carrier?.keys() ?? [],
  get: (carrier, key) => {
    if (!carrier?.has(key)) return undefined;
    const values = carrier.values(key);
    return values.length > 1 ? values : values[0];
  },
};

/** Writes the trace headers of `ctx` (default: the active context) into NATS `headers`. */
export function injectTraceHeaders(headers: MsgHdrs, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers, setter);
}

/**
 * Captures the trace headers of `ctx` (default: the active context) as a plain object, to be
 * written later with {@link traceHeadersToNats} (the usage sink captures at `record()` time
 * and publishes later). Empty when no propagator is registered or no span is active.
 */
export function captureTraceHeaders(ctx: Context = context.active()): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  return carrier;
}

/** NATS headers holding `captured` (from {@link captureTraceHeaders}); a fresh object each call; undefined when nothing was captured (tracing off). */
export function traceHeadersToNats(captured: Readonly<Record<string, string>>): MsgHdrs | undefined {
  let any = false;
  for (const _ in captured) {
    any = true;
    break;
  }
  if (!any) return undefined;
  const h = natsHeaders();
  for (const [k, v] of Object.entries(captured)) h.set(k, v);
  return h;
}

/**
 * The context carried by a message's headers, on top of `base` (default: the active
 * context): run the handler inside it (`context.with`) so its spans join the producer's trace.
 * Returns `base` unchanged when the headers carry no (valid) trace context.
 */
export function extractTraceContext(headers: MsgHdrs | undefined, base: Context = context.active()): Context {
  return propagation.extract(base, headers, getter);
}

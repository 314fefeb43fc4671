/**
 * Cost you can read (issue 16 §5; docs/api.md "Cost and overhead"): what a response cost and how
 * long Weir itself held it, on every generation route.
 *
 * - Non-streamed responses carry headers: `x-weir-cost-usd` (the request's billed cost, an exact
 *   decimal with 9 fractional digits) and `x-weir-overhead-ms` (Weir's own time, below).
 * - Streams carry the same two figures as `cost_usd` and `overhead_ms` in the `weir` object of
 *   their final event (the chat and completions usage chunk when `stream_options.include_usage`
 *   asked for it; `response.completed`/`response.incomplete` on `/v1/responses`; `message_delta`
 *   on `/v1/messages`).
 *
 * Overhead: the time from the request's arrival at the gateway to the moment the figure is
 * written (the response's headers, or the final event), minus the wall time of every upstream
 * attempt (`UpstreamAttempt.durationMs`, from the attempt's start to its end as the relay measured
 * it). It therefore includes authentication, validation, admission, cache lookups, any wait for a
 * scheduler slot and the relay's own work; it excludes the upstream's (and, on a stream, the time
 * the upstream attempt was open while the client read). A cache hit made no attempt: its whole
 * time is overhead. LiteLLM's `x-litellm-overhead-duration-ms` measures the same way.
 *
 * Cost: `GenerationOutcome.costNanoUsd`, the figure the ledger records — the answering revision's
 * prices over the measured token classes (`priceUsage`), or on a cache hit the tenant's policy
 * price (`hit_price_fraction` of the cached usage's cost).
 */
import type { ServerResponse } from 'node:http';
import type { Clock, GenerationOutcome } from '@weir/core';
import { nanoUsdToDecimal } from '@weir/ledger';

/** The two figures as they go on the wire. */
export interface CostReport {
  /** The request's cost in USD (a JSON number; the header carries the exact decimal). */
  cost_usd: number;
  /** Weir's own time so far, ms (3 decimals), upstream attempts excluded. */
  overhead_ms: number;
}

/** Reports a live request's cost and overhead; made when the request arrives. */
export interface CostMeter {
  /** The figures for `outcome`, overhead measured now. */
  report(outcome: GenerationOutcome): CostReport;
  /** Sets `x-weir-cost-usd` and `x-weir-overhead-ms` on a response whose headers are still unsent; no-op otherwise. */
  setHeaders(res: ServerResponse, outcome: GenerationOutcome): void;
}

/**
 * A meter for a request that arrived at `arrivedAt` on `clock` (ms; the gateway's monotonic clock).
 * Overhead never goes below 0 (attempt durations are rounded to whole ms by the relay).
 */
export function createCostMeter(clock: Clock, arrivedAt: number): CostMeter {
  const overheadMs = (o: GenerationOutcome): number => {
    const upstream = (o.attempts ?? []).reduce((sum, a) => sum + a.durationMs, 0);
    return Math.max(0, Math.round((clock.now() - arrivedAt - upstream) * 1000) / 1000);
  };
  return {
    report: (o) => ({ cost_usd: o.costNanoUsd / 1e9, overhead_ms: overheadMs(o) }),
    setHeaders(res, o) {
      if (res.headersSent) return;
      res.setHeader('x-weir-cost-usd', nanoUsdToDecimal(BigInt(o.costNanoUsd)));
      res.setHeader('x-weir-overhead-ms', String(overheadMs(o)));
    },
  };
}

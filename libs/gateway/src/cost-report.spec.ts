import type { ServerResponse } from 'node:http';
import type { GenerationOutcome, UpstreamAttempt } from '@weir/core';
import { createCostMeter } from './cost-report';

const attempt = (durationMs: number, outcome: UpstreamAttempt['outcome']): UpstreamAttempt => ({
  attempt: 1,
  revisionId: 'r@1',
  provider: 'openai-compatible',
  outcome,
  startedAtMs: 0,
  ttftMs: null,
  durationMs,
  inputTokens: 0,
  outputTokens: 0,
});

const outcome = (costNanoUsd: number, attempts?: UpstreamAttempt[]): GenerationOutcome => ({
  finishReason: 'stop',
  usage: { inputTokens: 1, outputTokens: 1 },
  costNanoUsd,
  modelRevision: 'r@1',
  timings: { queueMs: 0, ttftMs: 1, totalMs: 1 },
  ...(attempts ? { attempts } : {}),
});

/** A response double: the headers it was given, and whether they were sent. */
function response(headersSent = false) {
  const headers: Record<string, string> = {};
  return { headers, res: { headersSent, setHeader: (k: string, v: string) => void (headers[k] = v) } as unknown as ServerResponse };
}

describe('cost meter', () => {
  it('overhead is the time since arrival minus every upstream attempt, failed ones included', () => {
    let now = 1_000;
    const meter = createCostMeter({ now: () => now }, 1_000);
    now = 1_412.3456;
    expect(meter.report(outcome(5, [attempt(100, 'failed'), attempt(250, 'answered')]))).toEqual({ cost_usd: 5e-9, overhead_ms: 62.346 });
  });

  it('a cache hit (no attempt) is all overhead; overhead never goes below 0', () => {
    let now = 0;
    const meter = createCostMeter({ now: () => now }, 0);
    now = 7.5;
    expect(meter.report(outcome(0)).overhead_ms).toBe(7.5);
    // Attempt durations are whole ms rounded by the relay: they may exceed the gateway's span.
    expect(meter.report(outcome(0, [attempt(8, 'answered')])).overhead_ms).toBe(0);
  });

  it('sets x-weir-cost-usd as an exact 9-decimal USD amount and x-weir-overhead-ms, only before the headers are sent', () => {
    let now = 10;
    const meter = createCostMeter({ now: () => now }, 10);
    now = 13;
    const open = response();
    meter.setHeaders(open.res, outcome(6_615_200, [attempt(1, 'answered')]));
    expect(open.headers).toEqual({ 'x-weir-cost-usd': '0.006615200', 'x-weir-overhead-ms': '2' });
    const sent = response(true);
    meter.setHeaders(sent.res, outcome(1));
    expect(sent.headers).toEqual({});
  });
});

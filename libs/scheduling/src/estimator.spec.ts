import { estimateStartMs, ewma, fairShareAhead, queueBounds, sequenceSeconds, speedFactor, throughputFromReport } from './estimator';

describe('ewma', () => {
  it.each([
    { prev: undefined, sample: 50, alpha: 0.2, want: 50 },
    { prev: 100, sample: 50, alpha: 0.2, want: 90 },
    { prev: 100, sample: 200, alpha: 1, want: 200 },
    { prev: 100, sample: 0, alpha: 0.5, want: 50 },
  ])('ewma($prev, $sample, $alpha) = $want', ({ prev, sample, alpha, want }) => {
    expect(ewma(prev, sample, alpha)).toBeCloseTo(want, 10);
  });

  it('converges geometrically: after n equal samples the gap is (1 − alpha)^n of the start', () => {
    let v: number | undefined = 0;
    for (let i = 0; i < 10; i++) v = ewma(v, 100, 0.2);
    expect(v).toBeCloseTo(100 * (1 - 0.8 ** 10), 10);
  });
});

describe('throughputFromReport', () => {
  it('measures prefill from TTFT and decode from the time after it (semconv TPOT)', () => {
    expect(throughputFromReport({ inputTokens: 1000, outputTokens: 101, ttftMs: 100, durationMs: 2_100 })).toEqual({ prefillTokensPerS: 10_000, decodeTokensPerS: 50 });
  });

  it.each([
    { label: 'no token', report: { inputTokens: 10, outputTokens: 0, ttftMs: null, durationMs: 50 }, want: {} },
    { label: 'one token: no decode interval', report: { inputTokens: 1000, outputTokens: 1, ttftMs: 100, durationMs: 100 }, want: { prefillTokensPerS: 10_000 } },
    { label: 'TTFT under 1 ms', report: { inputTokens: 1000, outputTokens: 3, ttftMs: 0, durationMs: 20 }, want: { decodeTokensPerS: 100 } },
    { label: 'a prompt too short to time prefill', report: { inputTokens: 200, outputTokens: 3, ttftMs: 5, durationMs: 25 }, want: { decodeTokensPerS: 100 } },
  ])('leaves out what it cannot measure ($label)', ({ report, want }) => {
    expect(throughputFromReport(report)).toEqual(want);
  });

  it('reads a short prompt as the first-token overhead, and times prefill beyond it', () => {
    // 10 tokens in 150 ms: the overhead (a decode step, the hops), not a 67 tokens/s prefill.
    expect(throughputFromReport({ inputTokens: 10, outputTokens: 1, ttftMs: 150, durationMs: 150 })).toEqual({ firstTokenOverheadMs: 150 });
    // 2,000 tokens in 350 ms with 150 ms of overhead: 10,000 tokens/s.
    expect(throughputFromReport({ inputTokens: 2_000, outputTokens: 1, ttftMs: 350, durationMs: 350 }, 150)).toEqual({ prefillTokensPerS: 10_000 });
  });
});

describe('sequenceSeconds', () => {
  it.each([
    { input: 2000, output: 300, rates: { prefillTokensPerS: 10_000, decodeTokensPerS: 50 }, want: 0.2 + 6 },
    { input: 0, output: 0, rates: { prefillTokensPerS: 0, decodeTokensPerS: 0 }, want: 0 },
    { input: 1, output: 0, rates: { prefillTokensPerS: 0, decodeTokensPerS: 10 }, want: Infinity },
    { input: 2000, output: 300, rates: { prefillTokensPerS: 10_000, decodeTokensPerS: 50, firstTokenOverheadS: 0.15 }, want: 0.15 + 0.2 + 6 },
    { input: 0, output: 0, rates: { prefillTokensPerS: 10_000, decodeTokensPerS: 50, firstTokenOverheadS: 0.15 }, want: 0 },
  ])('$input in + $output out = $want s', ({ input, output, rates, want }) => {
    expect(sequenceSeconds(input, output, rates)).toBeCloseTo(want, 10);
  });
});

describe('fairShareAhead', () => {
  it('adds each other tenant up to its weighted share of the work served meanwhile', () => {
    // T (weight 1) has 10 units up to its entry; U (weight 2) has 100 queued → 20 served first;
    // V (weight 1) has only 3 queued → all 3.
    expect(fairShareAhead(10, 1, [{ amount: 100, weight: 2 }, { amount: 3, weight: 1 }])).toBe(10 + 20 + 3);
  });

  it('is the own work alone when nobody else waits', () => {
    expect(fairShareAhead(7, 3, [])).toBe(7);
  });
});

describe('estimateStartMs', () => {
  it('divides the work ahead by the sequences serving it', () => {
    expect(estimateStartMs({ inFlightSeconds: 4, aheadSeconds: 6, servers: 4 })).toBe(2_500);
  });

  it('is Infinity when nothing serves', () => {
    expect(estimateStartMs({ inFlightSeconds: 1, aheadSeconds: 0, servers: 0 })).toBe(Infinity);
  });
});

describe('speedFactor', () => {
  it.each([
    { rate: undefined, peers: [100], want: 1 },
    { rate: 40, peers: [], want: 1 },
    { rate: 90, peers: [100], want: 1 },
    { rate: 40, peers: [100], want: 0.4 },
    { rate: 120, peers: [100], want: 1 },
    { rate: 40, peers: [100, 80, 10_000], want: 0.4 },
    { rate: 40, peers: [60, 100], want: 0.5 },
  ])('rate $rate against peers $peers → $want (threshold 0.8)', ({ rate, peers, want }) => {
    expect(speedFactor(rate, peers, 0.8)).toBe(want);
  });

  it('does not read a pool that slows together (fuller batches) as lost capacity', () => {
    // Every replica went from 50 to 25 tokens/s per sequence as their batches filled.
    expect(speedFactor(25, [25, 26], 0.8)).toBe(1);
  });
});

describe('queueBounds', () => {
  it('scales with the capacity left: one of two replicas gone halves every bound', () => {
    const whole = queueBounds(2, { length: 8, bytes: 1000 }, 0.5);
    const half = queueBounds(1, { length: 8, bytes: 1000 }, 0.5);
    expect(whole).toEqual({ length: 16, bytes: 2000, tenantLength: 8, tenantBytes: 1000 });
    expect(half).toEqual({ length: 8, bytes: 1000, tenantLength: 4, tenantBytes: 500 });
  });

  it('keeps one entry while any capacity is left, none without', () => {
    expect(queueBounds(0.1, { length: 2, bytes: 100 }, 0.5)).toMatchObject({ length: 1, tenantLength: 1 });
    expect(queueBounds(0, { length: 2, bytes: 100 }, 0.5)).toEqual({ length: 0, bytes: 0, tenantLength: 0, tenantBytes: 0 });
  });
});

import { createCircuitBreaker, type BreakerStateChange, type CallOutcome, type CircuitBreaker, type CircuitBreakerOptions } from './circuit-breaker';

/** A breaker whose transitions are collected. */
function breakerWithLog(options: CircuitBreakerOptions = {}): { breaker: CircuitBreaker; changes: BreakerStateChange[] } {
  const changes: BreakerStateChange[] = [];
  return { breaker: createCircuitBreaker({ ...options, onStateChange: (c) => changes.push(c) }), changes };
}

/** Sends one call at `t` if allowed and records its outcome at once; returns whether it was sent. */
function call(breaker: CircuitBreaker, t: number, outcome: CallOutcome, latencyMs?: number): boolean {
  const permit = breaker.tryAcquire(t);
  if (!permit.allowed) return false;
  breaker.record(outcome, latencyMs, t, permit.probe);
  return true;
}

/** Opens a default breaker at `t` with 20 failures (the minimum volume). */
function openAt(breaker: CircuitBreaker, t: number): void {
  for (let i = 0; i < 20; i++) call(breaker, t, 'failure');
  expect(breaker.state(t)).toBe('open');
}

/**
 * 100 requests/s, one every 10 ms, each answered at once. `failing(t)` says whether the target
 * is down at t. Returns the transitions and the calls that reached the target while it was down.
 */
function simulate(breaker: CircuitBreaker, changes: BreakerStateChange[], untilMs: number, failing: (t: number) => boolean) {
  let sentWhileDown = 0;
  let refused = 0;
  for (let t = 0; t <= untilMs; t += 10) {
    const down = failing(t);
    if (call(breaker, t, down ? 'failure' : 'success')) sentWhileDown += down ? 1 : 0;
    else refused++;
  }
  return { changes, sentWhileDown, refused };
}

describe('createCircuitBreaker', () => {
  it('stays closed below the minimum volume, however many of the calls fail', () => {
    const { breaker, changes } = breakerWithLog();
    for (let i = 0; i < 19; i++) call(breaker, i * 10, 'failure');
    expect(breaker.state(190)).toBe('closed');
    expect(breaker.snapshot(190)).toMatchObject({ calls: 19, failures: 19, failureRate: 1 });
    call(breaker, 200, 'failure');
    expect(breaker.state(200)).toBe('open');
    expect(changes).toEqual([{ from: 'closed', to: 'open', reason: 'failure_rate', atMs: 200, openMs: 5_000 }]);
  });

  it.each([
    { successes: 16, failures: 4, state: 'open' }, // 20 % — the threshold is "equal or greater"
    { successes: 17, failures: 3, state: 'closed' }, // 15 %
    { successes: 80, failures: 19, state: 'closed' }, // 19.2 %
    { successes: 80, failures: 20, state: 'open' }, // 20 %
  ])('with $successes successes then $failures failures in the window it is $state', ({ successes, failures, state }) => {
    const breaker = createCircuitBreaker();
    for (let i = 0; i < successes; i++) call(breaker, 1_000, 'success');
    for (let i = 0; i < failures; i++) call(breaker, 1_000, 'failure');
    expect(breaker.state(1_000)).toBe(state);
  });

  it("does not count outcomes marked 'ignored' (a client's cancellation) in the window", () => {
    const breaker = createCircuitBreaker();
    for (let i = 0; i < 50; i++) call(breaker, 0, 'ignored');
    for (let i = 0; i < 19; i++) call(breaker, 0, 'failure');
    expect(breaker.snapshot(0)).toMatchObject({ state: 'closed', calls: 19 });
  });

  describe('a total outage at 100 requests/s', () => {
    // The outage starts at 15 s plus an offset into the 1 s bucket (φ in the module comment).
    it.each([0, 10, 200, 500, 730, 990])('opens within 2,000 ms of its start (offset %i ms into a bucket)', (offsetMs) => {
      const { breaker, changes } = breakerWithLog();
      const start = 15_000 + offsetMs;
      simulate(breaker, changes, 20_000, (t) => t >= start);
      const opened = changes.find((c) => c.to === 'open');
      expect(opened).toBeDefined();
      const afterMs = (opened?.atMs ?? Infinity) - start;
      // Between 1.8 s and 2.0 s by the window arithmetic (module comment).
      expect(afterMs).toBeLessThanOrEqual(2_000);
      expect(afterMs).toBeGreaterThanOrEqual(1_800);
    });

    it('then probes through half-open with backoff while it lasts, and closes through probes when it ends', () => {
      const { breaker, changes } = breakerWithLog();
      // Healthy 0–15 s, down 15–40 s, healthy again after.
      const run = simulate(breaker, changes, 60_000, (t) => t >= 15_000 && t < 40_000);
      const summary = changes.map((c) => `${c.atMs} ${c.from}→${c.to} ${c.reason}`);
      expect(summary).toEqual([
        '16990 closed→open failure_rate',
        '21990 open→half_open wait_elapsed',
        '21990 half_open→open probe_failed', // re-opened for 10 s
        '31990 open→half_open wait_elapsed',
        '31990 half_open→open probe_failed', // re-opened for 20 s
        '51990 open→half_open wait_elapsed',
        '52010 half_open→closed probes_succeeded', // 3 probes at 51,990, 52,000, 52,010
      ]);
      // 200 failures (15,000–16,990 ms) opened it; then one probe per half-open spell reached the dead target.
      expect(run.sentWhileDown).toBe(200 + 2);
      expect(breaker.snapshot(60_000)).toMatchObject({ state: 'closed', reopens: 0, failures: 0 });
    });
  });

  it('does not open at a steady 10 % error rate', () => {
    const { breaker, changes } = breakerWithLog();
    let n = 0;
    simulate(breaker, changes, 60_000, () => n++ % 10 === 0);
    expect(changes).toEqual([]);
    expect(breaker.snapshot(60_000).failureRate).toBeCloseTo(0.1, 2);
  });

  it('ages old buckets out: a burst of failures 11 s ago does not count', () => {
    // 19 failures at t = 0, then one more later: together they would reach the minimum volume.
    const at = (laterMs: number) => {
      const breaker = createCircuitBreaker();
      for (let i = 0; i < 19; i++) call(breaker, 0, 'failure');
      call(breaker, laterMs, 'failure');
      return breaker.snapshot(laterMs);
    };
    expect(at(11_000)).toMatchObject({ state: 'closed', calls: 1 });
    // Bucket 0 (0–999 ms) leaves the window when bucket 10 begins.
    expect(at(10_000)).toMatchObject({ state: 'closed', calls: 1 });
    expect(at(9_999)).toMatchObject({ state: 'open', calls: 20 });
    expect(at(9_000)).toMatchObject({ state: 'open', calls: 20 });
  });

  it('keeps counting across partly aged windows (subtract on evict)', () => {
    const breaker = createCircuitBreaker();
    for (let s = 0; s < 30; s++) for (let i = 0; i < 10; i++) call(breaker, s * 1_000 + i, i === 0 ? 'failure' : 'success');
    // The last 10 buckets: 100 calls, 10 failures.
    expect(breaker.snapshot(29_999)).toMatchObject({ state: 'closed', calls: 100, failures: 10 });
    expect(breaker.snapshot(35_500)).toMatchObject({ calls: 40, failures: 4 });
    expect(breaker.snapshot(100_000)).toMatchObject({ calls: 0, failureRate: 0 });
  });

  describe('slow calls', () => {
    it('open the breaker when enabled and their rate reaches the threshold', () => {
      const { breaker, changes } = breakerWithLog({ slowCallMs: 2_000, slowCallRateThreshold: 0.5 });
      for (let i = 0; i < 10; i++) call(breaker, 0, 'success', 500);
      for (let i = 0; i < 9; i++) call(breaker, 0, 'success', 2_500);
      expect(breaker.state(0)).toBe('closed'); // 19 calls: below the minimum volume
      call(breaker, 0, 'success', 2_001);
      expect(changes.map((c) => c.reason)).toEqual(['slow_call_rate']);
      expect(breaker.snapshot(0)).toMatchObject({ slowCalls: 10, slowCallRate: 0.5 });
    });

    it('are tracked by default: more than 10 s to first token is slow, 80 % of the window opens it', () => {
      const { breaker, changes } = breakerWithLog();
      for (let i = 0; i < 4; i++) call(breaker, 0, 'success', 200);
      call(breaker, 0, 'success', 10_000); // exactly the threshold: not slow
      for (let i = 0; i < 19; i++) call(breaker, 0, 'success', 10_001);
      expect(breaker.snapshot(0)).toMatchObject({ state: 'closed', slowCalls: 19, calls: 24 }); // 79 %
      call(breaker, 0, 'success', 12_000); // 20 of 25 = 80 %
      expect(changes).toEqual([{ from: 'closed', to: 'open', reason: 'slow_call_rate', atMs: 0, openMs: 5_000 }]);
    });

    it('open the breaker in a brownout at 100 requests/s once the fast calls age out (about 8 s)', () => {
      // Fast (200 ms to first token) until 15 s, then every call takes 12 s to its first token,
      // recorded when it arrives: the slow share of the window reaches 80 % once the fast
      // calls of the first 8 s of the window have left it.
      const { breaker, changes } = breakerWithLog();
      for (let t = 0; t <= 40_000; t += 10) {
        const slow = t >= 15_000;
        const permit = breaker.tryAcquire(t);
        if (permit.allowed) breaker.record('success', slow ? 12_000 : 200, t, permit.probe);
      }
      const opened = changes.find((c) => c.to === 'open');
      expect(opened?.reason).toBe('slow_call_rate');
      const afterMs = (opened?.atMs ?? Infinity) - 15_000;
      expect(afterMs).toBeGreaterThanOrEqual(7_000);
      expect(afterMs).toBeLessThanOrEqual(9_000);
      // And it stays closed for a brownout of a fifth of the calls.
      const mild = breakerWithLog();
      let n = 0;
      for (let t = 0; t <= 40_000; t += 10) call(mild.breaker, t, 'success', n++ % 5 === 0 ? 12_000 : 200);
      expect(mild.changes).toEqual([]);
    });

    it('are not tracked when slowCallMs is null, and a call at exactly slowCallMs is not slow', () => {
      const off = createCircuitBreaker({ slowCallMs: null });
      for (let i = 0; i < 40; i++) call(off, 0, 'success', 120_000);
      expect(off.snapshot(0)).toMatchObject({ state: 'closed', slowCalls: 0 });
      const on = createCircuitBreaker({ slowCallMs: 1_000 });
      for (let i = 0; i < 40; i++) call(on, 0, 'success', 1_000);
      expect(on.snapshot(0)).toMatchObject({ state: 'closed', slowCalls: 0 });
    });
  });

  it('refuses calls while open, with the time left as retryAfterMs, then turns half-open', () => {
    const { breaker, changes } = breakerWithLog();
    openAt(breaker, 1_000);
    expect(breaker.tryAcquire(1_000)).toEqual({ allowed: false, reason: 'open', retryAfterMs: 5_000 });
    expect(breaker.tryAcquire(4_499.5)).toEqual({ allowed: false, reason: 'open', retryAfterMs: 1_501 });
    expect(breaker.snapshot(5_999)).toMatchObject({ state: 'open', openUntilMs: 6_000 });
    // Read late: the transition is stamped with the time it became due.
    expect(breaker.state(7_500)).toBe('half_open');
    expect(changes.at(-1)).toEqual({ from: 'open', to: 'half_open', reason: 'wait_elapsed', atMs: 6_000 });
  });

  it('ignores late answers of calls sent before it opened', () => {
    const breaker = createCircuitBreaker();
    openAt(breaker, 0);
    for (let i = 0; i < 100; i++) breaker.record('success', 10, 100, false);
    expect(breaker.state(100)).toBe('open');
    breaker.state(5_000);
    breaker.record('failure', 10, 5_000, false); // half-open: not a probe, so no verdict
    expect(breaker.state(5_000)).toBe('half_open');
  });

  describe('half-open', () => {
    it('admits exactly the permitted probes at once; a recorded probe frees its slot', () => {
      const breaker = createCircuitBreaker({ halfOpenProbes: 3, halfOpenSuccessesToClose: 4 });
      openAt(breaker, 0);
      const permits = [0, 1, 2, 3, 4].map(() => breaker.tryAcquire(5_000));
      expect(permits.slice(0, 3)).toEqual([{ allowed: true, probe: true }, { allowed: true, probe: true }, { allowed: true, probe: true }]);
      expect(permits.slice(3)).toEqual([
        { allowed: false, reason: 'half_open', retryAfterMs: 5_000 },
        { allowed: false, reason: 'half_open', retryAfterMs: 5_000 },
      ]);
      expect(breaker.snapshot(5_000).probesInFlight).toBe(3);
      breaker.record('success', 100, 5_100, true);
      expect(breaker.tryAcquire(5_100)).toEqual({ allowed: true, probe: true });
      expect(breaker.tryAcquire(5_100).allowed).toBe(false);
      for (let i = 0; i < 3; i++) breaker.record('success', 100, 5_200, true);
      expect(breaker.state(5_200)).toBe('closed');
    });

    it('never has more than the permitted probes in flight under 100 requests/s with 250 ms calls', () => {
      const breaker = createCircuitBreaker();
      openAt(breaker, 0);
      const inFlight: number[] = []; // completion times of the probes sent
      let most = 0;
      for (let t = 5_000; t < 5_400; t += 10) {
        for (const done of inFlight.filter((d) => d <= t)) {
          inFlight.splice(inFlight.indexOf(done), 1);
          breaker.record('failure', 250, t, true);
        }
        const permit = breaker.tryAcquire(t);
        if (permit.allowed) inFlight.push(t + 250);
        most = Math.max(most, inFlight.length);
      }
      expect(most).toBe(3);
      // The first probe's failure (at 5,250) re-opened it; the other two were answered while open.
      expect(breaker.snapshot(5_400)).toMatchObject({ state: 'open', openUntilMs: 15_250, reopens: 1 });
    });

    it('re-opens on a probe failure with an exponentially longer wait, capped', () => {
      const { breaker, changes } = breakerWithLog({ openMs: 5_000, openBackoffMultiplier: 2, maxOpenMs: 30_000 });
      openAt(breaker, 0);
      let t = 0;
      for (let i = 0; i < 5; i++) {
        t = breaker.snapshot(t).openUntilMs ?? NaN;
        expect(call(breaker, t, 'failure')).toBe(true);
      }
      expect(changes.filter((c) => c.to === 'open').map((c) => [c.reason, c.openMs])).toEqual([
        ['failure_rate', 5_000],
        ['probe_failed', 10_000],
        ['probe_failed', 20_000],
        ['probe_failed', 30_000],
        ['probe_failed', 30_000],
        ['probe_failed', 30_000],
      ]);
      expect(breaker.snapshot(t).reopens).toBe(5);
    });

    it('re-opens on a slow probe', () => {
      const { breaker, changes } = breakerWithLog({ slowCallMs: 1_000 });
      openAt(breaker, 0);
      call(breaker, 5_000, 'success', 1_500);
      expect(changes.at(-1)).toMatchObject({ from: 'half_open', to: 'open', reason: 'probe_slow', openMs: 10_000 });
    });

    it('closes after enough probe successes, with an empty window and the backoff reset', () => {
      const { breaker, changes } = breakerWithLog();
      openAt(breaker, 0);
      call(breaker, 5_000, 'failure'); // re-open for 10 s
      for (let i = 0; i < 2; i++) call(breaker, 15_000, 'success');
      expect(breaker.state(15_000)).toBe('half_open');
      call(breaker, 15_000, 'success');
      expect(changes.at(-1)).toEqual({ from: 'half_open', to: 'closed', reason: 'probes_succeeded', atMs: 15_000 });
      expect(breaker.snapshot(15_000)).toMatchObject({ state: 'closed', calls: 0, failures: 0, reopens: 0 });
      // A fresh window: the minimum volume applies again, and the next open waits the base 5 s.
      for (let i = 0; i < 19; i++) call(breaker, 15_001, 'failure');
      expect(breaker.state(15_001)).toBe('closed');
      call(breaker, 15_001, 'failure');
      expect(changes.at(-1)).toMatchObject({ to: 'open', openMs: 5_000 });
    });

    it("gives a slot back for an 'ignored' probe without counting it", () => {
      const breaker = createCircuitBreaker({ halfOpenProbes: 1 });
      openAt(breaker, 0);
      expect(call(breaker, 5_000, 'ignored')).toBe(true);
      expect(breaker.snapshot(5_000)).toMatchObject({ state: 'half_open', probesInFlight: 0 });
      expect(call(breaker, 5_000, 'success')).toBe(true);
      expect(breaker.state(5_000)).toBe('closed'); // halfOpenSuccessesToClose defaults to halfOpenProbes
    });

    it('frees the slot of a probe never recorded after probeTimeoutMs', () => {
      const breaker = createCircuitBreaker({ halfOpenProbes: 1, probeTimeoutMs: 30_000 });
      openAt(breaker, 0);
      expect(breaker.tryAcquire(5_000)).toEqual({ allowed: true, probe: true });
      expect(breaker.tryAcquire(33_000)).toEqual({ allowed: false, reason: 'half_open', retryAfterMs: 2_000 });
      expect(breaker.tryAcquire(35_000)).toEqual({ allowed: true, probe: true });
    });
  });

  it('reset forces closed with an empty window', () => {
    const { breaker, changes } = breakerWithLog();
    openAt(breaker, 0);
    breaker.reset(10);
    expect(breaker.snapshot(10)).toMatchObject({ state: 'closed', calls: 0 });
    expect(changes.at(-1)).toEqual({ from: 'open', to: 'closed', reason: 'reset', atMs: 10 });
    expect(breaker.tryAcquire(10)).toEqual({ allowed: true, probe: false });
  });

  it('takes a clock that steps back as the latest time seen', () => {
    const breaker = createCircuitBreaker();
    for (let i = 0; i < 19; i++) call(breaker, 20_000, 'failure');
    call(breaker, 0, 'failure'); // lands in the 20 s bucket, not in a long-gone one
    expect(breaker.state(20_000)).toBe('open');
  });

  it.each<[string, CircuitBreakerOptions]>([
    ['windowMs', { windowMs: 0 }],
    ['buckets', { buckets: 2.5 }],
    ['failureRateThreshold', { failureRateThreshold: 0 }],
    ['failureRateThreshold', { failureRateThreshold: 20 }],
    ['minimumCalls', { minimumCalls: 0 }],
    ['slowCallMs', { slowCallMs: -1 }],
    ['openMs', { openMs: Number.NaN }],
    ['openBackoffMultiplier', { openBackoffMultiplier: 0.5 }],
    ['maxOpenMs', { openMs: 10_000, maxOpenMs: 5_000 }],
    ['halfOpenProbes', { halfOpenProbes: 0 }],
    ['probeTimeoutMs', { probeTimeoutMs: 0 }],
  ])('rejects a bad %s with a RangeError', (name, options) => {
    expect(() => createCircuitBreaker(options)).toThrow(new RegExp(`^${name}`));
    expect(() => createCircuitBreaker(options)).toThrow(RangeError);
  });
});

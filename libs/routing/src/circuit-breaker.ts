/**
 * A circuit breaker for one routing target (a revision, or a provider as `provider:<name>`):
 * it watches the outcomes of the calls sent to the target and stops sending them while the
 * target is failing, then lets a few probe calls through to find out when it has recovered.
 *
 * States (resilience4j's CircuitBreaker model; Envoy's outlier detection and LiteLLM's
 * cooldowns do the same job with a fixed ejection time):
 * - `closed`: every call is allowed. Outcomes go into a time-bucketed sliding window
 *   (`buckets` buckets of `windowMs ÷ buckets` each, default 10 × 1 s). Once the window holds
 *   at least `minimumCalls` calls and either the failure rate (failures ÷ calls) reaches
 *   `failureRateThreshold` or the slow-call rate (calls slower than `slowCallMs` ÷ calls)
 *   reaches `slowCallRateThreshold`, the breaker opens. Both comparisons are "equal or
 *   greater", as in resilience4j (its `failureRateThreshold`, `slowCallDurationThreshold` and
 *   `slowCallRateThreshold`). The latency trigger is on by default (10 s, 80 %); a slow call
 *   is not a failure, so a brownout opens the breaker by its own rate, never by adding to the
 *   failure rate.
 * - `open`: every call is refused with `retryAfterMs` until the open wait has elapsed
 *   (`openMs`, default 5 s; each re-open straight from half-open multiplies it by
 *   `openBackoffMultiplier`, default 2, up to `maxOpenMs`, default 60 s; closing resets it).
 * - `half_open`: at most `halfOpenProbes` (default 3) probe calls are in flight at once; the
 *   rest are refused. One failed (or slow) probe re-opens the breaker; `halfOpenSuccessesToClose`
 *   successful probes (default `halfOpenProbes`) close it with an empty window.
 *
 * The window. A call recorded at time t (ms) lands in bucket ⌊t ÷ b⌋, b = windowMs ÷ buckets.
 * The window is the current bucket and the `buckets − 1` before it, so it covers between
 * windowMs − b and windowMs of history (9–10 s by default); a bucket is subtracted from the
 * totals as it falls out ("subtract on evict"), so reading the rates costs O(1) and moving the
 * window at most O(buckets). A burst of failures 11 s ago never counts; one 9.5 s ago may,
 * depending on where in its bucket it fell.
 *
 * Why a total outage at 100 requests/s opens the breaker within about 2 s (defaults). Let the
 * target answer r requests/s successfully for at least `windowMs`, then fail every call from
 * a point φ·b into some bucket (0 ≤ φ < 1). While the window holds F failures and S successes
 * the breaker opens at the first failure with F ≥ minimumCalls and F ÷ (F + S) ≥ p = 0.2,
 * that is F ≥ p ÷ (1 − p) · S = S ÷ 4. Failures grow continuously, F = r·e after e seconds,
 * but successes only leave the window at bucket boundaries, r·b at a time: in the k-th bucket
 * of the outage (k = 0 for the one it starts in) the window still holds
 * S = r·b·(buckets − 1 − k + φ) successes. With b = 1 s this asks e ≥ (9 − k + φ) ÷ 4 s while
 * e < k + 1 − φ s: impossible for k ≤ 1, met in bucket k = 2 at e = max(2 − φ, 1.75 + φ ÷ 4).
 * So the breaker opens between 1.8 s (φ = 0.2) and 2.0 s (φ → 0) after the outage starts,
 * whatever r, as long as r·1.8 s ≥ minimumCalls (about 11 requests/s and up by default; below
 * that the 20th failure opens it). At 100 requests/s the simulation in `circuit-breaker.spec.ts`
 * opens it after 1.8–1.99 s; a steady 10 % error rate never opens it. After a quiet spell
 * (empty window) it opens at the `minimumCalls`-th failure: 0.2 s at 100 requests/s. A longer
 * window or a lower threshold makes it slower to open: more old successes must age out.
 *
 * Latency (defaults): when every call turns slow (over 10 s to first token) at once, the slow
 * share reaches 80 % only when the fast calls still in the window are at most a quarter of the
 * slow ones, which at a steady rate happens once 8 of the window's 10 buckets have turned over:
 * about 8 s (the brownout simulation in `circuit-breaker.spec.ts`). A fifth of the calls slow
 * never opens it.
 *
 * Recovery: 5 s after opening the breaker turns half-open and admits 3 probes; if the target
 * is still down the first failed probe re-opens it for 10 s, then 20 s, 40 s, 60 s, 60 s …;
 * once the target answers, the first 3 successful probes close it.
 *
 * What counts is the caller's decision ({@link CallOutcome}); this module never parses errors.
 * Pure: no clock of its own and no timers. Every method takes `nowMs` (ms on a monotonic clock,
 * e.g. `performance.now()` or `Date.now()`; a time earlier than one already seen is taken as
 * that one). The open → half-open transition happens on the first call (any method) at or
 * after the wait ends, and is reported with the time it became due.
 */

/** `closed`: calls flow; `open`: calls are refused; `half_open`: a few probe calls are let through. */
export type BreakerState = 'closed' | 'open' | 'half_open';

/**
 * The outcome of one call, as the caller classifies it:
 * - `failure`: the target failed: upstream 5xx, unavailable or refused connection, timeout,
 *   stream broken before its verdict;
 * - `success`: the target answered, including a 4xx caused by the request itself (a bad request
 *   or a context-length error says nothing about the target's health);
 * - `ignored`: no verdict about the target (the client cancelled first, the call was never
 *   sent): counted nowhere, but it returns a probe's slot.
 */
export type CallOutcome = 'success' | 'failure' | 'ignored';

/** Why the state changed. */
export type BreakerTransitionReason =
  /** closed → open: the window's failure rate reached the threshold. */
  | 'failure_rate'
  /** closed → open: the window's slow-call rate reached the threshold. */
  | 'slow_call_rate'
  /** open → half_open: the open wait elapsed. */
  | 'wait_elapsed'
  /** half_open → open: a probe failed. */
  | 'probe_failed'
  /** half_open → open: a probe took longer than `slowCallMs`. */
  | 'probe_slow'
  /** half_open → closed: enough probes succeeded. */
  | 'probes_succeeded'
  /** → closed by {@link CircuitBreaker.reset}. */
  | 'reset';

/** One state change, given to `onStateChange`. */
export interface BreakerStateChange {
  from: BreakerState;
  to: BreakerState;
  reason: BreakerTransitionReason;
  /** When it happened (ms, the caller's clock); for `wait_elapsed`, when the wait ended. */
  atMs: number;
  /** On entering `open`: how long it stays open (ms). */
  openMs?: number;
}

/** Options of {@link createCircuitBreaker}; every field has a default. */
export interface CircuitBreakerOptions {
  /** Length of the sliding window (ms, > 0). Default 10,000. */
  windowMs?: number;
  /** Buckets the window is divided into (integer ≥ 1); bucket = windowMs ÷ buckets. Default 10 (1 s each). */
  buckets?: number;
  /** Failure rate (failures ÷ calls in the window, in (0, 1]) at or above which it opens. Default 0.2. */
  failureRateThreshold?: number;
  /** Calls the window must hold before either rate can open it (integer ≥ 1). Default 20. */
  minimumCalls?: number;
  /**
   * A call whose latency (ms; the caller passes TTFT for streams, duration otherwise) is above
   * this is slow; `null` turns the latency trigger off. Default 10,000 (`DEFAULT_CIRCUIT_BREAKER`
   * of `@weir/core`: a third of the upstreams' default 30 s first-token timeout).
   */
  slowCallMs?: number | null;
  /** Slow-call rate (in (0, 1]) at or above which it opens, unless `slowCallMs` is null. Default 0.8. */
  slowCallRateThreshold?: number;
  /** Wait in `open` before probing (ms, ≥ 0). Default 5,000. */
  openMs?: number;
  /** Each re-open from half-open multiplies the wait by this (≥ 1; 1 = no backoff). Default 2. */
  openBackoffMultiplier?: number;
  /** Cap on the open wait (ms, ≥ openMs). Default 60,000 (or `openMs` when that is longer). */
  maxOpenMs?: number;
  /** Probe calls allowed in flight at once in `half_open` (integer ≥ 1). Default 3. */
  halfOpenProbes?: number;
  /** Successful probes that close it (integer ≥ 1). Default `halfOpenProbes`. */
  halfOpenSuccessesToClose?: number;
  /**
   * A probe not recorded within this long (ms, > 0) gives its slot back without counting, so
   * a caller that never records cannot wedge the breaker in `half_open`. Callers record their
   * own timeouts as `failure`. Default 60,000.
   */
  probeTimeoutMs?: number;
  /**
   * Called after each state change, once the breaker is consistent (a metrics counter, a log
   * line). It must not throw.
   */
  onStateChange?: (change: BreakerStateChange) => void;
}

/** What {@link CircuitBreaker.tryAcquire} answers. */
export type BreakerPermit =
  /** Send the call, then {@link CircuitBreaker.record} its outcome with `wasProbe: probe`. */
  | { allowed: true; probe: boolean }
  /**
   * Do not send it. `open`: until the wait ends (`retryAfterMs`); `half_open`: the probe slots
   * are taken, retry after the open wait or when the oldest probe's slot expires, whichever is
   * sooner (ms, ≥ 1, rounded up).
   */
  | { allowed: false; reason: 'open' | 'half_open'; retryAfterMs: number };

/** The breaker's figures at one moment. */
export interface BreakerSnapshot {
  state: BreakerState;
  /** Calls in the window (successes + failures; `ignored` not counted). */
  calls: number;
  failures: number;
  /** Calls above `slowCallMs` (0 when slow calls are not tracked: `slowCallMs: null`). */
  slowCalls: number;
  /** failures ÷ calls, 0 with no calls. */
  failureRate: number;
  /** slowCalls ÷ calls, 0 with no calls. */
  slowCallRate: number;
  /** In `open`: when it turns half-open (ms, the caller's clock). */
  openUntilMs?: number;
  /** Probe calls in flight (`half_open` only; 0 otherwise). */
  probesInFlight: number;
  /** Re-opens from half-open since it last closed (the backoff exponent). */
  reopens: number;
}

/** A circuit breaker for one key. See the module comment for the state machine and its arithmetic. */
export interface CircuitBreaker {
  /**
   * Asks to send one call. `closed`: allowed; `open`: refused with `retryAfterMs`; `half_open`:
   * allowed as a probe while fewer than `halfOpenProbes` probes are in flight, else refused.
   */
  tryAcquire(nowMs: number): BreakerPermit;
  /**
   * Records the outcome of an allowed call. `latencyMs` (TTFT or duration) is compared with
   * `slowCallMs`; undefined never counts as slow. `wasProbe` is the permit's `probe`.
   * `closed`: the call goes into the window (and may open it). `half_open`: a probe's outcome
   * decides (a failed or slow probe re-opens, enough successes close); probes are counted by
   * number, not identity, and a non-probe call (sent before the breaker opened) is ignored.
   * `open`: ignored (late answers of calls sent before it opened).
   */
  record(outcome: CallOutcome, latencyMs: number | undefined, nowMs: number, wasProbe: boolean): void;
  /** The state now (turns an open breaker half-open once its wait has elapsed). */
  state(nowMs: number): BreakerState;
  /** The state and window figures now. */
  snapshot(nowMs: number): BreakerSnapshot;
  /** Forces `closed` with an empty window and no backoff (an operator's reset, a config change). */
  reset(nowMs: number): void;
}

/**
 * Creates a breaker in `closed` with an empty window.
 * @throws RangeError when an option is out of its documented range (a configuration fault).
 */
export function createCircuitBreaker(options: CircuitBreakerOptions = {}): CircuitBreaker {
  const windowMs = options.windowMs ?? 10_000;
  const buckets = options.buckets ?? 10;
  const failureRateThreshold = options.failureRateThreshold ?? 0.2;
  const minimumCalls = options.minimumCalls ?? 20;
  const slowCallMs = options.slowCallMs === undefined ? 10_000 : (options.slowCallMs ?? undefined);
  const slowCallRateThreshold = options.slowCallRateThreshold ?? 0.8;
  const baseOpenMs = options.openMs ?? 5_000;
  const backoff = options.openBackoffMultiplier ?? 2;
  const maxOpenMs = options.maxOpenMs ?? Math.max(60_000, baseOpenMs);
  const halfOpenProbes = options.halfOpenProbes ?? 3;
  const successesToClose = options.halfOpenSuccessesToClose ?? halfOpenProbes;
  const probeTimeoutMs = options.probeTimeoutMs ?? 60_000;
  const onStateChange = options.onStateChange;

  check(windowMs > 0 && Number.isFinite(windowMs), 'windowMs must be a finite number > 0', windowMs);
  check(Number.isInteger(buckets) && buckets >= 1, 'buckets must be an integer >= 1', buckets);
  check(failureRateThreshold > 0 && failureRateThreshold <= 1, 'failureRateThreshold must be in (0, 1]', failureRateThreshold);
  check(Number.isInteger(minimumCalls) && minimumCalls >= 1, 'minimumCalls must be an integer >= 1', minimumCalls);
  check(slowCallMs === undefined || slowCallMs >= 0, 'slowCallMs must be >= 0', slowCallMs);
  check(slowCallRateThreshold > 0 && slowCallRateThreshold <= 1, 'slowCallRateThreshold must be in (0, 1]', slowCallRateThreshold);
  check(baseOpenMs >= 0 && Number.isFinite(baseOpenMs), 'openMs must be a finite number >= 0', baseOpenMs);
  check(backoff >= 1 && Number.isFinite(backoff), 'openBackoffMultiplier must be a finite number >= 1', backoff);
  check(maxOpenMs >= baseOpenMs && Number.isFinite(maxOpenMs), 'maxOpenMs must be finite and >= openMs', maxOpenMs);
  check(Number.isInteger(halfOpenProbes) && halfOpenProbes >= 1, 'halfOpenProbes must be an integer >= 1', halfOpenProbes);
  check(Number.isInteger(successesToClose) && successesToClose >= 1, 'halfOpenSuccessesToClose must be an integer >= 1', successesToClose);
  check(probeTimeoutMs > 0, 'probeTimeoutMs must be > 0', probeTimeoutMs);

  const bucketMs = windowMs / buckets;
  const window = new SlidingWindow(buckets);

  let current: BreakerState = 'closed';
  let lastNow = -Infinity;
  let openUntil = 0;
  let reopens = 0;
  /** Expiry times (ms) of the probes in flight, oldest first. */
  let probes: number[] = [];
  let probeSuccesses = 0;

  const clamp = (nowMs: number) => (lastNow = Math.max(lastNow, nowMs));

  const transition = (to: BreakerState, reason: BreakerTransitionReason, atMs: number) => {
    const from = current;
    current = to;
    let openFor: number | undefined;
    if (to === 'open') {
      openFor = Math.min(maxOpenMs, baseOpenMs * backoff ** reopens);
      openUntil = atMs + openFor;
    }
    if (to === 'half_open' || to === 'open') {
      probes = [];
      probeSuccesses = 0;
    }
    if (to === 'closed') {
      window.clear();
      reopens = 0;
      probes = [];
      probeSuccesses = 0;
    }
    if (from !== to) onStateChange?.({ from, to, reason, atMs, ...(openFor !== undefined ? { openMs: openFor } : {}) });
  };

  /** Moves the window to `now` and performs the time-driven transition (open → half_open). */
  const sync = (nowMs: number): number => {
    const now = clamp(nowMs);
    window.advance(Math.floor(now / bucketMs));
    if (current === 'open' && now >= openUntil) transition('half_open', 'wait_elapsed', openUntil);
    if (current === 'half_open') while (probes.length > 0 && probes[0] <= now) probes.shift();
    return now;
  };

  const isSlow = (latencyMs: number | undefined) => slowCallMs !== undefined && latencyMs !== undefined && latencyMs > slowCallMs;

  return {
    tryAcquire(nowMs) {
      const now = sync(nowMs);
      switch (current) {
        case 'closed':
          return { allowed: true, probe: false };
        case 'open':
          return { allowed: false, reason: 'open', retryAfterMs: Math.max(1, Math.ceil(openUntil - now)) };
        case 'half_open':
          if (probes.length < halfOpenProbes) {
            probes.push(now + probeTimeoutMs);
            return { allowed: true, probe: true };
          }
          return { allowed: false, reason: 'half_open', retryAfterMs: Math.max(1, Math.ceil(Math.min(baseOpenMs, probes[0] - now))) };
        default: {
          const unreachable: never = current;
          return unreachable;
        }
      }
    },

    record(outcome, latencyMs, nowMs, wasProbe) {
      const now = sync(nowMs);
      if (current === 'closed') {
        if (outcome === 'ignored') return;
        window.add(outcome === 'failure', isSlow(latencyMs));
        if (window.calls < minimumCalls) return;
        if (window.failures / window.calls >= failureRateThreshold) transition('open', 'failure_rate', now);
        else if (slowCallMs !== undefined && window.slow / window.calls >= slowCallRateThreshold) transition('open', 'slow_call_rate', now);
        return;
      }
      if (current !== 'half_open' || !wasProbe) return;
      probes.shift();
      if (outcome === 'ignored') return;
      if (outcome === 'failure' || isSlow(latencyMs)) {
        reopens++;
        transition('open', outcome === 'failure' ? 'probe_failed' : 'probe_slow', now);
        return;
      }
      if (++probeSuccesses >= successesToClose) transition('closed', 'probes_succeeded', now);
    },

    state(nowMs) {
      sync(nowMs);
      return current;
    },

    snapshot(nowMs) {
      sync(nowMs);
      const calls = window.calls;
      return {
        state: current,
        calls,
        failures: window.failures,
        slowCalls: window.slow,
        failureRate: calls > 0 ? window.failures / calls : 0,
        slowCallRate: calls > 0 ? window.slow / calls : 0,
        ...(current === 'open' ? { openUntilMs: openUntil } : {}),
        probesInFlight: current === 'half_open' ? probes.length : 0,
        reopens,
      };
    },

    reset(nowMs) {
      const now = sync(nowMs);
      if (current === 'closed') {
        window.clear();
        reopens = 0;
        return;
      }
      transition('closed', 'reset', now);
    },
  };
}

function check(ok: boolean, message: string, value: unknown): void {
  if (!ok) throw new RangeError(`${message}, got ${String(value)}`);
}

/** Per-bucket counts in a ring indexed by bucket number mod size, with running totals. */
class SlidingWindow {
  calls = 0;
  failures = 0;
  slow = 0;
  private readonly bucketCalls: number[];
  private readonly bucketFailures: number[];
  private readonly bucketSlow: number[];
  /** The current bucket number (⌊t ÷ bucketMs⌋); −Infinity before the first call. */
  private head = -Infinity;

  constructor(private readonly size: number) {
    this.bucketCalls = new Array<number>(size).fill(0);
    this.bucketFailures = new Array<number>(size).fill(0);
    this.bucketSlow = new Array<number>(size).fill(0);
  }

  /** Makes `bucket` the current one, evicting the buckets that fall out of the window. */
  advance(bucket: number): void {
    if (bucket <= this.head) return;
    if (bucket - this.head >= this.size) this.clear();
    else for (let b = this.head + 1; b <= bucket; b++) this.evict(b);
    this.head = bucket;
  }

  add(failure: boolean, slow: boolean): void {
    const i = this.slot(this.head);
    this.bucketCalls[i]++;
    this.calls++;
    if (failure) {
      this.bucketFailures[i]++;
      this.failures++;
    }
    if (slow) {
      this.bucketSlow[i]++;
      this.slow++;
    }
  }

  clear(): void {
    this.bucketCalls.fill(0);
    this.bucketFailures.fill(0);
    this.bucketSlow.fill(0);
    this.calls = this.failures = this.slow = 0;
  }

  private evict(bucket: number): void {
    const i = this.slot(bucket);
    this.calls -= this.bucketCalls[i];
    this.failures -= this.bucketFailures[i];
    this.slow -= this.bucketSlow[i];
    this.bucketCalls[i] = this.bucketFailures[i] = this.bucketSlow[i] = 0;
  }

  private slot(bucket: number): number {
    return ((bucket % this.size) + this.size) % this.size;
  }
}

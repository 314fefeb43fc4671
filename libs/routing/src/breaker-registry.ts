/**
 * The circuit breakers of one process, one per routing target, keyed by string: a revision id
 * (`stories260k@1`) for a model served by Weir's replicas, or {@link providerBreakerKey}
 * (`provider:openai`) for a whole external provider. Breakers are created on first use with
 * shared options (optionally overridden per key) and are never shared between processes: each
 * gateway judges the targets by the calls it sends itself.
 *
 * Metrics stay outside this domain library: the composition passes `onStateChange` (see
 * {@link breakerTransitionRecorder}) and reads {@link BreakerRegistry.snapshot} at each scrape,
 * as `scheduler-metrics.ts` does for the scheduler.
 */
import {
  createCircuitBreaker,
  type BreakerPermit,
  type BreakerState,
  type BreakerStateChange,
  type CallOutcome,
  type CircuitBreaker,
  type CircuitBreakerOptions,
} from './circuit-breaker';

/** Breaker options without the listener (the registry supplies its own). */
export type SharedBreakerOptions = Omit<CircuitBreakerOptions, 'onStateChange'>;

/** Options of {@link createBreakerRegistry}. */
export interface BreakerRegistryOptions {
  /** Options of every breaker (defaults: those of {@link createCircuitBreaker}). */
  breaker?: SharedBreakerOptions;
  /** Per-key overrides, merged over `breaker` when the key's breaker is created (e.g. a slower provider's `slowCallMs`). */
  optionsFor?: (key: string) => SharedBreakerOptions | undefined;
  /**
   * Most breakers kept (integer ≥ 1). Keys come from configuration, so this is a guard, not a
   * working limit: creating one more evicts the least recently used closed breaker (or, if
   * none is closed, the least recently used one), which starts afresh if used again.
   * Default 1,024.
   */
  maxKeys?: number;
  /** Called after each state change of any breaker, with its key. It must not throw. */
  onStateChange?: (key: string, change: BreakerStateChange) => void;
  /** Called when a breaker is evicted to respect `maxKeys` (a log line). */
  onEvict?: (key: string, state: BreakerState) => void;
}

/** One breaker's figures for metrics (`weir.circuit_breaker.state` takes `key` and `state`). */
export interface BreakerMetricsSample {
  key: string;
  state: BreakerState;
  /** Failures ÷ calls in the breaker's window (0 with no calls). */
  failureRate: number;
  /** Calls in the window. */
  calls: number;
}

/** The breakers of one process. */
export interface BreakerRegistry {
  /** The key's breaker, created on first use. */
  get(key: string): CircuitBreaker;
  /** The key's breaker if it exists (no creation, no recency update). */
  peek(key: string): CircuitBreaker | undefined;
  /** `get(key).tryAcquire(nowMs)`. */
  tryAcquire(key: string, nowMs: number): BreakerPermit;
  /** `get(key).record(…)`. */
  record(key: string, outcome: CallOutcome, latencyMs: number | undefined, nowMs: number, wasProbe: boolean): void;
  /** Every breaker's state and window figures now, sorted by key (for a metrics callback). */
  snapshot(nowMs: number): BreakerMetricsSample[];
  /** Forgets the key's breaker (a target removed from configuration); true if there was one. */
  delete(key: string): boolean;
  /** Breakers kept. */
  readonly size: number;
}

/** The registry key of a whole provider: `provider:<name>`. */
export function providerBreakerKey(provider: string): string {
  return `provider:${provider}`;
}

/**
 * Creates an empty registry.
 * @throws RangeError when `maxKeys` is not an integer ≥ 1; breaker options are checked when
 * the first breaker is created (see {@link createCircuitBreaker}).
 */
export function createBreakerRegistry(options: BreakerRegistryOptions = {}): BreakerRegistry {
  const maxKeys = options.maxKeys ?? 1_024;
  if (!(Number.isInteger(maxKeys) && maxKeys >= 1)) throw new RangeError(`maxKeys must be an integer >= 1, got ${maxKeys}`);
  // Insertion order is recency order: get() moves a key to the end.
  const breakers = new Map<string, CircuitBreaker>();

  const evictOne = () => {
    let victim: string | undefined;
    for (const [key, breaker] of breakers) {
      // No clock here: −Infinity reads each breaker as of its last use (an earlier time is taken as the latest seen).
      if (breaker.snapshot(-Infinity).state === 'closed') {
        victim = key;
        break;
      }
    }
    victim ??= breakers.keys().next().value;
    if (victim === undefined) return;
    const state = breakers.get(victim)?.snapshot(-Infinity).state ?? 'closed';
    breakers.delete(victim);
    options.onEvict?.(victim, state);
  };

  const get = (key: string): CircuitBreaker => {
    const found = breakers.get(key);
    if (found) {
      breakers.delete(key);
      breakers.set(key, found);
      return found;
    }
    const breaker = createCircuitBreaker({
      ...options.breaker,
      ...options.optionsFor?.(key),
      ...(options.onStateChange ? { onStateChange: (change: BreakerStateChange) => options.onStateChange?.(key, change) } : {}),
    });
    if (breakers.size >= maxKeys) evictOne();
    breakers.set(key, breaker);
    return breaker;
  };

  return {
    get,
    peek: (key) => breakers.get(key),
    tryAcquire: (key, nowMs) => get(key).tryAcquire(nowMs),
    record: (key, outcome, latencyMs, nowMs, wasProbe) => get(key).record(outcome, latencyMs, nowMs, wasProbe),
    snapshot(nowMs) {
      return [...breakers.entries()]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([key, breaker]) => {
          const s = breaker.snapshot(nowMs);
          return { key, state: s.state, failureRate: s.failureRate, calls: s.calls };
        });
    },
    delete: (key) => breakers.delete(key),
    get size() {
      return breakers.size;
    },
  };
}

/** What {@link breakerTransitionRecorder} records into (`WeirMetrics` fits). */
export interface BreakerMetricsSink {
  recordCircuitBreakerTransition(transition: { key: string; from: BreakerState; to: BreakerState }): void;
}

/**
 * An `onStateChange` for {@link createBreakerRegistry} that counts each transition
 * (`weir.circuit_breaker.transitions` by `key`, `from`, `to`) and forwards it to `also` (a log line).
 */
export function breakerTransitionRecorder(
  sink: BreakerMetricsSink,
  also?: (key: string, change: BreakerStateChange) => void,
): (key: string, change: BreakerStateChange) => void {
  return (key, change) => {
    sink.recordCircuitBreakerTransition({ key, from: change.from, to: change.to });
    also?.(key, change);
  };
}

/**
 * The circuit breakers of one process, one per routing target, keyed by string: a revision id
 * (`stories260k@1`, scope `revision`), or {@link providerBreakerKey} (`provider:api.openai.com`,
 * scope `provider`) for a whole external provider. Breakers are created on first use with
 * shared options (optionally overridden per key) and are never shared between processes: each
 * gateway judges the targets by the calls it sends itself.
 *
 * {@link createRevisionHealth} puts both scopes in front of a request: a call to a revision
 * needs both its revision's and its provider's breaker to allow it, and its outcome feeds both,
 * so an outage of a whole provider opens one breaker and skips every revision behind it at once.
 *
 * Metrics stay outside this domain library: the composition passes `onStateChange` (see
 * {@link breakerTransitionRecorder}) and reads {@link BreakerRegistry.snapshot} at each scrape,
 * as `scheduler-metrics.ts` does for the scheduler.
 */
import { DEFAULT_CIRCUIT_BREAKER, type CircuitBreakerDefaults, type RevisionSpec } from '@weir/core';
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

/** What a breaker guards: one revision, or every revision of one external provider. */
export type BreakerScope = 'revision' | 'provider';

/** One breaker's figures for metrics (`weir.circuit_breaker.state` takes `key`, `scope` and `state`). */
export interface BreakerMetricsSample {
  key: string;
  scope: BreakerScope;
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

const PROVIDER_PREFIX = 'provider:';

/** The registry key of a whole provider: `provider:<name>`. */
export function providerBreakerKey(provider: string): string {
  return `${PROVIDER_PREFIX}${provider}`;
}

/** A key's scope: `provider` for {@link providerBreakerKey} keys, else `revision`. */
export function breakerScopeOf(key: string): BreakerScope {
  return key.startsWith(PROVIDER_PREFIX) ? 'provider' : 'revision';
}

/**
 * The provider breaker key of a revision, or undefined when the revision is its own provider.
 * - `openai-compatible` and `anthropic` revisions call an external upstream: their provider is
 *   the host (and port) of `baseUrl`, `provider:api.anthropic.com`, so revisions on the same
 *   upstream share one provider breaker (the whole `baseUrl` when it is not a URL).
 * - Revisions served by Weir's own replicas (`replicas`, or an in-process `llamacpp` or
 *   `simulated` engine) have none: a dead replica is the scheduler's business (it ejects it),
 *   and the revision breaker already covers the revision as a whole.
 */
export function revisionProviderKey(revision: Pick<RevisionSpec, 'engine' | 'replicas'>): string | undefined {
  if ((revision.replicas?.length ?? 0) > 0) return undefined;
  const engine = revision.engine;
  switch (engine.kind) {
    case 'openai-compatible':
    case 'anthropic': {
      let host: string;
      try {
        host = new URL(engine.baseUrl).host || engine.baseUrl;
      } catch {
        host = engine.baseUrl;
      }
      return providerBreakerKey(host);
    }
    case 'llamacpp':
    case 'simulated':
      return undefined;
    default: {
      const unreachable: never = engine;
      return unreachable;
    }
  }
}

/**
 * Breaker options from the configuration's `defaults.circuit_breaker` (absent:
 * `DEFAULT_CIRCUIT_BREAKER` of `@weir/core`; absent `slowCallMs`: latency not tracked). The
 * other options (10 buckets, doubling open wait up to 60 s, 60 s probe timeout) keep the
 * defaults of {@link createCircuitBreaker}.
 */
export function breakerOptionsFrom(settings: CircuitBreakerDefaults = DEFAULT_CIRCUIT_BREAKER): SharedBreakerOptions {
  return {
    windowMs: settings.windowMs,
    failureRateThreshold: settings.errorRate,
    minimumCalls: settings.minRequests,
    openMs: settings.openMs,
    halfOpenProbes: settings.halfOpenProbes,
    slowCallMs: settings.slowCallMs ?? null,
    slowCallRateThreshold: settings.slowCallRate,
  };
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
          return { key, scope: breakerScopeOf(key), state: s.state, failureRate: s.failureRate, calls: s.calls };
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
  recordCircuitBreakerTransition(transition: { key: string; scope: BreakerScope; from: BreakerState; to: BreakerState }): void;
}

/**
 * An `onStateChange` for {@link createBreakerRegistry} that counts each transition
 * (`weir.circuit_breaker.transitions` by `key`, `scope`, `from`, `to`) and forwards it to `also` (a log line).
 */
export function breakerTransitionRecorder(
  sink: BreakerMetricsSink,
  also?: (key: string, change: BreakerStateChange) => void,
): (key: string, change: BreakerStateChange) => void {
  return (key, change) => {
    sink.recordCircuitBreakerTransition({ key, scope: breakerScopeOf(key), from: change.from, to: change.to });
    also?.(key, change);
  };
}

/** What {@link RevisionHealth.tryAcquire} answers. */
export type RevisionPermit =
  /** Send the call, then {@link RevisionHealth.record} its outcome with `wasProbe: probe`. */
  | { allowed: true; probe: boolean }
  /** Do not send it: the breaker of `scope` refused (`open`, or `half_open` with its probe slots taken) for `retryAfterMs` (ms, ≥ 1). */
  | { allowed: false; scope: BreakerScope; reason: 'open' | 'half_open'; retryAfterMs: number };

/**
 * The health of revisions for the gateway's failover (`CandidateHealth` of `@weir/gateway`),
 * over both breakers of each revision: its own and its provider's.
 */
export interface RevisionHealth {
  /**
   * May a call go to `revisionId` now? Only when its revision breaker and then its provider
   * breaker (if it has one) both allow it; a probe slot taken on the first is given back when
   * the second refuses. `probe`: the call is a probe of either breaker.
   */
  tryAcquire(revisionId: string, nowMs: number): RevisionPermit;
  /**
   * Records the outcome of an allowed call in both breakers (`latencyMs`: its time to first
   * token, ms; `wasProbe`: the permit's `probe`). Each breaker counts it as its own probe only
   * if it gave a probe slot to a call to this revision that is not yet recorded, so a call
   * that was a probe of the provider only is not taken as a probe of a revision breaker that
   * turned half-open meanwhile.
   */
  record(revisionId: string, outcome: CallOutcome, latencyMs: number | undefined, nowMs: number, wasProbe: boolean): void;
}

/**
 * Creates the two-scope health of revisions over `registry`. `providerOf(revisionId)` names the
 * revision's provider key ({@link revisionProviderKey} of its spec), undefined when it has none
 * (then only the revision breaker applies). Pure: the registry's breakers keep the state, this
 * keeps only the count of unrecorded probes per revision and scope.
 */
export function createRevisionHealth(registry: BreakerRegistry, providerOf: (revisionId: string) => string | undefined): RevisionHealth {
  /** Probe slots handed out for calls to a revision and not yet recorded, per scope. */
  const revisionProbes = new Map<string, number>();
  const providerProbes = new Map<string, number>();
  const add = (m: Map<string, number>, id: string) => m.set(id, (m.get(id) ?? 0) + 1);
  const take = (m: Map<string, number>, id: string): boolean => {
    const n = m.get(id) ?? 0;
    if (n <= 0) return false;
    if (n === 1) m.delete(id);
    else m.set(id, n - 1);
    return true;
  };

  return {
    tryAcquire(revisionId, nowMs) {
      const own = registry.tryAcquire(revisionId, nowMs);
      if (!own.allowed) return { allowed: false, scope: 'revision', reason: own.reason, retryAfterMs: own.retryAfterMs };
      const providerKey = providerOf(revisionId);
      const shared = providerKey === undefined ? ({ allowed: true, probe: false } as const) : registry.tryAcquire(providerKey, nowMs);
      if (!shared.allowed) {
        // The revision's probe slot goes back unused.
        if (own.probe) registry.record(revisionId, 'ignored', undefined, nowMs, true);
        return { allowed: false, scope: 'provider', reason: shared.reason, retryAfterMs: shared.retryAfterMs };
      }
      if (own.probe) add(revisionProbes, revisionId);
      if (shared.probe) add(providerProbes, revisionId);
      return { allowed: true, probe: own.probe || shared.probe };
    },

    record(revisionId, outcome, latencyMs, nowMs, wasProbe) {
      const ownProbe = wasProbe && take(revisionProbes, revisionId);
      const sharedProbe = wasProbe && take(providerProbes, revisionId);
      registry.record(revisionId, outcome, latencyMs, nowMs, ownProbe);
      const providerKey = providerOf(revisionId);
      if (providerKey !== undefined) registry.record(providerKey, outcome, latencyMs, nowMs, sharedProbe);
    },
  };
}

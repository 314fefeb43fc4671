import { breakerTransitionRecorder, createBreakerRegistry, providerBreakerKey, type BreakerMetricsSink } from './breaker-registry';
import type { BreakerState } from './circuit-breaker';

/** Records `n` failures for `key` at `t` through the registry. */
function fail(registry: ReturnType<typeof createBreakerRegistry>, key: string, t: number, n = 20): void {
  for (let i = 0; i < n; i++) {
    const permit = registry.tryAcquire(key, t);
    if (permit.allowed) registry.record(key, 'failure', 10, t, permit.probe);
  }
}

describe('createBreakerRegistry', () => {
  it('creates one breaker per key on first use, with the shared options and per-key overrides', () => {
    const registry = createBreakerRegistry({
      breaker: { minimumCalls: 5 },
      optionsFor: (key) => (key === providerBreakerKey('slow') ? { minimumCalls: 50 } : undefined),
    });
    expect(registry.size).toBe(0);
    expect(registry.peek('m@1')).toBeUndefined();
    const breaker = registry.get('m@1');
    expect(registry.get('m@1')).toBe(breaker);
    fail(registry, 'm@1', 0, 5);
    fail(registry, 'provider:slow', 0, 5);
    expect(registry.get('m@1').state(0)).toBe('open');
    expect(registry.get('provider:slow').state(0)).toBe('closed');
    expect(registry.size).toBe(2);
  });

  it('tells each transition with its key', () => {
    const seen: string[] = [];
    const registry = createBreakerRegistry({ onStateChange: (key, c) => seen.push(`${key} ${c.from}→${c.to} ${c.reason}`) });
    fail(registry, 'm@1', 0);
    registry.get('m@2');
    registry.snapshot(5_000); // a scrape after the wait sees (and reports) half-open
    expect(seen).toEqual(['m@1 closed→open failure_rate', 'm@1 open→half_open wait_elapsed']);
  });

  it('snapshots every breaker for metrics, sorted by key', () => {
    const registry = createBreakerRegistry();
    for (let i = 0; i < 30; i++) registry.record('b@1', i % 3 === 0 ? 'failure' : 'success', 10, 0, false);
    fail(registry, 'a@1', 0);
    registry.get(providerBreakerKey('openai'));
    expect(registry.snapshot(1_000)).toEqual([
      { key: 'a@1', state: 'open', failureRate: 1, calls: 20 },
      { key: 'b@1', state: 'open', failureRate: 0.35, calls: 20 }, // opened at its 20th call: 7 of 20 failed
      { key: 'provider:openai', state: 'closed', failureRate: 0, calls: 0 },
    ]);
  });

  it('is bounded: past maxKeys it evicts the least recently used closed breaker, else the least recently used', () => {
    const evicted: Array<[string, BreakerState]> = [];
    const registry = createBreakerRegistry({ maxKeys: 3, onEvict: (key, state) => evicted.push([key, state]) });
    fail(registry, 'a', 0); // open
    registry.get('b');
    registry.get('c');
    registry.get('b'); // recency: a, c, b
    registry.get('d'); // evicts c: the least recently used closed one (a is open)
    expect(evicted).toEqual([['c', 'closed']]);
    fail(registry, 'b', 0);
    fail(registry, 'd', 0);
    registry.get('e'); // all open: evicts a, the least recently used
    expect(evicted).toEqual([
      ['c', 'closed'],
      ['a', 'open'],
    ]);
    expect(registry.snapshot(0).map((s) => s.key)).toEqual(['b', 'd', 'e']);
    expect(registry.size).toBe(3);
    expect(registry.delete('b')).toBe(true);
    expect(registry.delete('b')).toBe(false);
  });

  it('rejects a bad maxKeys', () => {
    expect(() => createBreakerRegistry({ maxKeys: 0 })).toThrow(RangeError);
  });
});

describe('breakerTransitionRecorder', () => {
  it('counts each transition into the sink and forwards it', () => {
    const counted: string[] = [];
    const sink: BreakerMetricsSink = { recordCircuitBreakerTransition: (t) => counted.push(`${t.key}:${t.from}:${t.to}`) };
    const forwarded: string[] = [];
    const registry = createBreakerRegistry({ onStateChange: breakerTransitionRecorder(sink, (key, c) => forwarded.push(`${key} ${c.reason}`)) });
    fail(registry, 'm@1', 0);
    for (let i = 0; i < 3; i++) {
      expect(registry.tryAcquire('m@1', 5_000)).toEqual({ allowed: true, probe: true });
      registry.record('m@1', 'success', 10, 5_000, true);
    }
    expect(counted).toEqual(['m@1:closed:open', 'm@1:open:half_open', 'm@1:half_open:closed']);
    expect(forwarded).toEqual(['m@1 failure_rate', 'm@1 wait_elapsed', 'm@1 probes_succeeded']);
  });
});

import { DEFAULT_CIRCUIT_BREAKER, type EngineSpec, type RevisionSpec } from '@weir/core';
import {
  breakerOptionsFrom,
  breakerScopeOf,
  breakerTransitionRecorder,
  createBreakerRegistry,
  createRevisionHealth,
  providerBreakerKey,
  revisionProviderKey,
  type BreakerMetricsSink,
  type RevisionHealth,
} from './breaker-registry';
import type { BreakerState, BreakerStateChange, CallOutcome } from './circuit-breaker';

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
      { key: 'a@1', scope: 'revision', state: 'open', failureRate: 1, calls: 20 },
      { key: 'b@1', scope: 'revision', state: 'open', failureRate: 0.35, calls: 20 }, // opened at its 20th call: 7 of 20 failed
      { key: 'provider:openai', scope: 'provider', state: 'closed', failureRate: 0, calls: 0 },
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
    const sink: BreakerMetricsSink = { recordCircuitBreakerTransition: (t) => counted.push(`${t.key}:${t.scope}:${t.from}:${t.to}`) };
    const forwarded: string[] = [];
    const registry = createBreakerRegistry({ onStateChange: breakerTransitionRecorder(sink, (key, c) => forwarded.push(`${key} ${c.reason}`)) });
    fail(registry, 'm@1', 0);
    for (let i = 0; i < 3; i++) {
      expect(registry.tryAcquire('m@1', 5_000)).toEqual({ allowed: true, probe: true });
      registry.record('m@1', 'success', 10, 5_000, true);
    }
    expect(counted).toEqual(['m@1:revision:closed:open', 'm@1:revision:open:half_open', 'm@1:revision:half_open:closed']);
    expect(forwarded).toEqual(['m@1 failure_rate', 'm@1 wait_elapsed', 'm@1 probes_succeeded']);
    fail(registry, providerBreakerKey('api.openai.com'), 0);
    expect(counted.at(-1)).toBe('provider:api.openai.com:provider:closed:open');
  });
});

const hosted = (kind: 'openai-compatible' | 'anthropic', baseUrl: string, replicas?: RevisionSpec['replicas']): Pick<RevisionSpec, 'engine' | 'replicas'> => ({
  engine: (kind === 'anthropic'
    ? { kind, baseUrl, upstreamModel: 'm', firstTokenTimeoutMs: 30_000, idleTimeoutMs: 30_000, maxConcurrency: 16 }
    : { kind, baseUrl, upstreamModel: 'm', api: 'chat', firstTokenTimeoutMs: 30_000, idleTimeoutMs: 30_000, maxConcurrency: 16 }) as EngineSpec,
  ...(replicas ? { replicas } : {}),
});

describe('revisionProviderKey and breakerScopeOf', () => {
  it.each<[string, Pick<RevisionSpec, 'engine' | 'replicas'>, string | undefined]>([
    ['an OpenAI-compatible upstream: its host', hosted('openai-compatible', 'https://api.openai.com/v1'), 'provider:api.openai.com'],
    ['the host with its port', hosted('openai-compatible', 'http://127.0.0.1:8000/v1'), 'provider:127.0.0.1:8000'],
    ['Anthropic', hosted('anthropic', 'https://api.anthropic.com'), 'provider:api.anthropic.com'],
    ['a base URL that is not a URL: as written', hosted('openai-compatible', 'upstream-a'), 'provider:upstream-a'],
    ["Weir's own replicas: none", hosted('openai-compatible', 'http://127.0.0.1:8000/v1', [{ id: 'r/0', baseUrl: 'http://10.0.0.1:8080/v1', slots: 4 }]), undefined],
    ['in-process llama.cpp: none', { engine: { kind: 'llamacpp', threads: 1, sequences: 4, contextSize: 512, testTokenDelayMs: 0 } }, undefined],
    ['a simulated replica: none', { engine: { kind: 'simulated', prefillTokensPerSecond: 1, decodeStepMs: [[1, 10]], kvTokens: 1, maxSequences: 1, seed: 1 } }, undefined],
  ])('%s', (_what, revision, key) => {
    expect(revisionProviderKey(revision)).toBe(key);
    if (key) expect(breakerScopeOf(key)).toBe('provider');
  });

  it('reads a revision id as revision scope', () => {
    expect(breakerScopeOf('chat@1')).toBe('revision');
  });
});

describe('breakerOptionsFrom', () => {
  it('maps defaults.circuit_breaker to breaker options, the latency trigger on by default', () => {
    expect(breakerOptionsFrom()).toEqual({ windowMs: 10_000, failureRateThreshold: 0.2, minimumCalls: 20, openMs: 5_000, halfOpenProbes: 3, slowCallMs: 10_000, slowCallRateThreshold: 0.8 });
    const { slowCallMs: _off, ...noLatency } = DEFAULT_CIRCUIT_BREAKER;
    expect(breakerOptionsFrom(noLatency).slowCallMs).toBeNull();
  });

  it('gives breakers that follow the settings', () => {
    const registry = createBreakerRegistry({ breaker: breakerOptionsFrom({ ...DEFAULT_CIRCUIT_BREAKER, minRequests: 4, errorRate: 0.5, openMs: 1_000, halfOpenProbes: 1 }) });
    for (let i = 0; i < 2; i++) registry.record('m@1', 'success', 10, 0, false);
    registry.record('m@1', 'failure', undefined, 0, false);
    expect(registry.get('m@1').state(0)).toBe('closed'); // 3 calls: below min_requests
    registry.record('m@1', 'failure', undefined, 0, false); // 2 of 4 = 50 %
    expect(registry.get('m@1').snapshot(0)).toMatchObject({ state: 'open', openUntilMs: 1_000 });
    expect(registry.tryAcquire('m@1', 1_000)).toEqual({ allowed: true, probe: true });
    expect(registry.tryAcquire('m@1', 1_000)).toMatchObject({ allowed: false, reason: 'half_open' });
  });
});

describe('createRevisionHealth', () => {
  /** Two revisions on one provider (a@1, b@1), one served by Weir (local@1, no provider). */
  function setup() {
    const changes: string[] = [];
    const registry = createBreakerRegistry({ onStateChange: (key, c: BreakerStateChange) => changes.push(`${c.atMs} ${key} ${c.from}→${c.to} ${c.reason}`) });
    const providers: Record<string, string> = { 'a@1': providerBreakerKey('api.example.com'), 'b@1': providerBreakerKey('api.example.com') };
    const health = createRevisionHealth(registry, (id) => providers[id]);
    return { registry, health, changes, provider: providerBreakerKey('api.example.com') };
  }

  /** Sends one call if allowed and records its outcome at once. */
  function call(health: RevisionHealth, id: string, t: number, outcome: CallOutcome, latencyMs?: number): boolean {
    const permit = health.tryAcquire(id, t);
    if (!permit.allowed) return false;
    health.record(id, outcome, latencyMs, t, permit.probe);
    return true;
  }

  it('feeds both breakers and refuses when either is open, naming the scope', () => {
    const { registry, health, provider } = setup();
    for (let i = 0; i < 20; i++) call(health, 'a@1', 0, 'failure');
    // a@1's 20 failures opened its own breaker and the provider's (20 calls, all failed).
    expect(registry.get('a@1').state(0)).toBe('open');
    expect(registry.get(provider).state(0)).toBe('open');
    expect(health.tryAcquire('a@1', 1_000)).toEqual({ allowed: false, scope: 'revision', reason: 'open', retryAfterMs: 4_000 });
    // b@1's own breaker is closed, but its provider's is open.
    expect(health.tryAcquire('b@1', 1_000)).toEqual({ allowed: false, scope: 'provider', reason: 'open', retryAfterMs: 4_000 });
    expect(registry.get('b@1').snapshot(1_000)).toMatchObject({ state: 'closed', calls: 0 });
    // A revision without a provider is judged by its own breaker only.
    expect(call(health, 'local@1', 1_000, 'success')).toBe(true);
    expect(registry.peek(providerBreakerKey('undefined'))).toBeUndefined();
  });

  it("a provider whose revisions each fail a little opens as a whole, though no revision's breaker does", () => {
    const { registry, health, provider } = setup();
    // 15 calls to each revision, a third failing: 5 failures of 15 per revision is 33 %, but
    // below the minimum volume of 20; the provider sees 10 of 30.
    for (let i = 0; i < 15; i++) {
      call(health, 'a@1', 0, i % 3 === 0 ? 'failure' : 'success');
      call(health, 'b@1', 0, i % 3 === 0 ? 'failure' : 'success');
    }
    expect(registry.get('a@1').state(0)).toBe('closed');
    expect(registry.get('b@1').state(0)).toBe('closed');
    expect(registry.get(provider).state(0)).toBe('open');
    expect(health.tryAcquire('a@1', 0)).toMatchObject({ allowed: false, scope: 'provider' });
  });

  it("gives the revision's probe slot back when the provider refuses", () => {
    const { registry, health, provider } = setup();
    for (let i = 0; i < 20; i++) registry.record('a@1', 'failure', undefined, 0, false); // a@1 open until 5 s
    for (let i = 0; i < 20; i++) registry.record(provider, 'failure', undefined, 3_000, false); // provider open until 8 s
    expect(health.tryAcquire('a@1', 5_000)).toMatchObject({ allowed: false, scope: 'provider' });
    expect(registry.get('a@1').snapshot(5_000)).toMatchObject({ state: 'half_open', probesInFlight: 0 });
  });

  it('counts a call as a probe only for the breaker that gave it a probe slot', () => {
    const { registry, health, provider } = setup();
    for (let i = 0; i < 20; i++) registry.record(provider, 'failure', undefined, 0, false); // provider open until 5 s
    const permit = health.tryAcquire('a@1', 5_000); // provider half-open: a provider probe; a@1 closed
    expect(permit).toEqual({ allowed: true, probe: true });
    // Meanwhile a@1 opens and turns half-open (other calls sent before, answered now).
    for (let i = 0; i < 20; i++) registry.record('a@1', 'failure', undefined, 5_000, false);
    expect(registry.get('a@1').state(10_000)).toBe('half_open');
    health.record('a@1', 'success', 100, 10_000, true);
    // The provider counts its probe; a@1 does not take it as one of its own (no verdict there).
    expect(registry.get(provider).snapshot(10_000)).toMatchObject({ state: 'half_open', probesInFlight: 0 });
    expect(registry.get('a@1').snapshot(10_000)).toMatchObject({ state: 'half_open', probesInFlight: 0, reopens: 0 });
  });

  describe('a total outage of the provider at 100 requests/s, split over two revisions', () => {
    /**
     * 100 requests/s, alternating between a@1 and b@1; each call that b@1's or a@1's breakers
     * refuse goes to local@1 (the fallback). `down(t)` says whether the provider is down at t.
     */
    function simulate(untilMs: number, down: (t: number) => boolean) {
      const s = setup();
      let reachedWhileDown = 0;
      let fellBack = 0;
      let n = 0;
      for (let t = 0; t <= untilMs; t += 10) {
        const id = n++ % 2 === 0 ? 'a@1' : 'b@1';
        const failing = down(t);
        if (call(s.health, id, t, failing ? 'failure' : 'success', failing ? undefined : 300)) reachedWhileDown += failing ? 1 : 0;
        else {
          fellBack++;
          call(s.health, 'local@1', t, 'success', 50);
        }
      }
      return { ...s, reachedWhileDown, fellBack };
    }

    it.each([0, 250, 730])('opens the provider breaker within about 2 s (offset %i ms into a bucket), skipping both revisions', (offsetMs) => {
      const start = 15_000 + offsetMs;
      const { changes, registry, provider, health } = simulate(18_000, (t) => t >= start);
      const opened = changes.find((c) => c.includes(`${provider} closed→open`));
      expect(opened).toBeDefined();
      const afterMs = Number(opened?.split(' ')[0]) - start;
      expect(afterMs).toBeGreaterThanOrEqual(1_800);
      expect(afterMs).toBeLessThanOrEqual(2_000);
      // Each revision sees half the traffic and also opens within the same bound (its own window, same rates).
      for (const id of ['a@1', 'b@1']) {
        const own = changes.find((c) => c.includes(` ${id} closed→open`));
        expect(own).toBeDefined();
        expect(Number(own?.split(' ')[0]) - start).toBeLessThanOrEqual(2_000);
      }
      expect(registry.get(provider).state(18_000)).toBe('open');
      expect(health.tryAcquire('b@1', 18_000)).toMatchObject({ allowed: false });
    });

    it('closes the provider breaker through half-open probes once the provider is back', () => {
      // Down 15–30 s, healthy after.
      const { changes, registry, provider, fellBack } = simulate(60_000, (t) => t >= 15_000 && t < 30_000);
      const providerChanges = changes.filter((c) => c.includes(` ${provider} `)).map((c) => c.split(' ').slice(2).join(' '));
      expect(providerChanges[0]).toBe('closed→open failure_rate');
      expect(providerChanges).toContain('open→half_open wait_elapsed');
      expect(providerChanges).toContain('half_open→open probe_failed'); // a probe while still down
      expect(providerChanges.at(-1)).toBe('half_open→closed probes_succeeded');
      const closedAt = Number(changes.filter((c) => c.includes(`${provider} half_open→closed`)).at(-1)?.split(' ')[0]);
      expect(closedAt).toBeGreaterThan(30_000);
      for (const key of [provider, 'a@1', 'b@1']) expect(registry.get(key).state(60_000)).toBe('closed');
      expect(fellBack).toBeGreaterThan(0);
    });
  });
});

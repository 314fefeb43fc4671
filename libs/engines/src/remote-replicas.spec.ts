import { type RevisionSpec, systemClock, type TokenUsage } from '@weir/core';
import { createPoolScheduler, type PoolScheduler } from '@weir/scheduling';
import {
  anthropicModelScript,
  chatStreamEvents,
  collectEngineEvents,
  engineRequest,
  freePort,
  type ScriptedUpstream,
  sseReply,
  startScriptedUpstream,
  type UpstreamScript,
} from '@weir/testing';
import {
  createReplicaEngine,
  createReplicaEngines,
  remoteReplicas,
  replicaHealthUrl,
  type ReplicaHealthChange,
  replicaTokenCounter,
  replicaUnreachable,
  startReplicaHealthChecks,
} from './remote-replicas';

const pricing = { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 };
const simulated = (replicas?: RevisionSpec['replicas'], extra: Partial<RevisionSpec> = {}): RevisionSpec => ({
  id: 'sim@1',
  model: 'sim',
  engine: { kind: 'simulated', prefillTokensPerSecond: 10_000, decodeStepMs: [[1, 20]], kvTokens: 65_536, maxSequences: 8, seed: 1 },
  contextWindow: 4096,
  maxOutputTokens: 256,
  defaultOutputTokens: 16,
  pricing,
  ...(replicas ? { replicas } : {}),
  ...extra,
});
const hosted = (baseUrl: string): RevisionSpec => ({
  id: 'hosted@1',
  model: 'hosted',
  engine: { kind: 'openai-compatible', baseUrl, upstreamModel: 'gpt-x', apiKeyEnv: 'WEIR_UPSTREAM_HOSTED', api: 'completions', firstTokenTimeoutMs: 30_000, idleTimeoutMs: 30_000, maxConcurrency: 16 },
  contextWindow: 8192,
  maxOutputTokens: 256,
  defaultOutputTokens: 16,
  pricing,
});
const claude = (baseUrl: string): RevisionSpec => ({
  id: 'claude@1',
  model: 'claude',
  engine: { kind: 'anthropic', baseUrl, upstreamModel: 'claude-up', apiKeyEnv: 'WEIR_UPSTREAM_CLAUDE', firstTokenTimeoutMs: 30_000, idleTimeoutMs: 30_000, maxConcurrency: 12 },
  contextWindow: 200_000,
  maxOutputTokens: 8192,
  defaultOutputTokens: 16,
  pricing,
});
const llamacpp: RevisionSpec = {
  id: 'local@1',
  model: 'local',
  engine: { kind: 'llamacpp', modelPath: '/models/x.gguf', threads: 1, sequences: 4, contextSize: 512, testTokenDelayMs: 0 },
  contextWindow: 512,
  maxOutputTokens: 128,
  defaultOutputTokens: 16,
  pricing,
};

describe('remoteReplicas', () => {
  const revisions = [
    simulated([
      { id: 'sim@1/0', baseUrl: 'http://a:1/v1', slots: 4 },
      { id: 'sim@1/1', baseUrl: 'http://b:2/v1', slots: 2, pool: 'batch', kvTokens: 1000 },
    ], { pool: 'gold' }),
    hosted('https://api.example/v1'),
    llamacpp,
    claude('https://api.anthropic.example'),
  ];

  it("lists every revision's replicas with their placement, a hosted upstream as its one replica, and nothing for an in-process-only revision", () => {
    expect(remoteReplicas(revisions)).toEqual([
      { id: 'sim@1/0', baseUrl: 'http://a:1/v1', slots: 4, revisionId: 'sim@1', pool: 'gold', kvTokens: 4 * 4096, configured: true },
      { id: 'sim@1/1', baseUrl: 'http://b:2/v1', slots: 2, revisionId: 'sim@1', pool: 'batch', kvTokens: 1000, configured: true },
      { id: 'hosted@1/0', baseUrl: 'https://api.example/v1', slots: 16, revisionId: 'hosted@1', pool: 'interactive', kvTokens: 16 * 8192, configured: false },
      { id: 'claude@1/0', baseUrl: 'https://api.anthropic.example', slots: 12, revisionId: 'claude@1', pool: 'interactive', kvTokens: 12 * 200_000, configured: false },
    ]);
  });

  it('lists only configured replicas when asked (the all-in-one runs a hosted upstream in-process)', () => {
    expect(remoteReplicas(revisions, { configuredOnly: true }).map((r) => r.id)).toEqual(['sim@1/0', 'sim@1/1']);
  });
});

describe('replicaUnreachable', () => {
  const usage = (outputTokens: number): TokenUsage => ({ inputTokens: 5, outputTokens });
  it.each([
    ['upstream_unavailable', 0, true],
    ['upstream_timeout', 0, true],
    ['upstream_unavailable', 3, false],
    ['upstream_error', 0, false],
    ['context_length_exceeded', 0, false],
  ])('%s after %d output tokens → %s', (code, outputTokens, expected) => {
    expect(replicaUnreachable({ error: { code, message: 'x' }, usage: usage(outputTokens) })).toBe(expected);
  });
  it('is false without an error', () => {
    expect(replicaUnreachable({ usage: usage(0) })).toBe(false);
  });
});

describe('replicaHealthUrl', () => {
  it('is /readyz beside /v1', () => {
    expect(replicaHealthUrl('http://127.0.0.1:8091/v1')).toBe('http://127.0.0.1:8091/readyz');
    expect(replicaHealthUrl('http://127.0.0.1:8091/v1/')).toBe('http://127.0.0.1:8091/readyz');
    expect(replicaHealthUrl('http://127.0.0.1:8091')).toBe('http://127.0.0.1:8091/readyz');
  });
});

describe('replica adapters and token counting (scripted replicas over HTTP)', () => {
  let upstream: ScriptedUpstream;
  const script: UpstreamScript = (req) =>
    req.path === '/tokenize' ? { kind: 'json', body: { input_tokens: 42 } } : sseReply(chatStreamEvents(['Hello', ' world'], { usage: { prompt_tokens: 3, completion_tokens: 2 } }));
  beforeAll(async () => {
    upstream = await startScriptedUpstream({ script });
  });
  afterAll(() => upstream.close());

  it("calls a Weir engine replica with the revision id, its slots, the revision's context window, usage on every chunk and graceful stop", async () => {
    const revision = simulated([{ id: 'sim@1/0', baseUrl: upstream.url, slots: 3 }]);
    const engine = createReplicaEngine(revision, { id: 'sim@1/0', baseUrl: upstream.url, slots: 3 });
    expect(engine.capacity).toMatchObject({ slots: 3, contextTokens: 4096 });
    const { events, error } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'hi' }));
    expect(error).toBeUndefined();
    expect(events.at(-1)).toMatchObject({ type: 'end' });
    const sent = upstream.requests.at(-1);
    expect(sent?.path).toBe('/v1/chat/completions');
    expect(sent?.body).toMatchObject({ model: 'sim@1', stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } });

    // Graceful stop: a cancelled stream asks the replica to stop the generation.
    upstream.setScript((req) =>
      req.path.startsWith('/v1/stop/') ? { kind: 'json', body: { stopped: true } } : sseReply(chatStreamEvents(['Hello'], { finishReason: null, usage: false, done: false }), { hang: true }),
    );
    const abort = new AbortController();
    const request = engineRequest({ kind: 'text', text: 'hi' }, { signal: abort.signal });
    await collectEngineEvents(engine, request, (event) => {
      if (event.type === 'delta' && event.text) abort.abort();
    });
    expect(upstream.requests.some((r) => r.method === 'POST' && r.path === `/v1/stop/${request.generationId}`)).toBe(true);
    upstream.setScript(script);
    await engine.close();
  });

  it("keeps a hosted upstream's model, API and key variable, and builds one adapter per replica by id", async () => {
    const revision = { ...hosted(upstream.url), replicas: [{ id: 'hosted@1/a', baseUrl: upstream.url, slots: 5 }] };
    process.env.WEIR_UPSTREAM_HOSTED = 'sk-test-hosted';
    const engines = createReplicaEngines([revision], remoteReplicas([revision]));
    expect([...engines.keys()]).toEqual(['hosted@1/a']);
    const engine = engines.get('hosted@1/a');
    expect(engine?.capacity.slots).toBe(5);
    await collectEngineEvents(engine as NonNullable<typeof engine>, engineRequest({ kind: 'text', text: 'hi' }));
    const sent = upstream.requests.at(-1);
    expect(sent?.path).toBe('/v1/completions');
    expect(sent?.body).toMatchObject({ model: 'gpt-x' });
    expect((sent?.body as { stream_options?: unknown }).stream_options).toEqual({ include_usage: true });
    expect(sent?.headers.authorization).toBe('Bearer sk-test-hosted');
    delete process.env.WEIR_UPSTREAM_HOSTED;
    await engine?.close();
  });

  it("calls an Anthropic upstream (its revision's one replica) with the Messages adapter, its model, key variable and slots", async () => {
    upstream.setScript(anthropicModelScript());
    const revision = claude(upstream.url.replace(/\/v1$/, ''));
    process.env.WEIR_UPSTREAM_CLAUDE = 'sk-ant-test';
    const engines = createReplicaEngines([revision], remoteReplicas([revision]));
    expect([...engines.keys()]).toEqual(['claude@1/0']);
    const engine = engines.get('claude@1/0') as NonNullable<ReturnType<typeof engines.get>>;
    expect(engine.kind).toBe('anthropic');
    expect(engine.capacity).toEqual({ slots: 12, contextTokens: 200_000 });
    const { events, error } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'hi' }));
    expect(error).toBeUndefined();
    expect(events.at(-1)).toMatchObject({ type: 'end', reason: 'stop' });
    const sent = upstream.requests.at(-1);
    expect(sent?.path).toBe('/v1/messages');
    expect(sent?.body).toMatchObject({ model: 'claude-up', stream: true });
    expect(sent?.headers['x-api-key']).toBe('sk-ant-test');
    delete process.env.WEIR_UPSTREAM_CLAUDE;
    upstream.setScript(script);
    await engine.close();
  });

  it('gives no /tokenize counter to an Anthropic revision', () => {
    expect(replicaTokenCounter({ ...claude(upstream.url), replicas: [{ id: 'claude@1/a', baseUrl: upstream.url, slots: 1 }] })).toBeUndefined();
  });

  it('refuses a replica whose revision is not given', () => {
    expect(() => createReplicaEngines([], [{ id: 'x/0', baseUrl: upstream.url, slots: 1, revisionId: 'x', pool: 'interactive', kvTokens: 1, configured: true }])).toThrow(/revision x is not in the configuration/);
  });

  it("counts prompt tokens with the replicas' /tokenize, and gives no counter to a revision without replicas", async () => {
    const count = replicaTokenCounter(simulated([{ id: 'sim@1/0', baseUrl: upstream.url, slots: 1 }]));
    await expect(count?.({ kind: 'text', text: 'one two' })).resolves.toBe(42);
    expect(upstream.requests.at(-1)).toMatchObject({ method: 'POST', path: '/tokenize', body: { input: 'one two' } });
    expect(replicaTokenCounter(simulated())).toBeUndefined();
    expect(replicaTokenCounter(hosted(upstream.url))).toBeUndefined();
  });
});

describe('startReplicaHealthChecks (real scheduler, replicas over HTTP)', () => {
  let a: ScriptedUpstream;
  let b: ScriptedUpstream;
  let healthyA = true;
  beforeEach(async () => {
    healthyA = true;
    a = await startScriptedUpstream({ script: (req) => (req.path === '/readyz' && healthyA ? { kind: 'json', body: { status: 'ok' } } : { kind: 'error', status: 503 }) });
    b = await startScriptedUpstream({ script: () => ({ kind: 'json', body: { status: 'ok' } }) });
  });
  afterEach(async () => {
    await a.close();
    await b.close();
  });

  const setup = (extra: RevisionSpec[] = []) => {
    const revisions = [simulated([
      { id: 'sim@1/0', baseUrl: a.url, slots: 2 },
      { id: 'sim@1/1', baseUrl: b.url, slots: 2 },
    ]), ...extra];
    const replicas = remoteReplicas(revisions);
    const scheduler: PoolScheduler = createPoolScheduler({ replicas, clock: systemClock });
    const changes: ReplicaHealthChange[] = [];
    const checks = startReplicaHealthChecks({
      scheduler,
      replicas,
      intervalMs: 60_000, // rounds are run by hand
      timeoutMs: 500,
      failuresToEject: 2,
      startupGraceMs: 0,
      onChange: (c) => changes.push(c),
    });
    const inRotation = (id: string) => scheduler.stats().replicas.find((r) => r.id === id)?.healthy;
    return { scheduler, checks, changes, inRotation };
  };

  it('ejects a replica after failuresToEject failed /readyz probes and brings it back on the next success', async () => {
    const { checks, changes, inRotation } = setup();
    try {
      await checks.probeAll();
      expect(checks.up('sim@1/0', true)).toBe(true);
      expect(a.requests.map((r) => `${r.method} ${r.path}`)).toEqual(['GET /readyz']);
      healthyA = false;
      await checks.probeAll();
      expect(inRotation('sim@1/0')).toBe(true); // one failure is not enough
      await checks.probeAll();
      expect(inRotation('sim@1/0')).toBe(false);
      expect(inRotation('sim@1/1')).toBe(true);
      expect(checks.up('sim@1/0', false)).toBe(false);
      healthyA = true;
      await checks.probeAll();
      expect(inRotation('sim@1/0')).toBe(true);
      expect(changes).toEqual([
        { replicaId: 'sim@1/0', revisionId: 'sim@1', healthy: false, reason: 'probe_failed' },
        { replicaId: 'sim@1/0', revisionId: 'sim@1', healthy: true, reason: 'recovered' },
      ]);
    } finally {
      checks.stop();
    }
  });

  it('ejects a replica that refuses connections (killed)', async () => {
    const { checks, changes, inRotation } = setup();
    try {
      await checks.probeAll();
      await b.close();
      await checks.probeAll();
      await checks.probeAll();
      expect(inRotation('sim@1/1')).toBe(false);
      expect(changes).toEqual([{ replicaId: 'sim@1/1', revisionId: 'sim@1', healthy: false, reason: 'probe_error' }]);
    } finally {
      checks.stop();
    }
  });

  it('ejects at once a replica reported unreachable, without telling onChange, and a probe brings it back', async () => {
    const { checks, changes, inRotation } = setup();
    try {
      await checks.probeAll();
      checks.reportUnreachable('sim@1/0');
      expect(inRotation('sim@1/0')).toBe(false);
      expect(checks.up('sim@1/0', false)).toBe(false);
      expect(changes).toEqual([]);
      await checks.probeAll();
      expect(inRotation('sim@1/0')).toBe(true);
      expect(changes).toEqual([{ replicaId: 'sim@1/0', revisionId: 'sim@1', healthy: true, reason: 'recovered' }]);
      checks.reportUnreachable('nobody/0'); // unknown ids are ignored
    } finally {
      checks.stop();
    }
  });

  it('does not probe a hosted upstream: it is up while in rotation, and a report takes it out', async () => {
    const port = await freePort();
    const { checks, inRotation } = setup([hosted(`http://127.0.0.1:${port}/v1`)]);
    try {
      await checks.probeAll();
      await checks.probeAll();
      expect(inRotation('hosted@1/0')).toBe(true);
      expect(checks.up('hosted@1/0', true)).toBe(true);
      checks.reportUnreachable('hosted@1/0');
      expect(inRotation('hosted@1/0')).toBe(false);
      expect(checks.up('hosted@1/0', false)).toBe(false);
    } finally {
      checks.stop();
    }
  });
});

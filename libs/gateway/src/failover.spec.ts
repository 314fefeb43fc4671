import { type GenerationOutcome, type RelayEvent, type RelayHandle, type RelayJob, type RevisionSpec, type ScheduleRequest, type ScheduleResult, createAsyncQueue } from '@weir/core';
import { createBreakerRegistry } from '@weir/routing';
import { type CandidateHealth, type FailoverRequest, startWithFailover } from './failover';

const rev = (id: string): RevisionSpec => ({
  id,
  model: id,
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: id, api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 512,
  maxOutputTokens: 100,
  defaultOutputTokens: 10,
  pricing: { inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 1 },
});
const A = rev('a@1');
const B = rev('b@1');
const C = rev('c@1');

/** What an attempt on `<revision>/<replica>` does: fail retryably before a token, fail after `tokens`, or answer `tokens`. */
type Script = { kind: 'down' } | { kind: 'bad_request' } | { kind: 'answer'; tokens: number } | { kind: 'break_after'; tokens: number } | { kind: 'relay_lost'; tokens: number };

const caller = { tenantId: 't', appId: 'a', apiKeyId: 'k' };
let now = 0;
const clock = { now: () => now };

function outcomeOf(job: RelayJob, o: Partial<GenerationOutcome> & Pick<GenerationOutcome, 'finishReason'>): GenerationOutcome {
  return { usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 }, costNanoUsd: 0, modelRevision: job.revision.id, timings: { queueMs: job.queueMs, ttftMs: null, totalMs: 1 }, ...o };
}

/** A relay whose attempts follow `scripts` by `<revision>/<replica>`, recording like the real one (unrecorded when the job allows a retry). */
function fakeRelay(scripts: Record<string, Script>) {
  const jobs: RelayJob[] = [];
  const records: GenerationOutcome[] = [];
  const stops: string[] = [];
  return {
    jobs,
    records,
    stops,
    start(job: RelayJob): RelayHandle {
      jobs.push(job);
      const queue = createAsyncQueue<RelayEvent>();
      const script = scripts[job.replicaId] ?? { kind: 'answer', tokens: 2 };
      let outcome: GenerationOutcome;
      if (script.kind === 'down') {
        outcome = job.retryBeforeFirstToken
          ? outcomeOf(job, { finishReason: 'error', error: { code: 'upstream_unavailable', message: 'upstream connection failed', retryable: true }, unrecorded: true })
          : outcomeOf(job, { finishReason: 'error', error: { code: 'upstream_unavailable', message: 'upstream connection failed', retryable: true } });
      } else if (script.kind === 'bad_request') {
        outcome = outcomeOf(job, { finishReason: 'error', error: { code: 'upstream_bad_request', message: 'bad' } });
      } else {
        for (let i = 0; i < script.tokens; i++) queue.push({ type: 'delta', text: `${job.revision.id}:${i} `, tokens: 1 });
        const usage = { inputTokens: 3, outputTokens: script.tokens, cachedInputTokens: 0 };
        outcome =
          script.kind === 'answer'
            ? outcomeOf(job, { finishReason: 'stop', usage, costNanoUsd: 10 })
            : script.kind === 'relay_lost'
              ? outcomeOf(job, { finishReason: 'error', usage, costNanoUsd: 10, relayLost: true, error: { code: 'upstream_error', message: 'the streaming relay was lost mid-generation', internal: true } })
              : outcomeOf(job, { finishReason: 'error', usage, costNanoUsd: 10, error: { code: 'upstream_error', message: 'upstream connection broke mid-stream' } });
      }
      if (!outcome.unrecorded) records.push(outcome);
      queue.push({ type: 'end', outcome });
      queue.end();
      return { events: queue, done: Promise.resolve(outcome), stop: (cause) => void stops.push(cause) };
    },
  };
}

/** A scheduler with replicas `<revision>/0` and `<revision>/1` for revisions in `twoReplicas`, else `<revision>/0` only. */
function fakeScheduler(twoReplicas: string[] = []) {
  const calls: ScheduleRequest[] = [];
  const released: string[] = [];
  return {
    calls,
    released,
    async acquire(request: ScheduleRequest): Promise<ScheduleResult> {
      calls.push(request);
      const replicas = twoReplicas.includes(request.revisionId) ? [0, 1] : [0];
      const free = replicas.map((i) => `${request.revisionId}/${i}`).find((id) => !request.avoidReplicas?.includes(id));
      if (!free) return { ok: false, reason: 'no_replica', message: 'none', queueMs: 0 };
      return { ok: true, lease: { replicaId: free, queueMs: 0, release: () => void released.push(free) } };
    },
  };
}

function request(chain: RevisionSpec[], first = `${chain[0].id}/0`): FailoverRequest {
  return {
    job: {
      generationId: 'gen_1',
      requestId: 'req_1',
      route: 'generations',
      caller,
      modelAlias: 'chat',
      engineRequest: { input: { kind: 'text', text: 'hi' }, maxOutputTokens: 10, sampling: {} },
      arrivedAt: 0,
      deadlineAt: 60_000,
      inputTokens: 3,
    },
    caller,
    tokens: 13,
    bytes: 2,
    chain,
    first: { revision: chain[0], lease: { replicaId: first, queueMs: 0, release: () => undefined }, grantedAt: 0, probe: false },
    firstIndex: 0,
  };
}

async function run(handle: RelayHandle) {
  const text: string[] = [];
  let end: GenerationOutcome | undefined;
  for await (const ev of handle.events) {
    if (ev.type === 'delta') text.push(ev.text);
    else end = ev.outcome;
  }
  return { text: text.join(''), end: end as GenerationOutcome, done: await handle.done };
}

function setup(scripts: Record<string, Script>, twoReplicas: string[] = [], health?: CandidateHealth, maxAttempts = 3) {
  const relay = fakeRelay(scripts);
  const scheduler = fakeScheduler(twoReplicas);
  const failures: GenerationOutcome[] = [];
  const attemptsEnded: string[] = [];
  const deps = {
    relay,
    scheduler,
    clock,
    ...(health ? { health } : {}),
    options: { maxAttempts, backoffBaseMs: 1, backoffMaxMs: 2 },
    onAttemptEnd: (attempt: { lease: { replicaId: string } }) => void attemptsEnded.push(attempt.lease.replicaId),
    recordFailure: async (o: GenerationOutcome) => void failures.push(o),
  };
  return { relay, scheduler, failures, attemptsEnded, deps };
}

beforeEach(() => {
  now = 0;
});

describe('startWithFailover', () => {
  it('retries on another replica of the same revision after a retryable failure before the first token, billing once', async () => {
    const s = setup({ 'a@1/0': { kind: 'down' } }, ['a@1']);
    const { text, done } = await run(startWithFailover(request([A]), s.deps));
    expect(text).toBe('a@1:0 a@1:1 ');
    expect(done).toMatchObject({ finishReason: 'stop', modelRevision: 'a@1', fallback: { reason: 'upstream_unavailable', from: 'a@1', attempts: 2 } });
    expect(s.relay.jobs.map((j) => [j.replicaId, j.retryBeforeFirstToken ?? false])).toEqual([
      ['a@1/0', true],
      ['a@1/1', true],
    ]);
    expect(s.scheduler.calls[0]).toMatchObject({ revisionId: 'a@1', avoidReplicas: ['a@1/0'] });
    // One usage record (the answer's), none for the failed attempt, and no failure written here.
    expect(s.relay.records).toHaveLength(1);
    expect(s.failures).toHaveLength(0);
    expect(s.attemptsEnded).toEqual(['a@1/0', 'a@1/1']);
  });

  it('falls back to the next revision of the chain, which then names itself as the model used', async () => {
    const s = setup({ 'a@1/0': { kind: 'down' } });
    const { text, done } = await run(startWithFailover(request([A, B]), s.deps));
    expect(text).toBe('b@1:0 b@1:1 ');
    expect(done).toMatchObject({ modelRevision: 'b@1', fallback: { reason: 'upstream_unavailable', from: 'a@1', attempts: 2 } });
    expect(s.scheduler.calls.map((c) => [c.revisionId, c.avoidReplicas ?? []])).toEqual([
      ['a@1', ['a@1/0']],
      ['b@1', []],
    ]);
  });

  it('never retries once a token was produced: the stream ends with the error, and the tokens are billed', async () => {
    const s = setup({ 'a@1/0': { kind: 'break_after', tokens: 2 } }, ['a@1']);
    const { text, done } = await run(startWithFailover(request([A, B]), s.deps));
    expect(text).toBe('a@1:0 a@1:1 ');
    expect(done).toMatchObject({ finishReason: 'error', error: { code: 'upstream_error' }, usage: { outputTokens: 2 }, modelRevision: 'a@1' });
    expect(done.fallback).toBeUndefined();
    expect(s.relay.jobs).toHaveLength(1);
    expect(s.relay.records).toHaveLength(1);
  });

  it('never retries a failure that is not retryable (an upstream 4xx)', async () => {
    const s = setup({ 'a@1/0': { kind: 'bad_request' } }, ['a@1']);
    const { done } = await run(startWithFailover(request([A, B]), s.deps));
    expect(done).toMatchObject({ finishReason: 'error', error: { code: 'upstream_bad_request' } });
    expect(s.relay.jobs).toHaveLength(1);
    expect(s.scheduler.calls).toHaveLength(0);
  });

  it('stops after maxAttempts, the last attempt recording the failure once', async () => {
    const s = setup({ 'a@1/0': { kind: 'down' }, 'b@1/0': { kind: 'down' }, 'c@1/0': { kind: 'down' } }, [], undefined, 2);
    const { done } = await run(startWithFailover(request([A, B, C]), s.deps));
    expect(s.relay.jobs.map((j) => [j.revision.id, j.retryBeforeFirstToken ?? false])).toEqual([
      ['a@1', true],
      ['b@1', false],
    ]);
    expect(done).toMatchObject({ finishReason: 'error', modelRevision: 'b@1', fallback: { from: 'a@1', attempts: 2 } });
    expect(done.unrecorded).toBeUndefined();
    // The relay recorded the last attempt; nothing else was written.
    expect(s.relay.records).toHaveLength(1);
    expect(s.failures).toHaveLength(0);
  });

  it('records one failure itself when no candidate is left to try', async () => {
    const s = setup({ 'a@1/0': { kind: 'down' } });
    const { done } = await run(startWithFailover(request([A]), s.deps));
    expect(done).toMatchObject({ finishReason: 'error', error: { code: 'upstream_unavailable' }, fallback: { from: 'a@1', attempts: 1 } });
    expect(done.unrecorded).toBeUndefined();
    expect(s.relay.records).toHaveLength(0);
    expect(s.failures).toEqual([done]);
  });

  it('skips a revision whose circuit breaker is open, and feeds the breakers', async () => {
    const breakers = createBreakerRegistry({ breaker: { minimumCalls: 1, failureRateThreshold: 0.5 } });
    // b@1 failed before: its breaker is open.
    breakers.record('b@1', 'failure', undefined, 0, false);
    expect(breakers.tryAcquire('b@1', 0).allowed).toBe(false);
    const s = setup({ 'a@1/0': { kind: 'down' } }, [], breakers);
    const { done } = await run(startWithFailover(request([A, B, C]), s.deps));
    expect(done).toMatchObject({ modelRevision: 'c@1', fallback: { from: 'a@1' } });
    // a@1 has no other replica; the request left it, so a@1's breaker counts the failure.
    expect(s.scheduler.calls.map((c) => c.revisionId)).toEqual(['a@1', 'c@1']);
    expect(breakers.snapshot(now).map((b) => [b.key, b.state])).toEqual([
      ['a@1', 'open'],
      ['b@1', 'open'],
      ['c@1', 'closed'],
    ]);
  });

  it("does not count against a revision's breaker a failure that another replica of it repaired", async () => {
    const breakers = createBreakerRegistry({ breaker: { minimumCalls: 1, failureRateThreshold: 0.5 } });
    const s = setup({ 'a@1/0': { kind: 'down' } }, ['a@1'], breakers);
    const { done } = await run(startWithFailover(request([A, B]), s.deps));
    expect(done).toMatchObject({ finishReason: 'stop', modelRevision: 'a@1' });
    // One dead replica of two: the scheduler's business, not the revision's — its breaker stays closed.
    expect(breakers.snapshot(now).map((b) => [b.key, b.state, b.calls])).toEqual([['a@1', 'closed', 1]]);
  });

  it("counts a mid-stream failure against a hosted revision's breaker, not against one served by Weir's replicas", async () => {
    const hostedBreakers = createBreakerRegistry({ breaker: { minimumCalls: 1, failureRateThreshold: 0.5 } });
    const hosted = setup({ 'a@1/0': { kind: 'break_after', tokens: 2 } }, [], hostedBreakers);
    await run(startWithFailover(request([A]), hosted.deps));
    expect(hostedBreakers.snapshot(now).map((b) => [b.key, b.state])).toEqual([['a@1', 'open']]);

    const replicated = { ...A, replicas: [{ id: 'a@1/0', baseUrl: 'http://127.0.0.1:1/v1', slots: 4 }] };
    const ownBreakers = createBreakerRegistry({ breaker: { minimumCalls: 1, failureRateThreshold: 0.5 } });
    const own = setup({ 'a@1/0': { kind: 'break_after', tokens: 2 } }, [], ownBreakers);
    await run(startWithFailover(request([replicated]), own.deps));
    expect(ownBreakers.snapshot(now).map((b) => [b.key, b.state])).toEqual([['a@1', 'closed']]);
  });

  it("never counts a lost relay against a hosted revision's breaker (a split process died, not the provider)", async () => {
    const breakers = createBreakerRegistry({ breaker: { minimumCalls: 1, failureRateThreshold: 0.5 } });
    const s = setup({ 'a@1/0': { kind: 'relay_lost', tokens: 2 } }, [], breakers);
    const { done } = await run(startWithFailover(request([A]), s.deps));
    expect(done).toMatchObject({ finishReason: 'error', relayLost: true });
    expect(breakers.snapshot(now).filter((b) => b.state !== 'closed')).toEqual([]);
  });

  it('ends the stream once, with one failure record, when the relay itself throws', async () => {
    const s = setup({});
    const deps = { ...s.deps, relay: { start: () => { throw new Error('relay gone'); } } };
    let released = 0;
    const req = request([A]);
    req.first.lease.release = () => void released++;
    const { end, done } = await run(startWithFailover(req, deps));
    expect(released).toBe(1);
    expect(end).toMatchObject({ finishReason: 'error', error: { code: 'internal' } });
    expect(done).toBe(end);
    expect(s.failures).toHaveLength(1);
  });

  it('tries nothing more once the client has left', async () => {
    const s = setup({ 'a@1/0': { kind: 'down' } }, ['a@1']);
    const handle = startWithFailover(request([A, B]), s.deps);
    handle.stop('client_disconnected');
    const { done } = await run(handle);
    expect(done).toMatchObject({ finishReason: 'error' });
    expect(s.relay.jobs).toHaveLength(1);
    expect(s.relay.stops).toEqual(['client_disconnected']);
    expect(s.failures).toHaveLength(1);
  });
});

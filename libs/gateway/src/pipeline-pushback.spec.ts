/**
 * Scheduler pushback through the pipeline: after the scheduler refuses a tenant's request to
 * a revision, that tenant's like requests are refused by `admit` itself — without counting
 * tokens, reserving or asking the scheduler — while other tenants (and other revisions and
 * priorities) go through; the memo ends after the hold, at a grant, and is off at 0.
 */
import { createRecordingSettlements } from '@weir/testing';
import type {
  AdmissionService,
  Caller,
  GenerationOutcome,
  ReservationRequest,
  RequestPriority,
  RevisionSpec,
  ScheduleRequest,
  ScheduleResult,
  SchedulerService,
  WeirErrorCode,
} from '@weir/core';
import { WeirError } from '@weir/core';
import { createGenerationPipeline, type GenerationPipeline } from './pipeline';

const revision = (id: string): RevisionSpec => ({
  id,
  model: 'm',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'x', api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 4096,
  maxOutputTokens: 1024,
  defaultOutputTokens: 16,
  pricing: { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 },
});
const R1 = revision('m@1');
const R2 = revision('m@2');
const A: Caller = { tenantId: 'a', appId: 'a1', apiKeyId: 'ka' };
const B: Caller = { tenantId: 'b', appId: 'b1', apiKeyId: 'kb' };

const GRANT: ScheduleResult = { ok: true, lease: { replicaId: 'r0', queueMs: 0, release: () => undefined } };
const QUEUE_FULL_MESSAGE = "this tenant's share of the queue of pool interactive for m@1 is full (4 waiting); retry later";
const QUEUE_FULL: ScheduleResult = { ok: false, reason: 'queue_full', message: QUEUE_FULL_MESSAGE, queueMs: 0, retryAfterMs: 1_000 };
const UNMEETABLE_MESSAGE = 'the estimated start (in 3000 ms) plus prefill (10 ms) is past the deadline (in 1000 ms); raise deadline_ms or retry later';
const UNMEETABLE: ScheduleResult = { ok: false, reason: 'deadline_unmeetable', message: UNMEETABLE_MESSAGE, queueMs: 0, retryAfterMs: 2_010 };

/**
 * A pipeline over fakes that count every expensive step; the scheduler answers from `answers`
 * (then grants). `countMs`: how long each token count takes on the fake clock.
 */
function harness(options: { pushbackMs?: number; countMs?: number } = {}) {
  let now = 10_000;
  const clock = { now: () => now };
  const calls = { count: 0, reserve: [] as ReservationRequest[], release: [] as string[], acquire: [] as ScheduleRequest[], rejected: [] as Array<[string, WeirErrorCode]> };
  const answers: ScheduleResult[] = [];
  const admission: AdmissionService = {
    reserve: async (r) => (calls.reserve.push(r), { ok: true, reservationId: `res-${calls.reserve.length}` }),
    settle: async () => undefined,
    release: async (id) => void calls.release.push(id),
  };
  const scheduler: SchedulerService = { acquire: async (r) => (calls.acquire.push(r), answers.shift() ?? GRANT) };
  const pipeline: GenerationPipeline = createGenerationPipeline({
    router: {
      resolve: async (_caller, alias) => {
        const rev = alias === 'm2' ? R2 : R1;
        return { ok: true, route: { alias: { name: alias, targets: [{ revision: rev.id, weight: 1 }] }, revision: rev, fallbacks: [] } };
      },
      listAliases: async () => [],
    },
    admission,
    scheduler,
    // The relay is never awaited here: a generation that "runs" forever.
    relay: { start: () => ({ events: (async function* () {})(), done: new Promise<GenerationOutcome>(() => undefined), stop: () => undefined }) },
    countInputTokens: async () => (calls.count++, (now += options.countMs ?? 0), 10),
    settlements: createRecordingSettlements(),
    tenants: new Map(),
    clock,
    observer: { onRejected: (caller, reason) => void calls.rejected.push([caller.tenantId, reason]) },
    ...(options.pushbackMs !== undefined ? { pushbackMs: options.pushbackMs } : {}),
  });
  let n = 0;
  const admit = (caller: Caller, extra: { alias?: string; deadlineMs?: number; priority?: RequestPriority; maxOutputTokens?: number } = {}) =>
    pipeline.admit({
      caller,
      route: 'generations',
      alias: extra.alias ?? 'm',
      generationId: `gen_${++n}`,
      requestId: `gen_${n}`,
      input: { kind: 'text', text: 'Once upon a time' },
      sampling: {},
      arrivedAt: now,
      deadlineMs: extra.deadlineMs ?? 60_000,
      ...(extra.priority !== undefined ? { priority: extra.priority } : {}),
      ...(extra.maxOutputTokens !== undefined ? { maxOutputTokens: extra.maxOutputTokens } : {}),
    });
  /** Admits and starts; resolves with the start result or the WeirError thrown on the way. */
  const run = async (caller: Caller, extra?: Parameters<typeof admit>[1]) => {
    try {
      const admitted = await admit(caller, extra);
      return await admitted.start(new AbortController().signal);
    } catch (err) {
      if (err instanceof WeirError) return err;
      throw err;
    }
  };
  /** Counts of the expensive steps so far. */
  const work = () => ({ count: calls.count, reserve: calls.reserve.length, acquire: calls.acquire.length });
  return { pipeline, calls, answers, admit, run, work, advance: (ms: number) => void (now += ms) };
}

const asError = (r: unknown): WeirError => {
  expect(r).toBeInstanceOf(WeirError);
  return r as WeirError;
};

describe('scheduler pushback in the pipeline', () => {
  it('refuses a tenant right after a queue_full, before counting, reserving or scheduling, while another tenant goes through', async () => {
    const h = harness();
    h.answers.push(QUEUE_FULL);
    const first = asError(await h.run(A));
    expect(first).toMatchObject({ code: 'queue_full', message: QUEUE_FULL_MESSAGE, retryAfterMs: 1_000 });
    // The refused request's reservation was released, as before.
    expect(h.calls.release).toEqual(['res-1']);
    expect(h.work()).toEqual({ count: 1, reserve: 1, acquire: 1 });

    h.advance(50);
    const second = asError(await h.run(A));
    expect(second.code).toBe('queue_full');
    expect(second.retryable).toBe(true);
    expect(second.message).toBe(`recently refused: ${QUEUE_FULL_MESSAGE}`);
    // What is left of the scheduler's 1 s hint, not of the 250 ms hold.
    expect(second.retryAfterMs).toBe(950);
    expect(h.work()).toEqual({ count: 1, reserve: 1, acquire: 1 }); // nothing more was done
    expect(h.calls.release).toEqual(['res-1']);
    // Counted as a rejection with its code, like the scheduler's own refusal.
    expect(h.calls.rejected).toEqual([
      ['a', 'queue_full'],
      ['a', 'queue_full'],
    ]);

    const other = await h.run(B);
    expect(other).toMatchObject({ kind: 'running' });
    expect(h.work()).toEqual({ count: 2, reserve: 2, acquire: 2 });
    expect(h.calls.acquire[1].caller.tenantId).toBe('b');
  });

  it('keeps the memo to the refused revision and priority', async () => {
    const h = harness();
    h.answers.push(QUEUE_FULL);
    await h.run(A);
    expect(await h.run(A, { alias: 'm2' })).toMatchObject({ kind: 'running' });
    expect(await h.run(A, { priority: 'batch' })).toMatchObject({ kind: 'running' });
    expect(h.calls.acquire.map((r) => [r.revisionId, r.priority ?? 'interactive'])).toEqual([
      ['m@1', 'interactive'],
      ['m@2', 'interactive'],
      ['m@1', 'batch'],
    ]);
    expect(asError(await h.run(A)).code).toBe('queue_full');
    expect(h.calls.acquire).toHaveLength(3);
  });

  it('lets the tenant through to the scheduler again once the hold (pushbackMs) has passed', async () => {
    const h = harness({ pushbackMs: 250 });
    h.answers.push(QUEUE_FULL);
    await h.run(A);
    h.advance(249);
    expect(asError(await h.run(A)).message).toMatch(/^recently refused/);
    expect(h.work().acquire).toBe(1);
    h.advance(1);
    expect(await h.run(A)).toMatchObject({ kind: 'running' });
    expect(h.work()).toEqual({ count: 2, reserve: 2, acquire: 2 });
  });

  it('forgets the refusal when the scheduler grants a request of the same tenant and revision', async () => {
    const h = harness();
    // Admitted before the refusal, started after it (it was waiting for the scheduler).
    const early = await h.admit(A);
    h.answers.push(QUEUE_FULL);
    await h.run(A);
    expect(asError(await h.run(A)).code).toBe('queue_full');
    expect(h.work().acquire).toBe(1);
    expect(await early.start(new AbortController().signal)).toMatchObject({ kind: 'running' });
    expect(await h.run(A)).toMatchObject({ kind: 'running' });
    expect(h.work().acquire).toBe(3);
  });

  it('keeps the memo when a request that had queued is granted (the queue moves; a new one would still not fit)', async () => {
    const h = harness();
    const early = await h.admit(A);
    h.answers.push(QUEUE_FULL);
    await h.run(A);
    h.answers.push({ ...GRANT, lease: { ...GRANT.lease, queueMs: 800 } } as ScheduleResult);
    expect(await early.start(new AbortController().signal)).toMatchObject({ kind: 'running' });
    expect(asError(await h.run(A)).code).toBe('queue_full');
    expect(h.work().acquire).toBe(2);
  });

  it('after deadline_unmeetable refuses requests with as little slack, and lets a longer deadline through', async () => {
    const h = harness();
    h.answers.push(UNMEETABLE);
    expect(asError(await h.run(A, { deadlineMs: 1_000 })).code).toBe('deadline_unmeetable');
    expect(h.calls.release).toEqual(['res-1']);

    h.advance(20);
    for (const deadlineMs of [1_000, 400]) {
      const e = asError(await h.run(A, { deadlineMs }));
      expect(e).toMatchObject({ code: 'deadline_unmeetable', retryable: true });
      expect(e.message).toBe(`recently refused a like request (no later deadline, no smaller output limit): ${UNMEETABLE_MESSAGE}`);
      expect(e.retryAfterMs).toBe(2_010 - 20);
    }
    expect(h.work()).toEqual({ count: 1, reserve: 1, acquire: 1 });

    expect(await h.run(A, { deadlineMs: 30_000 })).toMatchObject({ kind: 'running' });
    expect(h.work()).toEqual({ count: 2, reserve: 2, acquire: 2 });
    expect(h.calls.rejected.map(([, code]) => code)).toEqual(['deadline_unmeetable', 'deadline_unmeetable', 'deadline_unmeetable']);
  });

  it('after deadline_unmeetable lets a request asking for less output through, and refuses one asking for as much or more', async () => {
    const h = harness();
    h.answers.push(UNMEETABLE);
    expect(asError(await h.run(A, { deadlineMs: 1_000, maxOutputTokens: 300 })).code).toBe('deadline_unmeetable');
    expect(asError(await h.run(A, { deadlineMs: 1_000, maxOutputTokens: 500 })).message).toMatch(/^recently refused a like request/);
    expect(h.work().acquire).toBe(1);
    expect(await h.run(A, { deadlineMs: 1_000, maxOutputTokens: 2 })).toMatchObject({ kind: 'running' });
    expect(h.work().acquire).toBe(2);
  });

  it('compares slack where the memo is consulted, so time the refused request spent counting does not let a like request through', async () => {
    // Each token count takes 40 ms: the refused request reached the scheduler with 960 ms left.
    const h = harness({ countMs: 40 });
    h.answers.push(UNMEETABLE);
    expect(asError(await h.run(A, { deadlineMs: 1_000 })).code).toBe('deadline_unmeetable');
    h.advance(10);
    // A request with the same deadline has 1,000 ms left at the memo, 960 ms at the scheduler: refused.
    expect(asError(await h.run(A, { deadlineMs: 1_000 })).message).toMatch(/^recently refused/);
    expect(h.work()).toEqual({ count: 1, reserve: 1, acquire: 1 });
    // More slack than the refused request's plus the scheduler's hint (2,010 ms): it goes through.
    expect(await h.run(A, { deadlineMs: 3_011 })).toMatchObject({ kind: 'running' });
    expect(h.work()).toEqual({ count: 2, reserve: 2, acquire: 2 });
  });

  it('remembers batch work shed in a brownout as queue_full for batch requests only', async () => {
    const h = harness();
    h.answers.push({ ok: false, reason: 'shed', message: 'batch work is refused while pool interactive has lost capacity (brownout); retry later', queueMs: 0, retryAfterMs: 5_000 });
    expect(asError(await h.run(A, { priority: 'batch' })).code).toBe('queue_full');
    const again = asError(await h.run(A, { priority: 'batch' }));
    expect(again).toMatchObject({ code: 'queue_full', message: 'recently refused: batch work is refused while pool interactive has lost capacity (brownout); retry later' });
    expect(await h.run(A)).toMatchObject({ kind: 'running' });
    expect(h.work().acquire).toBe(2);
  });

  it('does not remember no_replica, deadline or cancelled', async () => {
    const h = harness();
    h.answers.push({ ok: false, reason: 'no_replica', message: 'no healthy replica in pool interactive serves m@1; retry shortly', queueMs: 0, retryAfterMs: 1_000 });
    expect(asError(await h.run(A)).code).toBe('engine_unavailable');
    h.answers.push({ ok: false, reason: 'deadline', message: 'the deadline passed while the request was queued', queueMs: 5 });
    expect(await h.run(A)).toMatchObject({ kind: 'ended', outcome: { finishReason: 'deadline' } });
    h.answers.push({ ok: false, reason: 'cancelled', message: 'the request was cancelled while queued', queueMs: 5 });
    expect(await h.run(A)).toMatchObject({ kind: 'ended', outcome: { finishReason: 'cancelled' } });
    expect(await h.run(A)).toMatchObject({ kind: 'running' });
    expect(h.work()).toEqual({ count: 4, reserve: 4, acquire: 4 });
    expect(h.calls.release).toEqual(['res-1', 'res-2', 'res-3']);
  });

  it('still answers an output limit above the model maximum with output_limit_exceeded, before the memo', async () => {
    const h = harness();
    h.answers.push(QUEUE_FULL);
    await h.run(A);
    const e = asError(await h.run(A, { maxOutputTokens: 2_000 }));
    expect(e).toMatchObject({ code: 'output_limit_exceeded', param: 'max_tokens' });
    expect(e.message).toBe("The output limit 2000 is above the maximum of model 'm' (1024 tokens); lower `max_tokens`.");
    expect(h.work()).toEqual({ count: 1, reserve: 1, acquire: 1 });
  });

  it('is off at pushbackMs 0: every request reaches the scheduler', async () => {
    const h = harness({ pushbackMs: 0 });
    h.answers.push(QUEUE_FULL, QUEUE_FULL);
    expect(asError(await h.run(A)).message).toBe(QUEUE_FULL_MESSAGE);
    expect(asError(await h.run(A)).message).toBe(QUEUE_FULL_MESSAGE);
    expect(await h.run(A)).toMatchObject({ kind: 'running' });
    expect(h.work()).toEqual({ count: 3, reserve: 3, acquire: 3 });
    expect(h.calls.release).toEqual(['res-1', 'res-2']);
  });
});

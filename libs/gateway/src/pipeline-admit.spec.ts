/**
 * The pipeline on one `AdmitService` (issue 13, item 6): the reservation and the first slot come
 * from one call; the relay job carries the reservation the generation settles; settle goes to
 * the admission that reserved; a lost relay's estimate is journaled with its reservation while
 * admission counts the worst case at once; a refusal the admit call already released is not
 * released again.
 */
import { createRecordingSettlements } from '@weir/testing';
import {
  type AdmitRequest,
  type AdmitService,
  type GenerationOutcome,
  type RelayJob,
  type ReservationRef,
  type RevisionSpec,
  type RouterService,
  type ScheduleResult,
  type Settlement,
  createAsyncQueue,
} from '@weir/core';
import { createGenerationPipeline, worstCaseCostNanoUsd } from './pipeline';

const rev = (id: string): RevisionSpec => ({
  id,
  model: 'm',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: id, api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 4096,
  maxOutputTokens: 64,
  defaultOutputTokens: 8,
  pricing: { inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 1 },
});
const A = rev('a@1');
const B = rev('b@1');
const router: RouterService = { resolve: async () => ({ ok: true, route: { alias: { name: 'chat', targets: [{ revision: A.id, weight: 1 }] }, revision: A, fallbacks: [B] } }), listAliases: async () => [] };
const ref: ReservationRef = { reservationId: 'rsv_1', worstCaseNano: 1, monthStartsOn: '2026-12-01', dayStartsOn: '2026-12-07', leaseIds: ['lse_1'] };

function setup(options: { scheduled?: ScheduleResult; outcome?: (job: RelayJob) => GenerationOutcome; firstOpen?: boolean } = {}) {
  const asked: AdmitRequest[] = [];
  const settled: Settlement[] = [];
  const released: string[] = [];
  const acquiredDirectly: string[] = [];
  const jobs: RelayJob[] = [];
  const admit: AdmitService = {
    async admit(request) {
      asked.push(request);
      return {
        ok: true,
        reservationId: 'rsv_1',
        reservation: ref,
        schedule: async () => options.scheduled ?? { ok: true, lease: { replicaId: `${request.schedule.revisionId}/0`, queueMs: 0, release: () => undefined } },
        settle: async (s) => void settled.push(s),
        release: async () => void released.push('rsv_1'),
      };
    },
    // Reserve-only is for cache hits; this pipeline has no cache.
    reserve: () => Promise.reject(new Error('reserve-only called without a cache')),
  };
  const settlements = createRecordingSettlements();
  const pipeline = createGenerationPipeline({
    router,
    admit,
    scheduler: { acquire: async (r) => (acquiredDirectly.push(r.revisionId), { ok: true, lease: { replicaId: `${r.revisionId}/0`, queueMs: 0, release: () => undefined } }) },
    relay: {
      start(job) {
        jobs.push(job);
        const outcome: GenerationOutcome = options.outcome?.(job) ?? {
          finishReason: 'stop',
          usage: { inputTokens: 2, outputTokens: 3, cachedInputTokens: 0 },
          costNanoUsd: 8,
          modelRevision: job.revision.id,
          timings: { queueMs: 0, ttftMs: 1, totalMs: 2 },
        };
        const events = createAsyncQueue<{ type: 'end'; outcome: GenerationOutcome }>();
        events.push({ type: 'end', outcome });
        events.end();
        return { events, done: Promise.resolve(outcome), stop: () => undefined };
      },
    },
    countInputTokens: async () => 2,
    settlements,
    tenants: new Map(),
    clock: { now: () => 0 },
    ...(options.firstOpen ? { health: { tryAcquire: (key: string) => (key === A.id ? { allowed: false as const, retryAfterMs: 5_000 } : { allowed: true as const, probe: false }), record: () => undefined } } : {}),
    observer: { onFinished: () => finished++ },
  });
  let finished = 0;
  const run = async () => {
    const admitted = await pipeline.admit({ caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' }, route: 'chat.completions', alias: 'chat', generationId: 'gen_1', requestId: 'gen_1', input: { kind: 'text', text: 'hi' }, maxOutputTokens: 10, sampling: {}, arrivedAt: 0 });
    const started = await admitted.start(new AbortController().signal);
    if (started.kind === 'running') await started.handle.done;
    const until = Date.now() + 2_000;
    while (finished === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 2));
    return started;
  };
  return { run, asked, settled, released, acquiredDirectly, jobs, settlements };
}

it('reserves and acquires the first slot in one call, carries the reservation to the relay, and settles where it reserved', async () => {
  const t = setup({ firstOpen: true });
  await t.run();
  expect(t.asked).toHaveLength(1);
  // The first choice's breaker is open: the one call already asks for the fallback's slot.
  expect(t.asked[0].schedule).toMatchObject({ revisionId: 'b@1', tokens: 12, inputTokens: 2 });
  expect(t.asked[0].reservation).toMatchObject({ inputTokens: 2, maxOutputTokens: 10, worstCaseCostNanoUsd: worstCaseCostNanoUsd([A, B], 2, 10) });
  expect(t.acquiredDirectly).toEqual([]);
  expect(t.jobs.map((j) => j.reservation)).toEqual([ref]);
  expect(t.settled).toEqual([{ usage: { inputTokens: 2, outputTokens: 3, cachedInputTokens: 0 }, costNanoUsd: 8 }]);
  expect(t.released).toEqual([]);
});

it('journals a lost relay\'s estimate with its reservation, and has admission count the worst case at once', async () => {
  const t = setup({
    outcome: (job) =>
      ({
        finishReason: 'error',
        usage: { inputTokens: 2, outputTokens: 4, cachedInputTokens: 0 },
        costNanoUsd: 10,
        modelRevision: job.revision.id,
        timings: { queueMs: 0, ttftMs: 1, totalMs: 2 },
        error: { code: 'upstream_error', message: 'the streaming relay was lost' },
        usageSource: 'estimated',
        relayLost: true,
      }) as GenerationOutcome,
  });
  await t.run();
  expect(t.settlements.entries).toHaveLength(1);
  expect(t.settlements.entries[0].usage).toMatchObject({ generationId: 'gen_1', outputTokens: 4, usageSource: 'estimated', reservation: ref });
  expect(t.settled).toEqual([{ usage: { inputTokens: 2, outputTokens: 10, cachedInputTokens: 0 }, costNanoUsd: worstCaseCostNanoUsd([A, B], 2, 10) }]);
});

it('does not release again what the admit call released after a scheduler refusal', async () => {
  const t = setup({ scheduled: { ok: false, reason: 'queue_full', message: 'full', queueMs: 0, retryAfterMs: 700 } });
  await expect(t.run()).rejects.toMatchObject({ code: 'queue_full', retryAfterMs: 700 });
  expect(t.released).toEqual([]);
  expect(t.settled).toEqual([]);
});

it('after no_replica on the first choice, acquires the fallback slot from the scheduler on the reservation still held', async () => {
  const t = setup({ scheduled: { ok: false, reason: 'no_replica', message: 'none', queueMs: 0 } });
  const started = await t.run();
  expect(started).toMatchObject({ kind: 'running', revisionId: 'b@1', fallbackReason: 'no_replica' });
  expect(t.acquiredDirectly).toEqual(['b@1']);
  expect(t.released).toEqual([]);
});

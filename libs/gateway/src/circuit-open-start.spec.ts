/**
 * A first choice whose circuit breaker is open, or that no replica serves (a canary not placed
 * yet): the pipeline starts on the next revision of the chain and says so before any header goes out.
 */
import { createRecordingSettlements } from '@weir/testing';
import type { AdmissionService, GenerationOutcome, RelayJob, RevisionSpec, RouterService, ScheduleResult, SchedulerService } from '@weir/core';
import { createAsyncQueue } from '@weir/core';
import { createGenerationPipeline, type GenerationPipelineDeps } from './pipeline';

const rev = (id: string): RevisionSpec => ({
  id,
  model: 'm',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: id, api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 4096,
  maxOutputTokens: 64,
  defaultOutputTokens: 8,
  pricing: { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 },
});
const A = rev('a@1');
const B = rev('b@1');

const router: RouterService = { resolve: async () => ({ ok: true, route: { alias: { name: 'chat', targets: [{ revision: A.id, weight: 1 }] }, revision: A, fallbacks: [B] } }), listAliases: async () => [] };
const admission = { reserve: async () => ({ ok: true, reservationId: 'res-1' }), settle: async () => undefined, release: async () => undefined } as unknown as AdmissionService;
const granted = (revisionId: string): ScheduleResult => ({ ok: true, lease: { replicaId: `${revisionId}/0`, queueMs: 0, release: () => undefined } });

/** A pipeline on chain [A, B] whose relay answers at once; `jobs` are the relay's starts. */
function pipelineWith(scheduler: SchedulerService, health?: GenerationPipelineDeps['health']) {
  const jobs: RelayJob[] = [];
  const pipeline = createGenerationPipeline({
    router,
    admission,
    scheduler,
    relay: {
      start(job) {
        jobs.push(job);
        const events = createAsyncQueue<{ type: 'end'; outcome: GenerationOutcome }>();
        const outcome: GenerationOutcome = { finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 0, cachedInputTokens: 0 }, costNanoUsd: 0, modelRevision: job.revision.id, timings: { queueMs: 0, ttftMs: null, totalMs: 1 } };
        events.push({ type: 'end', outcome });
        events.end();
        return { events, done: Promise.resolve(outcome), stop: () => undefined };
      },
    },
    countInputTokens: async () => 1,
    settlements: createRecordingSettlements(),
    tenants: new Map(),
    clock: { now: () => 0 },
    ...(health ? { health } : {}),
  });
  const start = async (generationId: string) => {
    const admitted = await pipeline.admit({ caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' }, route: 'chat.completions', alias: 'chat', generationId, requestId: generationId, input: { kind: 'text', text: 'hi' }, sampling: {}, arrivedAt: 0 });
    return admitted.start(new AbortController().signal);
  };
  return { jobs, start };
}

it('starts on the fallback when the first choice is circuit-open, and names it and the reason', async () => {
  const { jobs, start } = pipelineWith(
    { acquire: async (r) => granted(r.revisionId) },
    { tryAcquire: (key) => (key === A.id ? { allowed: false, retryAfterMs: 4_000 } : { allowed: true, probe: false }), record: () => undefined },
  );
  const started = await start('gen_1');
  expect(started).toMatchObject({ kind: 'running', revisionId: 'b@1', fallbackReason: 'circuit_open' });
  expect(jobs.map((j) => j.revision.id)).toEqual(['b@1']);
  if (started.kind === 'running') expect(await started.handle.done).toMatchObject({ modelRevision: 'b@1', fallback: { reason: 'circuit_open', from: 'a@1' } });
});

it('starts on the fallback when no replica serves the first choice (no_replica), and names it and the reason', async () => {
  const asked: string[] = [];
  const { jobs, start } = pipelineWith({
    acquire: async (r): Promise<ScheduleResult> => {
      asked.push(r.revisionId);
      if (r.revisionId === A.id) return { ok: false, reason: 'no_replica', message: `no replica of ${A.id} serves this tenant's pool`, queueMs: 0 };
      return granted(r.revisionId);
    },
  });
  const started = await start('gen_2');
  expect(asked).toEqual(['a@1', 'b@1']);
  expect(started).toMatchObject({ kind: 'running', revisionId: 'b@1', fallbackReason: 'no_replica' });
  expect(jobs.map((j) => j.revision.id)).toEqual(['b@1']);
  if (started.kind === 'running') expect(await started.handle.done).toMatchObject({ modelRevision: 'b@1', fallback: { reason: 'no_replica', from: 'a@1' } });
});

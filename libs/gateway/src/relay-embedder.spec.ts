/**
 * The split gateway's cache embedder over a hand-written relay: the job it sends (an internal
 * embedding on the revision's replicas in turn, bounded by the budget), the vectors it decodes,
 * and every failure as a rejection the semantic tier takes for a miss — the relay's error, a
 * wrong number of vectors, the budget, the caller's abort (the relay then told to stop).
 */
import { encodeEmbeddingDelta, type GenerationOutcome, type RelayEvent, type RelayJob, type RelayService, type RevisionSpec, type StopCause } from '@weir/core';
import { createRelayEmbedder, relayEmbeddersOf } from './relay-embedder';
import { fakeRevision } from './test-support';

const EMB: RevisionSpec = { ...fakeRevision(), id: 'emb@1', model: 'emb', kind: 'embedding', embedding: { dimensions: 2, variableDimensions: false } };
const OUTCOME: GenerationOutcome = { finishReason: 'stop', usage: { inputTokens: 2, outputTokens: 0, cachedInputTokens: 0 }, costNanoUsd: 0, modelRevision: 'emb@1', timings: { queueMs: 0, ttftMs: null, totalMs: 1 }, unrecorded: true };

/**
 * A relay that answers each job with `script(job)` (events, then the end), or never ends when it
 * returns `'hang'` (until stopped: then it ends `cancelled`). Records jobs and stops.
 */
function fakeRelay(script: (job: RelayJob) => RelayEvent[] | 'hang'): RelayService & { jobs: RelayJob[]; stops: StopCause[] } {
  const self = {
    jobs: [] as RelayJob[],
    stops: [] as StopCause[],
    start(job: RelayJob) {
      self.jobs.push(job);
      const planned = script(job);
      let stop: () => void = () => undefined;
      const stopped = new Promise<void>((resolve) => (stop = resolve));
      const ended = { ...OUTCOME, finishReason: 'cancelled' as const, error: undefined };
      async function* events(): AsyncGenerator<RelayEvent> {
        if (planned === 'hang') {
          await stopped;
          yield { type: 'end', outcome: ended };
          return;
        }
        yield* planned;
      }
      return {
        events: events(),
        done: Promise.resolve(OUTCOME),
        stop(cause: StopCause) {
          self.stops.push(cause);
          stop();
        },
      };
    },
  };
  return self;
}

const vectors = (job: RelayJob): RelayEvent[] => {
  const items = job.engineRequest.input.kind === 'embedding' ? job.engineRequest.input.items : [];
  return [...items.map((item, i) => ({ type: 'delta' as const, text: encodeEmbeddingDelta([item.length, i]), tokens: 0 })), { type: 'end', outcome: OUTCOME }];
};

describe('createRelayEmbedder', () => {
  it('sends one internal embedding job per call, on the replicas in turn, within the budget, and decodes its vectors', async () => {
    const relay = fakeRelay(vectors);
    const embedder = createRelayEmbedder({ relay, revision: EMB, replicaIds: ['r1', 'r2'], timeoutMs: 300, clock: { now: () => 1_000 } });
    expect(embedder.revisionId).toBe('emb@1');
    const out = await embedder.embed(['hello', 'hi']);
    expect(out.map((v) => Array.from(v))).toEqual([
      [5, 0],
      [2, 1],
    ]);
    await embedder.embed(['x']);
    await embedder.embed(['y']);
    expect(relay.jobs.map((j) => j.replicaId)).toEqual(['r1', 'r2', 'r1']);
    expect(relay.jobs[0]).toMatchObject({
      route: 'embeddings',
      internal: true,
      revision: EMB,
      engineRequest: { input: { kind: 'embedding', items: ['hello', 'hi'] }, maxOutputTokens: 0 },
      arrivedAt: 1_000,
      deadlineAt: 1_300,
      inputTokens: 0,
      caller: { tenantId: 'weir-internal' },
    });
    expect(relay.jobs[0].reservation).toBeUndefined();
    expect(new Set(relay.jobs.map((j) => j.generationId)).size).toBe(3);
    expect(await embedder.embed([])).toEqual([]);
    expect(relay.jobs).toHaveLength(3);
  });

  it('rejects with the outcome’s error code when the relay or engine fails', async () => {
    const relay = fakeRelay(() => [{ type: 'end', outcome: { ...OUTCOME, finishReason: 'error', error: { code: 'upstream_unavailable', message: 'down' } } }]);
    const embedder = createRelayEmbedder({ relay, revision: EMB, replicaIds: ['r1'] });
    await expect(embedder.embed(['a'])).rejects.toMatchObject({ name: 'WeirError', code: 'upstream_unavailable' });
  });

  it('rejects with upstream_error when the vectors do not match the texts', async () => {
    const relay = fakeRelay(() => [{ type: 'delta', text: encodeEmbeddingDelta([1, 2]), tokens: 0 }, { type: 'end', outcome: OUTCOME }]);
    const embedder = createRelayEmbedder({ relay, revision: EMB, replicaIds: ['r1'] });
    await expect(embedder.embed(['a', 'b'])).rejects.toMatchObject({ code: 'upstream_error' });
  });

  it('gives up after the budget and tells the relay to stop', async () => {
    const relay = fakeRelay(() => 'hang');
    const embedder = createRelayEmbedder({ relay, revision: EMB, replicaIds: ['r1'], timeoutMs: 20 });
    await expect(embedder.embed(['a'])).rejects.toMatchObject({ code: 'deadline_exceeded' });
    expect(relay.stops).toEqual(['cancel_requested']);
  });

  it('gives up when the caller aborts (the cache lookup’s budget) and tells the relay to stop; an aborted signal sends nothing', async () => {
    const relay = fakeRelay(() => 'hang');
    const embedder = createRelayEmbedder({ relay, revision: EMB, replicaIds: ['r1'], timeoutMs: 60_000 });
    const abort = new AbortController();
    const pending = embedder.embed(['a'], abort.signal);
    abort.abort();
    await expect(pending).rejects.toMatchObject({ code: 'deadline_exceeded' });
    expect(relay.stops).toEqual(['cancel_requested']);
    await expect(embedder.embed(['a'], abort.signal)).rejects.toBeDefined();
    expect(relay.jobs).toHaveLength(1);
  });
});

describe('relayEmbeddersOf', () => {
  it('makes one embedder per embedding revision that has replicas', () => {
    const relay = fakeRelay(vectors);
    const gen = fakeRevision();
    const lonely: RevisionSpec = { ...EMB, id: 'emb@2' };
    const map = relayEmbeddersOf({
      relay,
      revisions: [gen, EMB, lonely],
      replicas: [
        { id: 'g0', revisionId: gen.id },
        { id: 'e0', revisionId: 'emb@1' },
      ],
    });
    expect([...map.keys()]).toEqual(['emb@1']);
    expect(() => createRelayEmbedder({ relay, revision: lonely, replicaIds: [] })).toThrow(TypeError);
  });
});

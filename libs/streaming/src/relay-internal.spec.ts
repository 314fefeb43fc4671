/**
 * `RelayJob.internal` (the gateway's own embedding of a prompt for the semantic cache): platform
 * overhead — no settlement entry, no output moderation, `outcome.unrecorded` — honoured for an
 * embedding input only, so it can never make a generation free.
 */
import { encodeEmbeddingDelta, type EngineAdapter, type EngineEvent, type EngineRequest, type RelayJob, type RevisionSpec, type UsageRecord } from '@weir/core';
import { createRecordingSettlements } from '@weir/testing';
import { createRelay } from './relay';

/** Embeds each item as `[length, 1]`; generates `a b c` for a text input. */
const engine: EngineAdapter = {
  kind: 'fake',
  capacity: { slots: 4, contextTokens: 512 },
  async countInputTokens() {
    return 3;
  },
  async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
    if (request.input.kind === 'embedding') {
      for (const item of request.input.items) yield { type: 'delta', text: encodeEmbeddingDelta([item.length, 1]), tokens: 0 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: 0 }, usageSource: 'reported' };
      return;
    }
    for (const w of ['a ', 'b ', 'c ']) yield { type: 'delta', text: w, tokens: 1 };
    yield { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: 3 }, usageSource: 'reported' };
  },
  async close() {},
};

const revision: RevisionSpec = {
  id: 'fake@1',
  model: 'fake',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'x', api: 'chat', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 1 },
  contextWindow: 512,
  maxOutputTokens: 100,
  defaultOutputTokens: 10,
  pricing: { inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 1 },
};
const clock = { now: () => performance.now() };

function job(over: Partial<RelayJob>): RelayJob {
  const now = clock.now();
  return {
    generationId: 'gen_1',
    requestId: 'gen_1',
    route: 'embeddings',
    caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' },
    modelAlias: 'fake',
    revision,
    replicaId: 'r0',
    engineRequest: { input: { kind: 'embedding', items: ['hello', 'hi'] }, maxOutputTokens: 0, sampling: {} },
    arrivedAt: now,
    deadlineAt: now + 60_000,
    queueMs: 0,
    inputTokens: 0,
    ...over,
  };
}

function setup() {
  const records: UsageRecord[] = [];
  const asked: string[] = [];
  const relay = createRelay({ engineFor: () => engine, settlements: createRecordingSettlements(records), clock, moderation: { outputFor: (j) => void asked.push(j.route) } });
  return { relay, records, asked };
}

async function texts(events: AsyncIterable<{ type: string; text?: string }>): Promise<string> {
  let out = '';
  for await (const e of events) if (e.type === 'delta') out += e.text;
  return out;
}

describe('internal relay jobs', () => {
  it('an internal embedding streams its vectors and records nothing: no usage row, no output moderation, `unrecorded`', async () => {
    const { relay, records, asked } = setup();
    const handle = relay.start(job({ internal: true }));
    expect(await texts(handle.events)).toBe(encodeEmbeddingDelta([5, 1]) + encodeEmbeddingDelta([2, 1]));
    const outcome = await handle.done;
    expect(outcome).toMatchObject({ finishReason: 'stop', unrecorded: true });
    expect(records).toEqual([]);
    expect(asked).toEqual([]);
  });

  it('the same embedding job, not internal, is recorded (the /v1/embeddings route)', async () => {
    const { relay, records, asked } = setup();
    const outcome = await relay.start(job({})).done;
    expect(outcome.unrecorded).toBeUndefined();
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ route: 'embeddings', status: 'completed' });
    expect(asked).toEqual(['embeddings']);
  });

  it('`internal` on a generation is ignored: it is recorded and moderated like any other', async () => {
    const { relay, records, asked } = setup();
    const handle = relay.start(job({ internal: true, route: 'chat.completions', engineRequest: { input: { kind: 'text', text: 'hi' }, maxOutputTokens: 10, sampling: {} } }));
    expect(await texts(handle.events)).toBe('a b c ');
    expect((await handle.done).unrecorded).toBeUndefined();
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ route: 'chat.completions', outputTokens: 3 });
    expect(asked).toEqual(['chat.completions']);
  });
});

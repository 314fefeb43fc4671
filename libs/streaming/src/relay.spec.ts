import { type EngineAdapter, type EngineEvent, type EngineRequest, type RelayJob, type RevisionSpec, type UsageRecord, WeirError } from '@weir/core';
import { billedUsage, createRelay } from './relay';
import { createRecordingSettlements } from '@weir/testing';
import { compileModerationPolicies } from '@weir/moderation';

/** A hand-written engine: emits `tokens` one-token deltas `delayMs` apart, honours abort, optionally fails after `failAfter`. */
function fakeEngine(options: { tokens: number; delayMs?: number; failAfter?: number; reportUsage?: boolean; failRetryable?: boolean }): EngineAdapter & { produced: number } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 512 },
    produced: 0,
    async countInputTokens() {
      return 3;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      let n = 0;
      for (; n < Math.min(options.tokens, request.maxOutputTokens); n++) {
        if (request.signal.aborted) break;
        if (options.failAfter !== undefined && n === options.failAfter) {
          throw options.failRetryable ? new WeirError('upstream_unavailable', 'upstream connection failed', { retryable: true }) : new WeirError('upstream_error', 'upstream died');
        }
        if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs));
        engine.produced++;
        yield { type: 'delta', text: `t${n} `, tokens: 1 };
      }
      const reason = request.signal.aborted ? 'aborted' : n >= request.maxOutputTokens ? 'length' : 'stop';
      yield { type: 'end', reason, usage: { inputTokens: 3, outputTokens: n }, usageSource: options.reportUsage === false ? 'estimated' : 'reported' };
    },
    async close() {},
  };
  return engine;
}

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

function job(over: Partial<RelayJob> = {}): RelayJob {
  const now = clock.now();
  return {
    generationId: 'gen_1',
    requestId: 'req_1',
    route: 'generations',
    caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' },
    modelAlias: 'fake',
    revision,
    replicaId: 'r0',
    engineRequest: { input: { kind: 'text', text: 'hi' }, maxOutputTokens: 50, sampling: {} },
    arrivedAt: now,
    deadlineAt: now + 60_000,
    queueMs: 0,
    inputTokens: 3,
    ...over,
  };
}

function setup(engine: EngineAdapter, graceMs = 50) {
  const records: UsageRecord[] = [];
  const relay = createRelay({ engineFor: (id) => (id === 'r0' ? engine : undefined), settlements: createRecordingSettlements(records), clock, cancelGraceMs: graceMs });
  return { relay, records };
}

async function collect(events: AsyncIterable<{ type: string }>) {
  const out = [];
  for await (const e of events) out.push(e);
  return out;
}

describe('createRelay', () => {
  it('streams deltas then exactly one end, and records one usage row priced at the revision', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 5 }));
    const handle = relay.start(job());
    const events = await collect(handle.events);
    expect(events.map((e) => e.type)).toEqual(['delta', 'delta', 'delta', 'delta', 'delta', 'end']);
    const outcome = await handle.done;
    expect(outcome).toMatchObject({ finishReason: 'stop', usage: { inputTokens: 3, outputTokens: 5 }, costNanoUsd: 3 * 1_000 + 5 * 2_000, modelRevision: 'fake@1' });
    expect(outcome.timings.ttftMs).not.toBeNull();
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ generationId: 'gen_1', status: 'completed', finishReason: 'stop', outputTokens: 5, costNanoUsd: 13_000 });
  });

  it('passes tool-call deltas on in order (text, tool calls, or both), drops empty ones, and ends with tool_calls', async () => {
    const script: EngineEvent[] = [
      { type: 'delta', text: 'Let me check. ', tokens: 1 },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_a', name: 'get_weather', argumentsDelta: '' }] },
      { type: 'delta', text: '', tokens: 0, toolCalls: [] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '{"city":' }] },
      { type: 'delta', text: 'x', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '"Paris"}' }, { index: 1, id: 'call_b', name: 'now' }] },
      { type: 'end', reason: 'tool_calls', usage: { inputTokens: 3, outputTokens: 4 }, usageSource: 'reported' },
    ];
    const engine: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 1, contextTokens: 512 },
      countInputTokens: async () => 3,
      async *generate() {
        yield* script;
      },
      close: async () => {},
    };
    const { relay, records } = setup(engine);
    const handle = relay.start(job());
    const events = await collect(handle.events);
    expect(events.slice(0, -1)).toEqual([
      { type: 'delta', text: 'Let me check. ', tokens: 1 },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_a', name: 'get_weather', argumentsDelta: '' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '{"city":' }] },
      { type: 'delta', text: 'x', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '"Paris"}' }, { index: 1, id: 'call_b', name: 'now' }] },
    ]);
    expect(await handle.done).toMatchObject({ finishReason: 'tool_calls', usage: { outputTokens: 4 } });
    expect(records[0]).toMatchObject({ status: 'completed', finishReason: 'tool_calls' });
  });

  it('passes reasoning on beside text and tool calls, billing its tokens; under output moderation (which checks the text only) it is not passed on', async () => {
    const script: EngineEvent[] = [
      { type: 'delta', text: '', tokens: 1, reasoning: 'Think.' },
      { type: 'delta', text: '', tokens: 1, reasoning: '' },
      { type: 'delta', text: 'Hi', tokens: 1, reasoning: ' Done.' },
      { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: 3 }, usageSource: 'reported' },
    ];
    const engine: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 1, contextTokens: 512 },
      countInputTokens: async () => 3,
      async *generate() {
        yield* script;
      },
      close: async () => {},
    };
    const { relay, records } = setup(engine);
    const events = await collect(relay.start(job()).events);
    expect(events.slice(0, -1)).toEqual([
      { type: 'delta', text: '', tokens: 1, reasoning: 'Think.' },
      { type: 'delta', text: 'Hi', tokens: 1, reasoning: ' Done.' },
    ]);
    expect(records[0]).toMatchObject({ outputTokens: 3 });

    const config = { tenants: [{ id: 't', name: 'T', apps: [], allowedAliases: ['*'], limits: {}, moderation: { output: { engine: 'rules', windowChars: 64, overlapChars: 16, fail: 'closed' as const, timeoutMs: 2_000 }, rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }] } } }] };
    const plans = compileModerationPolicies(config as unknown as Parameters<typeof compileModerationPolicies>[0]);
    const moderated = createRelay({ engineFor: () => engine, settlements: createRecordingSettlements([]), clock, cancelGraceMs: 50, moderation: { outputFor: () => plans.of('t')?.output } });
    expect(plans.of('t')?.output).toBeDefined();
    const checked = await collect(moderated.start(job()).events);
    expect(checked.slice(0, -1)).toEqual([{ type: 'delta', text: 'Hi', tokens: 1 }]);
  });

  it('carries the use case into the usage record, and leaves it out when none was named', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 2 }));
    await relay.start(job({ generationId: 'gen_uc', useCase: 'support.summaries' })).done;
    await relay.start(job({ generationId: 'gen_none' })).done;
    expect(records.find((r) => r.generationId === 'gen_uc')?.useCase).toBe('support.summaries');
    expect(records.find((r) => r.generationId === 'gen_none')).not.toHaveProperty('useCase');
  });

  it('reports length at the output limit', async () => {
    const { relay } = setup(fakeEngine({ tokens: 100 }));
    const outcome = await relay.start(job({ engineRequest: { input: { kind: 'text', text: 'x' }, maxOutputTokens: 7, sampling: {} } })).done;
    expect(outcome).toMatchObject({ finishReason: 'length', usage: { outputTokens: 7 } });
  });

  it('cuts an engine that ignores the output limit at the limit, stops it, and never bills beyond it', async () => {
    let aborted = false;
    let sent = 0;
    const runaway: EngineAdapter = {
      kind: 'runaway',
      capacity: { slots: 1, contextTokens: 64 },
      async countInputTokens() {
        return 2;
      },
      async *generate(request) {
        // Ignores maxOutputTokens (a buggy upstream, or one that reads another field).
        for (; sent < 200 && !request.signal.aborted; sent++) yield { type: 'delta', text: 'w ', tokens: 1 };
        aborted = request.signal.aborted;
        yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: sent }, usageSource: 'reported' };
      },
      async close() {},
    };
    const { relay, records } = setup(runaway);
    const handle = relay.start(job({ engineRequest: { input: { kind: 'text', text: 'x' }, maxOutputTokens: 3, sampling: {} } }));
    const events = await collect(handle.events);
    const outcome = await handle.done;
    expect(events.filter((e) => e.type === 'delta')).toHaveLength(3);
    expect(outcome).toMatchObject({ finishReason: 'length', usage: { outputTokens: 3 } });
    expect(records[0]).toMatchObject({ outputTokens: 3 });
    // The engine is stopped right there (its generator is closed at the next token), not left running.
    expect(sent).toBeLessThanOrEqual(4);
    expect(aborted).toBe(false);
  });

  it('bills at most the output limit even when an engine reports more (one oversized chunk)', async () => {
    const oversized: EngineAdapter = {
      kind: 'oversized',
      capacity: { slots: 1, contextTokens: 64 },
      async countInputTokens() {
        return 2;
      },
      async *generate() {
        yield { type: 'delta', text: 'one chunk of many tokens', tokens: 50 };
        yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: 50 }, usageSource: 'reported' };
      },
      async close() {},
    };
    const { relay, records } = setup(oversized);
    const outcome = await relay.start(job({ engineRequest: { input: { kind: 'text', text: 'x' }, maxOutputTokens: 5, sampling: {} } })).done;
    expect(outcome.usage.outputTokens).toBe(5);
    expect(records[0]).toMatchObject({ outputTokens: 5 });
  });

  it('cuts at the deadline and bills what was produced', async () => {
    const engine = fakeEngine({ tokens: 100, delayMs: 10 });
    const { relay, records } = setup(engine);
    const outcome = await relay.start(job({ deadlineAt: clock.now() + 80 })).done;
    expect(outcome.finishReason).toBe('deadline');
    expect(outcome.usage.outputTokens).toBe(engine.produced);
    expect(engine.produced).toBeGreaterThan(0);
    expect(engine.produced).toBeLessThan(100);
    expect(records[0]).toMatchObject({ status: 'deadline', outputTokens: engine.produced });
  });

  it('bills the reserved input count, not the adapter\'s loose estimate, when the engine reported no usage', async () => {
    // An engine cut before its usage chunk: the adapter's estimate (a UTF-8 byte bound) is 609,
    // the revision's tokenizer counted 200 at admission. Billing 609 would exceed the reservation.
    const engine: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 1, contextTokens: 1024 },
      countInputTokens: async () => 609,
      async *generate() {
        yield { type: 'end', reason: 'aborted', usage: { inputTokens: 609, outputTokens: 0 }, usageSource: 'estimated' };
      },
      async close() {},
    };
    const { relay, records } = setup(engine);
    const outcome = await relay.start(job({ inputTokens: 200 })).done;
    expect(outcome.usage).toMatchObject({ inputTokens: 200, outputTokens: 0 });
    // $1 per million input tokens = 1,000 nano-USD a token.
    expect(outcome.costNanoUsd).toBe(200 * 1_000);
    expect(records[0]).toMatchObject({ inputTokens: 200 });
    // A reported count is the engine's own and stands as it is.
    const reporting = fakeEngine({ tokens: 2, reportUsage: true });
    const reported = await setup(reporting).relay.start(job({ inputTokens: 200 })).done;
    expect(reported.usage.inputTokens).toBe(3);
  });

  it('on a client disconnect keeps generating for the grace period, then stops and bills every token', async () => {
    const engine = fakeEngine({ tokens: 1000, delayMs: 5 });
    const { relay, records } = setup(engine, 100);
    const handle = relay.start(job({ engineRequest: { input: { kind: 'text', text: 'x' }, maxOutputTokens: 1000, sampling: {} } }));
    await new Promise((r) => setTimeout(r, 50));
    const atDisconnect = engine.produced;
    handle.stop('client_disconnected');
    const outcome = await handle.done;
    expect(outcome.finishReason).toBe('cancelled');
    expect(engine.produced).toBeGreaterThan(atDisconnect); // the grace period produced more
    expect(outcome.usage.outputTokens).toBe(engine.produced);
    expect(records).toHaveLength(1);
    expect(records[0].status).toBe('cancelled');
  });

  it('stops at once on an explicit cancel, and stop is idempotent and a no-op once finished', async () => {
    const engine = fakeEngine({ tokens: 1000, delayMs: 5 });
    const { relay, records } = setup(engine, 10_000);
    const handle = relay.start(job({ engineRequest: { input: { kind: 'text', text: 'x' }, maxOutputTokens: 1000, sampling: {} } }));
    await new Promise((r) => setTimeout(r, 30));
    handle.stop('cancel_requested');
    handle.stop('cancel_requested');
    const outcome = await handle.done;
    expect(outcome.finishReason).toBe('cancelled');
    expect(outcome.usage.outputTokens).toBeLessThan(50);
    handle.stop('client_disconnected');
    expect(records).toHaveLength(1);
  });

  it('ends a failure after the first token with an error outcome and bills the tokens produced', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 10, failAfter: 4 }));
    const handle = relay.start(job());
    const events = await collect(handle.events);
    expect(events.filter((e) => e.type === 'delta')).toHaveLength(4);
    expect(events.filter((e) => e.type === 'end')).toHaveLength(1);
    const outcome = await handle.done;
    expect(outcome).toMatchObject({ finishReason: 'error', error: { code: 'upstream_error' }, usage: { inputTokens: 3, outputTokens: 4 } });
    expect(records[0]).toMatchObject({ status: 'failed', errorCode: 'upstream_error', outputTokens: 4 });
  });

  it('records nothing for an attempt the caller will retry: a retryable failure before the first token', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 5, failAfter: 0, failRetryable: true }));
    const outcome = await relay.start(job({ retryBeforeFirstToken: true })).done;
    expect(outcome).toMatchObject({ finishReason: 'error', unrecorded: true, costNanoUsd: 0, usage: { inputTokens: 0, outputTokens: 0 }, error: { code: 'upstream_unavailable', retryable: true } });
    expect(records).toHaveLength(0);
  });

  it('records the attempt as usual when no retry follows, when the failure is not retryable, or when output began', async () => {
    const last = setup(fakeEngine({ tokens: 5, failAfter: 0, failRetryable: true }));
    expect(await last.relay.start(job()).done).toMatchObject({ finishReason: 'error', error: { code: 'upstream_unavailable', retryable: true } });
    expect(last.records).toHaveLength(1);
    const permanent = setup(fakeEngine({ tokens: 5, failAfter: 0 }));
    expect((await permanent.relay.start(job({ retryBeforeFirstToken: true })).done).unrecorded).toBeUndefined();
    expect(permanent.records).toHaveLength(1);
    const midStream = setup(fakeEngine({ tokens: 5, failAfter: 2, failRetryable: true }));
    const outcome = await midStream.relay.start(job({ retryBeforeFirstToken: true })).done;
    expect(outcome).toMatchObject({ finishReason: 'error', usage: { outputTokens: 2 } });
    expect(outcome.unrecorded).toBeUndefined();
    expect(outcome.error?.retryable).toBeUndefined();
    expect(midStream.records).toMatchObject([{ status: 'failed', outputTokens: 2 }]);
  });

  it('fails cleanly when the replica is gone', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 1 }));
    const outcome = await relay.start(job({ replicaId: 'gone' })).done;
    expect(outcome).toMatchObject({ finishReason: 'error', error: { code: 'engine_unavailable' }, usage: { outputTokens: 0 } });
    expect(records).toHaveLength(1);
  });

  it('finishes and bills even when nobody reads the events', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 3 }));
    await relay.start(job()).done;
    expect(records[0].outputTokens).toBe(3);
  });

  it('bills nothing for a failure before any output, even the last attempt, and keeps the upstream count on its attempt', async () => {
    const counted = new WeirError('upstream_bad_request', 'upstream answered HTTP 400', { produced: { usage: { inputTokens: 7, outputTokens: 0 }, source: 'reported' } });
    const engine: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 1, contextTokens: 512 },
      countInputTokens: async () => 18,
      async *generate() {
        throw counted;
      },
      close: async () => {},
    };
    const { relay, records } = setup(engine);
    const outcome = await relay.start(job({ inputTokens: 18 })).done;
    expect(outcome).toMatchObject({ finishReason: 'error', usage: { inputTokens: 0, outputTokens: 0 }, costNanoUsd: 0, usageSource: 'reported' });
    expect(records[0]).toMatchObject({ status: 'failed', inputTokens: 0, outputTokens: 0, costNanoUsd: 0 });
    expect(records[0].attempts).toEqual([expect.objectContaining({ attempt: 1, outcome: 'failed', errorCode: 'upstream_bad_request', inputTokens: 7, outputTokens: 0, replicaId: 'r0', ttftMs: null })]);
  });

  it('bills a failure after output what the adapter counted (its source kept), else the deltas as estimated', async () => {
    const counting: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 1, contextTokens: 512 },
      countInputTokens: async () => 3,
      async *generate() {
        yield { type: 'delta', text: 'a', tokens: 1 };
        yield { type: 'delta', text: 'bc', tokens: 1 };
        throw new WeirError('upstream_error', 'upstream died', { produced: { usage: { inputTokens: 2, outputTokens: 3 }, source: 'counted' } });
      },
      close: async () => {},
    };
    const withCount = setup(counting);
    expect(await withCount.relay.start(job()).done).toMatchObject({ usage: { inputTokens: 2, outputTokens: 3 }, usageSource: 'counted' });
    const without = setup(fakeEngine({ tokens: 10, failAfter: 4 }));
    expect(await without.relay.start(job()).done).toMatchObject({ usage: { inputTokens: 3, outputTokens: 4 }, usageSource: 'estimated' });
  });

  it('numbers its attempt after the prior ones and carries them all on the outcome and the record', async () => {
    const { relay, records } = setup(fakeEngine({ tokens: 2 }));
    const prior = [{ attempt: 1, revisionId: 'other@1', provider: 'anthropic', outcome: 'failed' as const, errorCode: 'upstream_unavailable', startedAtMs: 1, ttftMs: null, durationMs: 3, inputTokens: 0, outputTokens: 0 }];
    const outcome = await relay.start(job({ priorAttempts: prior })).done;
    expect(outcome.attempts).toEqual([prior[0], expect.objectContaining({ attempt: 2, revisionId: 'fake@1', provider: 'openai-compatible', replicaId: 'r0', outcome: 'answered', inputTokens: 3, outputTokens: 2 })]);
    expect(records[0].attempts).toEqual(outcome.attempts);
    expect(records[0].usageSource).toBe('reported');
  });

  it.each([
    ['caps the input at the reserved count (its uncached part first) and the output at the limit', { usage: { inputTokens: 50, outputTokens: 90, cachedInputTokens: 40 }, source: 'reported' as const }, false, { inputTokens: 20, outputTokens: 64, cachedInputTokens: 10 }],
    ['never turns capped full-price input into cache reads', { usage: { inputTokens: 100, outputTokens: 5, cachedInputTokens: 40 }, source: 'reported' as const }, false, { inputTokens: 20, outputTokens: 5, cachedInputTokens: 0 }],
    ['keeps a count within the reservation', { usage: { inputTokens: 12, outputTokens: 5 }, source: 'counted' as const }, false, { inputTokens: 12, outputTokens: 5 }],
    ['bills nothing for a failure before any output', { usage: { inputTokens: 12, outputTokens: 0 }, source: 'reported' as const }, true, { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 }],
    [
      'keeps token classes within their billed totals',
      { usage: { inputTokens: 18, outputTokens: 10, cachedInputTokens: 8, cacheWriteInputTokens: 6, reasoningTokens: 7 }, source: 'reported' as const },
      false,
      { inputTokens: 18, outputTokens: 10, cachedInputTokens: 8, cacheWriteInputTokens: 6, reasoningTokens: 7 },
    ],
    [
      'caps the input uncached first, then cache writes, then reads, and reasoning at the capped output',
      { usage: { inputTokens: 50, outputTokens: 90, cachedInputTokens: 15, cacheWriteInputTokens: 30, reasoningTokens: 80 }, source: 'reported' as const },
      false,
      { inputTokens: 20, outputTokens: 64, cachedInputTokens: 0, cacheWriteInputTokens: 15, reasoningTokens: 64 },
    ],
  ])('billedUsage %s', (_name, produced, failedBeforeOutput, expected) => {
    expect(billedUsage(produced, { reservedInputTokens: 20, maxOutputTokens: 64 }, failedBeforeOutput).usage).toEqual(expected);
  });

  it('ends a job already past its deadline without starting the engine or billing', async () => {
    const engine = fakeEngine({ tokens: 5 });
    const { relay, records } = setup(engine);
    const outcome = await relay.start(job({ deadlineAt: clock.now() - 1 })).done;
    expect(outcome).toMatchObject({ finishReason: 'deadline', usage: { inputTokens: 0, outputTokens: 0 }, costNanoUsd: 0 });
    expect(engine.produced).toBe(0);
    expect(records[0]).toMatchObject({ status: 'deadline', outputTokens: 0 });
  });
});

describe('createRelay: the settlement entry (ADR 0002 §2)', () => {
  const ref = { reservationId: 'rsv_1', worstCaseNano: 1_000_000, monthStartsOn: '2026-12-01', dayStartsOn: '2026-12-01', leaseIds: ['lse_a', 'lse_b'] };
  const retain = { key: 'order-1', bodySha256: 'f'.repeat(64), createdS: 1_765_000_000, retainUntilMs: 1_900_000_000_000 };

  function setupJournal(engine: EngineAdapter) {
    const settlements = createRecordingSettlements();
    const relay = createRelay({ engineFor: (id) => (id === 'r0' ? engine : undefined), settlements, clock, cancelGraceMs: 20 });
    return { relay, settlements };
  }

  it('appends one entry with the reservation it settles before the terminal event is emitted', async () => {
    const { relay, settlements } = setupJournal(fakeEngine({ tokens: 3 }));
    const handle = relay.start(job({ reservation: ref }));
    let appendedAtEnd = -1;
    for await (const ev of handle.events) if (ev.type === 'end') appendedAtEnd = settlements.entries.length;
    expect(appendedAtEnd).toBe(1);
    expect(settlements.entries[0].usage).toMatchObject({ generationId: 'gen_1', outputTokens: 3, reservation: ref });
    expect(settlements.entries[0].idempotency).toBeUndefined();
  });

  it("leaves a keyed request's result for retries: its deltas as streamed and its outcome", async () => {
    const { relay, settlements } = setupJournal(fakeEngine({ tokens: 3 }));
    const handle = relay.start(job({ retain }));
    await collect(handle.events);
    const idem = settlements.entries[0].idempotency;
    expect(idem).toMatchObject({ tenantId: 't', key: 'order-1', bodySha256: retain.bodySha256, route: 'generations', retainUntilMs: retain.retainUntilMs });
    expect(idem?.outcome).toMatchObject({ kind: 'result', result: { generationId: 'gen_1', requestId: 'req_1', createdS: retain.createdS, deltas: ['t0 ', 't1 ', 't2 '], outcome: { finishReason: 'stop' } } });
  });

  it('marks a keyed request interrupted when it failed after output, and leaves nothing when it failed before any', async () => {
    const after = setupJournal(fakeEngine({ tokens: 9, failAfter: 2 }));
    await collect(after.relay.start(job({ retain })).events);
    expect(after.settlements.entries[0].idempotency?.outcome).toMatchObject({ kind: 'interrupted', generationId: 'gen_1' });
    expect(after.settlements.entries[0].usage.outputTokens).toBe(2);

    const before = setupJournal(fakeEngine({ tokens: 9, failAfter: 0 }));
    await collect(before.relay.start(job({ retain })).events);
    expect(before.settlements.entries).toHaveLength(1);
    expect(before.settlements.entries[0].usage).toMatchObject({ outputTokens: 0, costNanoUsd: 0 });
    expect(before.settlements.entries[0].idempotency).toBeUndefined();
  });

  it('ends with an error, not a whole answer, when the entry cannot be journaled', async () => {
    const { relay, settlements } = setupJournal(fakeEngine({ tokens: 2 }));
    settlements.failAppends(1);
    const handle = relay.start(job());
    const events = await collect(handle.events);
    const end = events.at(-1) as { type: 'end'; outcome: { finishReason: string; error?: { code: string } } };
    expect(end.outcome.finishReason).toBe('error');
    expect(end.outcome.error?.code).toBe('internal');
  });

  it('offers progress marks while it streams: tokens so far priced now, the running attempt last', async () => {
    const { relay, settlements } = setupJournal(fakeEngine({ tokens: 4 }));
    await collect(relay.start(job({ reservation: ref, retain })).events);
    const mark = settlements.progressMarks.get('gen_1');
    expect(mark).toMatchObject({ outputTokens: 4, inputTokens: 3, costNanoUsd: 3 * 1_000 + 4 * 2_000, reservation: ref, idempotencyKey: 'order-1', modelRevision: 'fake@1' });
    expect(mark?.attempts?.at(-1)).toMatchObject({ attempt: 1, revisionId: 'fake@1', replicaId: 'r0', outputTokens: 4 });
  });
});

describe('billedUsage', () => {
  it('bills only non-negative whole counts, whatever an adapter hands over', () => {
    const limits = { reservedInputTokens: 100, maxOutputTokens: 50 };
    expect(billedUsage({ usage: { inputTokens: -5, outputTokens: Number.NaN, cachedInputTokens: 2.7 }, source: 'reported' }, limits, false).usage).toEqual({ inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 });
    expect(billedUsage({ usage: { inputTokens: 10.9, outputTokens: Number.POSITIVE_INFINITY }, source: 'reported' }, limits, false).usage).toEqual({ inputTokens: 10, outputTokens: 50 });
  });
});

import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { GenerationOutcome } from '@weir/core';
import { commonV1, relayV1 } from '@weir/proto';
import { contractPlatformConfig, relayJob } from '@weir/testing';
import { makeGrpcServiceDefinition } from './index';
import { deltaFromWire, eventToWire, jobFromWire, jobToWire } from './relay-grpc';
import { callerFromWire, callerToWire, outcomeFromWire, outcomeToWire, revisionFromWire, revisionToWire } from './wire-common';

/** Encodes with `toWire`, through the binary format, and back. */
function viaWire<T, D extends Parameters<typeof create>[0]>(schema: D, toWire: (v: T) => Parameters<typeof create<D>>[1], fromWire: (m: never) => T, value: T): T {
  const bytes = toBinary(schema, create(schema, toWire(value)));
  return fromWire(fromBinary(schema, bytes) as never);
}

describe('wire translation', () => {
  it.each(contractPlatformConfig().revisions.map((r) => [r.id, r]))('round-trips revision %s with every field', (_id, revision) => {
    expect(viaWire(commonV1.RevisionSchema, revisionToWire, revisionFromWire, revision)).toEqual(revision);
  });

  it('carries the class prices of a revision, and leaves absent ones absent (their defaults apply where priced)', () => {
    const base = contractPlatformConfig().revisions[0];
    const priced = { ...base, pricing: { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3, cacheWriteInputPerMTok: 3.75, reasoningPerMTok: 20 } };
    expect(viaWire(commonV1.RevisionSchema, revisionToWire, revisionFromWire, priced).pricing).toEqual(priced.pricing);
    const plain = { ...base, pricing: { inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 1 } };
    expect(viaWire(commonV1.RevisionSchema, revisionToWire, revisionFromWire, plain).pricing).toEqual(plain.pricing);
  });

  it('carries every token class of an outcome, absent classes staying absent', () => {
    const outcome = (usage: GenerationOutcome['usage']): GenerationOutcome => ({ finishReason: 'stop', usage, costNanoUsd: 123, modelRevision: 'r@1', timings: { queueMs: 1, ttftMs: 2, totalMs: 3 } });
    const full = outcome({ inputTokens: 3_100, outputTokens: 500, cachedInputTokens: 2_000, cacheWriteInputTokens: 1_000, reasoningTokens: 400 });
    expect(viaWire(commonV1.GenerationOutcomeSchema, outcomeToWire, outcomeFromWire, full).usage).toEqual(full.usage);
    const bare = outcome({ inputTokens: 3, outputTokens: 4 });
    expect(viaWire(commonV1.GenerationOutcomeSchema, outcomeToWire, outcomeFromWire, bare).usage).toEqual(bare.usage);
  });

  it('carries the caller’s internal ids (split topology: admission and the relay file state under them, issue 14 §4), absent ones staying absent', () => {
    const withIds = { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1', tenantUid: 'acme~0123456789abcdef', appUid: 'web~fedcba9876543210' };
    expect(viaWire(commonV1.CallerSchema, callerToWire, callerFromWire, withIds)).toEqual(withIds);
    const legacy = viaWire(commonV1.CallerSchema, callerToWire, callerFromWire, { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' });
    expect(legacy).toEqual({ tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' });
    expect('tenantUid' in legacy).toBe(false);
    // Inside a relay job too: the usage record it settles names them.
    const clock = { now: () => 0 };
    const job = relayJob({ tokens: 1 }, { caller: withIds });
    const wire = fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(job, clock))));
    expect(jobFromWire(wire, clock).caller).toEqual(withIds);
  });

  it('carries an anthropic engine in its own oneof case, an absent key variable staying absent', () => {
    const claude = contractPlatformConfig().revisions.find((r) => r.engine.kind === 'anthropic');
    if (!claude || claude.engine.kind !== 'anthropic') throw new Error('the fixture has no anthropic revision');
    const { apiKeyEnv: _unset, ...engine } = claude.engine;
    const revision = { ...claude, engine };
    const wire = create(commonV1.RevisionSchema, revisionToWire(revision));
    expect(wire.engine.case).toBe('anthropic');
    expect(wire.engine.value).toMatchObject({ baseUrl: engine.baseUrl, upstreamModel: engine.upstreamModel, maxConcurrency: engine.maxConcurrency });
    const back = viaWire(commonV1.RevisionSchema, revisionToWire, revisionFromWire, revision);
    expect(back).toEqual(revision);
    expect('apiKeyEnv' in back.engine).toBe(false);
  });

  it.each<[string, GenerationOutcome]>([
    [
      'an error before the first token',
      {
        finishReason: 'error',
        usage: { inputTokens: 5, outputTokens: 0 },
        costNanoUsd: 500,
        timings: { queueMs: 1.5, ttftMs: null, totalMs: 20.25 },
        modelRevision: 'tiny@1',
        error: { code: 'upstream_unavailable', message: 'connection refused' },
      },
    ],
    [
      'an unrecorded attempt (a retryable failure before the first token)',
      {
        finishReason: 'error',
        usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
        costNanoUsd: 0,
        timings: { queueMs: 2, ttftMs: null, totalMs: 30 },
        modelRevision: 'hosted@1',
        error: { code: 'upstream_unavailable', message: 'upstream returned 503', retryAfterMs: 1_500, retryable: true },
        unrecorded: true,
      },
    ],
    [
      'a cached stop',
      {
        finishReason: 'stop',
        usage: { inputTokens: 50, outputTokens: 9, cachedInputTokens: 40 },
        costNanoUsd: 12_345_678_901,
        timings: { queueMs: 0, ttftMs: 3.25, totalMs: 40 },
        modelRevision: 'hosted@1',
      },
    ],
    ['a stop at a stop sequence', { finishReason: 'stop', stopSequence: 'END', usage: { inputTokens: 3, outputTokens: 2 }, costNanoUsd: 5, timings: { queueMs: 0, ttftMs: 1, totalMs: 2 }, modelRevision: 'r@1' }],
    [
      'a fallback that answered, with its usage source and every attempt',
      {
        finishReason: 'cancelled',
        usage: { inputTokens: 7, outputTokens: 5 },
        costNanoUsd: 17,
        timings: { queueMs: 0, ttftMs: 12.5, totalMs: 90 },
        modelRevision: 'second@1',
        usageSource: 'counted',
        attempts: [
          { attempt: 1, revisionId: 'first@1', provider: 'openai-compatible', replicaId: 'first@1/0', outcome: 'failed', errorCode: 'upstream_unavailable', startedAtMs: 1_760_000_000_000, ttftMs: null, durationMs: 4, inputTokens: 7, outputTokens: 0 },
          { attempt: 2, revisionId: 'second@1', provider: 'anthropic', replicaId: 'second@1/0', outcome: 'answered', startedAtMs: 1_760_000_000_060, ttftMs: 12, durationMs: 30, inputTokens: 7, outputTokens: 5 },
        ],
      },
    ],
  ])('round-trips the outcome of %s', (_name, outcome) => {
    expect(viaWire(commonV1.GenerationOutcomeSchema, outcomeToWire, outcomeFromWire, outcome)).toEqual(outcome);
  });

  it('rebases a job on the receiver clock', () => {
    const job = relayJob({ tokens: 1 }, { arrivedAt: 1_000, deadlineAt: 6_000 });
    const sender = { now: () => 2_000 };
    const receiver = { now: () => 90_000 };
    const wire = fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(job, sender))));
    expect(jobFromWire(wire, receiver)).toEqual({ ...job, arrivedAt: 89_000, deadlineAt: 94_000 });
  });

  it('carries the prior attempts of a job (none when it has none)', () => {
    const clock = { now: () => 0 };
    const roundTrip = (job: ReturnType<typeof relayJob>) =>
      jobFromWire(fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(job, clock)))), clock);
    const priorAttempts = [
      { attempt: 1, revisionId: 'a@1', provider: 'openai-compatible', outcome: 'failed' as const, errorCode: 'engine_unavailable', startedAtMs: 1_760_000_000_000, ttftMs: null, durationMs: 2, inputTokens: 0, outputTokens: 0 },
    ];
    expect(roundTrip(relayJob({ tokens: 1 }, { priorAttempts })).priorAttempts).toEqual(priorAttempts);
    expect(roundTrip(relayJob({ tokens: 1 }))).not.toHaveProperty('priorAttempts');
  });

  it('carries the use case when the job has one, and none when it has none', () => {
    const clock = { now: () => 0 };
    const roundTrip = (job: ReturnType<typeof relayJob>) =>
      jobFromWire(fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(job, clock)))), clock);
    expect(roundTrip(relayJob({ tokens: 1 }, { useCase: 'support:triage-v2' })).useCase).toBe('support:triage-v2');
    expect(roundTrip(relayJob({ tokens: 1 }))).not.toHaveProperty('useCase');
  });

  it('carries an output schema as JSON, and rejects one that is not a JSON object', () => {
    const clock = { now: () => 0 };
    const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
    const job = relayJob({ tokens: 1 });
    const withSchema = { ...job, engineRequest: { ...job.engineRequest, outputSchema: schema } };
    const wire = create(relayV1.RelayJobSchema, jobToWire(withSchema, clock));
    expect(jobFromWire(fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, wire)), clock).engineRequest.outputSchema).toEqual(schema);
    expect(jobFromWire(create(relayV1.RelayJobSchema, jobToWire(job, clock)), clock).engineRequest).not.toHaveProperty('outputSchema');
    const bad = create(relayV1.RelayJobSchema, jobToWire(job, clock));
    if (bad.engineRequest) bad.engineRequest.outputSchemaJson = '[1, 2]';
    expect(() => jobFromWire(bad, clock)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });

  it('carries tools, tool_choice, parallel_tool_calls and tool-call chat messages, and rejects malformed tools', () => {
    const clock = { now: () => 0 };
    const job = relayJob({ tokens: 1 });
    const tools = [{ type: 'function' as const, function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const messages = [
      { role: 'user' as const, content: 'weather in Paris?' },
      { role: 'assistant' as const, content: '', toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
      { role: 'tool' as const, content: '{"temp":21}', toolCallId: 'call_1' },
    ];
    const withTools = { ...job, engineRequest: { ...job.engineRequest, input: { kind: 'chat' as const, messages }, tools, toolChoice: { type: 'function' as const, function: { name: 'get_weather' } }, parallelToolCalls: false, anthropicBeta: ['context-1m-2025-08-07', 'fine-grained-tool-streaming-2025-05-14'] } };
    const back = jobFromWire(fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(withTools, clock)))), clock);
    expect(back.engineRequest).toMatchObject({ input: { kind: 'chat', messages }, tools, toolChoice: { type: 'function', function: { name: 'get_weather' } }, parallelToolCalls: false, anthropicBeta: ['context-1m-2025-08-07', 'fine-grained-tool-streaming-2025-05-14'] });
    expect(back.engineRequest.input).toEqual({ kind: 'chat', messages });
    const plain = jobFromWire(create(relayV1.RelayJobSchema, jobToWire(job, clock)), clock).engineRequest;
    expect(plain).not.toHaveProperty('tools');
    expect(plain).not.toHaveProperty('toolChoice');
    expect(plain).not.toHaveProperty('parallelToolCalls');
    expect(plain).not.toHaveProperty('anthropicBeta');
    for (const [field, value] of [['toolsJson', '{"type":"function"}'], ['toolsJson', 'not json'], ['toolChoiceJson', '"sometimes"']] as const) {
      const bad = create(relayV1.RelayJobSchema, jobToWire(job, clock));
      if (bad.engineRequest) bad.engineRequest[field] = value;
      expect(() => jobFromWire(bad, clock)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
    }
  });

  it('round-trips tool-call deltas in order, and a text-only delta without them', () => {
    const roundTrip = (ev: Parameters<typeof eventToWire>[0]) => {
      const m = fromBinary(relayV1.GenerateResponseSchema, toBinary(relayV1.GenerateResponseSchema, eventToWire(ev)));
      if (m.event.case !== 'delta') throw new Error('not a delta');
      return deltaFromWire(m.event.value);
    };
    const delta = {
      type: 'delta' as const,
      text: 'ok',
      tokens: 2,
      toolCalls: [{ index: 0, argumentsDelta: '"}' }, { index: 1, id: 'call_2', name: 'now', argumentsDelta: '' }, { index: 1, argumentsDelta: '{}' }],
    };
    expect(roundTrip(delta)).toEqual(delta);
    expect(roundTrip({ type: 'delta', text: 'plain', tokens: 1 })).toEqual({ type: 'delta', text: 'plain', tokens: 1 });
  });

  it('round-trips the tool_calls finish reason', () => {
    const outcome: GenerationOutcome = {
      finishReason: 'tool_calls',
      usage: { inputTokens: 5, outputTokens: 9, cachedInputTokens: 0 },
      costNanoUsd: 100,
      timings: { queueMs: 1, ttftMs: 2, totalMs: 3 },
      modelRevision: 'tiny@1',
    };
    expect(viaWire(commonV1.GenerationOutcomeSchema, outcomeToWire, outcomeFromWire, outcome).finishReason).toBe('tool_calls');
  });

  it('carries the retry-before-first-token flag when set, and nothing when not', () => {
    const clock = { now: () => 0 };
    const roundTrip = (job: ReturnType<typeof relayJob>) =>
      jobFromWire(fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(job, clock)))), clock);
    expect(roundTrip(relayJob({ tokens: 1 }, { retryBeforeFirstToken: true })).retryBeforeFirstToken).toBe(true);
    expect(roundTrip(relayJob({ tokens: 1 }))).not.toHaveProperty('retryBeforeFirstToken');
  });

  it('carries the internal flag (the semantic cache\'s own embeddings) when set, and nothing when not', () => {
    const clock = { now: () => 0 };
    const roundTrip = (job: ReturnType<typeof relayJob>) =>
      jobFromWire(fromBinary(relayV1.RelayJobSchema, toBinary(relayV1.RelayJobSchema, create(relayV1.RelayJobSchema, jobToWire(job, clock)))), clock);
    expect(roundTrip(relayJob({ tokens: 1 }, { internal: true })).internal).toBe(true);
    expect(roundTrip(relayJob({ tokens: 1 }))).not.toHaveProperty('internal');
  });

  it('rejects a job with no engine request as invalid_request', () => {
    const wire = create(relayV1.RelayJobSchema, { ...jobToWire(relayJob({ tokens: 1 }), { now: () => 0 }), engineRequest: undefined });
    expect(() => jobFromWire(wire, { now: () => 0 })).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });

  it('builds grpc-js definitions from descriptors', () => {
    const def = makeGrpcServiceDefinition(relayV1.RelayService);
    expect(Object.keys(def).sort()).toEqual(['generate', 'stop']);
    expect(def.generate).toMatchObject({ path: '/weir.relay.v1.RelayService/Generate', requestStream: false, responseStream: true });
    expect(def.stop).toMatchObject({ path: '/weir.relay.v1.RelayService/Stop', requestStream: false, responseStream: false });
    const request = create(relayV1.StopRequestSchema, { generationId: 'gen_1', cause: relayV1.StopCause.CLIENT_DISCONNECTED });
    expect(def.stop.requestDeserialize(def.stop.requestSerialize(request))).toEqual(request);
  });
});

/**
 * Translation between `@weir/core` types and `weir.common.v1` messages. Decoders validate
 * what the peer sent and throw `WeirError('invalid_request')` on a message that cannot be a
 * core value (a missing required message, an UNSPECIFIED enum), which the server answers
 * with INVALID_ARGUMENT. Absent optional fields decode to absent properties, not `undefined`
 * values, so values round-trip with deep equality.
 */
import { type MessageInitShape, create } from '@bufbuild/protobuf';
import {
  type AliasSpec,
  type Caller,
  type EngineSpec,
  type FinishReason,
  type GenerationOutcome,
  type AttemptOutcome,
  type ReservationRef,
  type RevisionSpec,
  type TokenizerName,
  type TokenUsage,
  type UpstreamAttempt,
  type UsageSource,
  WeirError,
} from '@weir/core';
import { commonV1 } from '@weir/proto';

/** Throws the decoding error for a malformed message. */
export function malformed(what: string): never {
  throw new WeirError('invalid_request', `malformed gRPC message: ${what}`);
}

/** Returns `value` or throws when a required sub-message is absent. */
export function required<T>(value: T | undefined, what: string): T {
  return value === undefined ? malformed(`${what} is missing`) : value;
}

/** Copies the keys of `source` whose value is not undefined. */
export function defined<T extends object>(source: T): T {
  const out: Partial<T> = {};
  for (const key of Object.keys(source) as (keyof T)[]) if (source[key] !== undefined) out[key] = source[key];
  return out as T;
}

/** nano-USD (integer) → int64. */
export function toNanoUsd(value: number): bigint {
  return BigInt(Math.round(value));
}

export function callerToWire(caller: Caller): MessageInitShape<typeof commonV1.CallerSchema> {
  return { tenantId: caller.tenantId, appId: caller.appId, apiKeyId: caller.apiKeyId, tenantUid: caller.tenantUid, appUid: caller.appUid };
}

/** A reservation's holds → wire. */
export function reservationToWire(ref: ReservationRef): MessageInitShape<typeof commonV1.ReservationRefSchema> {
  return {
    reservationId: ref.reservationId,
    worstCaseNano: toNanoUsd(ref.worstCaseNano),
    monthStartsOn: ref.monthStartsOn,
    dayStartsOn: ref.dayStartsOn,
    leaseIds: [...ref.leaseIds],
    ...(ref.useCase !== undefined ? { useCase: ref.useCase } : {}),
  };
}

/** Wire → a reservation's holds; `invalid_request` when it names no reservation or no periods. */
export function reservationFromWire(ref: commonV1.ReservationRef): ReservationRef {
  if (ref.reservationId.length === 0 || ref.monthStartsOn.length === 0 || ref.dayStartsOn.length === 0) malformed('reservation ref without its id or periods');
  return {
    reservationId: ref.reservationId,
    worstCaseNano: Number(ref.worstCaseNano),
    monthStartsOn: ref.monthStartsOn,
    dayStartsOn: ref.dayStartsOn,
    leaseIds: [...ref.leaseIds],
    ...(ref.useCase !== undefined ? { useCase: ref.useCase } : {}),
  };
}

export function callerFromWire(caller: commonV1.Caller | undefined): Caller {
  const c = required(caller, 'caller');
  return {
    tenantId: c.tenantId,
    appId: c.appId,
    apiKeyId: c.apiKeyId,
    ...(c.tenantUid !== undefined ? { tenantUid: c.tenantUid } : {}),
    ...(c.appUid !== undefined ? { appUid: c.appUid } : {}),
  };
}

function engineToWire(engine: EngineSpec): commonV1.Revision['engine'] {
  switch (engine.kind) {
    case 'llamacpp':
      return {
        case: 'llamacpp',
        value: create(commonV1.LlamaCppEngineSchema, {
          modelPath: engine.modelPath,
          modelSha256: engine.modelSha256,
          modelUrl: engine.modelUrl,
          threads: engine.threads,
          sequences: engine.sequences,
          contextSize: engine.contextSize,
          testTokenDelayMs: engine.testTokenDelayMs,
        }),
      };
    case 'openai-compatible':
      return {
        case: 'openaiCompatible',
        value: create(commonV1.OpenAiCompatibleEngineSchema, {
          baseUrl: engine.baseUrl,
          upstreamModel: engine.upstreamModel,
          apiKeyEnv: engine.apiKeyEnv,
          api: engine.api === 'chat' ? commonV1.UpstreamApi.CHAT : commonV1.UpstreamApi.COMPLETIONS,
          firstTokenTimeoutMs: engine.firstTokenTimeoutMs,
          idleTimeoutMs: engine.idleTimeoutMs,
          maxConcurrency: engine.maxConcurrency,
          continuousUsageStats: engine.continuousUsageStats,
          tokenizer: engine.tokenizer,
        }),
      };
    case 'anthropic':
      return {
        case: 'anthropic',
        value: create(commonV1.AnthropicEngineSchema, {
          baseUrl: engine.baseUrl,
          upstreamModel: engine.upstreamModel,
          apiKeyEnv: engine.apiKeyEnv,
          firstTokenTimeoutMs: engine.firstTokenTimeoutMs,
          idleTimeoutMs: engine.idleTimeoutMs,
          maxConcurrency: engine.maxConcurrency,
          tokenizer: engine.tokenizer,
        }),
      };
    case 'simulated':
      return {
        case: 'simulated',
        value: create(commonV1.SimulatedEngineSchema, {
          prefillTokensPerSecond: engine.prefillTokensPerSecond,
          decodeStepMs: engine.decodeStepMs.map(([batch, ms]) => ({ batch, ms })),
          kvTokens: engine.kvTokens,
          maxSequences: engine.maxSequences,
          seed: engine.seed,
        }),
      };
  }
}

const TOKENIZERS: readonly TokenizerName[] = ['o200k_base', 'cl100k_base', 'none'];

/** Decodes an engine's `tokenizer`: absent stays absent; an unknown name is malformed. */
function tokenizerFromWire(name: string | undefined): TokenizerName | undefined {
  if (name === undefined) return undefined;
  return (TOKENIZERS as readonly string[]).includes(name) ? (name as TokenizerName) : malformed(`engine.tokenizer ${JSON.stringify(name)} is unknown`);
}

function engineFromWire(engine: commonV1.Revision['engine']): EngineSpec {
  switch (engine.case) {
    case 'llamacpp': {
      const e = engine.value;
      return defined({
        kind: 'llamacpp' as const,
        modelPath: e.modelPath,
        modelSha256: e.modelSha256,
        modelUrl: e.modelUrl,
        threads: e.threads,
        sequences: e.sequences,
        contextSize: e.contextSize,
        testTokenDelayMs: e.testTokenDelayMs,
      });
    }
    case 'openaiCompatible': {
      const e = engine.value;
      if (e.api === commonV1.UpstreamApi.UNSPECIFIED) malformed('openai_compatible.api is unspecified');
      return defined({
        kind: 'openai-compatible' as const,
        baseUrl: e.baseUrl,
        upstreamModel: e.upstreamModel,
        apiKeyEnv: e.apiKeyEnv,
        api: e.api === commonV1.UpstreamApi.CHAT ? ('chat' as const) : ('completions' as const),
        firstTokenTimeoutMs: e.firstTokenTimeoutMs,
        idleTimeoutMs: e.idleTimeoutMs,
        maxConcurrency: e.maxConcurrency,
        continuousUsageStats: e.continuousUsageStats,
        tokenizer: tokenizerFromWire(e.tokenizer),
      });
    }
    case 'anthropic': {
      const e = engine.value;
      return defined({
        kind: 'anthropic' as const,
        baseUrl: e.baseUrl,
        upstreamModel: e.upstreamModel,
        apiKeyEnv: e.apiKeyEnv,
        firstTokenTimeoutMs: e.firstTokenTimeoutMs,
        idleTimeoutMs: e.idleTimeoutMs,
        maxConcurrency: e.maxConcurrency,
        tokenizer: tokenizerFromWire(e.tokenizer),
      });
    }
    case 'simulated': {
      const e = engine.value;
      return {
        kind: 'simulated' as const,
        prefillTokensPerSecond: e.prefillTokensPerSecond,
        decodeStepMs: e.decodeStepMs.map((p): [number, number] => [p.batch, p.ms]),
        kvTokens: e.kvTokens,
        maxSequences: e.maxSequences,
        seed: e.seed,
      };
    }
    case undefined:
      return malformed('revision.engine is missing');
  }
}

export function revisionToWire(revision: RevisionSpec): MessageInitShape<typeof commonV1.RevisionSchema> {
  return {
    id: revision.id,
    model: revision.model,
    engine: engineToWire(revision.engine),
    contextWindow: revision.contextWindow,
    maxOutputTokens: revision.maxOutputTokens,
    defaultOutputTokens: revision.defaultOutputTokens,
    pricing: {
      inputUsdPerMtok: revision.pricing.inputPerMTok,
      outputUsdPerMtok: revision.pricing.outputPerMTok,
      cachedInputUsdPerMtok: revision.pricing.cachedInputPerMTok,
      cacheWriteInputUsdPerMtok: revision.pricing.cacheWriteInputPerMTok,
      reasoningUsdPerMtok: revision.pricing.reasoningPerMTok,
    },
    replicas: (revision.replicas ?? []).map((r) => ({ id: r.id, baseUrl: r.baseUrl, slots: r.slots })),
    ...(revision.capabilities ? { capabilities: { ...revision.capabilities } } : {}),
  };
}

/** Decodes a revision; an empty replica list decodes to an absent `replicas`. */
export function revisionFromWire(revision: commonV1.Revision | undefined, what = 'revision'): RevisionSpec {
  const r = required(revision, what);
  const pricing = required(r.pricing, `${what}.pricing`);
  return {
    id: r.id,
    model: r.model,
    engine: engineFromWire(r.engine),
    contextWindow: r.contextWindow,
    maxOutputTokens: r.maxOutputTokens,
    defaultOutputTokens: r.defaultOutputTokens,
    pricing: defined({
      inputPerMTok: pricing.inputUsdPerMtok,
      outputPerMTok: pricing.outputUsdPerMtok,
      cachedInputPerMTok: pricing.cachedInputUsdPerMtok,
      cacheWriteInputPerMTok: pricing.cacheWriteInputUsdPerMtok,
      reasoningPerMTok: pricing.reasoningUsdPerMtok,
    }),
    ...(r.replicas.length > 0 ? { replicas: r.replicas.map((e) => ({ id: e.id, baseUrl: e.baseUrl, slots: e.slots })) } : {}),
    ...(r.capabilities ? { capabilities: { streaming: r.capabilities.streaming, tools: r.capabilities.tools, jsonOutput: r.capabilities.jsonOutput } } : {}),
  };
}

export function aliasToWire(alias: AliasSpec): MessageInitShape<typeof commonV1.AliasSchema> {
  return {
    name: alias.name,
    targets: alias.targets.map((t) => ({ revisionId: t.revision, weight: t.weight })),
    description: alias.description,
    fallbacks: alias.fallbacks ? [...alias.fallbacks] : [],
  };
}

export function aliasFromWire(alias: commonV1.Alias | undefined): AliasSpec {
  const a = required(alias, 'alias');
  return defined({
    name: a.name,
    targets: a.targets.map((t) => ({ revision: t.revisionId, weight: t.weight })),
    description: a.description,
    fallbacks: a.fallbacks.length > 0 ? [...a.fallbacks] : undefined,
  });
}

export function usageToWire(usage: TokenUsage): MessageInitShape<typeof commonV1.TokenUsageSchema> {
  return {
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    cachedInputTokens: usage.cachedInputTokens,
    cacheWriteInputTokens: usage.cacheWriteInputTokens,
    reasoningTokens: usage.reasoningTokens,
  };
}

export function usageFromWire(usage: commonV1.TokenUsage | undefined): TokenUsage {
  const u = required(usage, 'usage');
  return defined({
    inputTokens: u.inputTokens,
    outputTokens: u.outputTokens,
    cachedInputTokens: u.cachedInputTokens,
    cacheWriteInputTokens: u.cacheWriteInputTokens,
    reasoningTokens: u.reasoningTokens,
  });
}

const FINISH_REASONS: Record<FinishReason, commonV1.FinishReason> = {
  stop: commonV1.FinishReason.STOP,
  length: commonV1.FinishReason.LENGTH,
  cancelled: commonV1.FinishReason.CANCELLED,
  deadline: commonV1.FinishReason.DEADLINE,
  error: commonV1.FinishReason.ERROR,
  content_filter: commonV1.FinishReason.CONTENT_FILTER,
  tool_calls: commonV1.FinishReason.TOOL_CALLS,
};

/** Decodes a wire enum through the inverse of an exhaustive core → wire table. */
export function enumFromWire<K extends string, V extends number>(table: Record<K, V>, value: V, what: string): K {
  for (const key of Object.keys(table) as K[]) if (table[key] === value) return key;
  return malformed(`${what} is unspecified or unknown (${value})`);
}

export function outcomeToWire(outcome: GenerationOutcome): MessageInitShape<typeof commonV1.GenerationOutcomeSchema> {
  return {
    finishReason: FINISH_REASONS[outcome.finishReason],
    usage: usageToWire(outcome.usage),
    costNanoUsd: toNanoUsd(outcome.costNanoUsd),
    timings: {
      queueMs: outcome.timings.queueMs,
      ttftMs: outcome.timings.ttftMs ?? undefined,
      totalMs: outcome.timings.totalMs,
    },
    modelRevision: outcome.modelRevision,
    error: outcome.error
      ? {
          code: outcome.error.code,
          message: outcome.error.message,
          ...(outcome.error.retryAfterMs !== undefined ? { retryAfterMs: Math.max(0, Math.round(outcome.error.retryAfterMs)) } : {}),
          retryable: outcome.error.retryable === true,
        }
      : undefined,
    unrecorded: outcome.unrecorded === true,
    usageSource: outcome.usageSource !== undefined ? USAGE_SOURCES[outcome.usageSource] : commonV1.UsageSource.UNSPECIFIED,
    attempts: (outcome.attempts ?? []).map(attemptToWire),
    ...(outcome.stopSequence !== undefined ? { stopSequence: outcome.stopSequence } : {}),
  };
}

const USAGE_SOURCES: Record<UsageSource, commonV1.UsageSource> = {
  reported: commonV1.UsageSource.REPORTED,
  counted: commonV1.UsageSource.COUNTED,
  estimated: commonV1.UsageSource.ESTIMATED,
};

const ATTEMPT_OUTCOMES: Record<AttemptOutcome, commonV1.AttemptOutcome> = {
  answered: commonV1.AttemptOutcome.ANSWERED,
  failed: commonV1.AttemptOutcome.FAILED,
};

export function attemptToWire(a: UpstreamAttempt): MessageInitShape<typeof commonV1.UpstreamAttemptSchema> {
  return {
    attempt: a.attempt,
    revisionId: a.revisionId,
    provider: a.provider,
    replicaId: a.replicaId,
    outcome: ATTEMPT_OUTCOMES[a.outcome],
    errorCode: a.errorCode,
    startedAtUnixMs: BigInt(Math.round(a.startedAtMs)),
    ttftMs: a.ttftMs ?? undefined,
    durationMs: a.durationMs,
    inputTokens: a.inputTokens,
    outputTokens: a.outputTokens,
  };
}

export function attemptFromWire(a: commonV1.UpstreamAttempt): UpstreamAttempt {
  return defined({
    attempt: a.attempt,
    revisionId: a.revisionId,
    provider: a.provider,
    replicaId: a.replicaId,
    outcome: enumFromWire(ATTEMPT_OUTCOMES, a.outcome, 'attempt.outcome'),
    errorCode: a.errorCode,
    startedAtMs: Number(a.startedAtUnixMs),
    ttftMs: a.ttftMs ?? null,
    durationMs: a.durationMs,
    inputTokens: a.inputTokens,
    outputTokens: a.outputTokens,
  });
}

export function outcomeFromWire(outcome: commonV1.GenerationOutcome | undefined): GenerationOutcome {
  const o = required(outcome, 'outcome');
  const timings = required(o.timings, 'outcome.timings');
  return {
    finishReason: enumFromWire(FINISH_REASONS, o.finishReason, 'outcome.finish_reason'),
    usage: usageFromWire(o.usage),
    costNanoUsd: Number(o.costNanoUsd),
    timings: { queueMs: timings.queueMs, ttftMs: timings.ttftMs ?? null, totalMs: timings.totalMs },
    modelRevision: o.modelRevision,
    ...(o.error
      ? {
          error: {
            code: o.error.code,
            message: o.error.message,
            ...(o.error.retryAfterMs !== undefined ? { retryAfterMs: o.error.retryAfterMs } : {}),
            ...(o.error.retryable ? { retryable: true } : {}),
          },
        }
      : {}),
    ...(o.unrecorded ? { unrecorded: true } : {}),
    // An older relay sends no source: its counts were the engine's or the byte bound, as before.
    ...(o.usageSource !== commonV1.UsageSource.UNSPECIFIED ? { usageSource: enumFromWire(USAGE_SOURCES, o.usageSource, 'outcome.usage_source') } : {}),
    ...(o.attempts.length > 0 ? { attempts: o.attempts.map(attemptFromWire) } : {}),
    ...(o.stopSequence !== undefined ? { stopSequence: o.stopSequence } : {}),
  };
}

/**
 * `RelayService` over gRPC (`weir.relay.v1.RelayService`): Generate is a server stream of
 * deltas then exactly one end; Stop reaches a running generation by id.
 */
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  type ApiRoute,
  type ChatRole,
  type Clock,
  type GenerationInput,
  type GenerationOutcome,
  type RelayEvent,
  type RelayHandle,
  type RelayJob,
  type RelayService,
  type SamplingParams,
  type StopCause,
  type TokenUsage,
  type UpstreamAttempt,
  type ToolCallDelta,
  type ToolChoice,
  type ToolDefinition,
  WeirError,
  createAsyncQueue,
  systemClock,
} from '@weir/core';
import { priceUsage } from '@weir/ledger';
import { relayV1 } from '@weir/proto';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { type GrpcClientOptions, createGrpcConnection, isServiceError } from './client-connection';
import { toGrpcError, weirCodeOf, fromGrpcError } from './grpc-errors';
import { type GrpcServerBindingOptions, type GrpcServiceBinding, bindService, unaryHandler } from './server-handlers';
import { decodeGenerateResponse, encodeGenerateResponse, plainDelta } from './generate-codec';
import { grpcMethodPath, serializerFor } from './service-definition';
import { injectTraceContext, runInServerSpan } from './trace-context';
import {
  callerFromWire,
  callerToWire,
  defined,
  enumFromWire,
  malformed,
  outcomeFromWire,
  outcomeToWire,
  required,
  revisionFromWire,
  revisionToWire,
  attemptFromWire,
  attemptToWire,
  reservationFromWire,
  reservationToWire,
} from './wire-common';

const ROUTES: Record<ApiRoute, relayV1.ApiRoute> = {
  generations: relayV1.ApiRoute.GENERATIONS,
  'chat.completions': relayV1.ApiRoute.CHAT_COMPLETIONS,
  completions: relayV1.ApiRoute.COMPLETIONS,
  embeddings: relayV1.ApiRoute.EMBEDDINGS,
};

const ROLES: Record<ChatRole, relayV1.ChatRole> = {
  system: relayV1.ChatRole.SYSTEM,
  developer: relayV1.ChatRole.DEVELOPER,
  user: relayV1.ChatRole.USER,
  assistant: relayV1.ChatRole.ASSISTANT,
  tool: relayV1.ChatRole.TOOL,
};

const STOP_CAUSES: Record<StopCause, relayV1.StopCause> = {
  client_disconnected: relayV1.StopCause.CLIENT_DISCONNECTED,
  cancel_requested: relayV1.StopCause.CANCEL_REQUESTED,
  input_flagged: relayV1.StopCause.INPUT_FLAGGED,
};

/**
 * A generation outcome the gateway's relay client made up because the relay was lost: the
 * counts are Weir's best knowledge (the tokens relayed before the stream broke), not the
 * relay's measurement, and the relay could not record usage (the caller records it, marked
 * uncertain, for reconciliation).
 */
export type RelayLostOutcome = GenerationOutcome & { relayLost: true };

/**
 * True when `outcome` was synthesized by the relay gRPC client because the stream broke
 * before its end event (relay killed, connection lost, stream deadline): `finishReason`
 * `error`, error code `upstream_error`, usage = input tokens of the job plus the output
 * tokens relayed so far (nothing at all when no output was relayed: a failure before any
 * output bills nothing), priced at the job's revision, `usageSource: estimated`,
 * `relayLost: true`, and the job's attempts with this one last.
 */
export function isRelayLost(outcome: GenerationOutcome): outcome is RelayLostOutcome {
  return outcome.relayLost === true;
}

function inputToWire(input: GenerationInput): relayV1.EngineRequest['input'] {
  if (input.kind === 'embedding') {
    return {
      case: 'embedding',
      value: create(relayV1.EmbeddingInputSchema, {
        items: input.items.map((item) => ({ item: typeof item === 'string' ? { case: 'text' as const, value: item } : { case: 'tokens' as const, value: { ids: item } } })),
        dimensions: input.dimensions,
      }),
    };
  }
  return input.kind === 'text'
    ? { case: 'text', value: input.text }
    : {
        case: 'chat',
        value: create(relayV1.ChatInputSchema, {
          messages: input.messages.map((m) => ({
            role: ROLES[m.role],
            content: m.content,
            name: m.name,
            toolCalls: m.toolCalls ?? [],
            toolCallId: m.toolCallId,
          })),
        }),
      };
}

function inputFromWire(input: relayV1.EngineRequest['input']): GenerationInput {
  switch (input.case) {
    case 'text':
      return { kind: 'text', text: input.value };
    case 'chat':
      return {
        kind: 'chat',
        messages: input.value.messages.map((m) =>
          defined({
            role: enumFromWire(ROLES, m.role, 'message.role'),
            content: m.content,
            name: m.name,
            toolCalls: m.toolCalls.length > 0 ? m.toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })) : undefined,
            toolCallId: m.toolCallId,
          }),
        ),
      };
    case 'embedding':
      return defined({
        kind: 'embedding' as const,
        items: input.value.items.map((i) => (i.item.case === 'text' ? i.item.value : i.item.case === 'tokens' ? [...i.item.value.ids] : malformed('engine_request.input.embedding item is empty'))),
        dimensions: input.value.dimensions,
      });
    case undefined:
      return malformed('engine_request.input is missing');
  }
}

function samplingToWire(s: SamplingParams): MessageInitShape<typeof relayV1.SamplingSchema> {
  return { temperature: s.temperature, topP: s.topP, seed: s.seed === undefined ? undefined : BigInt(s.seed), stop: s.stop ?? [] };
}

function samplingFromWire(s: relayV1.Sampling | undefined): SamplingParams {
  if (!s) return {};
  return defined({
    temperature: s.temperature,
    topP: s.topP,
    seed: s.seed === undefined ? undefined : Number(s.seed),
    stop: s.stop.length > 0 ? [...s.stop] : undefined,
  });
}

/** Encodes a job; absolute times become durations from now on `clock`. */
export function jobToWire(job: RelayJob, clock: Clock): MessageInitShape<typeof relayV1.RelayJobSchema> {
  const now = clock.now();
  return {
    generationId: job.generationId,
    requestId: job.requestId,
    route: ROUTES[job.route],
    caller: callerToWire(job.caller),
    modelAlias: job.modelAlias,
    revision: revisionToWire(job.revision),
    replicaId: job.replicaId,
    engineRequest: {
      input: inputToWire(job.engineRequest.input),
      maxOutputTokens: job.engineRequest.maxOutputTokens,
      sampling: samplingToWire(job.engineRequest.sampling),
      ...(job.engineRequest.outputSchema !== undefined ? { outputSchemaJson: JSON.stringify(job.engineRequest.outputSchema) } : {}),
      ...(job.engineRequest.tools !== undefined ? { toolsJson: JSON.stringify(job.engineRequest.tools) } : {}),
      ...(job.engineRequest.toolChoice !== undefined ? { toolChoiceJson: JSON.stringify(job.engineRequest.toolChoice) } : {}),
      ...(job.engineRequest.parallelToolCalls !== undefined ? { parallelToolCalls: job.engineRequest.parallelToolCalls } : {}),
      ...(job.engineRequest.anthropicBeta !== undefined ? { anthropicBeta: job.engineRequest.anthropicBeta } : {}),
    },
    arrivedMsAgo: Math.max(0, now - job.arrivedAt),
    deadlineInMs: Math.max(0, job.deadlineAt - now),
    queueMs: job.queueMs,
    inputTokens: job.inputTokens,
    ...(job.useCase !== undefined ? { useCase: job.useCase } : {}),
    retryBeforeFirstToken: job.retryBeforeFirstToken === true,
    internal: job.internal === true,
    priorAttempts: (job.priorAttempts ?? []).map(attemptToWire),
    ...(job.reservation ? { reservation: reservationToWire(job.reservation) } : {}),
    ...(job.retain
      ? {
          retain: {
            key: job.retain.key,
            bodySha256: job.retain.bodySha256,
            createdS: BigInt(Math.floor(job.retain.createdS)),
            retainUntilUnixMs: BigInt(Math.round(job.retain.retainUntilMs)),
          },
        }
      : {}),
  };
}

/** Decodes `output_schema_json`: a JSON object, else `invalid_request`. */
function outputSchemaFromWire(json: string): object {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return malformed('job.engine_request.output_schema_json is not JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return malformed('job.engine_request.output_schema_json is not a JSON object');
  return value;
}

/** Decodes `tools_json`: a JSON array of function tools (validated by the gateway), else `invalid_request`. */
function toolsFromWire(json: string): ToolDefinition[] {
  const value = parseJson(json, 'tools_json');
  if (!Array.isArray(value) || !value.every((t) => t !== null && typeof t === 'object' && (t as { type?: unknown }).type === 'function')) {
    return malformed('job.engine_request.tools_json is not an array of function tools');
  }
  return value as ToolDefinition[];
}

/** Decodes `tool_choice_json`: `none`/`auto`/`required` or `{type: "function", function: {name}}`, else `invalid_request`. */
function toolChoiceFromWire(json: string): ToolChoice {
  const value = parseJson(json, 'tool_choice_json');
  if (value === 'none' || value === 'auto' || value === 'required') return value;
  const name = (value as { function?: { name?: unknown } } | null)?.function?.name;
  if (value !== null && typeof value === 'object' && (value as { type?: unknown }).type === 'function' && typeof name === 'string') {
    return { type: 'function', function: { name } };
  }
  return malformed('job.engine_request.tool_choice_json is not a tool choice');
}

function parseJson(json: string, field: string): unknown {
  try {
    return JSON.parse(json) as unknown;
  } catch {
    return malformed(`job.engine_request.${field} is not JSON`);
  }
}

/** Decodes a job, rebasing its durations on `clock`. */
export function jobFromWire(wire: relayV1.RelayJob | undefined, clock: Clock): RelayJob {
  const job = required(wire, 'job');
  const engineRequest = required(job.engineRequest, 'job.engine_request');
  const now = clock.now();
  return {
    generationId: job.generationId,
    requestId: job.requestId,
    route: enumFromWire(ROUTES, job.route, 'job.route'),
    caller: callerFromWire(job.caller),
    modelAlias: job.modelAlias,
    revision: revisionFromWire(job.revision, 'job.revision'),
    replicaId: job.replicaId,
    engineRequest: {
      input: inputFromWire(engineRequest.input),
      maxOutputTokens: engineRequest.maxOutputTokens,
      sampling: samplingFromWire(engineRequest.sampling),
      ...(engineRequest.outputSchemaJson !== undefined ? { outputSchema: outputSchemaFromWire(engineRequest.outputSchemaJson) } : {}),
      ...(engineRequest.toolsJson !== undefined ? { tools: toolsFromWire(engineRequest.toolsJson) } : {}),
      ...(engineRequest.toolChoiceJson !== undefined ? { toolChoice: toolChoiceFromWire(engineRequest.toolChoiceJson) } : {}),
      ...(engineRequest.parallelToolCalls !== undefined ? { parallelToolCalls: engineRequest.parallelToolCalls } : {}),
      ...(engineRequest.anthropicBeta.length > 0 ? { anthropicBeta: [...engineRequest.anthropicBeta] } : {}),
    },
    arrivedAt: now - job.arrivedMsAgo,
    deadlineAt: now + job.deadlineInMs,
    queueMs: job.queueMs,
    inputTokens: job.inputTokens,
    ...(job.useCase !== undefined ? { useCase: job.useCase } : {}),
    ...(job.retryBeforeFirstToken ? { retryBeforeFirstToken: true } : {}),
    ...(job.internal ? { internal: true } : {}),
    ...(job.priorAttempts.length > 0 ? { priorAttempts: job.priorAttempts.map(attemptFromWire) } : {}),
    ...(job.reservation ? { reservation: reservationFromWire(job.reservation) } : {}),
    ...(job.retain
      ? { retain: { key: job.retain.key, bodySha256: job.retain.bodySha256, createdS: Number(job.retain.createdS), retainUntilMs: Number(job.retain.retainUntilUnixMs) } }
      : {}),
  };
}

/** A relay delta from the wire; tool-call fragments keep their order. */
export function deltaFromWire(d: relayV1.Delta): Extract<RelayEvent, { type: 'delta' }> {
  const reasoning = d.reasoning !== undefined && d.reasoning.length > 0 ? d.reasoning : undefined;
  if (d.toolCalls.length === 0) return reasoning ? { type: 'delta', text: d.text, tokens: d.tokens, reasoning } : { type: 'delta', text: d.text, tokens: d.tokens };
  const toolCalls: ToolCallDelta[] = d.toolCalls.map((c) => defined({ index: c.index, id: c.id, name: c.name, argumentsDelta: c.argumentsDelta }));
  return { type: 'delta', text: d.text, tokens: d.tokens, toolCalls, ...(reasoning ? { reasoning } : {}) };
}

/** A delta → wire (a plain message object unless it carries tool-call fragments or reasoning). */
function deltaToWire(event: Extract<RelayEvent, { type: 'delta' }>): relayV1.Delta {
  if ((!event.toolCalls || event.toolCalls.length === 0) && !event.reasoning) return plainDelta(event.text, event.tokens);
  return create(relayV1.DeltaSchema, { text: event.text, tokens: event.tokens, toolCalls: event.toolCalls ?? [], ...(event.reasoning ? { reasoning: event.reasoning } : {}) });
}

/** Encodes a relay event for the Generate stream (one delta, or the end). */
export function eventToWire(event: RelayEvent): relayV1.GenerateResponse {
  return event.type === 'delta'
    ? create(relayV1.GenerateResponseSchema, { event: { case: 'delta', value: deltaToWire(event) } })
    : create(relayV1.GenerateResponseSchema, { event: { case: 'end', value: { outcome: outcomeToWire(event.outcome) } } });
}

/** Encodes the deltas of one event-loop turn as one frame: a single `delta`, or `deltas` for several. */
export function deltasToWire(deltas: readonly relayV1.Delta[]): relayV1.GenerateResponse {
  return (
    deltas.length === 1
      ? { $typeName: 'weir.relay.v1.GenerateResponse', event: { case: 'delta', value: deltas[0] } }
      : { $typeName: 'weir.relay.v1.GenerateResponse', event: { case: 'deltas', value: { $typeName: 'weir.relay.v1.Deltas', deltas: [...deltas] } } }
  ) as relayV1.GenerateResponse;
}

/** Options of {@link createRelayGrpcServer}. */
export interface RelayGrpcServerOptions extends GrpcServerBindingOptions {
  /** The relay's clock; a job's durations are rebased on it. Default `systemClock`. */
  clock?: Clock;
  /** How long a Stop for a generation not (yet) running is remembered (ms). Default 30,000. */
  earlyStopTtlMs?: number;
}

/** The relay binding plus what it runs, for metrics and tests. */
export interface RelayGrpcServerBinding extends GrpcServiceBinding {
  /** Generations currently streaming through this binding. */
  running(): number;
}

const MAX_EARLY_STOPS = 10_000;

/**
 * Hosts `impl` as `weir.relay.v1.RelayService`. Generate starts `impl.start(job)` and
 * streams its events: the deltas of one event-loop turn go out as one frame (written at
 * `setImmediate`, so a burst of tokens is one write, not one per token), held back while the
 * stream is not drained (backpressure), then the end after every delta; the relay keeps running and
 * billing whether or not the stream is read. A cancelled Generate call (the gateway went
 * away) stops the generation as `client_disconnected` (grace period applies). Stop is
 * idempotent; a Stop for an id not running yet is remembered for `earlyStopTtlMs` and
 * applied when its Generate arrives. A malformed job is answered INVALID_ARGUMENT.
 */
export function createRelayGrpcServer(impl: RelayService, options: RelayGrpcServerOptions = {}): RelayGrpcServerBinding {
  const clock = options.clock ?? systemClock;
  const ttlMs = options.earlyStopTtlMs ?? 30_000;
  const running = new Map<string, RelayHandle>();
  const earlyStops = new Map<string, { cause: StopCause; at: number }>();
  const { method } = relayV1.RelayService;
  const generatePath = grpcMethodPath(method.generate);

  const rememberEarlyStop = (generationId: string, cause: StopCause) => {
    const now = clock.now();
    for (const [id, entry] of earlyStops) {
      if (now - entry.at < ttlMs && earlyStops.size < MAX_EARLY_STOPS) break;
      earlyStops.delete(id);
    }
    earlyStops.set(generationId, { cause, at: now });
  };

  const generate: grpc.handleServerStreamingCall<relayV1.GenerateRequest, relayV1.GenerateResponse> = (call) => {
    let cancelled = call.cancelled;
    let wake: (() => void) | undefined;
    let handle: RelayHandle | undefined;
    const onCancelled = () => {
      cancelled = true;
      handle?.stop('client_disconnected');
      wake?.();
    };
    call.once('cancelled', onCancelled);
    // Deltas not yet written: flushed once per event-loop turn, or when the stream drains.
    let pending: relayV1.Delta[] = [];
    let flushQueued = false;
    let blocked = false;
    const flush = () => {
      flushQueued = false;
      if (cancelled || blocked || pending.length === 0) return;
      const frame = deltasToWire(pending);
      pending = [];
      if (!call.write(frame)) {
        blocked = true;
        call.once('drain', () => {
          blocked = false;
          flush();
          wake?.();
        });
      }
    };
    runInServerSpan(generatePath, call.metadata, options.propagator, async () => {
      const job = jobFromWire(call.request.job, clock);
      if (running.has(job.generationId)) throw new WeirError('conflict', `generation ${job.generationId} is already running`);
      const h = impl.start(job);
      handle = h;
      running.set(job.generationId, h);
      try {
        const early = earlyStops.get(job.generationId);
        if (early) {
          earlyStops.delete(job.generationId);
          h.stop(early.cause);
        }
        if (cancelled) h.stop('client_disconnected');
        for await (const event of h.events) {
          if (cancelled) continue; // keep draining: the relay finishes and bills on its own
          if (event.type === 'delta') {
            pending.push(deltaToWire(event));
            if (!flushQueued && !blocked) {
              flushQueued = true;
              setImmediate(flush);
            }
            continue;
          }
          // The end: every delta first, once the stream has room for them.
          while (blocked && !cancelled) await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
          flush();
          if (!cancelled) call.write(eventToWire(event));
        }
        if (!cancelled) call.end();
      } finally {
        running.delete(job.generationId);
      }
    })
      .catch((error: unknown) => {
        if (!cancelled) call.emit('error', toGrpcError(error));
      })
      .finally(() => call.removeListener('cancelled', onCancelled));
  };

  const binding = bindService(relayV1.RelayService, {
    generate,
    stop: unaryHandler(method.stop, options.propagator, async (request) => {
      const cause = enumFromWire(STOP_CAUSES, request.cause, 'cause');
      const h = running.get(request.generationId);
      if (h) h.stop(cause);
      else rememberEarlyStop(request.generationId, cause);
      return create(relayV1.StopResponseSchema);
    }),
  });
  // Delta frames are encoded by hand (the same bytes; generate-codec.ts).
  const generateDefinition = binding.definition.generate as grpc.MethodDefinition<relayV1.GenerateRequest, relayV1.GenerateResponse>;
  generateDefinition.responseSerialize = encodeGenerateResponse;
  generateDefinition.responseDeserialize = decodeGenerateResponse;
  return { ...binding, running: () => running.size };
}

/** Options of {@link createRelayGrpcClient}. */
export interface RelayGrpcClientOptions extends GrpcClientOptions {
  /** The clock a job's `arrivedAt` and `deadlineAt` are on. Default `systemClock`. */
  clock?: Clock;
  /**
   * Generate's call deadline is the job's deadline plus this margin (ms): the relay cuts the
   * generation at the deadline itself; the margin only catches a hung relay. Default 5,000.
   */
  streamMarginMs?: number;
}

/** The relay gRPC client: the port plus `close()` for its channel. */
export interface RelayGrpcClient extends RelayService {
  /**
   * Cancels the running streams (each relay stops its generation as `client_disconnected`
   * and bills it; each handle here ends relay-lost) and closes the channel.
   */
  close(): void;
}

/**
 * A relay client over gRPC. `start(job)` opens the Generate stream at once and returns a
 * `RelayHandle`: `events` yields the deltas and the one end; `done` resolves with the same
 * outcome; `stop(cause)` sends Stop in the background (idempotent, retried on
 * `UNAVAILABLE`; sent once per cause, never after the end). The stream is drained into
 * memory whether or not `events` is read, so `done` always resolves.
 *
 * If the stream breaks before its end event (relay killed, connection lost, stream deadline)
 * the handle ends with a synthetic outcome (see {@link isRelayLost}): `error` /
 * `upstream_error`, usage = the job's input tokens plus the output tokens relayed so far,
 * priced at the job's revision, `relayLost: true`. If the relay refuses the job before
 * streaming anything (a Weir error status, e.g. INVALID_ARGUMENT or `shutting_down`), the
 * handle ends with that error, zero usage, and is not marked lost. `done` never rejects.
 */
export function createRelayGrpcClient(options: RelayGrpcClientOptions): RelayGrpcClient {
  const connection = createGrpcConnection(options, 'relay');
  const clock = options.clock ?? systemClock;
  const marginMs = options.streamMarginMs ?? 5_000;
  const { method } = relayV1.RelayService;
  const path = grpcMethodPath(method.generate);
  const serialize = serializerFor(method.generate.input);
  const deserialize = decodeGenerateResponse;
  const calls = new Set<{ cancel(): void }>();

  return {
    start(job) {
      const queue = createAsyncQueue<RelayEvent>();
      let resolveDone: (outcome: GenerationOutcome) => void = () => undefined;
      const done = new Promise<GenerationOutcome>((resolve) => (resolveDone = resolve));
      let ended = false;
      let received = 0;
      let outputTokens = 0;
      let ttftMs: number | null = null;
      const stopsSent = new Set<StopCause>();
      const startedAtMs = Date.now();
      const startedAt = clock.now();
      // This attempt as the gateway saw it, after the job's earlier ones (the relay's own record
      // is lost with it, or it refused the job before running anything).
      const attemptsWith = (usage: TokenUsage, errorCode: string, replicaReached: boolean): UpstreamAttempt[] => {
        const prior = job.priorAttempts ?? [];
        return [
          ...prior,
          {
            attempt: prior.length + 1,
            revisionId: job.revision.id,
            provider: job.revision.engine.kind,
            ...(replicaReached ? { replicaId: job.replicaId } : {}),
            outcome: usage.outputTokens > 0 ? 'answered' : 'failed',
            errorCode,
            startedAtMs,
            ttftMs: ttftMs === null ? null : Math.max(0, Math.round(ttftMs - (startedAt - job.arrivedAt))),
            durationMs: Math.round(clock.now() - startedAt),
            inputTokens: usage.inputTokens,
            outputTokens: usage.outputTokens,
          },
        ];
      };

      const finish = (outcome: GenerationOutcome) => {
        if (ended) return;
        ended = true;
        queue.push({ type: 'end', outcome });
        queue.end();
        resolveDone(outcome);
      };
      /**
       * `deadline`: the relay went silent (hung, or unreachable mid-stream) past the request's
       * deadline and the call's margin — the request ends as a deadline (504 before any output),
       * not as an upstream error.
       */
      const lost = (why: string, ending: 'error' | 'deadline' = 'error'): RelayLostOutcome => {
        // What was relayed, with the input reserved for; nothing when no output came (a failure
        // before any output bills nothing, as on the relay).
        const usage: TokenUsage = outputTokens > 0 ? { inputTokens: job.inputTokens, outputTokens, cachedInputTokens: 0 } : { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 };
        const base = {
          usage,
          costNanoUsd: priceUsage(job.revision.pricing, usage),
          timings: { queueMs: job.queueMs, ttftMs, totalMs: clock.now() - job.arrivedAt },
          modelRevision: job.revision.id,
          relayLost: true as const,
          usageSource: 'estimated' as const,
        };
        if (ending === 'deadline') return { ...base, finishReason: 'deadline', attempts: attemptsWith(usage, 'deadline_exceeded', true) };
        return {
          ...base,
          finishReason: 'error',
          error: { code: 'upstream_error', message: `the streaming relay was lost mid-generation (${why}); usage counts the tokens relayed before it`, internal: true },
          attempts: attemptsWith(usage, 'upstream_error', true),
        };
      };
      const refused = (error: WeirError): GenerationOutcome => ({
        finishReason: 'error',
        usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
        costNanoUsd: 0,
        timings: { queueMs: job.queueMs, ttftMs: null, totalMs: clock.now() - job.arrivedAt },
        modelRevision: job.revision.id,
        error: { code: error.code, message: error.message, ...(error.retryAfterMs !== undefined ? { retryAfterMs: error.retryAfterMs } : {}) },
        usageSource: 'reported',
        attempts: attemptsWith({ inputTokens: 0, outputTokens: 0 }, error.code, false),
      });

      const metadata = new grpc.Metadata();
      injectTraceContext(metadata, options.propagator);
      const request = create(relayV1.GenerateRequestSchema, { job: jobToWire(job, clock) });
      const remainingMs = Math.max(0, job.deadlineAt - clock.now());
      const call = connection.calls.makeServerStreamRequest(path, serialize, deserialize, request, metadata, {
        deadline: Date.now() + remainingMs + marginMs,
      });
      calls.add(call);
      void done.then(() => calls.delete(call));

      const onDelta = (d: relayV1.Delta) => {
        outputTokens += d.tokens;
        if (ttftMs === null && d.tokens > 0) ttftMs = clock.now() - job.arrivedAt;
        queue.push(deltaFromWire(d));
      };
      call.on('data', (message: relayV1.GenerateResponse) => {
        if (ended) return;
        received++;
        const event = message.event;
        switch (event.case) {
          case 'delta':
            onDelta(event.value);
            break;
          case 'deltas':
            for (const d of event.value.deltas) onDelta(d);
            break;
          case 'end':
            try {
              finish(outcomeFromWire(event.value.outcome));
            } catch {
              finish(lost('the end event was malformed'));
            }
            break;
          case undefined:
            break;
        }
      });
      call.on('error', (error: unknown) => {
        if (ended) return;
        if (received === 0 && isServiceError(error) && weirCodeOf(error) !== undefined) {
          finish(refused(fromGrpcError(error, 'relay')));
          return;
        }
        // Unreachable before anything was streamed (down, restarting, reconnecting): nothing
        // ran that this call could know of, so it is a retryable refusal, not a lost stream.
        if (received === 0 && isServiceError(error) && error.code === grpc.status.UNAVAILABLE) {
          const out = refused(new WeirError('engine_unavailable', 'the streaming relay is unavailable; retry shortly', { retryable: true, retryAfterMs: 1_000, cause: error }));
          finish({ ...out, error: { ...(out.error as NonNullable<GenerationOutcome['error']>), internal: true } });
          return;
        }
        const status = isServiceError(error) ? `gRPC ${grpc.status[error.code] ?? error.code}: ${error.details}` : String(error);
        const pastDeadline = isServiceError(error) && error.code === grpc.status.DEADLINE_EXCEEDED && clock.now() >= job.deadlineAt;
        finish(lost(status, pastDeadline ? 'deadline' : 'error'));
      });
      call.on('end', () => finish(lost('the stream closed without an end event')));

      return {
        events: queue,
        done,
        stop(cause) {
          if (ended || stopsSent.has(cause)) return;
          stopsSent.add(cause);
          connection.background('relay.Stop', () =>
            connection.unary(method.stop, { generationId: job.generationId, cause: STOP_CAUSES[cause] }),
          );
        },
      };
    },
    close() {
      for (const call of calls) call.cancel();
      calls.clear();
      connection.close();
    },
  };
}

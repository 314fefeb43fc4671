/**
 * The streaming relay core: drives one engine generation, streams its deltas as they arrive,
 * meters tokens, enforces the deadline, applies the cancellation grace period, and ends with
 * exactly one terminal event and exactly one usage record (ARCHITECTURE.md §2 steps 5–6).
 *
 * The pump runs independently of whoever reads the events: if the client goes away, the
 * generation is still stopped, measured and billed.
 */
import {
  tenantKeyOf,
  type Clock,
  type EngineAdapter,
  type EngineEvent,
  type FinishReason,
  type GenerationOutcome,
  type ProducedUsage,
  type RelayEvent,
  type RelayHandle,
  type RelayService,
  type RelayJob,
  type TokenUsage,
  type UpstreamAttempt,
  type IdempotencySettlement,
  type ProgressMark,
  type SettlementEntry,
  type SettlementJournal,
  type ToolCallDelta,
  type UsageRecord,
  type UsageSource,
  WeirError,
  createAsyncQueue,
  forEachBatch,
  toWeirError,
} from '@weir/core';
import { priceUsage, usageStatusFor } from '@weir/ledger';
import { createOutputWindow, cutAt, runCheck, type ModerationObserver, type OutputPlan } from '@weir/moderation';
import { judgeOutput, type LoadedOutputSchema, loadOutputSchema } from './output-schema';


/** Dependencies of the relay. */
export interface RelayDeps {
  /** Resolves the engine adapter serving a replica id; undefined when it is gone. */
  engineFor(replicaId: string): EngineAdapter | undefined;
  /**
   * Where each finished generation's settlement entry goes (ADR 0002 §2): the relay appends it —
   * usage record, the reservation it settles, a keyed request's result — and only then emits the
   * terminal event, so every answer a client received has left the process before it was told.
   * Progress marks of long streams go here too.
   */
  settlements: SettlementJournal;
  clock: Clock;
  /** Wall clock for record timestamps (default `Date.now`). */
  wallClock?: () => number;
  /**
   * How long a generation keeps running after its client disconnects before the engine is
   * stopped (ms). Tokens produced in the grace period are billed. Default 250.
   */
  cancelGraceMs?: number;
  /** Called once per finished generation, after its settlement entry is journaled (metrics). */
  onOutcome?(job: RelayJob, outcome: GenerationOutcome): void;
  /**
   * Output moderation (issue 15 item 7): the plan of a job's tenant, looked up once per
   * generation (a map lookup; undefined = no moderation, the unchanged fast path). With a plan,
   * deltas are held in a rolling window until checked; a flagged window is never emitted, the
   * engine is stopped and the generation ends `content_filter`, billed for what was produced.
   */
  moderation?: {
    outputFor(job: RelayJob): OutputPlan | undefined;
    observer?: ModerationObserver;
    /** A cut (metrics): the categories that blocked, or the failure reason. */
    onCut?(job: RelayJob, reason: string, categories: string[]): void;
  };
}

/** A running generation (the port lives in `@weir/core`). */
export type { RelayHandle };

/** The relay: starts generations on engine replicas. */
export type Relay = RelayService;

/**
 * Builds the one usage record of a request from its job and outcome. Also used by the
 * gateway for requests that ended before reaching an engine (deadline or cancel in queue).
 */
export function buildUsageRecord(
  job: Pick<RelayJob, 'generationId' | 'requestId' | 'route' | 'caller' | 'modelAlias' | 'useCase'>,
  outcome: GenerationOutcome,
  finishedAtMs: number,
): UsageRecord {
  return {
    generationId: job.generationId,
    requestId: job.requestId,
    tenantId: job.caller.tenantId,
    appId: job.caller.appId,
    // The internal ids (issue 14 §4): the ledger row and its budget rows are filed under them.
    tenantUid: job.caller.tenantUid,
    appUid: job.caller.appUid,
    apiKeyId: job.caller.apiKeyId,
    route: job.route,
    modelAlias: job.modelAlias,
    modelRevision: outcome.modelRevision,
    inputTokens: outcome.usage.inputTokens,
    outputTokens: outcome.usage.outputTokens,
    cachedInputTokens: outcome.usage.cachedInputTokens ?? 0,
    ...(outcome.usage.cacheWriteInputTokens ? { cacheWriteInputTokens: outcome.usage.cacheWriteInputTokens } : {}),
    ...(outcome.usage.reasoningTokens ? { reasoningTokens: outcome.usage.reasoningTokens } : {}),
    costNanoUsd: outcome.costNanoUsd,
    status: usageStatusFor(outcome.finishReason),
    finishReason: outcome.finishReason,
    errorCode: outcome.error?.code ?? null,
    queueMs: Math.round(outcome.timings.queueMs),
    ttftMs: outcome.timings.ttftMs === null ? null : Math.round(outcome.timings.ttftMs),
    totalMs: Math.round(outcome.timings.totalMs),
    startedAt: new Date(finishedAtMs - outcome.timings.totalMs),
    finishedAt: new Date(finishedAtMs),
    ...(outcome.relayLost ? { uncertain: true } : {}),
    ...(job.useCase !== undefined ? { useCase: job.useCase } : {}),
    ...(outcome.usageSource !== undefined ? { usageSource: outcome.usageSource } : {}),
    ...(outcome.attempts !== undefined && outcome.attempts.length > 0 ? { attempts: outcome.attempts } : {}),
    ...(outcome.cacheHit !== undefined ? { cacheHit: outcome.cacheHit } : {}),
  };
}

/** No tokens: what a failure before any output bills (and what an engine that never ran counted). */
const NOTHING: TokenUsage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 };

/**
 * What a generation bills from what its engine produced (issue 13): nothing for a failure
 * before any output (`reported`: zero is exact, whatever the upstream counted — that count stays
 * on the attempt record); otherwise the engine's count, never above the reservation — output at
 * most `maxOutputTokens`, input at most the `reservedInputTokens` admission reserved for, and
 * each class within its total (cache reads + cache writes ≤ input, reasoning ≤ output).
 */
export function billedUsage(
  produced: ProducedUsage,
  limits: { reservedInputTokens: number; maxOutputTokens: number },
  failedBeforeOutput: boolean,
): ProducedUsage {
  if (failedBeforeOutput) return { usage: NOTHING, source: 'reported' };
  // Whatever an adapter hands over, only non-negative whole counts are billed and priced.
  const p = produced.usage;
  const reportedInput = wholeCount(p.inputTokens);
  const inputTokens = Math.min(reportedInput, limits.reservedInputTokens);
  const outputTokens = Math.min(wholeCount(p.outputTokens), limits.maxOutputTokens);
  // The classes are parts of the totals: capped so they never add up to more than the billed
  // totals. When the input is capped, the uncached part is billed first, then cache writes, and
  // cache reads get what is left of the cap: a cap never turns full-price tokens into cheaper
  // cache reads.
  const reportedRead = wholeCount(p.cachedInputTokens ?? 0);
  const reportedWrite = wholeCount(p.cacheWriteInputTokens ?? 0);
  const uncached = Math.min(Math.max(0, reportedInput - reportedRead - reportedWrite), inputTokens);
  const cacheWrite = p.cacheWriteInputTokens !== undefined ? Math.min(reportedWrite, inputTokens - uncached) : undefined;
  const cached = p.cachedInputTokens !== undefined ? Math.min(reportedRead, inputTokens - uncached - (cacheWrite ?? 0)) : undefined;
  const reasoning = p.reasoningTokens !== undefined ? Math.min(wholeCount(p.reasoningTokens), outputTokens) : undefined;
  return {
    usage: {
      inputTokens,
      outputTokens,
      ...(cached !== undefined ? { cachedInputTokens: cached } : {}),
      ...(cacheWrite !== undefined ? { cacheWriteInputTokens: cacheWrite } : {}),
      ...(reasoning !== undefined ? { reasoningTokens: reasoning } : {}),
    },
    source: produced.source,
  };
}

/** A token count as billed: a non-negative whole number (NaN and negatives count 0, fractions are floored, +∞ is left to the caps). */
function wholeCount(n: number): number {
  return n > 0 ? Math.min(Math.floor(n), Number.MAX_SAFE_INTEGER) : 0;
}

/** Creates the relay. */
export function createRelay(deps: RelayDeps): Relay {
  const graceMs = deps.cancelGraceMs ?? 250;
  const wall = deps.wallClock ?? Date.now;

  return {
    start(job) {
      const queue = createAsyncQueue<RelayEvent>();
      const abort = new AbortController();
      // Fires on a stop (disconnect, cancel, deadline) only: output checks go on after the
      // engine is stopped at the output limit, so the held tail is still checked and released.
      const stopped = new AbortController();
      // Set once: the first reason to stop wins (a deadline that fires during the grace
      // period of a disconnect still reports `cancelled`, the earlier cause).
      let stopReason: 'cancelled' | 'deadline' | 'content_filter' | undefined;
      let finished = false;
      let inputFlagged = false;
      let graceTimer: NodeJS.Timeout | undefined;

      const requestStop = (reason: 'cancelled' | 'deadline' | 'content_filter', afterMs: number) => {
        if (finished) return;
        stopReason ??= reason;
        if (afterMs <= 0) {
          abort.abort();
          stopped.abort();
        } else if (!graceTimer) {
          graceTimer = setTimeout(() => (abort.abort(), stopped.abort()), afterMs);
        }
      };
      const deadlineTimer = setTimeout(
        () => requestStop('deadline', 0),
        Math.max(0, job.deadlineAt - deps.clock.now()),
      );

      const done = (async (): Promise<GenerationOutcome> => {
        const attemptStartedAtMs = wall();
        const attemptStart = deps.clock.now();
        let replicaReached = false;
        let producedTokens = 0;
        let ttftMs: number | null = null;
        let firstTokenAt: number | undefined;
        // With an output schema, the whole text is kept to validate the finished document.
        let schema: LoadedOutputSchema | undefined;
        let text = '';
        // A keyed request's deltas, kept for the result its settlement leaves for retries.
        const retained = job.retain ? { deltas: [] as string[], toolCalls: [] as (ToolCallDelta[] | null)[], anyToolCalls: false } : undefined;
        // What reaches the client: straight to the queue, or — under output moderation — held in
        // the rolling window until checked.
        const emit = (d: Extract<RelayEvent, { type: 'delta' }>) => {
          queue.push(d);
          if (retained) {
            retained.deltas.push(d.text);
            retained.toolCalls.push(d.toolCalls ?? null);
            if (d.toolCalls) retained.anyToolCalls = true;
          }
        };
        // The gateway's own embedding of a prompt (`job.internal`): platform overhead, never billed.
        const internal = job.internal === true && job.engineRequest.input.kind === 'embedding';
        const outputPlan = internal ? undefined : deps.moderation?.outputFor(job);
        const window = outputPlan ? createOutputWindow<Extract<RelayEvent, { type: 'delta' }>>(outputPlan) : undefined;
        // Under output moderation, a read's deltas wait here until they are fed into the window.
        const toWindow: Extract<RelayEvent, { type: 'delta' }>[] = [];
        // Checks the held text: releases it when clean; else stops the engine and drops it. False when cut.
        const checkWindow = async (): Promise<boolean> => {
          if (!window || !outputPlan || !window.holding()) return true;
          const verdict = await runCheck('output', outputPlan, [window.text()], stopped.signal, deps.moderation?.observer);
          if (!verdict.blocked) {
            for (const d of window.release()) emit(d);
            return true;
          }
          // A check aborted by a stop (disconnect, cancel, deadline) is that stop, not a cut.
          if (!stopped.signal.aborted) deps.moderation?.onCut?.(job, verdict.reason, verdict.categories);
          return false;
        };
        // A long stream's progress, offered to the journal on every delta (it takes one at most
        // every progress interval): what a crash of this process would still bill.
        const progressMark = (): ProgressMark =>
          progressOf(job, {
            outputTokens: producedTokens,
            ttftMs,
            attemptTtftMs: firstTokenAt === undefined ? null : Math.round(firstTokenAt - attemptStart),
            requestStartedAtMs: attemptStartedAtMs - Math.round(attemptStart - job.arrivedAt),
            attemptStartedAtMs,
            nowMs: wall(),
          });
        let end: Extract<EngineEvent, { type: 'end' }> | undefined;
        let failure: WeirError | undefined;
        try {
          // The gateway checked the schema already; a bad one (over gRPC) fails here, never crashes.
          if (job.engineRequest.outputSchema) schema = await loadOutputSchema(job.engineRequest.outputSchema, 'output_schema', { tenant: tenantKeyOf(job.caller), capped: false });
          const engine = deps.engineFor(job.replicaId);
          if (!engine) throw new WeirError('engine_unavailable', `replica ${job.replicaId} is not serving`, { retryable: true });
          replicaReached = true;
          // Past its deadline already (a slow hop): end now, before any work is done or billed.
          const late = job.deadlineAt <= deps.clock.now();
          if (late) {
            stopReason = 'deadline';
            // Nothing ran: zero is the exact count (so it is "reported", not estimated).
            end = { type: 'end', reason: 'aborted', usage: NOTHING, usageSource: 'reported' };
          }
          const stream = late ? [] : engine.generate({ ...job.engineRequest, signal: abort.signal, generationId: job.generationId });
          // The output limit is Weir's to enforce, whatever the engine does: an upstream that
          // ignores it (or a buggy one) is cut at the limit and never billed beyond it.
          const limit = job.engineRequest.maxOutputTokens;
          // The engine's events a batch at a time when it offers them (an upstream read's deltas
          // together), else one by one: the same loop, without a promise per delta. Returning
          // false stops reading and closes the engine's stream, as `break` out of `for await` did.
          const onBatch = (batch: readonly EngineEvent[]): boolean => {
            for (const ev of batch) {
              if (ev.type === 'delta') {
                if (producedTokens >= limit && ev.tokens > 0) {
                  abort.abort();
                  // The adapter's own count is lost with the cut: the deltas' tokens are the count.
                  end = { type: 'end', reason: 'length', usage: { inputTokens: job.inputTokens, outputTokens: producedTokens, cachedInputTokens: 0 }, usageSource: 'estimated' };
                  return false;
                }
                producedTokens += ev.tokens;
                if (schema) text += ev.text;
                if (ttftMs === null && ev.tokens > 0) {
                  firstTokenAt = deps.clock.now();
                  ttftMs = firstTokenAt - job.arrivedAt;
                }
                // A delta may carry text, tool-call fragments, reasoning, or several; one with none is dropped.
                const toolCalls = ev.toolCalls !== undefined && ev.toolCalls.length > 0 ? ev.toolCalls : undefined;
                // Output moderation checks the answer's text only: reasoning it has not seen is not passed on.
                const reasoning = window || ev.reasoning === undefined || ev.reasoning.length === 0 ? undefined : ev.reasoning;
                if (ev.text.length > 0 || toolCalls || reasoning) {
                  const d: Extract<RelayEvent, { type: 'delta' }> =
                    toolCalls || reasoning
                      ? { type: 'delta', text: ev.text, tokens: ev.tokens, ...(toolCalls ? { toolCalls } : {}), ...(reasoning ? { reasoning } : {}) }
                      : { type: 'delta', text: ev.text, tokens: ev.tokens };
                  if (window) toWindow.push(d);
                  else emit(d);
                }
                if (ev.tokens > 0) deps.settlements.progress(job.generationId, progressMark);
              } else {
                end = ev;
              }
            }
            return true;
          };
          /**
           * Feeds the waiting deltas into the window, checking it each time it is due. A delta
           * longer than the window's room is split there (never inside a surrogate pair): its
           * leading pieces carry no tokens, its last piece its tokens and tool-call fragments.
           * False when a window is flagged (what follows is dropped).
           */
          const feedWindow = async (): Promise<boolean> => {
            if (!window) return true;
            for (const d of toWindow.splice(0)) {
              let rest = d;
              while (rest.text.length > window.room()) {
                const at = cutAt(rest.text, window.room());
                const head: Extract<RelayEvent, { type: 'delta' }> = { type: 'delta', text: rest.text.slice(0, at), tokens: 0 };
                window.push(head, head.text);
                rest = { ...rest, text: rest.text.slice(at) };
                if (window.due() && !(await checkWindow())) return false;
              }
              window.push(rest, rest.text);
              if (window.due() && !(await checkWindow())) return false;
            }
            return true;
          };
          // The cut of a flagged window: the engine stops, the produced tokens are the count.
          const cut = () => {
            abort.abort();
            end = { type: 'end', reason: 'content_filter', usage: { inputTokens: job.inputTokens, outputTokens: producedTokens, cachedInputTokens: 0 }, usageSource: 'estimated' };
          };
          await forEachBatch(
            stream,
            window
              ? async (batch) => {
                  const go = onBatch(batch);
                  // A read's text is checked a window at a time, in order, each clean window
                  // released before the next is checked: at most one window is ever held back,
                  // however many deltas one read brings, and a flag cuts at its window.
                  if (!(await feedWindow())) {
                    cut();
                    return false;
                  }
                  return go;
                }
              : onBatch,
          );
          // The rest of the answer (shorter than a window) is checked before the end is told.
          if (window && end && end.reason !== 'content_filter' && !stopReason && !(await checkWindow())) {
            // The engine finished: its own count stands; only the ending changes.
            end = { ...end, reason: 'content_filter' };
          }
          if (!end) throw new WeirError('upstream_error', 'the engine stream ended without a terminal event');
        } catch (err) {
          // An abort can surface as a thrown error from some adapters; it is still our stop.
          if (!(abort.signal.aborted && stopReason)) failure = toWeirError(err);
        } finally {
          finished = true;
          clearTimeout(deadlineTimer);
          if (graceTimer) clearTimeout(graceTimer);
        }

        // What the engine produced, and how it was counted: its end event's usage; for a
        // failure, what the adapter attached (the upstream's count, or its tokenizer's), else
        // the deltas' tokens and the input admission reserved for (`estimated`).
        const produced: ProducedUsage = end
          ? { usage: end.usage, source: end.usageSource }
          : (failure?.produced ?? { usage: { inputTokens: job.inputTokens, outputTokens: producedTokens, cachedInputTokens: 0 }, source: 'estimated' });
        // A failure before any output bills nothing, in every topology (issue 13): the attempt
        // record keeps what the upstream counted.
        const failedBeforeOutput = failure !== undefined && producedTokens === 0;
        const billed = billedUsage(produced, { reservedInputTokens: job.inputTokens, maxOutputTokens: job.engineRequest.maxOutputTokens }, failedBeforeOutput);
        const usage = billed.usage;
        const usageSource: UsageSource = billed.source;
        let finishReason: FinishReason;
        if (failure) finishReason = 'error';
        else if (stopReason) finishReason = stopReason;
        else if (end && end.reason !== 'aborted') finishReason = end.reason;
        else finishReason = 'cancelled';

        const now = deps.clock.now();
        const prior = job.priorAttempts ?? [];
        // This attempt's record after the earlier ones: a failure before any output keeps the
        // upstream's own count (not billed); any other attempt the tokens it bills.
        const attempts = (errorCode: string | undefined): UpstreamAttempt[] => [
          ...prior,
          {
            attempt: prior.length + 1,
            revisionId: job.revision.id,
            provider: job.revision.engine.kind,
            ...(replicaReached ? { replicaId: job.replicaId } : {}),
            outcome: failedBeforeOutput ? 'failed' : 'answered',
            ...(errorCode !== undefined ? { errorCode } : {}),
            startedAtMs: attemptStartedAtMs,
            ttftMs: firstTokenAt === undefined ? null : Math.round(firstTokenAt - attemptStart),
            durationMs: Math.round(now - attemptStart),
            inputTokens: failedBeforeOutput ? (failure?.produced?.usage.inputTokens ?? 0) : usage.inputTokens,
            outputTokens: failedBeforeOutput ? (failure?.produced?.usage.outputTokens ?? 0) : usage.outputTokens,
          },
        ];
        // An attempt the caller will retry elsewhere (it failed before any output, retryably):
        // nothing was produced or delivered, so it is neither billed nor recorded.
        if (failure && failure.retryable && producedTokens === 0 && job.retryBeforeFirstToken && !stopReason) {
          const unrecorded: GenerationOutcome = {
            finishReason: 'error',
            usage: NOTHING,
            costNanoUsd: 0,
            modelRevision: job.revision.id,
            timings: { queueMs: job.queueMs, ttftMs: null, totalMs: now - job.arrivedAt },
            error: { code: failure.code, message: failure.message, retryable: true, ...(failure.retryAfterMs !== undefined ? { retryAfterMs: failure.retryAfterMs } : {}) },
            unrecorded: true,
            usageSource: 'reported',
            attempts: attempts(failure.code),
          };
          deps.onOutcome?.(job, unrecorded);
          queue.push({ type: 'end', outcome: unrecorded });
          queue.end();
          return unrecorded;
        }
        const measured: GenerationOutcome = {
          finishReason,
          ...(finishReason === 'stop' && end?.stopSequence !== undefined ? { stopSequence: end.stopSequence } : {}),
          usage,
          costNanoUsd: priceUsage(job.revision.pricing, usage),
          modelRevision: job.revision.id,
          timings: { queueMs: job.queueMs, ttftMs, totalMs: now - job.arrivedAt },
          ...(failure
            ? {
                error: {
                  code: failure.code,
                  message: failure.message,
                  ...(failure.retryAfterMs !== undefined && producedTokens === 0 ? { retryAfterMs: failure.retryAfterMs } : {}),
                  ...(failure.retryable && producedTokens === 0 ? { retryable: true } : {}),
                },
              }
            : {}),
          usageSource,
          // Blocked by input moderation: the error a retry of a keyed request is answered with too.
          ...(inputFlagged && !failure ? { error: { code: 'content_filter', message: 'The input was blocked by moderation; nothing was generated for you. Change the input.' } } : {}),
        };
        // Every schema-constrained output is validated here, once: an invalid one ends as
        // `output_invalid` in the usage record, the end event and every replay alike.
        const judged = (await judgeOutput(measured, text, schema)).outcome;
        let outcome: GenerationOutcome = { ...judged, attempts: attempts(judged.error?.code) };
        if (internal) {
          outcome = { ...outcome, unrecorded: true };
          deps.onOutcome?.(job, outcome);
          queue.push({ type: 'end', outcome });
          queue.end();
          return outcome;
        }
        try {
          await deps.settlements.append(settlementOf(job, outcome, wall(), inputFlagged ? { deltas: [], toolCalls: [], anyToolCalls: false } : retained));
        } catch (err) {
          // Not recorded: the client is told the answer failed rather than take it as whole.
          const e = toWeirError(err);
          outcome = { ...outcome, finishReason: 'error', error: { code: 'internal', message: `the usage of this generation could not be recorded (${e.message}); do not rely on this answer` } };
        }
        deps.onOutcome?.(job, outcome);
        queue.push({ type: 'end', outcome });
        queue.end();
        return outcome;
      })();

      return {
        events: queue,
        done,
        stop(cause) {
          if (cause === 'input_flagged') {
            // Nothing was sent to the client: nothing is retained for retries either.
            inputFlagged = true;
            requestStop('content_filter', 0);
          } else requestStop('cancelled', cause === 'client_disconnected' ? graceMs : 0);
        },
      };
    },
  };
}

/**
 * The settlement entry of a finished generation (ADR 0002 §2): its usage record with the
 * reservation it settles, and for a keyed request what a retry gets — its result when it
 * finished (stop, length, content filter, cancel, deadline: the answer as delivered), or
 * `interrupted` when it failed after producing output (billed; running it again would charge
 * twice). A failure before any output leaves no idempotency outcome: it billed nothing, and the
 * gateway frees the key so a retry runs anew.
 */
export function settlementOf(
  job: Pick<RelayJob, 'generationId' | 'requestId' | 'route' | 'caller' | 'modelAlias' | 'useCase' | 'reservation' | 'retain'>,
  outcome: GenerationOutcome,
  finishedAtMs: number,
  retained?: { deltas: string[]; toolCalls: (ToolCallDelta[] | null)[]; anyToolCalls: boolean },
): SettlementEntry {
  const usage: UsageRecord = { ...buildUsageRecord(job, outcome, finishedAtMs), ...(job.reservation ? { reservation: job.reservation } : {}) };
  const idempotency = job.retain ? idempotencyOf(job, job.retain, outcome, retained) : undefined;
  return idempotency ? { usage, idempotency } : { usage };
}

/** What a retry of a keyed generation that failed after producing output is told (it was billed; running it again would charge twice). */
export function interruptedMessage(generationId: string, outputTokens: number): string {
  return `The generation for this idempotency key (${generationId}) failed after producing ${outputTokens} tokens, which were billed; send a new key to run it again.`;
}

function idempotencyOf(
  job: Pick<RelayJob, 'generationId' | 'requestId' | 'route' | 'caller'>,
  retain: NonNullable<RelayJob['retain']>,
  outcome: GenerationOutcome,
  retained: { deltas: string[]; toolCalls: (ToolCallDelta[] | null)[]; anyToolCalls: boolean } | undefined,
): IdempotencySettlement | undefined {
  // Keys are filed under the tenant's internal id (issue 14 §4), as the gateway claimed them.
  const base = { tenantId: tenantKeyOf(job.caller), key: retain.key, retainUntilMs: retain.retainUntilMs, bodySha256: retain.bodySha256, route: job.route };
  if (outcome.finishReason === 'error') {
    if (outcome.usage.outputTokens === 0) return undefined;
    return {
      ...base,
      outcome: {
        kind: 'interrupted',
        generationId: job.generationId,
        message: interruptedMessage(job.generationId, outcome.usage.outputTokens),
      },
    };
  }
  return {
    ...base,
    outcome: {
      kind: 'result',
      result: {
        generationId: job.generationId,
        requestId: job.requestId,
        route: job.route,
        modelRevision: outcome.modelRevision,
        createdS: retain.createdS,
        deltas: retained?.deltas ?? [],
        ...(retained?.anyToolCalls ? { deltaToolCalls: retained.toolCalls } : {}),
        outcome,
      },
    },
  };
}

/** A running generation's progress mark: what it has produced so far, priced now (see `ProgressMark`). */
function progressOf(
  job: RelayJob,
  at: { outputTokens: number; ttftMs: number | null; attemptTtftMs: number | null; requestStartedAtMs: number; attemptStartedAtMs: number; nowMs: number },
): ProgressMark {
  const { outputTokens, ttftMs, attemptTtftMs, nowMs } = at;
  const usage = { inputTokens: job.inputTokens, outputTokens, cachedInputTokens: 0 };
  return {
    generationId: job.generationId,
    requestId: job.requestId,
    tenantId: job.caller.tenantId,
    appId: job.caller.appId,
    tenantUid: job.caller.tenantUid,
    appUid: job.caller.appUid,
    apiKeyId: job.caller.apiKeyId,
    route: job.route,
    modelAlias: job.modelAlias,
    modelRevision: job.revision.id,
    inputTokens: usage.inputTokens,
    outputTokens,
    cachedInputTokens: 0,
    costNanoUsd: priceUsage(job.revision.pricing, usage),
    startedAtMs: at.requestStartedAtMs,
    atMs: nowMs,
    queueMs: job.queueMs,
    ttftMs,
    ...(job.useCase !== undefined ? { useCase: job.useCase } : {}),
    ...(job.reservation ? { reservation: job.reservation } : {}),
    ...(job.retain ? { idempotencyKey: job.retain.key } : {}),
    // Every attempt so far, the running one last (recovery marks it failed, `interrupted`).
    attempts: [
      ...(job.priorAttempts ?? []),
      {
        attempt: (job.priorAttempts?.length ?? 0) + 1,
        revisionId: job.revision.id,
        provider: job.revision.engine.kind,
        replicaId: job.replicaId,
        outcome: 'answered',
        startedAtMs: at.attemptStartedAtMs,
        ttftMs: attemptTtftMs,
        durationMs: Math.max(0, nowMs - at.attemptStartedAtMs),
        inputTokens: usage.inputTokens,
        outputTokens,
      },
    ],
  };
}

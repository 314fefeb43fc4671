import {
  beginStep,
  endStep,
  enqueue,
  IDLE_REPLICA,
  kvUsed,
  type ReplicaProfile,
  type ReplicaState,
  removeSequence,
  validateProfile,
} from '@weir/capacity';
import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput, SimulatedEngineSpec } from '@weir/core';
import { type AsyncQueue, createAsyncQueue, WeirError } from '@weir/core';
import { renderPlainPrompt } from '../llamacpp/render-prompt';
import { type EngineLogger, silentLogger } from '../logger';
import { refuseTools } from '../refuse-tools';

/** The simulated replica's counters, shaped like the llama.cpp engine's (served on `/stats` and `/metrics`). */
export interface SimulatedEngineStats {
  /** Output tokens produced, all generations. */
  generatedTokens: number;
  /** Prompt tokens prefilled, all generations. */
  promptTokens: number;
  /** Sequences in the running batch right now. */
  activeSequences: number;
  /** Sequences waiting for admission (KV memory or batch slots) right now. */
  waitingSequences: number;
  /** KV tokens in use right now (Σ input + generated over the batch). */
  kvUsedTokens: number;
  /** Generations that ended (any reason). */
  completed: number;
}

/** The simulated engine: an {@link EngineAdapter} plus its counters and profile. */
export interface SimulatedEngine extends EngineAdapter {
  readonly kind: 'simulated';
  readonly profile: ReplicaProfile;
  stats(): SimulatedEngineStats;
}

/** Timer functions, replaceable in tests. Default: the global `setTimeout`/`clearTimeout` and `performance.now`. */
export interface SimulatedEngineClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * Prompt tokens of an input as the simulated replica counts them: 1 (a BOS token) plus the
 * whitespace-separated words of the plain-text rendering ({@link renderPlainPrompt}). This is the
 * simulator's own tokenizer, exact for it (and never more than the UTF-8 byte bound a gateway
 * reserves with).
 */
export function simulatedTokenCount(input: GenerationInput): number {
  const text = renderPlainPrompt(input).trim();
  return 1 + (text === '' ? 0 : text.split(/\s+/).length);
}

/** The filler text of output token `n` (1-based): `tok1`, then ` tok2`, ` tok3`, … */
export function fillerToken(n: number): string {
  return n === 1 ? 'tok1' : ` tok${n}`;
}

interface Session {
  request: EngineRequest;
  inputTokens: number;
  outputTokens: number;
  text: string;
  stop: string[];
  queue: AsyncQueue<EngineEvent>;
  done: boolean;
}

/**
 * A simulated GPU replica driven in real time: `@weir/capacity`'s replica model
 * ({@link beginStep}/{@link endStep}: continuous batching, whole-prompt prefill, KV admission by
 * whole context) with one timer per step. For capacity and load work only: it has no model and
 * emits filler tokens `tok1 tok2 …`, one per decode step per sequence, with the profile's timing.
 *
 * - `capacity` = `{slots: maxSequences, contextTokens: kvTokens}`.
 * - `generate` counts the prompt with {@link simulatedTokenCount}, reserves input + output limit
 *   in KV memory (the limit capped at `kvTokens − input`, as a real engine caps output at its
 *   context), waits for admission (FIFO) and yields one `delta` per token (`tokens: 1`) at the end
 *   of each step, then `end`: `length` at the output limit, `stop` when the output would contain a
 *   stop sequence (that token is not emitted nor counted), `aborted` when the request's signal
 *   fires or the consumer stops reading (the sequence leaves the batch at once; the tokens already
 *   yielded are the usage). `usage` is exact (`usageSource: reported`); sampling parameters other
 *   than `stop` change nothing: output is deterministic.
 * - Steps are scheduled on absolute times (each starts where the previous one was due), so timer
 *   lateness does not accumulate over a long stream.
 *
 * Throws from `generate`: `WeirError('context_length_exceeded', {param: 'input'})` when the
 * prompt leaves no room for one output token in `kvTokens`; `WeirError('engine_unavailable')`
 * once closed.
 *
 * @throws WeirError('invalid_request') from the factory when the profile is invalid (the message names the field).
 */
export function createSimulatedEngine(spec: SimulatedEngineSpec, deps: { logger?: EngineLogger; clock?: SimulatedEngineClock } = {}): SimulatedEngine {
  const logger = deps.logger ?? silentLogger;
  const clock: SimulatedEngineClock = deps.clock ?? {
    now: () => performance.now(),
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
  };
  const profile: ReplicaProfile = {
    prefillTokensPerSecond: spec.prefillTokensPerSecond,
    decodeStepMs: spec.decodeStepMs,
    kvTokens: spec.kvTokens,
    maxSequences: spec.maxSequences,
  };
  try {
    validateProfile(profile);
  } catch (error) {
    throw new WeirError('invalid_request', `simulated engine: ${(error as Error).message}`, { cause: error });
  }

  let state: ReplicaState = IDLE_REPLICA;
  const sessions = new Map<string, Session>();
  const counters = { generatedTokens: 0, promptTokens: 0, completed: 0 };
  let timer: unknown;
  /** When the step in flight is due (ms, clock time); undefined when idle. */
  let dueAt: number | undefined;
  let closed = false;
  let nextId = 0;

  const finish = (id: string, event: Extract<EngineEvent, { type: 'end' }> | { fail: WeirError }): void => {
    const s = sessions.get(id);
    if (!s || s.done) return;
    s.done = true;
    sessions.delete(id);
    state = removeSequence(state, id);
    counters.completed += 1;
    if ('fail' in event) s.queue.fail(event.fail);
    else {
      s.queue.push(event);
      s.queue.end();
    }
  };

  const startStep = (startAt: number): void => {
    const planned = beginStep(profile, state);
    if (!planned || closed) {
      dueAt = undefined;
      return;
    }
    state = planned.state;
    for (const a of planned.step.admitted) counters.promptTokens += a.inputTokens;
    dueAt = startAt + planned.step.durationMs;
    timer = clock.setTimeout(onStepEnd, Math.max(0, dueAt - clock.now()));
  };

  function onStepEnd(): void {
    const ended = endStep(state);
    state = ended.state;
    for (const token of ended.emitted) {
      const s = sessions.get(token.id);
      if (!s) continue;
      const text = fillerToken(token.generated);
      if (s.stop.some((stop) => (s.text + text).includes(stop))) {
        finish(token.id, { type: 'end', reason: 'stop', usage: { inputTokens: s.inputTokens, outputTokens: s.outputTokens }, usageSource: 'reported' });
        continue;
      }
      s.outputTokens += 1;
      s.text += text;
      counters.generatedTokens += 1;
      s.queue.push({ type: 'delta', text, tokens: 1 });
      if (token.finished) {
        finish(token.id, { type: 'end', reason: 'length', usage: { inputTokens: s.inputTokens, outputTokens: s.outputTokens }, usageSource: 'reported' });
      }
    }
    // The next step starts where this one was due, so lateness does not accumulate.
    startStep(dueAt ?? clock.now());
  }

  async function* generate(request: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    refuseTools(request, 'simulated');
    if (closed) throw new WeirError('engine_unavailable', 'engine is closed', { retryable: true });
    const inputTokens = simulatedTokenCount(request.input);
    if (inputTokens + 1 > profile.kvTokens) {
      throw new WeirError(
        'context_length_exceeded',
        `prompt is ${inputTokens} tokens; the simulated replica's KV cache holds ${profile.kvTokens} tokens including at least 1 output token`,
        { param: 'input' },
      );
    }
    if (request.signal.aborted) {
      yield { type: 'end', reason: 'aborted', usage: { inputTokens, outputTokens: 0 }, usageSource: 'reported' };
      return;
    }
    const id = `${request.generationId}#${nextId++}`;
    const session: Session = {
      request,
      inputTokens,
      outputTokens: 0,
      text: '',
      stop: (request.sampling.stop ?? []).filter((s) => s.length > 0),
      queue: createAsyncQueue<EngineEvent>(),
      done: false,
    };
    sessions.set(id, session);
    state = enqueue(profile, state, { id, inputTokens, maxOutputTokens: Math.min(request.maxOutputTokens, profile.kvTokens - inputTokens) });
    const abort = (): void =>
      finish(id, { type: 'end', reason: 'aborted', usage: { inputTokens, outputTokens: session.outputTokens }, usageSource: 'reported' });
    request.signal.addEventListener('abort', abort, { once: true });
    if (dueAt === undefined) startStep(clock.now());
    try {
      for (;;) {
        const next = await session.queue.next();
        if (next.done) return;
        yield next.value;
      }
    } finally {
      request.signal.removeEventListener('abort', abort);
      // The consumer stopped reading early: the sequence leaves the batch.
      abort();
      logger.debug({ generationId: request.generationId, inputTokens, outputTokens: session.outputTokens }, 'simulated generation finished');
    }
  }

  return {
    kind: 'simulated',
    profile,
    capacity: { slots: profile.maxSequences, contextTokens: profile.kvTokens },
    stats: () => ({
      ...counters,
      activeSequences: state.active.length,
      waitingSequences: state.waiting.length,
      kvUsedTokens: kvUsed(state),
    }),
    countInputTokens: async (input) => simulatedTokenCount(input),
    generate,
    async close() {
      if (closed) return;
      closed = true;
      if (timer !== undefined) clock.clearTimeout(timer);
      dueAt = undefined;
      for (const id of [...sessions.keys()]) finish(id, { fail: new WeirError('engine_unavailable', 'the simulated engine was closed', { retryable: true }) });
    },
  };
}

/**
 * A pure model of one GPU replica serving with continuous batching, in virtual time (no clocks,
 * no timers): the simulator advances it event by event, the simulated engine adapter in real
 * time. Every function returns a new state and leaves its arguments unchanged.
 *
 * The replica runs one iteration (a "step") at a time:
 * 1. **Admission**, between steps: waiting sequences join the batch in arrival order (FIFO,
 *    head of line: the first that does not fit blocks those behind it) while the batch has
 *    fewer than `maxSequences` sequences and the KV reservation of the batch plus the newcomer's
 *    whole context — input + maximum output tokens — fits in `kvTokens`. Reserving the whole
 *    context up front means a running sequence can never be evicted or preempted for memory.
 * 2. **Whole-prompt prefill**: the prompts of the sequences admitted for this step are
 *    processed in full at the start of the step (`Σ input / prefillTokensPerSecond`), which
 *    stalls decoding of the sequences already running (no chunked prefill).
 * 3. **Decode**: one decode step over the whole batch (`decodeStepMs(batch)`), which produces
 *    one token for every sequence in it, the newly prefilled ones included (their first token).
 * So a request alone on an idle replica has TTFT = prefill + one step at batch 1, and a time per
 * output token of one step at batch 1.
 *
 * Sequences leave the batch after the step that produced their last token (or when removed,
 * e.g. cancelled, between steps).
 */
import { CapacityInputError } from './errors';
import { decodeStepMs, prefillMs, type ReplicaProfile } from './profile';

/** A sequence offered to a replica. */
export interface ReplicaSequence {
  /** Unique within the replica. */
  id: string;
  /** Prompt tokens (≥ 1). */
  inputTokens: number;
  /** The request's output limit (≥ 1): what the KV reservation holds for its output. */
  maxOutputTokens: number;
  /**
   * Tokens it produces before it ends on its own (1…maxOutputTokens), e.g. a drawn output
   * length. Default `maxOutputTokens` (it runs to its limit).
   */
  outputTokens?: number;
}

/** A sequence in the running batch and the tokens it has produced. */
export interface ActiveSequence {
  readonly sequence: ReplicaSequence;
  /** Output tokens produced so far. */
  readonly generated: number;
}

/** A replica's state: sequences waiting for admission (FIFO) and the running batch. */
export interface ReplicaState {
  readonly waiting: readonly ReplicaSequence[];
  readonly active: readonly ActiveSequence[];
}

/** Why the head of the waiting queue could not join the batch at a step. */
export type AdmissionBlock = 'kv_memory' | 'max_sequences';

/** One step as {@link beginStep} planned it. Times in ms. */
export interface ReplicaStep {
  /** Sequences admitted (and prefilled) at this step, in order. */
  admitted: readonly ReplicaSequence[];
  /** Sequences decoded in this step (the batch after admission). */
  batchSize: number;
  /** Prompt tokens prefilled at this step. */
  prefillTokens: number;
  prefillMs: number;
  decodeMs: number;
  /** `prefillMs + decodeMs`. */
  durationMs: number;
  /** Set when sequences still wait after admission: what stopped the head of the queue. */
  blockedBy?: AdmissionBlock;
}

/** A token produced at the end of a step. */
export interface EmittedToken {
  id: string;
  /** Output tokens this sequence has produced, this one included (1 = its first token). */
  generated: number;
  /** True when this was its last token: it left the batch. */
  finished: boolean;
}

/** A replica with nothing waiting or running. */
export const IDLE_REPLICA: ReplicaState = Object.freeze({ waiting: Object.freeze([]), active: Object.freeze([]) });

const target = (s: ReplicaSequence): number => Math.min(s.outputTokens ?? s.maxOutputTokens, s.maxOutputTokens);

/** The KV tokens a sequence reserves while in the batch: its whole context, input + maximum output. */
export function contextReservation(s: ReplicaSequence): number {
  return s.inputTokens + s.maxOutputTokens;
}

/** KV tokens reserved by the running batch (Σ input + max output). */
export function kvReserved(state: ReplicaState): number {
  return state.active.reduce((n, a) => n + contextReservation(a.sequence), 0);
}

/** KV tokens in use by the running batch (Σ input + tokens generated so far). */
export function kvUsed(state: ReplicaState): number {
  return state.active.reduce((n, a) => n + a.sequence.inputTokens + a.generated, 0);
}

/** True when the sequence can ever run on this profile (its whole context fits the empty KV cache). */
export function fitsReplica(profile: ReplicaProfile, s: ReplicaSequence): boolean {
  return contextReservation(s) <= profile.kvTokens;
}

/**
 * Appends a sequence to the waiting queue.
 * @throws CapacityInputError (`inputTokens`) when its context (input + max output) exceeds
 *   `kvTokens`, since it could never be admitted; (`maxOutputTokens`, `inputTokens`) when not an
 *   integer ≥ 1.
 */
export function enqueue(profile: ReplicaProfile, state: ReplicaState, s: ReplicaSequence): ReplicaState {
  if (!Number.isInteger(s.inputTokens) || s.inputTokens < 1) throw new CapacityInputError('inputTokens', `must be an integer ≥ 1 (got ${s.inputTokens})`);
  if (!Number.isInteger(s.maxOutputTokens) || s.maxOutputTokens < 1) {
    throw new CapacityInputError('maxOutputTokens', `must be an integer ≥ 1 (got ${s.maxOutputTokens})`);
  }
  if (!fitsReplica(profile, s)) {
    throw new CapacityInputError(
      'inputTokens',
      `input ${s.inputTokens} + max output ${s.maxOutputTokens} tokens exceed the replica's KV cache of ${profile.kvTokens} tokens`,
    );
  }
  return { waiting: [...state.waiting, s], active: state.active };
}

/** Removes a sequence (waiting or running) by id, e.g. on cancellation between steps; unknown ids change nothing. */
export function removeSequence(state: ReplicaState, id: string): ReplicaState {
  return { waiting: state.waiting.filter((s) => s.id !== id), active: state.active.filter((a) => a.sequence.id !== id) };
}

/**
 * Plans the next step: admits waiting sequences (FIFO, head of line, while the batch has room
 * in sequences and KV reservation) and times the step. Returns undefined when the batch is empty
 * after admission (the replica idles until a sequence arrives).
 */
export function beginStep(profile: ReplicaProfile, state: ReplicaState): { state: ReplicaState; step: ReplicaStep } | undefined {
  const active = [...state.active];
  let reserved = kvReserved(state);
  let i = 0;
  let blockedBy: AdmissionBlock | undefined;
  const admitted: ReplicaSequence[] = [];
  for (; i < state.waiting.length; i += 1) {
    const head = state.waiting[i];
    if (active.length >= profile.maxSequences) {
      blockedBy = 'max_sequences';
      break;
    }
    if (reserved + contextReservation(head) > profile.kvTokens) {
      blockedBy = 'kv_memory';
      break;
    }
    reserved += contextReservation(head);
    admitted.push(head);
    active.push({ sequence: head, generated: 0 });
  }
  if (active.length === 0) return undefined;
  const prefillTokens = admitted.reduce((n, s) => n + s.inputTokens, 0);
  const p = prefillMs(profile, prefillTokens);
  const d = decodeStepMs(profile, active.length);
  const step: ReplicaStep = { admitted, batchSize: active.length, prefillTokens, prefillMs: p, decodeMs: d, durationMs: p + d };
  if (blockedBy) step.blockedBy = blockedBy;
  // Keep the same array when nobody was admitted: a long queue is not copied at every step.
  return { state: { waiting: i === 0 ? state.waiting : state.waiting.slice(i), active }, step };
}

/**
 * Ends the step {@link beginStep} planned: every running sequence produces one token; those that
 * reached their output length leave the batch. Returns the new state and the tokens, in batch order.
 */
export function endStep(state: ReplicaState): { state: ReplicaState; emitted: EmittedToken[] } {
  const emitted: EmittedToken[] = [];
  const active: ActiveSequence[] = [];
  for (const a of state.active) {
    const generated = a.generated + 1;
    const finished = generated >= target(a.sequence);
    emitted.push({ id: a.sequence.id, generated, finished });
    if (!finished) active.push({ sequence: a.sequence, generated });
  }
  return { state: { waiting: state.waiting, active }, emitted };
}

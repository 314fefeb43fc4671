/**
 * A generation's events as the gateway relays them, kept so that more than one reader can
 * follow them: the route answering the request, a repeat of the same `request_id`, and
 * `GET /v1/generations/{id}/events` resuming after a `Last-Event-ID`. One pump reads the
 * relay handle (its events have one consumer) and appends here; readers follow from any
 * position and wait for what has not happened yet.
 *
 * Weir's SSE event ids over a transcript (ARCHITECTURE.md §8): `start` is id 1, delta `i`
 * (0-based) is id `i + 2`, and `end` is id `deltas.length + 2`.
 */
import { forEachBatch, type GenerationOutcome, type RelayEvent, type ToolCallDelta } from '@weir/core';

/** An event read from a transcript, with its position. */
export type TranscriptEvent =
  | { type: 'delta'; index: number; text: string; tokens: number; toolCalls?: ToolCallDelta[]; reasoning?: string }
  | { type: 'end'; outcome: GenerationOutcome };

/** The transcript of one generation. */
export interface Transcript {
  /** Text deltas so far, in order. */
  readonly deltas: readonly string[];
  /** The tool-call fragments of delta `i` at index `i` (null for a delta without); empty when no delta had any. */
  readonly deltaToolCalls: readonly (ToolCallDelta[] | null)[];
  /** The reasoning text of delta `i` at index `i` (null for a delta without); empty when no delta had any. */
  readonly deltaReasoning: readonly (string | null)[];
  /** Set once the generation ended. */
  readonly outcome: GenerationOutcome | undefined;
  /** Total UTF-16 length of the deltas (a bound on the memory they hold). */
  readonly size: number;
  /** Appends a delta (text, tool-call fragments, reasoning, or several). Ignored once ended. */
  push(text: string, tokens?: number, toolCalls?: ToolCallDelta[], reasoning?: string): void;
  /** Ends it (first call wins). */
  end(outcome: GenerationOutcome): void;
  /**
   * Resolves with the outcome once it ended (at once when it has): what a reader that wants the
   * whole answer awaits, instead of following every delta.
   */
  ended(): Promise<GenerationOutcome>;
  /** The text of every delta so far, joined. */
  text(): string;
  /**
   * Resolves once there are more than `from` deltas or the transcript ended (at once if so),
   * or `signal` fired. Waiters are woken once per event-loop turn, after the turn's promise
   * jobs ran, so a reader takes all of a turn's deltas in one wake (see {@link readTranscript}).
   */
  changed(from: number, signal?: AbortSignal): Promise<void>;
  /**
   * Deltas from index `from` (0-based) and then the end, waiting for live ones. Each call is
   * an independent reader. Stops early (without the end) when `signal` fires.
   */
  follow(from?: number, signal?: AbortSignal): AsyncIterable<TranscriptEvent>;
  /** The same as relay events (`delta` and one `end`), from the start. */
  relayEvents(): AsyncIterable<RelayEvent>;
}

/** Creates an empty transcript, or a finished one from retained deltas and their outcome. */
export function createTranscript(finished?: { deltas: readonly string[]; deltaToolCalls?: readonly (ToolCallDelta[] | null)[]; outcome: GenerationOutcome }): Transcript {
  const deltas: string[] = finished ? [...finished.deltas] : [];
  const tokens: number[] = deltas.map(() => 0);
  // Kept empty until a delta has tool calls (most generations have none).
  const toolCalls: (ToolCallDelta[] | null)[] = finished?.deltaToolCalls ? [...finished.deltaToolCalls] : [];
  // Likewise until a delta has reasoning (retained and cached answers keep none).
  const reasoning: (string | null)[] = [];
  let outcome: GenerationOutcome | undefined = finished?.outcome;
  let size = deltas.reduce((n, d) => n + d.length, 0);
  let waiters: (() => void)[] = [];
  let whenEnded: Promise<GenerationOutcome> | undefined;
  let resolveEnded: ((o: GenerationOutcome) => void) | undefined;
  // Readers are woken once per turn: a tick queued from a promise job runs after every promise
  // job of the turn (the pump appends the deltas of one upstream read in such a chain).
  let wakeQueued = false;
  const wakeNow = () => {
    wakeQueued = false;
    const w = waiters;
    waiters = [];
    for (const f of w) f();
  };
  const wakeAtTurnEnd = () => process.nextTick(wakeNow);
  const wake = () => {
    if (wakeQueued || waiters.length === 0) return;
    wakeQueued = true;
    queueMicrotask(wakeAtTurnEnd);
  };

  const transcript: Transcript = {
    get deltas() {
      return deltas;
    },
    get deltaToolCalls() {
      return toolCalls;
    },
    get deltaReasoning() {
      return reasoning;
    },
    get outcome() {
      return outcome;
    },
    get size() {
      return size;
    },
    push(text, n = 0, calls, thought) {
      if (outcome) return;
      if (thought !== undefined && thought.length > 0) {
        while (reasoning.length < deltas.length) reasoning.push(null);
        reasoning.push(thought);
        size += thought.length;
      }
      if (calls !== undefined && calls.length > 0) {
        while (toolCalls.length < deltas.length) toolCalls.push(null);
        toolCalls.push(calls);
        size += calls.reduce((k, c) => k + (c.id?.length ?? 0) + (c.name?.length ?? 0) + (c.argumentsDelta?.length ?? 0), 0);
      }
      deltas.push(text);
      tokens.push(n);
      size += text.length;
      wake();
    },
    end(o) {
      if (outcome) return;
      outcome = o;
      resolveEnded?.(o);
      wake();
    },
    ended() {
      if (outcome) return Promise.resolve(outcome);
      whenEnded ??= new Promise<GenerationOutcome>((resolve) => (resolveEnded = resolve));
      return whenEnded;
    },
    text() {
      return deltas.length === 1 ? deltas[0] : deltas.join('');
    },
    changed(from, signal) {
      if (deltas.length > from || outcome || signal?.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => {
          signal?.removeEventListener('abort', done);
          resolve();
        };
        waiters.push(done);
        signal?.addEventListener('abort', done, { once: true });
      });
    },
    follow(from = 0, signal) {
      return {
        async *[Symbol.asyncIterator]() {
          let i = Math.max(0, from);
          for (;;) {
            if (signal?.aborted) return;
            if (i < deltas.length) {
              const calls = toolCalls[i];
              const thought = reasoning[i];
              if (thought) yield { type: 'delta', index: i, text: deltas[i], tokens: tokens[i], ...(calls ? { toolCalls: calls } : {}), reasoning: thought };
              else yield calls ? { type: 'delta', index: i, text: deltas[i], tokens: tokens[i], toolCalls: calls } : { type: 'delta', index: i, text: deltas[i], tokens: tokens[i] };
              i++;
              continue;
            }
            if (outcome) {
              yield { type: 'end', outcome };
              return;
            }
            await transcript.changed(i, signal);
          }
        },
      };
    },
    relayEvents() {
      const events = transcript.follow(0);
      return {
        async *[Symbol.asyncIterator]() {
          for await (const ev of events) {
            if (ev.type === 'end') yield { type: 'end', outcome: ev.outcome };
            else yield { type: 'delta', text: ev.text, tokens: ev.tokens, ...(ev.toolCalls ? { toolCalls: ev.toolCalls } : {}), ...(ev.reasoning ? { reasoning: ev.reasoning } : {}) };
          }
        },
      };
    },
  };
  return transcript;
}

/**
 * Reads a transcript from delta `from` (0-based) to its end in batches: `each(i)` for every
 * delta `i` in order (awaited when it returns a promise: backpressure), one wait per turn
 * rather than per delta. Resolves with the outcome, or undefined when `signal` fired first.
 */
export async function readTranscript(
  transcript: Transcript,
  from: number,
  each: (index: number) => Promise<void> | undefined | void,
  signal?: AbortSignal,
): Promise<GenerationOutcome | undefined> {
  let i = Math.max(0, from);
  for (;;) {
    if (signal?.aborted) return undefined;
    while (i < transcript.deltas.length) {
      const pending = each(i++);
      if (pending) await pending;
    }
    const outcome = transcript.outcome;
    if (outcome && i >= transcript.deltas.length) return outcome;
    if (i >= transcript.deltas.length) await transcript.changed(i, signal);
  }
}

/**
 * Waits for a transcript's first event. A generation that failed before any output (its first
 * event is an end with an error and no output tokens) throws `error(outcome)`, so the route
 * answers with an HTTP status rather than a 200 stream.
 */
export async function firstEventOrThrow(transcript: Transcript, error: (o: GenerationOutcome) => Error): Promise<void> {
  if (transcript.deltas.length === 0 && !transcript.outcome) await transcript.changed(0);
  const o = transcript.outcome;
  if (transcript.deltas.length === 0 && o && ((o.finishReason === 'error' && o.usage.outputTokens === 0) || blockedBeforeOutput(o))) throw error(o);
}

/**
 * Reads a relay handle's events into a transcript until its end. Resolves when it ended.
 * Never throws: an iterator failure ends the transcript with `fallback(err)`. `finalOutcome`
 * may restate the relay's outcome for the client (e.g. a stop by a revocation); the usage
 * record is the relay's and is not changed. `onFirstDelta` runs once, just before the first
 * delta reaches any reader (so a route can still set headers from it). Default none.
 */
export async function pumpInto(
  transcript: Transcript,
  events: AsyncIterable<RelayEvent>,
  fallback: (err: unknown) => GenerationOutcome,
  finalOutcome: (outcome: GenerationOutcome) => GenerationOutcome = (o) => o,
  onFirstDelta?: () => void,
): Promise<void> {
  let first = true;
  try {
    await forEachBatch(events, (batch) => {
      for (const ev of batch) {
        if (ev.type === 'delta') {
          if (first) onFirstDelta?.();
          first = false;
          transcript.push(ev.text, ev.tokens, ev.toolCalls, ev.reasoning);
        } else transcript.end(finalOutcome(ev.outcome));
      }
    });
  } catch (err) {
    transcript.end(fallback(err));
  }
  if (!transcript.outcome) transcript.end(fallback(new Error('the relay ended without an outcome')));
}

/**
 * Input moderation blocked the request (issue 15 item 6): the outcome the client is told ends
 * `content_filter` with an error (`content_filter`, 400; or `upstream_unavailable`, 503, when the
 * check failed and the policy fails closed) and no delta was sent, so every route answers that
 * error (before any header of a stream) instead of an empty answer.
 */
export function blockedBeforeOutput(o: GenerationOutcome): boolean {
  // An output cut ends `content_filter` without an error; only an input block carries one.
  return o.finishReason === 'content_filter' && o.error !== undefined;
}

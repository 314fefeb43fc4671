/**
 * Failover before the first token (issue 6: retries and fallback chains). One request, many
 * possible attempts: the chosen revision on another replica, then each revision of its
 * fallback chain in order — but only while nothing has reached the client. Once a first output
 * token exists, the attempt that produced it is the answer: if it fails later, the stream ends
 * with an explicit error and the tokens produced are billed; tokens of two generations are
 * never spliced.
 *
 * Billing stays exactly-once: every attempt but the last possible one runs with
 * `RelayJob.retryBeforeFirstToken`, so an attempt that fails retryably before its first token
 * records nothing (the relay says so with `outcome.unrecorded`); the request's one usage record
 * is the answering attempt's, or — when no attempt could answer — one failure record written
 * here. The reservation was made for the dearest revision of the chain, so any fallback fits it.
 *
 * Every attempt is visible (issue 13): each relay outcome carries the request's attempts so far
 * (`outcome.attempts`, the relay's own last), the next attempt's job takes them as
 * `priorAttempts`, so the one usage record names every failed attempt before the answering one
 * (a failed attempt bills nothing; its upstream's own count stays on its attempt record).
 *
 * Retries are bounded (`maxAttempts`), spaced by jittered exponential backoff, never after a
 * non-retryable failure (a 4xx other than 408/429 from an upstream is not retryable: the
 * adapters decide, see `upstream-errors.ts`), never past the request's deadline, and never once
 * the client has gone. A revision whose circuit breaker is open is skipped (fallback reason
 * `circuit_open`).
 */
import {
  type Caller,
  type Clock,
  type GenerationOutcome,
  type RelayEvent,
  type RelayHandle,
  type RelayJob,
  type RequestPriority,
  type RevisionSpec,
  type SchedulerService,
  type SlotLease,
  type StopCause,
  type UpstreamAttempt,
  createAsyncQueue,
  forEachBatch,
  retryDelayMs,
} from '@weir/core';
import type { Relay } from '@weir/streaming';

/**
 * Health of candidate revisions, keyed by revision id. A circuit-breaker registry from
 * `@weir/routing` (`createBreakerRegistry`) fits as is.
 */
export interface CandidateHealth {
  /** May a call go to `key` now? `probe`: it is one of a half-open breaker's probes. */
  tryAcquire(key: string, nowMs: number): { allowed: true; probe: boolean } | { allowed: false; retryAfterMs: number };
  /** The call's outcome: `failure` for a transient upstream failure, `ignored` for a client that left. `latencyMs`: its TTFT. */
  record(key: string, outcome: 'success' | 'failure' | 'ignored', latencyMs: number | undefined, nowMs: number, wasProbe: boolean): void;
}

/** Failover settings. */
export interface FailoverOptions {
  /** Attempts per request in all, the first included (≥ 1). Default 3. */
  maxAttempts?: number;
  /** Backoff before a retry: `retryDelayMs(attempt, {baseMs, maxMs})`. Defaults 50 and 1,000 ms. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
}

/** One granted attempt: its revision and its lease. */
export interface GrantedAttempt {
  revision: RevisionSpec;
  lease: SlotLease;
  /** When the lease was granted (`clock` ms). */
  grantedAt: number;
  /** The breaker permit was a half-open probe. */
  probe: boolean;
}

/** Everything {@link startWithFailover} needs of the request. */
export interface FailoverRequest {
  /** The job of the first attempt, without its revision and replica (filled per attempt). */
  job: Omit<RelayJob, 'revision' | 'replicaId' | 'queueMs' | 'retryBeforeFirstToken' | 'priorAttempts'>;
  caller: Caller;
  priority?: RequestPriority;
  /** Context tokens and bytes for the scheduler. */
  tokens: number;
  bytes: number;
  /** Prefix affinity for the scheduler (see `ScheduleRequest.affinityKey`). Default none. */
  affinityKey?: string;
  /** The candidates in order: the chosen revision, then its fallback chain. */
  chain: readonly RevisionSpec[];
  /** The first attempt, already granted (by the pipeline, which answers refusals of the first choice itself). */
  first: GrantedAttempt;
  /** Index in `chain` of the first attempt's revision (0 unless the first choice's breaker was open). */
  firstIndex: number;
  /** Why the first attempt is not on `chain[0]` (its breaker was open); undefined when it is. */
  initialFallbackReason?: string;
}

/** Dependencies. */
export interface FailoverDeps {
  relay: Relay;
  scheduler: SchedulerService;
  clock: Clock;
  health?: CandidateHealth;
  options?: FailoverOptions;
  /** Called once per attempt when its lease is to be released, with the attempt's outcome (metrics, the scheduler's estimates). */
  onAttemptEnd(attempt: GrantedAttempt, outcome: GenerationOutcome): void;
  /**
   * Called when no attempt could answer and nothing was recorded: the caller records this outcome
   * once. Resolves once the record has left the process (the terminal event waits for it).
   */
  recordFailure(outcome: GenerationOutcome): Promise<void>;
}

/** The attempt whose events a {@link FailoverHandle} relays now: its revision, and why it is not the first choice. */
export interface AnsweringAttempt {
  revisionId: string;
  /** Set after a fallback: why the first choice did not answer (`upstream_unavailable`, `circuit_open`, …). */
  fallbackReason?: string;
}

/** The handle of a request with failover: a relay handle, and which attempt answers. */
export interface FailoverHandle extends RelayHandle {
  /**
   * The attempt running now (once its first delta is out, the one that answers: no attempt
   * follows an output token). The gateway names it in headers and the generation resource.
   */
  answering(): AnsweringAttempt;
}

/**
 * Starts the first attempt and returns one handle for the whole request: its events are the
 * answering attempt's (a retry is invisible to the reader until the end), `done` resolves with
 * the final outcome — `modelRevision` names the revision that answered, `fallback` says why
 * and from what when it is not the first choice, and `attempts` lists every upstream attempt —
 * `stop` reaches whichever attempt is running, and `answering()` names it. Never throws: a
 * failure ends the stream with an error outcome.
 */
export function startWithFailover(request: FailoverRequest, deps: FailoverDeps): FailoverHandle {
  const { clock } = deps;
  const maxAttempts = Math.max(1, deps.options?.maxAttempts ?? 3);
  const backoff = { baseMs: deps.options?.backoffBaseMs ?? 50, maxMs: deps.options?.backoffMaxMs ?? 1_000 };
  const events = createAsyncQueue<RelayEvent>();
  // Stopped (client gone, cancel): no new attempt. The signal that tells a retry's scheduler
  // wait and backoff is made only when a retry needs one (most requests never retry).
  let isStopped = false;
  let stopSignal: AbortController | undefined;
  const stoppedSignal = (): AbortSignal => {
    stopSignal ??= new AbortController();
    if (isStopped) stopSignal.abort();
    return stopSignal.signal;
  };
  let stopCause: StopCause | undefined;
  let live: RelayHandle | undefined;
  /** The attempt running (or last run): its lease is released if Weir itself fails. */
  let current: GrantedAttempt = request.first;
  /** Why the running attempt is not the first choice (set once a fallback happened). */
  let fallbackReason: string | undefined = request.initialFallbackReason;
  /** The upstream attempts made so far (each failed before any output), oldest first. */
  let prior: UpstreamAttempt[] = [];

  const runAttempt = (attempt: GrantedAttempt, retryable: boolean): RelayHandle => {
    current = attempt;
    const handle = deps.relay.start({
      ...request.job,
      revision: attempt.revision,
      replicaId: attempt.lease.replicaId,
      queueMs: attempt.lease.queueMs,
      ...(retryable ? { retryBeforeFirstToken: true } : {}),
      ...(prior.length > 0 ? { priorAttempts: prior } : {}),
    });
    live = handle;
    if (stopCause) handle.stop(stopCause);
    return handle;
  };

  /**
   * The next attempt after a failure on `failed`: another replica of the same revision (its
   * breaker was already asked for this request), else the next revision with an allowing
   * breaker. `onLeave(revision)` is called once for `failed`'s revision when the request moves
   * past it (its breaker then records the failure).
   */
  const nextAttempt = async (failed: GrantedAttempt, index: number, avoid: string[], onLeave: () => void): Promise<{ attempt: GrantedAttempt; index: number } | undefined> => {
    let left = false;
    const leave = () => {
      if (!left) onLeave();
      left = true;
    };
    for (let i = index; i < request.chain.length; i++) {
      if (isStopped || clock.now() >= request.job.deadlineAt) return undefined;
      const revision = request.chain[i];
      const same = revision.id === failed.revision.id;
      if (!same) leave();
      const permit = same ? { allowed: true as const, probe: failed.probe } : (deps.health?.tryAcquire(revision.id, clock.now()) ?? { allowed: true as const, probe: false });
      if (!permit.allowed) continue;
      const result = await deps.scheduler
        .acquire({
          caller: request.caller,
          revisionId: revision.id,
          tokens: request.tokens,
          inputTokens: request.job.inputTokens,
          bytes: request.bytes,
          ...(request.priority !== undefined ? { priority: request.priority } : {}),
          ...(request.affinityKey !== undefined ? { affinityKey: request.affinityKey } : {}),
          deadlineAt: request.job.deadlineAt,
          signal: stoppedSignal(),
          ...(revision.id === failed.revision.id ? { avoidReplicas: [...avoid] } : {}),
        })
        .catch(() => undefined);
      if (result?.ok) return { attempt: { revision, lease: result.lease, grantedAt: clock.now(), probe: permit.probe }, index: i };
      // The probe slot taken by tryAcquire was not used (for the failed revision, `onLeave` records it).
      if (permit.probe && !same) deps.health?.record(revision.id, 'ignored', undefined, clock.now(), true);
    }
    return undefined;
  };

  const finish = (outcome: GenerationOutcome): GenerationOutcome => {
    events.push({ type: 'end', outcome });
    events.end();
    return outcome;
  };

  const run = async (): Promise<GenerationOutcome> => {
    let attempt = request.first;
    let index = request.firstIndex;
    let attempts = 0;
    let fallback: GenerationOutcome['fallback'] | undefined = request.initialFallbackReason
      ? { reason: request.initialFallbackReason, from: request.chain[0].id, attempts: 1 }
      : undefined;
    const avoid: string[] = [];
    for (;;) {
      attempts++;
      // More attempts are possible: the attempt budget allows one, and some candidate remains
      // (another replica of this revision, or a later revision).
      const retryable = attempts < maxAttempts;
      const handle = runAttempt(attempt, retryable);
      let firstTokenAt: number | undefined;
      let outcome: GenerationOutcome | undefined;
      // The attempt's events, a turn's worth at a time (the relay's queue hands them over in batches).
      await forEachBatch(handle.events, (batch) => {
        for (const ev of batch) {
          if (ev.type === 'delta') {
            firstTokenAt ??= clock.now();
            events.push(ev);
          } else {
            outcome = ev.outcome;
          }
        }
      });
      outcome ??= await handle.done;
      deps.onAttemptEnd(attempt, outcome);
      // The breaker judges a revision per request, not per replica: a failure a retry on another
      // replica of the same revision repairs is the scheduler's business (it ejects the replica),
      // not the revision's — one dead replica of three must not open the revision's breaker.
      const judged = attempt;
      const recordRevision = (result: 'success' | 'failure' | 'ignored') =>
        deps.health?.record(judged.revision.id, result, firstTokenAt === undefined ? undefined : firstTokenAt - judged.grantedAt, clock.now(), judged.probe);
      if (!outcome.unrecorded) {
        recordRevision(revisionVerdict(outcome, judged.revision));
        return finish(fallback ? { ...outcome, fallback: { ...fallback, attempts } } : outcome);
      }

      // Failed before any token, nothing recorded: try elsewhere, after a jittered pause.
      fallback ??= { reason: outcome.error?.code ?? 'upstream_error', from: attempt.revision.id, attempts };
      fallbackReason = fallback.reason;
      // The relay's outcome lists the attempts so far, its own last; the next job carries them.
      prior = outcome.attempts ?? prior;
      avoid.push(attempt.lease.replicaId);
      const pauseMs = Math.min(retryDelayMs(attempts, backoff), Math.max(0, request.job.deadlineAt - clock.now()));
      await sleep(pauseMs, stoppedSignal());
      let revisionRecorded = false;
      const next = await nextAttempt(attempt, index, avoid, () => {
        revisionRecorded = true;
        recordRevision('failure');
      });
      if (!next) {
        if (!revisionRecorded) recordRevision(isStopped ? 'ignored' : 'failure');
        // Nobody could take it: this failure is the answer, recorded once here.
        const { unrecorded: _unrecorded, ...failed } = outcome;
        const final: GenerationOutcome = { ...failed, fallback: { ...fallback, attempts } };
        await deps.recordFailure(final);
        return finish(final);
      }
      if (next.attempt.revision.id !== attempt.revision.id) avoid.length = 0;
      attempt = next.attempt;
      index = next.index;
    }
  };
  // A fault of Weir's own (a relay that throws) must still end the stream once, with one record.
  const done = run().catch(async (err: unknown): Promise<GenerationOutcome> => {
    const failed: GenerationOutcome = {
      finishReason: 'error',
      usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
      costNanoUsd: 0,
      modelRevision: current.revision.id,
      timings: { queueMs: request.first.lease.queueMs, ttftMs: null, totalMs: clock.now() - request.job.arrivedAt },
      error: { code: 'internal', message: `the generation could not be run: ${err instanceof Error ? err.message : String(err)}` },
      usageSource: 'reported',
      ...(prior.length > 0 ? { attempts: prior } : {}),
    };
    // Give the slot back (a lease's release is idempotent, so one already released is untouched).
    current.lease.release();
    await deps.recordFailure(failed).catch(() => undefined);
    return finish(failed);
  });

  return {
    events,
    done,
    answering: () => ({ revisionId: current.revision.id, ...(fallbackReason !== undefined ? { fallbackReason } : {}) }),
    stop(cause) {
      stopCause ??= cause;
      // No new attempt for a client that left or cancelled; the running one stops as the relay
      // decides (after the grace period for a disconnect).
      isStopped = true;
      stopSignal?.abort();
      live?.stop(cause);
    },
  };
}

/** Upstream faults count against a revision; a client's cancel, a deadline or a refused request say nothing about its health. */
const REVISION_FAULTS = new Set(['upstream_error', 'upstream_unavailable', 'upstream_timeout', 'engine_unavailable']);

/**
 * How a request that ended on a revision counts for its breaker. A failure mid-stream on a
 * revision served by Weir's own replicas is a replica's fault (a crash: the scheduler ejects
 * it, and the requests it held are the only ones lost), not the revision's: a replica killed
 * mid-load broke dozens of streams at once and opened the breaker of a revision whose other
 * replicas were healthy. For a hosted upstream (no replicas of Weir's) it counts. A lost or
 * unreachable relay (a split process) never counts: it opened the breakers of a healthy provider.
 */
function revisionVerdict(outcome: GenerationOutcome, revision: RevisionSpec): 'success' | 'failure' | 'ignored' {
  // A relay killed or unreachable broke every stream it carried, on every revision: Weir's fault.
  if (outcome.relayLost || outcome.error?.internal) return 'ignored';
  if (outcome.finishReason === 'error') {
    if (!outcome.error || !REVISION_FAULTS.has(outcome.error.code)) return 'ignored';
    return outcome.usage.outputTokens > 0 && (revision.replicas?.length ?? 0) > 0 ? 'ignored' : 'failure';
  }
  if (outcome.finishReason === 'cancelled' || outcome.finishReason === 'deadline') return 'ignored';
  return 'success';
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * The timers and failure classification every streaming upstream adapter shares (the
 * OpenAI-compatible and the Anthropic one): a first-token timeout while waiting for the first
 * output, an idle timeout between outputs after it, each aborting the call through the
 * adapter's controller, and the mapping of a failed call to a `WeirError`.
 */
import { WeirError } from '@weir/core';
import { egressRefusalError, isEgressRefusal } from '../egress-dispatcher';
import { connectionError, isConnectionError } from './upstream-errors';

/** The running call's timer (one at a time). */
export interface StreamWatchdog {
  /** Starts (or restarts) the timer: `first` until the first output, `idle` between outputs (ms; ≤ 0 = none). */
  arm(kind: 'first' | 'idle', ms: number): void;
  /** Stops the timer. */
  clear(): void;
  /** Whether a timer is running. */
  readonly armed: boolean;
  /** Which timer fired and aborted the call, if one did. */
  readonly timedOut: 'first' | 'idle' | undefined;
}

/** A watchdog that aborts `controller` (an `AbortController`, or anything with its `abort`) when a timer fires. */
export function createStreamWatchdog(controller: { abort(reason?: unknown): void }): StreamWatchdog {
  let timer: NodeJS.Timeout | undefined;
  let timedOut: 'first' | 'idle' | undefined;
  const clear = (): void => {
    if (timer) clearTimeout(timer);
    timer = undefined;
  };
  return {
    arm(kind, ms) {
      clear();
      if (ms > 0) {
        timer = setTimeout(() => {
          timedOut = kind;
          controller.abort(new Error(`upstream ${kind === 'first' ? 'first-token' : 'idle'} timeout`));
        }, ms);
      }
    },
    clear,
    get armed() {
      return timer !== undefined;
    },
    get timedOut() {
      return timedOut;
    },
  };
}

/**
 * A failed upstream call as a `WeirError`: one already is; a first-token timeout is retryable
 * `upstream_timeout`, an idle one is not; a refused or broken connection is
 * `upstream_unavailable` before any output and `upstream_error` after; anything else
 * `upstream_error`; a connection the egress policy refused (a name resolving to a link-local
 * or metadata address) is `engine_unavailable`, not retryable. Timeouts in ms, for the message.
 */
export function classifyUpstreamFailure(
  error: unknown,
  state: { timedOut: 'first' | 'idle' | undefined; outputStarted: boolean; firstTokenTimeoutMs: number; idleTimeoutMs: number },
): WeirError {
  if (error instanceof WeirError) return error;
  if (isEgressRefusal(error)) return egressRefusalError(error);
  if (state.timedOut === 'first') {
    return new WeirError('upstream_timeout', `no first token from the upstream within ${state.firstTokenTimeoutMs} ms`, { retryable: true, cause: error });
  }
  if (state.timedOut === 'idle') return new WeirError('upstream_timeout', `upstream silent for ${state.idleTimeoutMs} ms mid-stream`, { cause: error });
  if (isConnectionError(error)) return connectionError(error, state.outputStarted);
  return new WeirError('upstream_error', 'upstream call failed', { cause: error });
}

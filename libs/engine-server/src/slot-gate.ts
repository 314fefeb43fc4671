import { WeirError } from '@weir/core';

/** Hands out the engine's sequences (slots) in FIFO order, with a bounded wait queue. */
export interface SlotGate {
  /**
   * Resolves with a release function once a slot is free (FIFO among waiters).
   * @throws `WeirError('queue_full', {retryable: true})` at once when `maxQueue` requests already wait;
   *   the signal's reason when it aborts while waiting (the request leaves the queue).
   */
  acquire(signal: AbortSignal): Promise<() => void>;
  /** Slots held right now. */
  inUse(): number;
  /** Requests waiting right now. */
  queued(): number;
}

/** Creates a {@link SlotGate} of `slots` slots and at most `maxQueue` waiters. */
export function createSlotGate(options: { slots: number; maxQueue: number }): SlotGate {
  let inUse = 0;
  const waiters: Array<{ grant: () => void }> = [];

  const release = (): void => {
    const next = waiters.shift();
    if (next) next.grant();
    else inUse -= 1;
  };
  const once = (): (() => void) => {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      release();
    };
  };

  return {
    acquire(signal) {
      if (signal.aborted) return Promise.reject(signal.reason);
      if (inUse < options.slots) {
        inUse += 1;
        return Promise.resolve(once());
      }
      if (waiters.length >= options.maxQueue) {
        return Promise.reject(
          new WeirError('queue_full', `all ${options.slots} sequences are busy and ${options.maxQueue} requests wait`, {
            retryable: true,
            retryAfterMs: 1000,
          }),
        );
      }
      return new Promise((resolve, reject) => {
        const waiter = {
          grant: () => {
            signal.removeEventListener('abort', onAbort);
            // The slot passes straight from the releaser to this waiter (inUse unchanged).
            resolve(once());
          },
        };
        const onAbort = (): void => {
          const index = waiters.indexOf(waiter);
          if (index >= 0) waiters.splice(index, 1);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        waiters.push(waiter);
      });
    },
    inUse: () => inUse,
    queued: () => waiters.length,
  };
}

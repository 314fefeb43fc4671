/**
 * Runs {@link Admission.reconcileReservations} periodically (the admission service and the
 * all-in-one). Passes never overlap; a failed pass is reported and the next one runs on time.
 */
import type { Admission, ReconcileReport } from './admission';

/** Options of {@link startReconciler}. */
export interface ReconcilerOptions {
  /** Time between the end of one pass and the start of the next (ms). Default 10,000. */
  intervalMs?: number;
  /** Called with each pass's report. */
  onReport?(report: ReconcileReport): void;
  /** Called when a pass throws (e.g. the database is away). */
  onError?(err: unknown): void;
}

/** A running reconciler. */
export interface Reconciler {
  /** Runs one pass now (after any pass in progress). */
  runOnce(): Promise<ReconcileReport>;
  /** Stops the timer and waits for a pass in progress. Idempotent. */
  stop(): Promise<void>;
}

/** Starts reconciling every `intervalMs`; the first pass runs after one interval. */
export function startReconciler(admission: Pick<Admission, 'reconcileReservations'>, options: ReconcilerOptions = {}): Reconciler {
  const intervalMs = options.intervalMs ?? 10_000;
  let running: Promise<unknown> = Promise.resolve();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const pass = (): Promise<ReconcileReport> => {
    const next = running.then(() => admission.reconcileReservations());
    running = next.catch(() => undefined);
    return next;
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      pass()
        .then((report) => options.onReport?.(report))
        .catch((err) => options.onError?.(err))
        .finally(schedule);
    }, intervalMs);
    timer.unref();
  };
  schedule();
  return {
    runOnce: pass,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}

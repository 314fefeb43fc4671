import type { Kysely } from 'kysely';
import type { WeirSchema } from './schema';

/** Options of {@link startKeyHolder}. Durations in ms. */
export interface KeyHolderOptions {
  /** This process's id (the `holder` its idempotency claims name, see `createPgIdempotencyStore`). */
  holder: string;
  /** Heartbeat interval. Default 1,000. */
  intervalMs?: number;
  /** The row expires this long after the last heartbeat: the process counts as dead past it. Default 3,000. */
  ttlMs?: number;
  /** Rows of processes dead this long are deleted by the heartbeat (housekeeping). Default 86,400,000. */
  forgetAfterMs?: number;
  /** Epoch ms. Default `Date.now`. */
  now?: () => number;
  /** A failed heartbeat (retried at the next interval). Default: ignore. */
  onError?(err: unknown): void;
}

/** A running heartbeat of {@link startKeyHolder}. */
export interface KeyHolder {
  readonly holder: string;
  /** Stops the heartbeat. The row is left to expire (a stopped process holds no running key after its drain). */
  stop(): void;
}

/**
 * Registers this process in `key_holders` (one statement, awaited: a process that cannot register
 * does not serve) and moves its `expires_at_ms` to now + `ttlMs` every `intervalMs`, so other
 * processes can tell whether the holder of a running idempotency key is alive (issue 13: a retry
 * after a gateway died is answered within seconds). Each beat also deletes rows of processes dead
 * for `forgetAfterMs`. The timer does not keep the process alive.
 * @throws the database error of the first registration.
 */
export async function startKeyHolder(db: Kysely<WeirSchema>, options: KeyHolderOptions): Promise<KeyHolder> {
  const now = options.now ?? Date.now;
  const ttlMs = options.ttlMs ?? 3_000;
  const forgetAfterMs = options.forgetAfterMs ?? 86_400_000;
  const startedAt = now();
  const beat = async () => {
    const at = now();
    await db
      .insertInto('key_holders')
      .values({ holder: options.holder, started_at_ms: startedAt, heartbeat_at_ms: at, expires_at_ms: at + ttlMs })
      .onConflict((oc) => oc.column('holder').doUpdateSet({ heartbeat_at_ms: at, expires_at_ms: at + ttlMs }))
      .execute();
  };
  await beat();
  let beats = 0;
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    beats++;
    const housekeeping = beats % 60 === 0 ? db.deleteFrom('key_holders').where('expires_at_ms', '<', String(now() - forgetAfterMs)).execute() : Promise.resolve();
    void Promise.all([beat(), housekeeping])
      .catch((err: unknown) => options.onError?.(err))
      .finally(() => (running = false));
  }, options.intervalMs ?? 1_000);
  timer.unref();
  return { holder: options.holder, stop: () => clearInterval(timer) };
}

import type { Kysely } from 'kysely';
import type { WeirSchema } from './schema';

/** What {@link expireOrphans} found. */
export interface OrphanReport {
  /** Idempotency keys held by generations that were running (now free for a retry). */
  claimsFreed: number;
  /** Reservations that were held (now expired: reconciliation settles them from the ledger or releases them). */
  reservationsExpired: number;
}

/**
 * Frees what the previous process left when it stopped without finishing its requests
 * (`kill -9`, a crash): idempotency keys of generations that were `running`, and reservations
 * still `held`, which are marked expired now so that the next reservation reconciliation
 * settles them from the ledger (or releases them) instead of after their deadline and grace.
 *
 * Only for a database one process owns — the all-in-one on its embedded PGlite, whose data
 * directory is locked to one process — at start, before serving: with a shared Postgres, other
 * live processes own some of these rows, and reconciliation frees them at their expiry instead.
 */
export async function expireOrphans(db: Kysely<WeirSchema>, now: Date = new Date()): Promise<OrphanReport> {
  return db.transaction().execute(async (trx) => {
    const claims = await trx.deleteFrom('idempotency_keys').where('state', '=', 'running').executeTakeFirst();
    const held = await trx.updateTable('reservations').set({ expires_at: now }).where('state', '=', 'held').where('expires_at', '>', now).executeTakeFirst();
    return { claimsFreed: Number(claims.numDeletedRows), reservationsExpired: Number(held.numUpdatedRows) };
  });
}

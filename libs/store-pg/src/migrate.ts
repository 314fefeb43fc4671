import { type Kysely, Migrator } from 'kysely';
import { WeirError } from '@weir/core';
import type { StoreLogger } from './logger';
import { migrationProvider } from './migrations';
import type { WeirSchema } from './schema';

/**
 * Runs every pending migration of Weir's history (see `migrations/index.ts`) in order.
 *
 * Safe to run concurrently from several processes against one Postgres: kysely takes a
 * transaction-scoped advisory lock (`pg_advisory_xact_lock`) and runs the migrations inside
 * that transaction, so a second runner waits and then finds nothing to do. The same code
 * path works on PGlite. Idempotent: returns `[]` when the schema is current.
 *
 * @returns the names of the migrations applied by this call, in order.
 * @throws WeirError `internal` (with the driver's error as `cause`) when a migration fails;
 *   the failed migration's transaction is rolled back, so the schema is left as it was.
 */
export async function migrateToLatest(db: Kysely<unknown>, logger?: StoreLogger): Promise<string[]> {
  const migrator = new Migrator({ db, provider: migrationProvider });
  const { error, results = [] } = await migrator.migrateToLatest();
  if (error !== undefined) {
    const failed = results.find((r) => r.status === 'Error')?.migrationName;
    logger?.error({ err: error, migration: failed }, 'database migration failed');
    throw new WeirError('internal', `database migration failed${failed ? ` (${failed})` : ''}`, { cause: error });
  }
  const applied = results.filter((r) => r.status === 'Success').map((r) => r.migrationName);
  if (applied.length > 0) logger?.info({ migrations: applied }, 'database migrations applied');
  return applied;
}

/**
 * The migrations of Weir's history not yet applied to `db`, in order (empty when the schema is
 * current). Reads only: for a command that must not change a database it was not asked to.
 * @throws the driver's error when the database cannot be read.
 */
export async function pendingMigrations(db: Kysely<WeirSchema>): Promise<string[]> {
  const migrator = new Migrator({ db: db as Kysely<unknown>, provider: migrationProvider });
  return (await migrator.getMigrations()).filter((m) => m.executedAt === undefined).map((m) => m.name);
}

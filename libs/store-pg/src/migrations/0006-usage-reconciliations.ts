import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0006_usage_reconciliations`: what reconciliation changed in the ledger (issue 4).
 *
 * - `usage_reconciliations`: one row per ledger row settled from an engine's own count (an
 *   `uncertain` record whose relay was lost mid-stream): the counts and cost as first recorded
 *   (which are what the usage stream carries), where the settled count came from, and when.
 *   The ledger row itself holds the settled counts. Written in the same statement that clears
 *   `usage_ledger.uncertain`, so a row is settled exactly once.
 * - `usage_ledger_uncertain_idx`: a partial index, so listing the (few) uncertain rows never
 *   scans the ledger.
 */
export const usageReconciliations: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('usage_reconciliations')
      .addColumn('generation_id', 'text', (c) => c.primaryKey().references('usage_ledger.generation_id').onDelete('cascade'))
      .addColumn('source', 'text', (c) => c.notNull())
      .addColumn('recorded_input_tokens', 'integer', (c) => c.notNull())
      .addColumn('recorded_output_tokens', 'integer', (c) => c.notNull())
      .addColumn('recorded_cached_input_tokens', 'integer', (c) => c.notNull())
      .addColumn('recorded_cost_usd', sql`numeric(20,9)`, (c) => c.notNull())
      .addColumn('reconciled_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await sql`create index usage_ledger_uncertain_idx on usage_ledger (finished_at) where uncertain`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropIndex('usage_ledger_uncertain_idx').execute();
    await db.schema.dropTable('usage_reconciliations').execute();
  },
};

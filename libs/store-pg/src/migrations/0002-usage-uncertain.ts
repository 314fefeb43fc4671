import type { Kysely, Migration } from 'kysely';

/**
 * `0002_usage_uncertain`: `usage_ledger.uncertain` — true when the counts are the gateway's
 * best knowledge after a relay was lost mid-stream (split topology), to be settled by
 * reconciliation against the engines' counters. Existing rows are certain.
 */
export const usageUncertain: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('usage_ledger').addColumn('uncertain', 'boolean', (c) => c.notNull().defaultTo(false)).execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('usage_ledger').dropColumn('uncertain').execute();
  },
};

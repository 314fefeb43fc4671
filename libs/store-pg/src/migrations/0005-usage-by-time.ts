import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0005_usage_by_time`: an index on `usage_ledger (finished_at)` that also carries `tenant_id`
 * and `cost_usd`, for the burn-rate check, which sums every tenant's spend over the last
 * `burnRateBaselineHours` + 1 hours once a minute: a range scan of that window (an index-only
 * scan once the table is vacuumed) instead of a scan of the whole ledger. `/v1/usage` reads
 * one tenant's period through `usage_ledger_tenant_finished_idx` (0001).
 */
export const usageByTime: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    // kysely's index builder has no INCLUDE clause.
    await sql`create index usage_ledger_finished_idx on usage_ledger (finished_at) include (tenant_id, cost_usd)`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropIndex('usage_ledger_finished_idx').execute();
  },
};

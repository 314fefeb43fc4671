import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0016_response_cache_bounds` (docs/caching.md "Where the exact tier lives"): the Postgres exact
 * tier is bounded by bytes, per tenant on every store and in total on every purge, evicting the
 * oldest entries first. Both reads walk an index in `stored_at` order and read `bytes` from it:
 *
 * - `response_cache_tenant_stored_idx (tenant_key, stored_at, exact_key) INCLUDE (bytes)`: a store
 *   sums its tenant's bytes newest-first and deletes what is past the tenant's cap (it replaces
 *   `response_cache_tenant_idx`, whose column it starts with: dropping a tenant still uses it);
 * - `response_cache_stored_idx (stored_at, exact_key) INCLUDE (bytes)`: the purge does the same
 *   over the whole table against the total cap.
 */
export const responseCacheBounds: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`CREATE INDEX response_cache_tenant_stored_idx ON response_cache (tenant_key, stored_at, exact_key) INCLUDE (bytes)`.execute(db);
    await sql`CREATE INDEX response_cache_stored_idx ON response_cache (stored_at, exact_key) INCLUDE (bytes)`.execute(db);
    await sql`DROP INDEX response_cache_tenant_idx`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`CREATE INDEX response_cache_tenant_idx ON response_cache (tenant_key)`.execute(db);
    await sql`DROP INDEX response_cache_stored_idx`.execute(db);
    await sql`DROP INDEX response_cache_tenant_stored_idx`.execute(db);
  },
};

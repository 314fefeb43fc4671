import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0013_response_cache` (issue 15, docs/caching.md):
 *
 * - `usage_ledger.cache_hit`: the response-cache tier that answered the request (`exact`,
 *   `semantic`), null for a live answer. A hit's row bills its cached tokens at the tenant's
 *   cache price; `/v1/usage` counts hits.
 * - `response_cache`: the exact tier shared by a fleet of gateways (`createPgExactCacheTier`).
 *   One row per exact key: the partition it belongs to (tenant internal id, revision, template,
 *   params key — compared on every read, so nothing is read across partitions even on a hash
 *   collision), the answer (JSON: deltas, tool calls, finish reason, usage) and when it expires.
 *   Expired rows are never returned and are deleted by a periodic purge; `tenant_key` is
 *   indexed for dropping a tenant's entries.
 */
export const responseCache: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE usage_ledger ADD COLUMN cache_hit text CHECK (cache_hit IN ('exact', 'semantic'))`.execute(db);
    await sql`
      CREATE TABLE response_cache (
        exact_key text PRIMARY KEY,
        tenant_key text NOT NULL,
        revision_id text NOT NULL,
        template text NOT NULL,
        params_key text NOT NULL,
        answer jsonb NOT NULL,
        bytes integer NOT NULL,
        stored_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL
      )`.execute(db);
    await sql`CREATE INDEX response_cache_tenant_idx ON response_cache (tenant_key)`.execute(db);
    await sql`CREATE INDEX response_cache_expires_idx ON response_cache (expires_at)`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`DROP TABLE response_cache`.execute(db);
    await sql`ALTER TABLE usage_ledger DROP COLUMN cache_hit`.execute(db);
  },
};

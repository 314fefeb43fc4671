import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0014_semantic_cache`: the semantic cache's entries (issue 15 §2) for gateways that share
 * them through Postgres (`createPgSemanticStore`). One row per entry, filed under its partition's
 * full key (tenant, revision, template, params key, embedding revision: `partitionKeyOf`), so a
 * search selects one partition's rows by that key before any similarity is computed. The
 * embedding is a unit `float4` vector as little-endian bytes (`bytea`, `dims` of them); cosine is
 * computed exactly in the gateway process. No prompt text: the guard's signature (`guard`) and
 * the answer. Times are epoch ms of the gateway's clock. pgvector is not required (neither the
 * machines' Postgres nor PGlite has it); docs/caching.md says how to add it where it exists.
 */
export const semanticCache: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`CREATE TABLE semantic_cache_entries (
      id bigserial PRIMARY KEY,
      tenant_key text NOT NULL,
      partition_key text NOT NULL,
      dims integer NOT NULL CHECK (dims > 0),
      vector bytea NOT NULL,
      guard jsonb NOT NULL,
      answer jsonb NOT NULL,
      stored_at_ms bigint NOT NULL,
      expires_at_ms bigint NOT NULL,
      last_used_ms bigint NOT NULL
    )`.execute(db);
    await sql`CREATE INDEX semantic_cache_entries_partition ON semantic_cache_entries (partition_key, last_used_ms)`.execute(db);
    await sql`CREATE INDEX semantic_cache_entries_tenant ON semantic_cache_entries (tenant_key, last_used_ms)`.execute(db);
    await sql`CREATE INDEX semantic_cache_entries_expiry ON semantic_cache_entries (expires_at_ms)`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`DROP TABLE semantic_cache_entries`.execute(db);
  },
};

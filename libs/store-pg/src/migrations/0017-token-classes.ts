import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0017_token_classes` (issue 16 §4; docs/api.md "Usage"): the ledger keeps two more token
 * classes beside `cached_input_tokens` (cache reads), each a part of a total:
 *
 * - `cache_write_input_tokens`: of `input_tokens`, those written to a prompt cache (Anthropic's
 *   `cache_creation_input_tokens`);
 * - `reasoning_tokens`: of `output_tokens`, reasoning tokens (OpenAI's
 *   `completion_tokens_details.reasoning_tokens`).
 *
 * Both `integer NOT NULL DEFAULT 0`: rows written before this migration had neither class (their
 * cost priced every input and output token at the plain prices), so 0 is their truth. On
 * Postgres 11+ and PGlite, adding a column with a constant default rewrites no rows.
 */
export const tokenClasses: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE usage_ledger
      ADD COLUMN cache_write_input_tokens integer NOT NULL DEFAULT 0,
      ADD COLUMN reasoning_tokens integer NOT NULL DEFAULT 0`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE usage_ledger DROP COLUMN reasoning_tokens, DROP COLUMN cache_write_input_tokens`.execute(db);
  },
};

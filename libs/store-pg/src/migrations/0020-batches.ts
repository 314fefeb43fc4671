import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0020_batches` (docs/batch.md): OpenAI-compatible files and batches.
 *
 * - `batch_files` / `batch_file_chunks`: a file's metadata and its bytes in ordered chunks
 *   (`bytea`, a few hundred KiB each), so no file is ever held whole in memory; a file is
 *   visible only once `committed`.
 *   `ord` (both tables) is the creation order lists page by (newest first), finer than seconds.
 * - `batches`: one row per batch, with its counts, usage, pause and the lease a runner holds
 *   while it validates or finalizes it.
 * - `batch_items`: one row per input line, the work queue: runners lease items with
 *   `FOR UPDATE SKIP LOCKED` (`lease_token` fences the result write), `result` is the output
 *   line once done.
 */
export const batches: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`CREATE TABLE batch_files (
      id text PRIMARY KEY,
      tenant_key text NOT NULL,
      purpose text NOT NULL,
      filename text NOT NULL,
      bytes bigint NOT NULL DEFAULT 0,
      lines integer NOT NULL DEFAULT 0,
      committed boolean NOT NULL DEFAULT false,
      created_at_s bigint NOT NULL,
      ord bigserial NOT NULL
    )`.execute(db);
    await sql`CREATE INDEX batch_files_tenant_idx ON batch_files (tenant_key, ord)`.execute(db);
    await sql`CREATE TABLE batch_file_chunks (
      file_id text NOT NULL REFERENCES batch_files (id) ON DELETE CASCADE,
      seq integer NOT NULL,
      data bytea NOT NULL,
      PRIMARY KEY (file_id, seq)
    )`.execute(db);
    await sql`CREATE TABLE batches (
      id text PRIMARY KEY,
      tenant_key text NOT NULL,
      caller jsonb NOT NULL,
      endpoint text NOT NULL,
      input_file_id text NOT NULL,
      completion_window text NOT NULL,
      status text NOT NULL,
      final_status text,
      output_file_id text,
      error_file_id text,
      errors jsonb,
      metadata jsonb,
      model text,
      total integer NOT NULL DEFAULT 0,
      completed integer NOT NULL DEFAULT 0,
      failed integer NOT NULL DEFAULT 0,
      input_tokens bigint NOT NULL DEFAULT 0,
      output_tokens bigint NOT NULL DEFAULT 0,
      cached_tokens bigint NOT NULL DEFAULT 0,
      paused_reason text,
      paused_message text,
      paused_until_ms bigint,
      lease_owner text,
      lease_until_ms bigint,
      created_at_s bigint NOT NULL,
      in_progress_at_s bigint,
      expires_at_s bigint NOT NULL,
      finalizing_at_s bigint,
      completed_at_s bigint,
      failed_at_s bigint,
      expired_at_s bigint,
      cancelling_at_s bigint,
      cancelled_at_s bigint,
      ord bigserial NOT NULL
    )`.execute(db);
    await sql`CREATE INDEX batches_tenant_idx ON batches (tenant_key, ord)`.execute(db);
    await sql`CREATE INDEX batches_status_idx ON batches (status)`.execute(db);
    await sql`CREATE TABLE batch_items (
      batch_id text NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
      idx integer NOT NULL,
      custom_id text NOT NULL,
      body jsonb NOT NULL,
      state text NOT NULL DEFAULT 'pending',
      attempts integer NOT NULL DEFAULT 0,
      not_before_ms bigint NOT NULL DEFAULT 0,
      lease_owner text,
      lease_token text,
      lease_until_ms bigint,
      ok boolean,
      result text,
      PRIMARY KEY (batch_id, idx)
    )`.execute(db);
    await sql`CREATE INDEX batch_items_runnable_idx ON batch_items (batch_id, idx) WHERE state IN ('pending', 'running')`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`DROP TABLE batch_items`.execute(db);
    await sql`DROP TABLE batches`.execute(db);
    await sql`DROP TABLE batch_file_chunks`.execute(db);
    await sql`DROP TABLE batch_files`.execute(db);
  },
};

import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0009_evals`: eval-gated canaries (issue 7, item 6).
 *
 * - `golden_prompts`: a tenant's golden prompts per use case (chat messages, output token cap,
 *   optional output JSON Schema and reviewed answer). Deleted with their tenant.
 * - `eval_runs`: one row per replay of a use case's golden prompts on a candidate revision of
 *   an alias against its stable revision: the scorer and threshold, status (`running`,
 *   `finished`, `failed`), the gate verdict and the report. Kept when the tenant goes (history
 *   the canary gate and audits read), so no foreign key.
 * - `eval_runs_gate_idx`: the canary gate's lookup (latest passing run of a revision on an alias).
 * - `usage_ledger_alias_finished_idx`: the canary guard's per-arm window over the ledger.
 */
export const evals: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('golden_prompts')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id').onDelete('cascade'))
      .addColumn('use_case', 'text', (c) => c.notNull())
      .addColumn('messages', 'jsonb', (c) => c.notNull())
      .addColumn('max_tokens', 'integer', (c) => c.notNull().check(sql`max_tokens >= 1`))
      .addColumn('output_schema', 'jsonb')
      .addColumn('expected', 'text')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema.createIndex('golden_prompts_use_case_idx').on('golden_prompts').columns(['tenant_id', 'use_case', 'created_at', 'id']).execute();

    await db.schema
      .createTable('eval_runs')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('use_case', 'text', (c) => c.notNull())
      .addColumn('alias', 'text', (c) => c.notNull())
      .addColumn('candidate_revision', 'text', (c) => c.notNull())
      .addColumn('stable_revision', 'text', (c) => c.notNull())
      .addColumn('scorer', 'jsonb', (c) => c.notNull())
      .addColumn('threshold', 'double precision', (c) => c.notNull().check(sql`threshold >= 0 and threshold <= 1`))
      .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('running', 'finished', 'failed')`))
      .addColumn('pass', 'boolean')
      .addColumn('report', 'jsonb')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('finished_at', 'timestamptz')
      .execute();
    await sql`create index eval_runs_gate_idx on eval_runs (alias, candidate_revision, created_at desc) where pass`.execute(db);
    await sql`create index eval_runs_tenant_idx on eval_runs (tenant_id, created_at desc)`.execute(db);
    await sql`create index usage_ledger_alias_finished_idx on usage_ledger (model_alias, finished_at) include (model_revision, status, ttft_ms)`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropIndex('usage_ledger_alias_finished_idx').execute();
    await db.schema.dropTable('eval_runs').execute();
    await db.schema.dropTable('golden_prompts').execute();
  },
};

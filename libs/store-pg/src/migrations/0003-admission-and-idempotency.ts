import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0003_admission_and_idempotency`: durable admission state (ADR 0001, Postgres as the atomic
 * arbiter) and idempotency keys.
 *
 * - `admission_scopes`: one row per tenant (`tenant:<id>`) and app (`app:<tenant>/<app>`):
 *   in-flight count and the consumed level of each per-minute token bucket. Reserve locks
 *   the rows it checks (`SELECT … FOR UPDATE`, in scope order), so concurrent admissions on
 *   any number of instances serialise per scope.
 * - `budget_periods`: settled and reserved nano-USD per scope and calendar period (UTC month
 *   or day). The admission invariant is settled + reserved ≤ budget for every row.
 * - `reservations`: one row per admitted request, `held` until settled, released or expired.
 * - `idempotency_keys`: a tenant's `request_id` claimed by one generation, with its body hash
 *   and, once finished, its retained result, until `expires_at`.
 * - `usage_ledger.use_case`: the caller's use case (optional), for `/v1/usage` `by_use_case`.
 */
export const admissionAndIdempotency: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('admission_scopes')
      .addColumn('scope', 'text', (c) => c.primaryKey())
      .addColumn('in_flight', 'integer', (c) => c.notNull().defaultTo(0).check(sql`in_flight >= 0`))
      .addColumn('requests_used', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('tokens_used', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('input_tokens_used', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('output_tokens_used', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('used_at_ms', 'bigint', (c) => c.notNull().defaultTo(0))
      .execute();

    await db.schema
      .createTable('budget_periods')
      .addColumn('scope', 'text', (c) => c.notNull())
      .addColumn('period', 'text', (c) => c.notNull().check(sql`period in ('month', 'day')`))
      .addColumn('starts_on', 'date', (c) => c.notNull())
      .addColumn('settled_nano', 'bigint', (c) => c.notNull().defaultTo(0).check(sql`settled_nano >= 0`))
      .addColumn('reserved_nano', 'bigint', (c) => c.notNull().defaultTo(0).check(sql`reserved_nano >= 0`))
      .addPrimaryKeyConstraint('budget_periods_pk', ['scope', 'period', 'starts_on'])
      .execute();

    await db.schema
      .createTable('reservations')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('app_id', 'text', (c) => c.notNull())
      .addColumn('request_id', 'text', (c) => c.notNull())
      .addColumn('generation_id', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull().check(sql`state in ('held', 'settled', 'released', 'expired')`))
      .addColumn('input_tokens', 'integer', (c) => c.notNull())
      .addColumn('max_output_tokens', 'integer', (c) => c.notNull())
      .addColumn('worst_case_nano', 'bigint', (c) => c.notNull().check(sql`worst_case_nano >= 0`))
      .addColumn('month_starts_on', 'date', (c) => c.notNull())
      .addColumn('day_starts_on', 'date', (c) => c.notNull())
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
      .addColumn('settled_nano', 'bigint')
      .addColumn('settled_input_tokens', 'integer')
      .addColumn('settled_output_tokens', 'integer')
      .addColumn('finished_at', 'timestamptz')
      .addColumn('finished_by', 'text')
      .execute();
    await db.schema.createIndex('reservations_held_expiry_idx').on('reservations').column('expires_at').where(sql.ref('state'), '=', 'held').execute();
    await db.schema.createIndex('reservations_generation_idx').on('reservations').column('generation_id').execute();
    // Reconciliation compares recently finished reservations with the ledger.
    await db.schema.createIndex('reservations_finished_idx').on('reservations').column('finished_at').where(sql.ref('state'), '<>', 'held').execute();

    await db.schema
      .createTable('idempotency_keys')
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('request_id', 'text', (c) => c.notNull())
      .addColumn('body_sha256', 'text', (c) => c.notNull())
      .addColumn('generation_id', 'text', (c) => c.notNull())
      .addColumn('route', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull().check(sql`state in ('running', 'done')`))
      .addColumn('result', 'jsonb')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
      .addPrimaryKeyConstraint('idempotency_keys_pk', ['tenant_id', 'request_id'])
      .execute();
    await db.schema.createIndex('idempotency_keys_expiry_idx').on('idempotency_keys').column('expires_at').execute();

    await db.schema.alterTable('usage_ledger').addColumn('use_case', 'text').execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('usage_ledger').dropColumn('use_case').execute();
    await db.schema.dropTable('idempotency_keys').execute();
    await db.schema.dropTable('reservations').execute();
    await db.schema.dropTable('budget_periods').execute();
    await db.schema.dropTable('admission_scopes').execute();
  },
};

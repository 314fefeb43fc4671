import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0010_money_path`: budget leases and the settlement journal (ADR 0002, superseding ADR 0001's
 * per-request transactions).
 *
 * - `admission_holders`: one row per process that admits (the all-in-one, each admission
 *   instance), with its liveness: a holder whose `expires_at_ms` has passed is dead, and its
 *   leases are reclaimed once every reservation it could have made under them has expired.
 * - `admission_leases`: what a holder drew from a scope — a slice of one budget row
 *   (`kind = 'budget'`: `granted_nano` − `consumed_nano` still held), or a share of the scope's
 *   per-minute limits and concurrency slots (`kind = 'rate'`). Invariants, kept by every
 *   statement that touches them under the scope's or budget row's lock:
 *   settled_nano + leased_nano ≤ budget for every budgeted row;
 *   leased_nano = Σ (granted_nano − consumed_nano) of the row's live leases;
 *   Σ rate shares ≤ the scope's limit, Σ slots ≤ its concurrency limit.
 * - `budget_periods.leased_nano`: the row's money held by leases.
 * - `usage_ledger`: `usage_source` (reported / counted / estimated), the reservation it settled
 *   and the leases and budget periods that covered it, so a dead holder's lease is reconciled
 *   against the ledger exactly.
 * - `usage_ledger.attempts` (`jsonb`): the request's upstream attempts when there was more than
 *   one or its only one failed (null when its first attempt answered: the row itself is that
 *   attempt). A column rather than a table of its own: most requests have one answering attempt,
 *   and the settlement applier writes no extra row, statement or JSON for them (measured in
 *   `tools/bench/settlement-journal.ts`: an attempt as a row cost ~40 µs of PGlite CPU, as an
 *   always-written JSON object ~9 µs; not written, nothing).
 * - `journal_positions`: how far each settlement journal has been applied, written in the same
 *   transaction as what it applied, so an entry is applied exactly once.
 * - `idempotency_keys.state` may be `interrupted`: the generation holding the key died (or
 *   failed after output) and a retry is told so instead of being charged again.
 * - `idempotency_keys.holder` and `key_holders`: the process (a split gateway) that claimed a
 *   running key, and its liveness (a heartbeat moves `expires_at_ms`), so a retry of a key whose
 *   gateway died is answered from the relay's settlement within seconds instead of waiting out
 *   the claim's lease (deadline + grace) and running the request again.
 */
export const moneyPath: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('admission_holders')
      .addColumn('holder', 'text', (c) => c.primaryKey())
      .addColumn('mode', 'text', (c) => c.notNull().check(sql`mode in ('exclusive', 'shared')`))
      .addColumn('started_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('heartbeat_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('expires_at_ms', 'bigint', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('admission_leases')
      .addColumn('lease_id', 'text', (c) => c.primaryKey())
      .addColumn('holder', 'text', (c) => c.notNull())
      .addColumn('scope', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('budget', 'rate')`))
      // Budget leases: one budget row.
      .addColumn('period', 'text', (c) => c.check(sql`period in ('month', 'day')`))
      .addColumn('starts_on', 'date')
      .addColumn('granted_nano', 'bigint', (c) => c.notNull().defaultTo(0).check(sql`granted_nano >= 0`))
      .addColumn('consumed_nano', 'bigint', (c) => c.notNull().defaultTo(0).check(sql`consumed_nano >= 0`))
      // Rate leases: shares of the scope's per-minute limits and its concurrency slots.
      .addColumn('requests_per_minute', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('tokens_per_minute', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('input_tokens_per_minute', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('output_tokens_per_minute', 'double precision', (c) => c.notNull().defaultTo(0))
      .addColumn('slots', 'integer', (c) => c.notNull().defaultTo(0).check(sql`slots >= 0`))
      // The latest reservation expiry the holder may use this lease for (epoch ms): the lease
      // cannot be reclaimed before it, so a reservation never outlives its cover.
      .addColumn('hold_until_ms', 'bigint', (c) => c.notNull())
      .addColumn('created_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('updated_at_ms', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('admission_leases_holder_idx').on('admission_leases').column('holder').execute();
    await db.schema.createIndex('admission_leases_scope_idx').on('admission_leases').columns(['scope', 'kind']).execute();

    await db.schema.alterTable('budget_periods').addColumn('leased_nano', 'bigint', (c) => c.notNull().defaultTo(0).check(sql`leased_nano >= 0`)).execute();

    await db.schema
      .alterTable('usage_ledger')
      .addColumn('usage_source', 'text', (c) => c.notNull().defaultTo('reported').check(sql`usage_source in ('reported', 'counted', 'estimated')`))
      .execute();
    await db.schema.alterTable('usage_ledger').addColumn('reservation_id', 'text').execute();
    await db.schema.alterTable('usage_ledger').addColumn('lease_ids', sql`text[]`).execute();
    await db.schema.alterTable('usage_ledger').addColumn('budget_month', 'date').execute();
    await db.schema.alterTable('usage_ledger').addColumn('budget_day', 'date').execute();
    await db.schema.alterTable('usage_ledger').addColumn('attempts', 'jsonb').execute();
    await sql`create index usage_ledger_estimated_idx on usage_ledger (finished_at) where usage_source = 'estimated'`.execute(db);

    await db.schema
      .createTable('journal_positions')
      .addColumn('journal', 'text', (c) => c.primaryKey())
      .addColumn('segment', 'bigint', (c) => c.notNull())
      .addColumn('offset', 'bigint', (c) => c.notNull())
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await sql`alter table idempotency_keys drop constraint if exists idempotency_keys_state_check`.execute(db);
    await sql`alter table idempotency_keys add constraint idempotency_keys_state_check check (state in ('running', 'done', 'interrupted'))`.execute(db);
    // Which process holds a running key (its liveness tells a retry whether to wait).
    await db.schema.alterTable('idempotency_keys').addColumn('holder', 'text').execute();
    await db.schema
      .createTable('key_holders')
      .addColumn('holder', 'text', (c) => c.primaryKey())
      .addColumn('started_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('heartbeat_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('expires_at_ms', 'bigint', (c) => c.notNull())
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('key_holders').execute();
    await db.schema.alterTable('idempotency_keys').dropColumn('holder').execute();
    await sql`alter table idempotency_keys drop constraint if exists idempotency_keys_state_check`.execute(db);
    await sql`alter table idempotency_keys add constraint idempotency_keys_state_check check (state in ('running', 'done'))`.execute(db);
    await db.schema.dropTable('journal_positions').execute();
    await db.schema.dropIndex('usage_ledger_estimated_idx').execute();
    for (const c of ['attempts', 'budget_day', 'budget_month', 'lease_ids', 'reservation_id', 'usage_source']) await db.schema.alterTable('usage_ledger').dropColumn(c).execute();
    await db.schema.alterTable('budget_periods').dropColumn('leased_nano').execute();
    await db.schema.dropTable('admission_leases').execute();
    await db.schema.dropTable('admission_holders').execute();
  },
};

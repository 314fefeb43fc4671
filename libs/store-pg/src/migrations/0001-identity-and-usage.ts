import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0001_identity_and_usage`: tenants, apps, hashed API keys and the usage ledger.
 *
 * The ledger has no foreign keys on purpose: it is an append-only history that must accept
 * every record a relay produced (even for a tenant the configuration has since removed), so
 * a usage write can never fail on referential integrity and stall the batched sink.
 */
export const identityAndUsage: Migration = {
  // Migrations receive an untyped Kysely: they describe the schema's past, not its present.
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('tenants')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await db.schema
      .createTable('apps')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema.createIndex('apps_tenant_id_idx').on('apps').column('tenant_id').execute();

    await db.schema
      .createTable('api_keys')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('prefix', 'text', (c) => c.notNull().unique())
      .addColumn('sha256', 'text', (c) => c.notNull().unique().check(sql`sha256 ~ '^[0-9a-f]{64}$'`))
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id').onDelete('cascade'))
      .addColumn('app_id', 'text', (c) => c.notNull().references('apps.id').onDelete('cascade'))
      .addColumn('label', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('revoked_at', 'timestamptz')
      .execute();
    await db.schema.createIndex('api_keys_tenant_id_idx').on('api_keys').column('tenant_id').execute();

    await db.schema
      .createTable('usage_ledger')
      .addColumn('generation_id', 'text', (c) => c.primaryKey())
      .addColumn('request_id', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('app_id', 'text', (c) => c.notNull())
      .addColumn('api_key_id', 'text', (c) => c.notNull())
      .addColumn('route', 'text', (c) => c.notNull())
      .addColumn('model_alias', 'text', (c) => c.notNull())
      .addColumn('model_revision', 'text', (c) => c.notNull())
      .addColumn('input_tokens', 'integer', (c) => c.notNull())
      .addColumn('output_tokens', 'integer', (c) => c.notNull())
      .addColumn('cached_input_tokens', 'integer', (c) => c.notNull())
      .addColumn('cost_usd', sql`numeric(20, 9)`, (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('finish_reason', 'text', (c) => c.notNull())
      .addColumn('error_code', 'text')
      .addColumn('queue_ms', 'integer', (c) => c.notNull())
      .addColumn('ttft_ms', 'integer')
      .addColumn('total_ms', 'integer', (c) => c.notNull())
      .addColumn('started_at', 'timestamptz', (c) => c.notNull())
      .addColumn('finished_at', 'timestamptz', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('usage_ledger_tenant_finished_idx')
      .on('usage_ledger')
      .columns(['tenant_id', 'finished_at'])
      .execute();
  },

  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('usage_ledger').execute();
    await db.schema.dropTable('api_keys').execute();
    await db.schema.dropTable('apps').execute();
    await db.schema.dropTable('tenants').execute();
  },
};

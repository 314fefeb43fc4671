import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0008_control_plane`: the control plane's configuration store (issue 7). Configuration
 * entities are kept in the configuration file's own snake_case shapes as `jsonb`, so a
 * snapshot is composed by assembling rows into a configuration-file object:
 *
 * - `admin_tokens`: admin API tokens (`wa_<prefix>_<secret>`), stored as SHA-256 only.
 * - `tenant_policies`: a tenant's policy (limits, budgets, routes, redaction profile, content
 *   logging, kill switch, disabled, dedicated pool…), one row per tenant.
 * - `apps.limits`: an app's limits (the file's `tenants[].apps[].limits`).
 * - `model_revisions`: immutable revision specs; only `deprecation` may change.
 * - `model_aliases`, `pools`, `platform_defaults` (a singleton row).
 * - `config_snapshots`: every composed configuration, by monotonic version.
 * - `audit_log`: who changed what, with before and after.
 * - `revocations`: fast-path revocations by monotonic `seq`, with when each was published.
 */
export const controlPlane: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('admin_tokens')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('prefix', 'text', (c) => c.notNull().unique())
      .addColumn('sha256', 'text', (c) => c.notNull().unique().check(sql`sha256 ~ '^[0-9a-f]{64}$'`))
      .addColumn('role', 'text', (c) => c.notNull().check(sql`role in ('admin', 'viewer')`))
      .addColumn('label', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('revoked_at', 'timestamptz')
      .execute();

    await db.schema
      .createTable('tenant_policies')
      .addColumn('tenant_id', 'text', (c) => c.primaryKey().references('tenants.id').onDelete('cascade'))
      .addColumn('policy', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await db.schema.alterTable('apps').addColumn('limits', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`)).execute();

    await db.schema
      .createTable('model_revisions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('spec', 'jsonb', (c) => c.notNull())
      .addColumn('deprecation', 'jsonb')
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await db.schema
      .createTable('model_aliases')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('spec', 'jsonb', (c) => c.notNull())
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await db.schema
      .createTable('pools')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('spec', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await db.schema
      .createTable('platform_defaults')
      // A singleton: the only allowed key is true.
      .addColumn('id', 'boolean', (c) => c.primaryKey().defaultTo(true).check(sql`id`))
      .addColumn('spec', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();

    await db.schema
      .createTable('config_snapshots')
      .addColumn('version', 'bigint', (c) => c.primaryKey().check(sql`version >= 1`))
      .addColumn('schema_version', 'integer', (c) => c.notNull())
      .addColumn('issued_at', 'timestamptz', (c) => c.notNull())
      .addColumn('config', 'jsonb', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('published_at', 'timestamptz')
      .execute();

    await db.schema
      .createTable('audit_log')
      .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
      .addColumn('at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('actor_id', 'text', (c) => c.notNull())
      .addColumn('actor_label', 'text', (c) => c.notNull())
      .addColumn('action', 'text', (c) => c.notNull())
      .addColumn('entity_type', 'text', (c) => c.notNull())
      .addColumn('entity_id', 'text', (c) => c.notNull())
      .addColumn('before', 'jsonb')
      .addColumn('after', 'jsonb')
      .addColumn('snapshot_version', 'bigint')
      .execute();
    await db.schema.createIndex('audit_log_entity_idx').on('audit_log').columns(['entity_type', 'entity_id', 'id']).execute();
    await db.schema.createIndex('audit_log_at_idx').on('audit_log').column('at').execute();

    await db.schema
      .createTable('revocations')
      .addColumn('seq', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
      .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('api_key', 'tenant', 'kill_switch')`))
      .addColumn('tenant_id', 'text')
      .addColumn('api_key_id', 'text')
      .addColumn('api_key_sha256', 'text')
      .addColumn('enabled', 'boolean')
      .addColumn('issued_at', 'timestamptz', (c) => c.notNull())
      .addColumn('published_at', 'timestamptz')
      .execute();
  },

  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('revocations').execute();
    await db.schema.dropTable('audit_log').execute();
    await db.schema.dropTable('config_snapshots').execute();
    await db.schema.dropTable('platform_defaults').execute();
    await db.schema.dropTable('pools').execute();
    await db.schema.dropTable('model_aliases').execute();
    await db.schema.dropTable('model_revisions').execute();
    await db.schema.alterTable('apps').dropColumn('limits').execute();
    await db.schema.dropTable('tenant_policies').execute();
    await db.schema.dropTable('admin_tokens').execute();
  },
};

import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0015_redaction_profiles` (issue 15, item 5): the control plane's named PII redaction profiles
 * (the configuration file's `redaction_profiles`), one row per profile: `id` is its name, `spec`
 * its file shape (`recognizers`, `custom_patterns`, `replacement`, …), checked by `parseConfig`
 * on the composed configuration before a change commits. The built-in `default` and `strict`
 * profiles are not stored.
 */
export const redactionProfiles: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('redaction_profiles')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('spec', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
      .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('redaction_profiles').execute();
  },
};

import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0012_internal_ids` (issue 14 §4, nothing of a tenant outlives it): every tenant and app gets
 * an immutable internal id (`uid`), distinct from its display id (a slug an operator may reuse
 * after deleting it). Everything stored or cached about a tenant is filed under its `uid`, so a
 * tenant created later with the same slug starts with none of it.
 *
 * - `tenants.uid`, `apps.uid`: `<id>~<16 hex>`, set by a trigger on insert (an insert may also
 *   name one), unique, never changed. Rows that exist when the migration runs keep their id as
 *   their `uid`, so the state already filed under the slug (idempotency keys, budget rows,
 *   leases, ledger rows) stays theirs; `~` is not allowed in ids, so no new `uid` equals a slug.
 * - `usage_ledger.tenant_uid`, `app_uid`: the internal ids the row was recorded for; null on
 *   rows written before (their slug was their internal id). `/v1/usage` reads
 *   `coalesce(tenant_uid, tenant_id)`, indexed with `finished_at`. A deleted tenant's rows stay
 *   (invoices need them) under its retired internal id.
 */
export const internalIds: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    for (const table of ['tenants', 'apps']) {
      await sql`ALTER TABLE ${sql.table(table)} ADD COLUMN uid text`.execute(db);
      await sql`UPDATE ${sql.table(table)} SET uid = id`.execute(db);
      await sql`ALTER TABLE ${sql.table(table)} ALTER COLUMN uid SET NOT NULL`.execute(db);
      await sql`CREATE UNIQUE INDEX ${sql.raw(`${table}_uid_key`)} ON ${sql.table(table)} (uid)`.execute(db);
    }
    await sql`
      CREATE FUNCTION weir_internal_id() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.uid IS NULL THEN
          NEW.uid := NEW.id || '~' || substr(md5(random()::text || clock_timestamp()::text || NEW.id), 1, 16);
        END IF;
        RETURN NEW;
      END
      $$`.execute(db);
    await sql`CREATE TRIGGER tenants_internal_id BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION weir_internal_id()`.execute(db);
    await sql`CREATE TRIGGER apps_internal_id BEFORE INSERT ON apps FOR EACH ROW EXECUTE FUNCTION weir_internal_id()`.execute(db);
    await sql`ALTER TABLE usage_ledger ADD COLUMN tenant_uid text, ADD COLUMN app_uid text`.execute(db);
    await sql`CREATE INDEX usage_ledger_tenant_uid_finished_idx ON usage_ledger ((coalesce(tenant_uid, tenant_id)), finished_at)`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`DROP INDEX usage_ledger_tenant_uid_finished_idx`.execute(db);
    await sql`ALTER TABLE usage_ledger DROP COLUMN tenant_uid, DROP COLUMN app_uid`.execute(db);
    await sql`DROP TRIGGER apps_internal_id ON apps`.execute(db);
    await sql`DROP TRIGGER tenants_internal_id ON tenants`.execute(db);
    await sql`DROP FUNCTION weir_internal_id()`.execute(db);
    await sql`ALTER TABLE apps DROP COLUMN uid`.execute(db);
    await sql`ALTER TABLE tenants DROP COLUMN uid`.execute(db);
  },
};

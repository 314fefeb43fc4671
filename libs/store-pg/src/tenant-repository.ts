import type { Kysely } from 'kysely';
import { WeirError } from '@weir/core';
import type { WeirSchema } from './schema';

/** A tenant as stored, with its apps. */
export interface StoredTenant {
  id: string;
  name: string;
  createdAt: Date;
  /** The tenant's apps, ordered by id. */
  apps: { id: string; name: string }[];
}

/** Tenants and apps (the identity half of the configuration). */
export interface TenantRepository {
  /** Creates a tenant or renames an existing one (`createdAt` is kept). */
  upsertTenant(tenant: { id: string; name: string }): Promise<void>;
  /**
   * Creates an app or renames an existing one. The tenant must exist.
   * @throws WeirError `conflict` when the app id already belongs to another tenant (an app
   *   never moves between tenants: its keys would silently change owner); the driver's error
   *   when the tenant does not exist.
   */
  upsertApp(app: { id: string; tenantId: string; name: string }): Promise<void>;
  /** A tenant with its apps, or undefined. */
  getTenant(id: string): Promise<StoredTenant | undefined>;
}

/** Creates the tenant repository over an open database. */
export function createTenantRepository(db: Kysely<WeirSchema>): TenantRepository {
  return {
    async upsertTenant({ id, name }) {
      await db
        .insertInto('tenants')
        .values({ id, name })
        .onConflict((oc) => oc.column('id').doUpdateSet((eb) => ({ name: eb.ref('excluded.name') })))
        .execute();
    },

    async upsertApp({ id, tenantId, name }) {
      const row = await db
        .insertInto('apps')
        .values({ id, tenant_id: tenantId, name })
        .onConflict((oc) =>
          oc
            .column('id')
            .doUpdateSet((eb) => ({ name: eb.ref('excluded.name') }))
            .where('apps.tenant_id', '=', tenantId),
        )
        .returning('id')
        .executeTakeFirst();
      if (!row) throw new WeirError('conflict', `app ${id} already belongs to another tenant`, { param: 'app_id' });
    },

    async getTenant(id) {
      const tenant = await db.selectFrom('tenants').selectAll().where('id', '=', id).executeTakeFirst();
      if (!tenant) return undefined;
      const apps = await db.selectFrom('apps').select(['id', 'name']).where('tenant_id', '=', id).orderBy('id').execute();
      return { id: tenant.id, name: tenant.name, createdAt: tenant.created_at, apps };
    },
  };
}

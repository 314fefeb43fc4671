import type { Kysely } from 'kysely';
import { type ApiKeyIdentity, type ApiKeyStore, WeirError } from '@weir/core';
import type { WeirSchema } from './schema';

/** A key to store: its hash and owner, never its plaintext. */
export interface NewApiKey {
  id: string;
  /** Public prefix of `wk_<prefix>_<secret>`; unique across all keys. */
  prefix: string;
  /** SHA-256 of the whole key, 64 lowercase hex chars (core's `hashApiKey`); unique. */
  sha256: string;
  tenantId: string;
  appId: string;
  /** Free text for operators (e.g. "ci pipeline"); default "". */
  label?: string;
}

/** Hashed API keys in Postgres: core's {@link ApiKeyStore} plus the admin side. */
export interface ApiKeyRepository extends ApiKeyStore {
  /**
   * Resolves an active key by its SHA-256 hex, with its tenant's and app's internal ids;
   * undefined when unknown or revoked. One indexed lookup: put {@link createCachedApiKeyStore} in front of it on the request path.
   */
  findByHash(sha256Hex: string): Promise<ApiKeyIdentity | undefined>;
  /**
   * Stores a key. `tenantId` and `appId` must exist (foreign keys).
   * @throws WeirError `invalid_request` when `sha256` is not 64 lowercase hex chars (a
   *   guard against storing a plaintext key by mistake); the driver's error on a duplicate
   *   id, prefix or hash, or an unknown tenant/app.
   */
  insertKey(key: NewApiKey): Promise<void>;
  /**
   * Revokes a key (idempotent: the first revocation time is kept).
   * @returns true when the key exists (now revoked), false when no key has this id.
   */
  revoke(id: string): Promise<boolean>;
  /** Number of active (not revoked) keys of a tenant. */
  countKeys(tenantId: string): Promise<number>;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** Creates the API key repository over an open database. */
export function createApiKeyRepository(db: Kysely<WeirSchema>): ApiKeyRepository {
  return {
    async findByHash(sha256Hex) {
      // The tenant's and app's internal ids come with the key (one indexed join): what the
      // request's state is filed under (issue 14 §4).
      const row = await db
        .selectFrom('api_keys')
        .innerJoin('tenants', 'tenants.id', 'api_keys.tenant_id')
        .innerJoin('apps', 'apps.id', 'api_keys.app_id')
        .select(['api_keys.id', 'api_keys.prefix', 'api_keys.tenant_id', 'api_keys.app_id', 'tenants.uid as tenant_uid', 'apps.uid as app_uid'])
        .where('api_keys.sha256', '=', sha256Hex)
        .where('api_keys.revoked_at', 'is', null)
        .executeTakeFirst();
      return row && { keyId: row.id, prefix: row.prefix, tenantId: row.tenant_id, appId: row.app_id, tenantUid: row.tenant_uid, appUid: row.app_uid };
    },

    async insertKey(key) {
      if (!SHA256_HEX.test(key.sha256)) {
        throw new WeirError('invalid_request', 'sha256 must be the SHA-256 of the key as 64 lowercase hex characters', {
          param: 'sha256',
        });
      }
      await db
        .insertInto('api_keys')
        .values({
          id: key.id,
          prefix: key.prefix,
          sha256: key.sha256,
          tenant_id: key.tenantId,
          app_id: key.appId,
          label: key.label ?? '',
        })
        .execute();
    },

    async revoke(id) {
      const result = await db
        .updateTable('api_keys')
        .set((eb) => ({ revoked_at: eb.fn.coalesce('revoked_at', eb.fn<Date>('now')) }))
        .where('id', '=', id)
        .executeTakeFirst();
      return result.numUpdatedRows > 0n;
    },

    async countKeys(tenantId) {
      const row = await db
        .selectFrom('api_keys')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('tenant_id', '=', tenantId)
        .where('revoked_at', 'is', null)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },
  };
}

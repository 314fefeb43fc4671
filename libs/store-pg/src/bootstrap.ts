import type { Kysely } from 'kysely';
import { type PlatformConfig, WeirError, checkSuppliedApiKey, displayPrefixOf, hashApiKey, mintApiKey, newId } from '@weir/core';
import { createApiKeyRepository } from './api-key-repository';
import type { StoreLogger } from './logger';
import type { WeirSchema } from './schema';
import { createTenantRepository } from './tenant-repository';

/** What {@link bootstrapTenants} did about the demo key. */
export interface BootstrapResult {
  /** The demo key's plaintext, only when it was created or registered by this call (show it once). */
  demoApiKey?: string;
  /** The public prefix of the demo tenant's (newest active) key, when there is one. */
  demoKeyPrefix?: string;
}

/**
 * Upserts the configured tenants and apps, and makes sure the demo tenant (`demo`, else
 * the first tenant) has a key: the supplied `WEIR_DEMO_API_KEY` if given (stored hashed),
 * else a new random key when the tenant never had one (a tenant whose keys were all revoked
 * gets none: revocation is deliberate). The plaintext is returned only when this call
 * created or registered the key: an existing key is never shown again. Safe to run from
 * several processes at once (upserts; a key inserted concurrently by another process is not
 * an error).
 *
 * @throws WeirError `invalid_request` when the supplied key is malformed; `conflict` when
 *   another key already uses its public prefix.
 */
export async function bootstrapTenants(db: Kysely<WeirSchema>, config: PlatformConfig, suppliedKey: string | undefined, logger?: StoreLogger): Promise<BootstrapResult> {
  const tenants = createTenantRepository(db);
  const keys = createApiKeyRepository(db);
  for (const t of config.tenants) {
    await tenants.upsertTenant({ id: t.id, name: t.name });
    for (const app of t.apps) await tenants.upsertApp({ id: app.id, tenantId: t.id, name: app.name });
  }
  const demo = config.tenants.find((t) => t.id === 'demo') ?? config.tenants[0];
  if (!demo || demo.apps.length === 0) return { demoApiKey: undefined, demoKeyPrefix: undefined };
  const app = demo.apps[0];
  if (suppliedKey) {
    const problem = checkSuppliedApiKey(suppliedKey);
    if (problem) throw new WeirError('invalid_request', `WEIR_DEMO_API_KEY: ${problem}`);
    const prefix = displayPrefixOf(suppliedKey);
    if (await keys.findByHash(hashApiKey(suppliedKey))) return { demoKeyPrefix: prefix };
    const taken = await db.selectFrom('api_keys').select(['sha256']).where('prefix', '=', prefix).executeTakeFirst();
    if (taken && taken.sha256 !== hashApiKey(suppliedKey)) {
      throw new WeirError(
        'conflict',
        `WEIR_DEMO_API_KEY: another key already uses the prefix wk_${prefix}_ (prefixes are unique); choose a key with a different prefix`,
      );
    }
    try {
      await keys.insertKey({ id: newId('key'), prefix, sha256: hashApiKey(suppliedKey), tenantId: demo.id, appId: app.id, label: 'demo (WEIR_DEMO_API_KEY)' });
      logger?.info({ tenant: demo.id, app: app.id, prefix }, 'demo API key registered');
    } catch (err) {
      // Another process registered the same key between our lookup and insert.
      if (await keys.findByHash(hashApiKey(suppliedKey))) return { demoKeyPrefix: prefix };
      throw err;
    }
    return { demoApiKey: suppliedKey, demoKeyPrefix: prefix };
  }
  const existing = await db
    .selectFrom('api_keys')
    .select(['prefix', 'revoked_at', 'label'])
    .where('tenant_id', '=', demo.id)
    .orderBy('created_at', 'desc')
    .execute();
  // The demo key this bootstrap made (or registered), else the newest active key of the tenant:
  // never a key a platform engineer created later for another app.
  const active = existing.filter((k) => k.revoked_at === null);
  if (existing.length > 0) return { demoKeyPrefix: (active.find((k) => k.label?.startsWith('demo (')) ?? active[0])?.prefix };
  const minted = mintApiKey();
  await keys.insertKey({ id: newId('key'), prefix: minted.prefix, sha256: minted.sha256, tenantId: demo.id, appId: app.id, label: 'demo (generated)' });
  logger?.info({ tenant: demo.id, app: app.id, prefix: minted.prefix }, 'demo API key created');
  return { demoApiKey: minted.plaintext, demoKeyPrefix: minted.prefix };
}

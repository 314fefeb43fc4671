import { defaultConfig } from '@weir/config';
import { hashApiKey, mintApiKey } from '@weir/core';
import { createApiKeyRepository } from './api-key-repository';
import { bootstrapTenants } from './bootstrap';
import { createTestDatabase, type TestDatabase } from './testing';

describe('bootstrapTenants (real Postgres)', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database?.close();
  });

  it('creates a demo key once, never shows it again, and registers a supplied key idempotently from concurrent processes', async () => {
    const config = defaultConfig();
    const first = await bootstrapTenants(database.db, config, undefined);
    expect(first.demoApiKey).toMatch(/^wk_[a-z0-9]{8}_/);
    const again = await bootstrapTenants(database.db, config, undefined);
    expect(again.demoApiKey).toBeUndefined();

    expect(again.demoKeyPrefix).toBe(first.demoKeyPrefix);
    const supplied = mintApiKey().plaintext;
    const results = await Promise.all([1, 2, 3].map(() => bootstrapTenants(database.db, config, supplied)));
    // Registered once: exactly one call shows it; every call knows its prefix.
    expect(results.filter((r) => r.demoApiKey === supplied)).toHaveLength(1);
    for (const r of results) expect(r.demoKeyPrefix).toBe(supplied.slice(3, 11));
    expect((await bootstrapTenants(database.db, config, supplied)).demoApiKey).toBeUndefined();
    const found = await createApiKeyRepository(database.db).findByHash(hashApiKey(supplied));
    expect(found).toMatchObject({ tenantId: 'demo', appId: 'demo-app' });
    await expect(bootstrapTenants(database.db, config, 'sk short')).rejects.toThrow(/WEIR_DEMO_API_KEY/);
    const clash = `${supplied.slice(0, 12)}${'Z'.repeat(43)}`;
    await expect(bootstrapTenants(database.db, config, clash)).rejects.toThrow(/already uses the prefix/);
  });

  it('names the demo key on a restart, not a key created later for another app of the tenant', async () => {
    const config = defaultConfig();
    const db = await createTestDatabase();
    try {
      const first = await bootstrapTenants(db.db, config, undefined);
      // A platform engineer later creates a key of the demo tenant (newer than the demo key).
      await new Promise((r) => setTimeout(r, 5));
      const later = mintApiKey();
      await createApiKeyRepository(db.db).insertKey({ id: 'key_later', prefix: later.prefix, sha256: later.sha256, tenantId: 'demo', appId: 'demo-app', label: 'laptop' });
      const again = await bootstrapTenants(db.db, config, undefined);
      expect(again.demoKeyPrefix).toBe(first.demoKeyPrefix);
      expect(again.demoKeyPrefix).not.toBe(later.prefix);
    } finally {
      await db.close();
    }
  });

  it('does not mint a new demo key when every key of the tenant was revoked', async () => {
    const config = defaultConfig();
    const keys = createApiKeyRepository(database.db);
    const rows = await database.db.selectFrom('api_keys').select('id').where('tenant_id', '=', 'demo').execute();
    for (const r of rows) await keys.revoke(r.id);
    const after = await bootstrapTenants(database.db, config, undefined);
    expect(after.demoApiKey).toBeUndefined();
    expect(await keys.countKeys('demo')).toBe(0);
  });
});

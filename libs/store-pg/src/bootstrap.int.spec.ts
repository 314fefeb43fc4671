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

    const supplied = mintApiKey().plaintext;
    const results = await Promise.all([1, 2, 3].map(() => bootstrapTenants(database.db, config, supplied)));
    for (const r of results) expect(r.demoApiKey).toBe(supplied);
    const found = await createApiKeyRepository(database.db).findByHash(hashApiKey(supplied));
    expect(found).toMatchObject({ tenantId: 'demo', appId: 'demo-app' });
    await expect(bootstrapTenants(database.db, config, 'sk-not-a-weir-key')).rejects.toThrow(/WEIR_DEMO_API_KEY/);
  });
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { newId } from '@weir/core';
import { openDatabase } from './database';
import { migrateToLatest } from './migrate';
import { MIGRATIONS } from './migrations';
import { createTenantRepository } from './tenant-repository';
import { createUsageRepository } from './usage-repository';

describe('PGlite in a data directory', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'weir-pglite-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('persists data across reopen, and migrations are idempotent', async () => {
    const dataDir = path.join(dir, 'db');
    const generationId = newId('gen');
    const first = await openDatabase({ dataDir });
    expect(first.kind).toBe('pglite');
    await createTenantRepository(first.db).upsertTenant({ id: 'acme', name: 'Acme' });
    await createUsageRepository(first.db).insertMany([
      {
        generationId,
        requestId: generationId,
        tenantId: 'acme',
        appId: 'web',
        apiKeyId: 'key_1',
        route: 'generations',
        modelAlias: 'stories',
        modelRevision: 'stories260k@1',
        inputTokens: 3,
        outputTokens: 4,
        cachedInputTokens: 0,
        costNanoUsd: 77,
        status: 'cancelled',
        finishReason: 'cancelled',
        errorCode: null,
        queueMs: 0,
        ttftMs: 2,
        totalMs: 9,
        startedAt: new Date('2026-11-01T00:00:00.000Z'),
        finishedAt: new Date('2026-11-01T00:00:00.009Z'),
      },
    ]);
    await first.close();
    await first.close(); // idempotent

    const started = performance.now();
    const second = await openDatabase({ dataDir });
    const reopenMs = performance.now() - started;
    try {
      expect(await migrateToLatest(second.db as never)).toEqual([]);
      expect((await createTenantRepository(second.db).getTenant('acme'))?.name).toBe('Acme');
      expect((await createUsageRepository(second.db).getUsage(generationId))?.costNanoUsd).toBe(77);
      const migrations = await second.db
        .selectFrom('kysely_migration' as never)
        .select('name' as never)
        .execute();
      expect(migrations).toEqual(Object.keys(MIGRATIONS).map((name) => ({ name })));
    } finally {
      await second.close();
    }
    // STACK.md: reopening a data directory takes about 1 s (no initdb); the bound only
    // catches a reopen that re-initialises, with room for a loaded 2-core CI box.
    expect(reopenMs).toBeLessThan(15_000);
  }, 60_000);

  it('runs with the small memory settings (shared_buffers 16 MB, 8 connection slots), not PGlite\'s server defaults', async () => {
    const database = await openDatabase({ dataDir: path.join(dir, 'settings') });
    try {
      const r = await sql<{ name: string; setting: string }>`SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers', 'max_connections') ORDER BY name`.execute(database.db);
      // shared_buffers is in 8 kB pages: 2,048 × 8 kB = 16 MB (PGlite's default is 16,384).
      expect(r.rows).toEqual([
        { name: 'max_connections', setting: '8' },
        { name: 'shared_buffers', setting: '2048' },
      ]);
    } finally {
      await database.close();
    }
  }, 60_000);
});

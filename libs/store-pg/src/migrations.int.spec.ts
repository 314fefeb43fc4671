import { openDatabase } from './database';
import { migrateToLatest } from './migrate';
import { MIGRATIONS } from './migrations';
import { createTemporaryPostgresDatabase } from './testing';

describe('migrations on a real Postgres', () => {
  it('names sort in the order they run', () => {
    const names = Object.keys(MIGRATIONS);
    expect(names).toEqual([...names].sort());
    for (const name of names) expect(name).toMatch(/^\d{4}_[a-z0-9_]+$/);
  });

  it('concurrent openers take the migration lock: each migration runs exactly once', async () => {
    const temp = await createTemporaryPostgresDatabase();
    try {
      const opened = await Promise.all([1, 2, 3].map(() => openDatabase({ databaseUrl: temp.url, maxConnections: 2, migrate: false })));
      const applied = await Promise.all(opened.map((d) => migrateToLatest(d.db as never)));
      expect(applied.flat().sort()).toEqual(Object.keys(MIGRATIONS));
      await Promise.all(opened.map((d) => d.close()));
    } finally {
      await temp.drop();
    }
  });

  it('throws when the server is unreachable', async () => {
    await expect(openDatabase({ databaseUrl: 'postgres://postgres@127.0.0.1:1/postgres' })).rejects.toThrow();
  });

  it('createTemporaryPostgresDatabase makes distinct databases and drop is idempotent', async () => {
    const [a, b] = await Promise.all([createTemporaryPostgresDatabase(), createTemporaryPostgresDatabase()]);
    expect(a.name).not.toBe(b.name);
    expect(a.url).toContain(`/${a.name}`);
    await Promise.all([a.drop(), b.drop()]);
    await a.drop();
  });
});

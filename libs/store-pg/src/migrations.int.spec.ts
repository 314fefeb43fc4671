import { Migrator, type Kysely } from 'kysely';
import { openDatabase } from './database';
import { migrateToLatest } from './migrate';
import { MIGRATIONS, migrationProvider } from './migrations';
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

  it('0012 keeps the ids of existing tenants and apps as their internal ids, and gives new ones fresh internal ids', async () => {
    const temp = await createTemporaryPostgresDatabase();
    try {
      const database = await openDatabase({ databaseUrl: temp.url, maxConnections: 1, migrate: false });
      try {
        const migrator = new Migrator({ db: database.db as unknown as Kysely<unknown>, provider: migrationProvider });
        expect((await migrator.migrateTo('0011_lease_demand')).error).toBeUndefined();
        const raw = database.db as unknown as Kysely<Record<string, Record<string, unknown>>>;
        await raw.insertInto('tenants').values({ id: 'acme', name: 'Acme' }).execute();
        await raw.insertInto('apps').values({ id: 'web', tenant_id: 'acme', name: 'Web' }).execute();
        expect((await migrator.migrateToLatest()).error).toBeUndefined();
        expect(await database.db.selectFrom('tenants').select(['id', 'uid']).execute()).toEqual([{ id: 'acme', uid: 'acme' }]);
        expect(await database.db.selectFrom('apps').select(['id', 'uid']).execute()).toEqual([{ id: 'web', uid: 'web' }]);
        await database.db.deleteFrom('tenants').where('id', '=', 'acme').execute();
        const again = await database.db.insertInto('tenants').values({ id: 'acme', name: 'Acme again' }).returning('uid').executeTakeFirstOrThrow();
        expect(again.uid).toMatch(/^acme~[0-9a-f]{16}$/);
      } finally {
        await database.close();
      }
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

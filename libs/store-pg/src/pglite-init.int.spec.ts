/**
 * A new PGlite data directory is initialized by a child process (pglite-init.ts): the directory
 * then holds a cluster the serving process opens without running initdb, an existing one is
 * left alone, and a path the child cannot initialize is reported with the child's error.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { openDatabase } from './database';
import { initPgliteDataDir, pgliteDataDirExists } from './pglite-init';

jest.setTimeout(60_000);

describe('initializing a PGlite data directory in a child process', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'weir-pglite-init-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('creates the cluster in another process, then leaves it alone; the database opens on it', async () => {
    const dataDir = path.join(dir, 'fresh'); // PGlite creates the last component, as in-process
    expect(pgliteDataDirExists(dataDir)).toBe(false);
    const created = await initPgliteDataDir(dataDir);
    expect(created.outcome).toBe('created');
    expect(created.pid).toBeGreaterThan(0);
    expect(created.pid).not.toBe(process.pid);
    expect(pgliteDataDirExists(dataDir)).toBe(true);
    expect(await initPgliteDataDir(dataDir)).toEqual({ outcome: 'exists' });
    const database = await openDatabase({ dataDir });
    try {
      const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM kysely_migration`.execute(database.db);
      expect(rows[0].n).toBeGreaterThan(0);
    } finally {
      await database.close();
    }
  });

  it('reports the child\'s error for a path it cannot use; openDatabase fails there too', async () => {
    const file = path.join(dir, 'not-a-dir');
    writeFileSync(file, 'x');
    await expect(initPgliteDataDir(path.join(file, 'pg'))).rejects.toThrow(/initializing the embedded database in .*not-a-dir.* failed \(child exit 1\): .*ENOTDIR/);
    await expect(openDatabase({ dataDir: path.join(file, 'pg') })).rejects.toThrow();
  });
});

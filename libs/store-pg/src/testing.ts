import { randomBytes } from 'node:crypto';
import { Pool } from 'pg';
import { openDatabase, type WeirDatabase } from './database';

/**
 * Test helpers for suites that need a real database (store-pg's own integration tests and
 * the e2e suites). Not for production code paths.
 */

/** Where test databases are created: `WEIR_TEST_DATABASE_URL`, else the local dev/CI server. */
export const DEFAULT_TEST_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/** The admin URL tests should use: `WEIR_TEST_DATABASE_URL` when set, else {@link DEFAULT_TEST_ADMIN_URL}. */
export function testAdminUrl(): string {
  return process.env.WEIR_TEST_DATABASE_URL || DEFAULT_TEST_ADMIN_URL;
}

/** A throwaway database on a Postgres server. */
export interface TemporaryPostgresDatabase {
  /** Connection URL of the new database (the admin URL with its database name replaced). */
  url: string;
  /** Its name, `weir_test_<16 hex>`. */
  name: string;
  /** Drops it, terminating any connection still open to it. Idempotent. */
  drop(): Promise<void>;
}

/**
 * Creates an empty, uniquely named database (`weir_test_<random>`) on the server behind
 * `adminUrl`, so concurrent test runs never share state. Call `drop()` when done.
 *
 * @param adminUrl a URL whose role may `CREATE DATABASE`. Default {@link testAdminUrl}().
 * @throws the driver's error when the server is unreachable or refuses.
 */
export async function createTemporaryPostgresDatabase(adminUrl: string = testAdminUrl()): Promise<TemporaryPostgresDatabase> {
  const name = `weir_test_${randomBytes(8).toString('hex')}`;
  await withAdmin(adminUrl, (pool) => pool.query(`CREATE DATABASE ${name}`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  let dropped: Promise<void> | undefined;
  return {
    url: url.toString(),
    name,
    drop: () =>
      (dropped ??= withAdmin(adminUrl, async (pool) => {
        // WITH (FORCE) (Postgres 13+) ends leftover connections of a test that leaked a pool.
        await pool.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      })),
  };
}

/** A migrated database for a test, and how to get rid of it. */
export interface TestDatabase extends WeirDatabase {
  /** Closes the connection and, for Postgres, drops the temporary database. */
  close(): Promise<void>;
}

/**
 * Opens a migrated, empty database for a test.
 *
 * - `kind: 'postgres'` (default): a temporary database on {@link testAdminUrl}(), dropped on close.
 * - `kind: 'pglite'`: in-memory PGlite (3–5 s to boot; share one per test file).
 */
export async function createTestDatabase(options: { kind?: 'postgres' | 'pglite' } = {}): Promise<TestDatabase> {
  if (options.kind === 'pglite') return openDatabase();
  const temp = await createTemporaryPostgresDatabase();
  let database: WeirDatabase;
  try {
    database = await openDatabase({ databaseUrl: temp.url, maxConnections: 4 });
  } catch (err) {
    await temp.drop();
    throw err;
  }
  return {
    ...database,
    close: async () => {
      try {
        await database.close();
      } finally {
        await temp.drop();
      }
    },
  };
}

async function withAdmin<T>(adminUrl: string, fn: (pool: Pool) => Promise<T>): Promise<T> {
  const pool = new Pool({ connectionString: adminUrl, max: 1 });
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

/**
 * A Postgres connection cut while a query holds it (pg_terminate_backend, a server restart)
 * fails that query and nothing else: no unhandled 'error' event takes the process down, and
 * the pool serves the next query on a fresh connection.
 */
import { sql } from 'kysely';
import { Pool } from 'pg';
import { openDatabase } from './database';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from './testing';

describe('openDatabase on Postgres', () => {
  let temp: TemporaryPostgresDatabase;
  beforeAll(async () => {
    temp = await createTemporaryPostgresDatabase();
  });
  afterAll(() => temp.drop());

  it('survives a connection terminated in the middle of a transaction', async () => {
    const warnings: string[] = [];
    const logger = { info() {}, warn: (_o: object, msg?: string) => void warnings.push(msg ?? ''), error() {} };
    const database = await openDatabase({ databaseUrl: temp.url, maxConnections: 2, logger });
    const admin = new Pool({ connectionString: temp.url, max: 1 });
    try {
      const running = database.db.transaction().execute(async (trx) => {
        await sql`SELECT pg_sleep(10)`.execute(trx);
      });
      // Wait for the sleeping backend, then cut it from another connection.
      let pid: number | undefined;
      for (let i = 0; i < 100 && pid === undefined; i++) {
        const r = await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%'`);
        pid = r.rows[0]?.pid;
        if (pid === undefined) await new Promise((res) => setTimeout(res, 20));
      }
      expect(pid).toBeDefined();
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      await expect(running).rejects.toThrow(/terminat/i);
      // The next query gets a healthy connection.
      const ok = await sql<{ one: number }>`SELECT 1 AS one`.execute(database.db);
      expect(ok.rows).toEqual([{ one: 1 }]);
      expect(warnings).toContain('postgres connection failed while in use');
    } finally {
      await admin.end();
      await database.close();
    }
  });
});

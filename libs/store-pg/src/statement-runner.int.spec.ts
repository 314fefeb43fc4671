/**
 * The statement runner on PGlite (pipelined into one call, as `openDatabase` registers it) and
 * on the machine's Postgres (a kysely transaction): statements run in order as one transaction,
 * all or nothing, with text results; on PGlite it never interleaves with kysely's own queries and
 * survives an error and re-preparation.
 */
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Pool } from 'pg';
import type { WeirSchema } from './schema';
import { type Statement, createPgliteStatementRunner, statementRunnerFor } from './statement-runner';
import { createTestDatabase, type TestDatabase } from './testing';

const insert = (id: string, v: string | null): Statement => ({ name: 'runner_spec_insert', text: 'INSERT INTO runner_spec (id, v) VALUES ($1, $2)', values: [id, v] });
const select = (id: string): Statement => ({ name: 'runner_spec_select', text: 'SELECT id, v, length(v)::text AS n FROM runner_spec WHERE id = $1', values: [id] });

describe.each([['pglite' as const], ['postgres' as const]])('statement runner on %s', (kind) => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
    await sql`CREATE TABLE runner_spec (id text PRIMARY KEY, v text)`.execute(database.db);
  }, 60_000);
  afterAll(() => database?.close());

  const ids = async () => (await sql<{ id: string }>`SELECT id FROM runner_spec ORDER BY id`.execute(database.db)).rows.map((r) => r.id);

  it('runs the statements in order and returns their rows as text, parameters of any UTF-8 and NULL intact', async () => {
    const runner = statementRunnerFor(database.db);
    const text = 'ünïcode ✓ 😀';
    const results = await runner.run([insert('a', text), insert('b', null), select('a'), select('b'), select('none')]);
    expect(results.map((r) => r.rows)).toEqual([[], [], [{ id: 'a', v: text, n: String([...text].length) }], [{ id: 'b', v: null, n: null }], []]);
  });

  it('is all or nothing: a failing statement undoes the ones before it, throws with its SQLSTATE, and the next run works', async () => {
    const runner = statementRunnerFor(database.db);
    await expect(runner.run([insert('c', 'x'), insert('a', 'duplicate')])).rejects.toMatchObject({ code: '23505' });
    expect(await ids()).not.toContain('c');
    await runner.run([insert('c', 'x')]);
    expect(await ids()).toContain('c');
  });

  it('never runs inside a transaction of kysely’s that is open on the same database', async () => {
    const runner = statementRunnerFor(database.db);
    let inTransaction!: () => void;
    const opened = new Promise<void>((resolve) => (inTransaction = resolve));
    const rolledBack = database.db
      .transaction()
      .execute(async (trx) => {
        await sql`INSERT INTO runner_spec (id, v) VALUES ('in-trx', 'x')`.execute(trx);
        inTransaction();
        await new Promise((resolve) => setTimeout(resolve, 100));
        throw new Error('roll back');
      })
      .catch(() => undefined);
    await opened;
    // Run while the transaction is open: on PGlite, interleaved, the insert would be rolled back with it.
    await runner.run([insert('beside-trx', 'y')]);
    await rolledBack;
    expect(await ids()).toEqual(expect.arrayContaining(['beside-trx']));
    expect(await ids()).not.toContain('in-trx');
  });

  if (kind === 'pglite') {
    it('prepares a statement again after reprepareAfterRuns runs, and refuses a name reused for other SQL', async () => {
      const { PGlite, protocol } = await import('@electric-sql/pglite');
      const pglite = new PGlite();
      try {
        const { createPgConfig } = await import('@electric-sql/pglite/node-postgres');
        const db = new Kysely<WeirSchema>({ dialect: new PostgresDialect({ pool: new Pool({ ...createPgConfig(pglite), max: 1 }) }) });
        const runner = createPgliteStatementRunner(db, pglite, { protocol }, { reprepareAfterRuns: 2 });
        const count: Statement = { name: 'runner_spec_count', text: 'SELECT count(*)::text AS n FROM generate_series(1, $1::int)', values: ['3'] };
        for (let i = 0; i < 5; i++) expect((await runner.run([count]))[0].rows).toEqual([{ n: '3' }]);
        await expect(runner.run([{ ...count, text: 'SELECT 1' }])).rejects.toThrow('prepared with other SQL');
        // Dropped behind its back: the run fails once, the next prepares it again.
        await sql`DEALLOCATE runner_spec_count`.execute(db);
        await expect(runner.run([count])).rejects.toMatchObject({ code: '26000' });
        expect((await runner.run([count]))[0].rows).toEqual([{ n: '3' }]);
        await db.destroy();
      } finally {
        await pglite.close();
      }
    });
  }
});

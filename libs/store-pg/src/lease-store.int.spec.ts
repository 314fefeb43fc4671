/**
 * The lease store contract (`@weir/testing`) on every store: in memory (the reference), PGlite
 * and the machine's real Postgres. On Postgres the two stores are two connection pools on one
 * database (two holders' processes) and the applier's settlements run in their own
 * transaction through {@link applyLeaseSettlements}; on PGlite (one connection) they share the
 * handle, so transactions serialise.
 */
import { sql } from 'kysely';
import { createInMemoryLeaseStore } from '@weir/admission';
import { describeLeaseStoreContract, type LeaseStoreSubject } from '@weir/testing';
import { openDatabase, type WeirDatabase } from './database';
import { applyLeaseSettlements, createPgLeaseStore } from './lease-store';
import { createTemporaryPostgresDatabase } from './testing';

jest.setTimeout(60_000);

interface Backend {
  instances: [WeirDatabase, WeirDatabase];
  close(): Promise<void>;
}

const backends: Record<'pglite' | 'postgres', () => Promise<Backend>> = {
  pglite: async () => {
    const database = await openDatabase();
    return { instances: [database, database], close: () => database.close() };
  },
  postgres: async () => {
    const temp = await createTemporaryPostgresDatabase();
    const first = await openDatabase({ databaseUrl: temp.url, maxConnections: 8 });
    const second = await openDatabase({ databaseUrl: temp.url, maxConnections: 8, migrate: false });
    return {
      instances: [first, second],
      close: async () => {
        for (const d of [first, second]) await d.close();
        await temp.drop();
      },
    };
  },
};

const opened = new Map<string, Promise<Backend>>();
function backend(kind: 'pglite' | 'postgres'): Promise<Backend> {
  let b = opened.get(kind);
  if (!b) opened.set(kind, (b = backends[kind]()));
  return b;
}
afterAll(async () => {
  for (const b of opened.values()) await (await b).close();
});

async function pgSubject(kind: 'pglite' | 'postgres'): Promise<LeaseStoreSubject> {
  const b = await backend(kind);
  await sql`TRUNCATE admission_holders, admission_leases, admission_scopes, budget_periods`.execute(b.instances[0].db);
  return {
    stores: [createPgLeaseStore(b.instances[0].db), createPgLeaseStore(b.instances[1].db)],
    applySettlements: (items) => b.instances[1].db.transaction().execute((trx) => applyLeaseSettlements(trx, items)),
    close: async () => undefined,
  };
}

describeLeaseStoreContract('in memory', async () => {
  const store = createInMemoryLeaseStore();
  return { stores: [store, store], applySettlements: async (items) => store.applySettlements(items), close: async () => undefined };
});
describeLeaseStoreContract('PGlite', () => pgSubject('pglite'));
describeLeaseStoreContract('Postgres', () => pgSubject('postgres'));

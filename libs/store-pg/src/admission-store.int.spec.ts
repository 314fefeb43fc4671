/**
 * The admission contracts (`@weir/testing`) on every store: in memory, PGlite and the
 * machine's real Postgres. On Postgres, the two admission instances of the store contract are
 * two connection pools on one database, and the sampler is a third; on PGlite (one
 * connection) they share the handle, so transactions serialise.
 */
import { sql } from 'kysely';
import { type AdmissionStore, createAdmission, createInMemoryAdmissionStore } from '@weir/admission';
import { type AdmissionStoreSubject, describeAdmissionContract, describeAdmissionStoreContract } from '@weir/testing';
import { createPgAdmissionStore } from './admission-store';
import { openDatabase, type WeirDatabase } from './database';
import { nanoToDecimal } from './nano-usd';
import { createTemporaryPostgresDatabase, type TemporaryPostgresDatabase } from './testing';

jest.setTimeout(60_000);

/** One database per backend for this file, emptied before each test. */
interface Backend {
  instances: [WeirDatabase, WeirDatabase];
  sampler: WeirDatabase;
  close(): Promise<void>;
}

const backends: Record<'pglite' | 'postgres', () => Promise<Backend>> = {
  pglite: async () => {
    const database = await openDatabase();
    return { instances: [database, database], sampler: database, close: () => database.close() };
  },
  postgres: async () => {
    const temp: TemporaryPostgresDatabase = await createTemporaryPostgresDatabase();
    const first = await openDatabase({ databaseUrl: temp.url, maxConnections: 8 });
    const second = await openDatabase({ databaseUrl: temp.url, maxConnections: 8, migrate: false });
    const sampler = await openDatabase({ databaseUrl: temp.url, maxConnections: 1, migrate: false });
    return {
      instances: [first, second],
      sampler,
      close: async () => {
        for (const d of [first, second, sampler]) await d.close();
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

async function emptied(kind: 'pglite' | 'postgres'): Promise<Backend> {
  const b = await backend(kind);
  await sql`TRUNCATE admission_scopes, budget_periods, reservations, usage_ledger CASCADE`.execute(b.instances[0].db);
  return b;
}

async function pgSubject(kind: 'pglite' | 'postgres'): Promise<AdmissionStoreSubject> {
  const b = await emptied(kind);
  return {
    stores: [createPgAdmissionStore(b.instances[0].db), createPgAdmissionStore(b.instances[1].db)],
    async readBudgets() {
      const rows = await sql<{ scope: string; period: 'month' | 'day'; starts_on: string; settled_nano: string; reserved_nano: string }>`
        SELECT scope, period, starts_on::text AS starts_on, settled_nano::text AS settled_nano, reserved_nano::text AS reserved_nano FROM budget_periods`.execute(b.sampler.db);
      return rows.rows.map((r) => ({ scope: r.scope, period: r.period, startsOn: r.starts_on, settledNano: Number(r.settled_nano), reservedNano: Number(r.reserved_nano) }));
    },
    async recordLedger(row) {
      const now = new Date();
      await b.instances[0].db
        .insertInto('usage_ledger')
        .values({
          generation_id: row.generationId,
          request_id: row.generationId,
          tenant_id: row.tenantId,
          app_id: row.appId,
          api_key_id: 'key_test',
          route: 'generations',
          model_alias: 'tiny',
          model_revision: 'tiny@1',
          input_tokens: row.inputTokens,
          output_tokens: row.outputTokens,
          cached_input_tokens: 0,
          cost_usd: nanoToDecimal(row.costNano),
          status: 'ok',
          finish_reason: 'stop',
          error_code: null,
          queue_ms: 0,
          ttft_ms: 1,
          total_ms: 2,
          started_at: now,
          finished_at: now,
        })
        .execute();
    },
    close: async () => undefined,
  };
}

describeAdmissionContract('in-memory store', async (tenants, { clock }) => ({
  service: createAdmission({ tenants }, { store: createInMemoryAdmissionStore(), clock }),
}));
describeAdmissionContract('PGlite store', async (tenants, { clock }) => ({
  service: createAdmission({ tenants }, { store: createPgAdmissionStore((await emptied('pglite')).instances[0].db), clock }),
}));
describeAdmissionContract('Postgres store', async (tenants, { clock }) => ({
  service: createAdmission({ tenants }, { store: createPgAdmissionStore((await emptied('postgres')).instances[0].db), clock }),
}));

describeAdmissionStoreContract('in-memory', async () => {
  const store = createInMemoryAdmissionStore();
  return {
    stores: [store, store] as [AdmissionStore, AdmissionStore],
    readBudgets: async () => store.budgets(),
    recordLedger: async ({ generationId, costNano, inputTokens, outputTokens }) => store.recordLedger(generationId, { costNano, inputTokens, outputTokens }),
    close: async () => undefined,
  };
});
describeAdmissionStoreContract('PGlite', () => pgSubject('pglite'), { minSamples: 1 });
describeAdmissionStoreContract('Postgres, two instances', () => pgSubject('postgres'), { burst: 150 });

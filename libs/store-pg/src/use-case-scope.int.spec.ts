/**
 * The use-case admission scope on a real database (PGlite; issue 16 item 7, migration 0018):
 * - ADR 0001's engine over the Postgres admission store: a reservation naming a use case its
 *   tenant defines records it (`reservations.use_case`), locks and charges the use case's scope
 *   and budget rows, and its settlement moves that row too; the use case's budget then refuses
 *   it while another use case runs;
 * - on leases: the applier's side of a settlement (`applyLeaseSettlements`) charges the use
 *   case's budget rows when the reservation held its scope, so a shared holder's next draw sees
 *   the spend, and the cap holds across holders.
 */
import { sql } from 'kysely';
import { createAdmission, createLeasedAdmission } from '@weir/admission';
import type { ReservationRequest, TenantSpec } from '@weir/core';
import { openDatabase, type WeirDatabase } from './database';
import { createPgAdmissionStore } from './admission-store';
import { applyLeaseSettlements, createPgLeaseStore } from './lease-store';

jest.setTimeout(60_000);

const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);
const WORST = 1_000_000; // $0.001
const TENANT: TenantSpec = {
  id: 'acme',
  name: 'Acme',
  apps: [{ id: 'web', name: 'web', limits: {} }],
  allowedAliases: ['*'],
  defaultDeadlineMs: 120_000,
  limits: { maxConcurrent: 100 },
  useCases: [
    { name: 'drafts', model: 'chat', limits: { monthlyBudgetUsd: 0.0025 } },
    { name: 'search', model: 'chat', limits: {} },
  ],
};

let seq = 0;
const req = (useCase?: string): ReservationRequest => {
  seq++;
  return {
    caller: { tenantId: 'acme', appId: 'web', apiKeyId: 'k' },
    requestId: `r${seq}`,
    generationId: `gen_uc_${seq}`,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: WORST,
    expiresAtMs: NOW + 60_000,
    ...(useCase !== undefined ? { useCase } : {}),
  };
};
const usage = { inputTokens: 10, outputTokens: 20, cachedInputTokens: 0 };

let database: WeirDatabase;
beforeEach(async () => {
  database = await openDatabase();
});
afterEach(async () => {
  await database?.close();
});

async function settledNano(scope: string): Promise<number> {
  const { rows } = await sql<{ s: string }>`SELECT coalesce(sum(settled_nano), 0)::text AS s FROM budget_periods WHERE scope = ${scope} AND period = 'month'`.execute(database.db);
  return Number(rows[0].s);
}

describe('the use-case scope on Postgres (PGlite)', () => {
  it('ADR 0001: the reservation records its use case, settlement charges its rows, and its budget refuses it while another use case runs', async () => {
    const admission = createAdmission({ tenants: [TENANT] }, { store: createPgAdmissionStore(database.db), clock: { now: () => NOW } });
    for (let i = 0; i < 2; i++) {
      const r = await admission.reserve(req('drafts'));
      if (!r.ok) throw new Error(r.message);
      await admission.settle(r.reservationId, { usage, costNanoUsd: WORST });
    }
    const rows = await database.db.selectFrom('reservations').select(['use_case', 'state']).orderBy('created_at').execute();
    expect(rows).toEqual([
      { use_case: 'drafts', state: 'settled' },
      { use_case: 'drafts', state: 'settled' },
    ]);
    expect(await settledNano('usecase:acme/drafts')).toBe(2 * WORST);
    expect(await settledNano('tenant:acme')).toBe(2 * WORST);
    const refused = await admission.reserve(req('drafts'));
    expect(refused).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    expect((await admission.reserve(req('search'))).ok).toBe(true);
    // A use case the tenant does not define: no scope, no column value.
    expect((await admission.reserve(req('label-only'))).ok).toBe(true);
    const last = await database.db.selectFrom('reservations').select(['use_case']).where('generation_id', '=', `gen_uc_${seq}`).executeTakeFirstOrThrow();
    expect(last.use_case).toBeNull();
  });

  it('leases: the applier charges the use case’s rows, so a second holder cannot spend what the first one did', async () => {
    const clock = { now: () => NOW };
    const timer = { every: () => () => undefined };
    const a = createLeasedAdmission({ tenants: [TENANT], mode: 'shared', holderId: 'h1' }, { store: createPgLeaseStore(database.db), clock, timer });
    const b = createLeasedAdmission({ tenants: [TENANT], mode: 'shared', holderId: 'h2' }, { store: createPgLeaseStore(database.db), clock, timer });
    for (let i = 0; i < 2; i++) {
      const r = req('drafts');
      const res = await a.reserve(r);
      if (!res.ok) throw new Error(res.message);
      expect(res.reservation?.useCase).toBe('drafts');
      await a.settle(res.reservationId, { usage, costNanoUsd: WORST });
      await database.db.transaction().execute((trx) => applyLeaseSettlements(trx, [{ tenantId: 'acme', appId: 'web', costNano: WORST, reservation: res.reservation! }]));
    }
    expect(await settledNano('usecase:acme/drafts')).toBe(2 * WORST);
    // Holder a gives back what it does not use; b then finds $0.0005 of the use case's budget at most.
    await a.stop();
    expect(await b.reserve(req('drafts'))).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    expect((await b.reserve(req('search'))).ok).toBe(true);
    await b.stop({ returnLeases: false });
  });
});

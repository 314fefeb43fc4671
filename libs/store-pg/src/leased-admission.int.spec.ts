/**
 * Admission on leases (ADR 0002 §1) on real databases:
 * - the admission port contract (`@weir/testing`) passes in exclusive mode on the in-memory,
 *   PGlite and Postgres lease stores: on its own database, the leased engine is
 *   indistinguishable through the port from ADR 0001's;
 * - two shared instances (two connection pools on one Postgres database; on PGlite one shared
 *   handle) take bursts of concurrent reserves at a budget's edge, settle them to random actual
 *   costs ≤ the worst case, and the applier's side of each settlement runs in batches in its
 *   own transactions (`applyLeaseSettlements`), while a sampler checks settled + leased ≤
 *   budget on every row; the cost admitted (in flight at its worst case + settled) never
 *   exceeds the budget at any instant, and ends equal to the rows' settled spend;
 * - a holder killed with leases and reservations in flight: its leases are reclaimed only after
 *   hold_until, what they held goes back, and the survivor spends it — the cap still holds.
 */
import { sql } from 'kysely';
import {
  type LeaseSettlement,
  type LeaseStore,
  type LeasedAdmission,
  NANO_PER_USD,
  createInMemoryLeaseStore,
  createLeasedAdmission,
} from '@weir/admission';
import type { ReservationRequest, TenantSpec } from '@weir/core';
import { describeAdmissionContract, manualClock } from '@weir/testing';
import { openDatabase, type WeirDatabase } from './database';
import { applyLeaseSettlements, createPgLeaseStore } from './lease-store';
import { createTemporaryPostgresDatabase } from './testing';

jest.setTimeout(120_000);

interface Backend {
  instances: [WeirDatabase, WeirDatabase];
  /** A third handle (Postgres: its own pool) for the applier and the sampler. */
  side: WeirDatabase;
  close(): Promise<void>;
}

const backends: Record<'pglite' | 'postgres', () => Promise<Backend>> = {
  pglite: async () => {
    const database = await openDatabase();
    return { instances: [database, database], side: database, close: () => database.close() };
  },
  postgres: async () => {
    const temp = await createTemporaryPostgresDatabase();
    const first = await openDatabase({ databaseUrl: temp.url, maxConnections: 6 });
    const second = await openDatabase({ databaseUrl: temp.url, maxConnections: 6, migrate: false });
    const side = await openDatabase({ databaseUrl: temp.url, maxConnections: 2, migrate: false });
    return {
      instances: [first, second],
      side,
      close: async () => {
        for (const d of [first, second, side]) await d.close();
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
  await sql`TRUNCATE admission_holders, admission_leases, admission_scopes, budget_periods`.execute(b.instances[0].db);
  return b;
}

const noTimer = { every: () => () => undefined };

// ---- The admission port contract, exclusive mode ----

function contract(name: string, storeFor: () => Promise<LeaseStore>) {
  describeAdmissionContract(`leased, exclusive, ${name}`, async (tenants, { clock }) => {
    const admission = createLeasedAdmission({ tenants, mode: 'exclusive' }, { store: await storeFor(), clock, timer: noTimer });
    await admission.start();
    return { service: admission, close: () => admission.stop() };
  });
}
contract('in memory', async () => createInMemoryLeaseStore());
contract('PGlite', async () => createPgLeaseStore((await emptied('pglite')).instances[0].db));
contract('Postgres', async () => createPgLeaseStore((await emptied('postgres')).instances[0].db));

// ---- Two shared holders at a budget's edge ----

const BUDGET_NANO = 0.05 * NANO_PER_USD; // tenant, month
const APP_DAILY_NANO = 0.04 * NANO_PER_USD; // app, day
const TENANTS: TenantSpec[] = [
  {
    id: 'edge',
    name: 'Edge',
    apps: [{ id: 'web', name: 'web', limits: { dailyBudgetUsd: APP_DAILY_NANO / NANO_PER_USD } }],
    allowedAliases: ['*'],
    defaultDeadlineMs: 120_000,
    limits: { maxConcurrent: 150, tokensPerMinute: 10_000_000, monthlyBudgetUsd: BUDGET_NANO / NANO_PER_USD },
  },
];
const ROWS = [
  { key: { scope: 'tenant:edge', period: 'month' as const, startsOn: '2026-11-01' }, budget: BUDGET_NANO },
  { key: { scope: 'app:edge/web', period: 'day' as const, startsOn: '2026-11-30' }, budget: APP_DAILY_NANO },
];

/** A deterministic pseudo-random sequence (mulberry32). */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function twoHolders(kind: 'pglite' | 'postgres') {
  describe(`two shared holders on ${kind}`, () => {
    let b: Backend;
    let clock: ReturnType<typeof manualClock>;
    let holders: [LeasedAdmission, LeasedAdmission];
    let sampler: LeaseStore;
    const rnd = random(13);
    /** Cost admitted and not released: in flight at the worst case, settled at the actual cost. */
    let committed = 0;
    let maxCommitted = 0;
    let settledActual = 0;
    let queue: LeaseSettlement[] = [];

    beforeEach(async () => {
      b = await emptied(kind);
      clock = manualClock();
      holders = [0, 1].map((i) =>
        createLeasedAdmission({ tenants: TENANTS, mode: 'shared', holdMs: 180_000, reclaimGraceMs: 5_000 }, { store: createPgLeaseStore(b.instances[i].db), clock, timer: noTimer }),
      ) as [LeasedAdmission, LeasedAdmission];
      for (const h of holders) await h.start();
      sampler = createPgLeaseStore(b.side.db);
      committed = 0;
      maxCommitted = 0;
      settledActual = 0;
      queue = [];
    });

    let seq = 0;
    const request = (): ReservationRequest => {
      seq++;
      return {
        caller: { tenantId: 'edge', appId: 'web', apiKeyId: 'key_edge' },
        requestId: `req_${seq}`,
        generationId: `gen_${seq}`,
        inputTokens: 10,
        maxOutputTokens: 100,
        worstCaseCostNanoUsd: 500_000 + Math.floor(rnd() * 1_500_000),
        expiresAtMs: clock.now() + 60_000,
      };
    };

    /** Applies the queued settlements in one transaction, as the ledger's applier does. */
    const applyQueued = async () => {
      const batch = queue;
      queue = [];
      if (batch.length > 0) await b.side.db.transaction().execute((trx) => applyLeaseSettlements(trx, batch));
    };

    /** One holder's reserve → settle, counting what is committed at every step. */
    const attempt = async (h: LeasedAdmission, settleLater: LeaseSettlement[] | undefined): Promise<boolean> => {
      const r = request();
      const res = await h.reserve(r);
      if (!res.ok) {
        expect(res.reason).toBe('budget_exhausted');
        return false;
      }
      committed += r.worstCaseCostNanoUsd;
      maxCommitted = Math.max(maxCommitted, committed);
      expect(committed).toBeLessThanOrEqual(APP_DAILY_NANO); // the tighter of the two budgets
      expect(res.reservation?.leaseIds).toHaveLength(2);
      // Work happens; the cost is some actual ≤ the worst case.
      await new Promise((resolve) => setImmediate(resolve));
      const cost = Math.floor(rnd() * r.worstCaseCostNanoUsd);
      const item = { tenantId: 'edge', appId: 'web', costNano: cost, reservation: res.reservation! };
      if (settleLater) {
        settleLater.push(item);
        return true;
      }
      await h.settle(res.reservationId, { usage: { inputTokens: 10, outputTokens: 50, cachedInputTokens: 0 }, costNanoUsd: cost });
      committed -= r.worstCaseCostNanoUsd - cost;
      settledActual += cost;
      queue.push(item);
      return true;
    };

    /** Runs `work` while sampling the rows: settled + leased ≤ budget on each, every time. */
    const sampled = async <T>(work: Promise<T>): Promise<{ result: T; samples: number }> => {
      let done = false;
      let samples = 0;
      const loop = (async () => {
        while (!done) {
          for (const { key, budget } of ROWS) {
            const row = await sampler.readBudget(key);
            if (row) expect(row.settledNano + row.leasedNano).toBeLessThanOrEqual(budget);
          }
          samples++;
          await new Promise((resolve) => setImmediate(resolve));
        }
      })();
      try {
        return { result: await work, samples };
      } finally {
        done = true;
        await loop;
      }
    };

    it('bursts at the edge: the cap holds at every instant and everything admitted is settled exactly', async () => {
      let waves = 0;
      let admitted = 0;
      const { samples } = await sampled(
        (async () => {
          for (;;) {
            waves++;
            const results = await Promise.all(Array.from({ length: 120 }, (_, i) => attempt(holders[i % 2], undefined)));
            admitted += results.filter(Boolean).length;
            await applyQueued();
            clock.advance(500);
            for (const h of holders) await h.runMaintenance();
            if (!results.some(Boolean) || waves > 40) break;
          }
        })(),
      );
      expect(waves).toBeLessThanOrEqual(40);
      expect(samples).toBeGreaterThan(0);
      expect(admitted).toBeGreaterThan(20);
      expect(committed).toBe(settledActual);
      expect(maxCommitted).toBeLessThanOrEqual(APP_DAILY_NANO);
      const [month, day] = await Promise.all(ROWS.map((r) => sampler.readBudget(r.key)));
      expect(month?.settledNano).toBe(settledActual);
      expect(day?.settledNano).toBe(settledActual);
      // Near the edge what is stranded is small: settled + what both holders still hold unused + unleased = budget.
      expect(settledActual).toBeGreaterThan(0.8 * APP_DAILY_NANO);
      for (const { key, budget } of ROWS) {
        const row = (await sampler.readBudget(key))!;
        const { budget: leases } = await sampler.listLeases();
        const held = leases.filter((l) => l.key.scope === key.scope && l.key.period === key.period).reduce((s, l) => s + l.grantedNano - l.consumedNano, 0);
        expect(row.leasedNano).toBe(held);
        expect(row.settledNano + row.leasedNano).toBeLessThanOrEqual(budget);
      }
    });

    it('hands a quiet holder\'s money to a refused one at its next heartbeat (demand), within the cap', async () => {
      // The app's daily row is the tighter one: the one holder 1 finds dry.
      const holds = async (h: LeasedAdmission) =>
        (await sampler.listLeases(h.holderId)).budget.filter((l) => l.key.scope === ROWS[1].key.scope).reduce((sum, l) => sum + l.grantedNano - l.consumedNano, 0);
      // Holder 0 leases on its first request, then goes quiet.
      expect(await attempt(holders[0], undefined)).toBe(true);
      await applyQueued();
      expect(await holds(holders[0])).toBeGreaterThan(0);
      // Holder 1 spends until it is refused: what is left is held by holder 0.
      let spent = 0;
      while (await attempt(holders[1], undefined)) {
        spent++;
        await applyQueued();
      }
      expect(spent).toBeGreaterThan(5);
      // Holder 0's next maintenance pass (its heartbeat) learns of holder 1's demand and gives back
      // all of that row it does not have in flight (the month row, not dry, it keeps); holder 1,
      // past its retry delay, spends it.
      clock.advance(1_100);
      await holders[0].runMaintenance();
      expect(holders[0].snapshot().counters.rebalances).toBeGreaterThanOrEqual(1);
      expect(await holds(holders[0])).toBe(0);
      const { result: more } = await sampled(
        (async () => {
          let n = 0;
          while (await attempt(holders[1], undefined)) {
            n++;
            await applyQueued();
          }
          return n;
        })(),
      );
      expect(more).toBeGreaterThan(0);
      const day = (await sampler.readBudget(ROWS[1].key))!;
      expect(day.settledNano).toBe(settledActual);
      expect(day.settledNano + day.leasedNano).toBeLessThanOrEqual(APP_DAILY_NANO);
      expect(settledActual).toBeGreaterThan(0.8 * APP_DAILY_NANO);
    });

    it('reclaims a killed holder\'s leases after hold_until; the survivor spends what they held, within the cap', async () => {
      // Both spend a while; then the first is killed with reservations in flight (their relays
      // finish later: the applier settles them before the leases are reclaimed).
      for (let i = 0; i < 20; i++) await Promise.all([attempt(holders[0], undefined), attempt(holders[1], undefined)]);
      await applyQueued();
      const orphans: LeaseSettlement[] = [];
      for (let i = 0; i < 3; i++) await attempt(holders[0], orphans);
      expect((await sampler.listLeases(holders[0].holderId)).budget).toHaveLength(2);
      await holders[0].stop({ returnLeases: false });
      queue.push(...orphans);
      for (const o of orphans) {
        committed -= o.reservation.worstCaseNano - o.costNano;
        settledActual += o.costNano;
      }
      await applyQueued();

      const survivor = holders[1];
      expect(await survivor.reclaimExpired()).toMatchObject({ leases: 0 });
      // Three minutes pass; the survivor keeps working and heartbeating, the dead holder does not.
      for (let step = 0; step < 9; step++) {
        clock.advance(20_000);
        await attempt(survivor, undefined);
        await applyQueued();
        await survivor.runMaintenance();
        expect((await sampler.listLeases(holders[0].holderId)).budget).toHaveLength(2); // before hold_until + grace: kept
      }
      clock.advance(5_001);
      const held = (await sampler.listLeases(holders[0].holderId)).budget;
      const owed = held.reduce((sum, l) => sum + l.grantedNano - l.consumedNano, 0);
      const before = (await sampler.readBudget(ROWS[1].key))!;
      const reclaimed = await survivor.reclaimExpired();
      expect(reclaimed).toEqual({ leases: 3, returnedNano: owed, holders: 1 }); // two budget leases and the rate lease
      expect(await sampler.listLeases(holders[0].holderId)).toEqual({ budget: [], rate: [] });
      const after = (await sampler.readBudget(ROWS[1].key))!;
      const deadDay = held.find((l) => l.key.period === 'day')!;
      expect(before.leasedNano - after.leasedNano).toBe(deadDay.grantedNano - deadDay.consumedNano);
      expect(after.settledNano).toBe(before.settledNano);

      // The survivor spends to the edge, alone now.
      let more = 0;
      const { samples } = await sampled(
        (async () => {
          for (let wave = 0; wave < 40; wave++) {
            const results = await Promise.all(Array.from({ length: 60 }, () => attempt(survivor, undefined)));
            more += results.filter(Boolean).length;
            await applyQueued();
            clock.advance(500);
            await survivor.runMaintenance();
            if (!results.some(Boolean)) break;
          }
        })(),
      );
      expect(samples).toBeGreaterThan(0);
      expect(more).toBeGreaterThan(0);
      const day = (await sampler.readBudget(ROWS[1].key))!;
      expect(day.settledNano).toBe(settledActual);
      expect(settledActual).toBeLessThanOrEqual(APP_DAILY_NANO);
      expect(settledActual).toBeGreaterThan(0.8 * APP_DAILY_NANO);
      expect(maxCommitted).toBeLessThanOrEqual(APP_DAILY_NANO);
    });
  });
}

twoHolders('pglite');
twoHolders('postgres');

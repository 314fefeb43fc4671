import { type BudgetKey, type LeaseSettlement, type LeaseStore, NANO_PER_USD, RATE_FIELDS } from '@weir/admission';

/** What {@link describeLeaseStoreContract} runs on: two stores over one shared state. */
export interface LeaseStoreSubject {
  /** Two stores over the same state (for Postgres: two connection pools = two holders' processes). */
  stores: [LeaseStore, LeaseStore];
  /** The database side of settlements, as the ledger's applier performs it (one transaction). */
  applySettlements(items: LeaseSettlement[]): Promise<void>;
  close(): Promise<void>;
}

const T0 = Date.UTC(2026, 10, 30, 12, 0, 0);
const MONTH: BudgetKey = { scope: 'tenant:acme', period: 'month', startsOn: '2026-11-01' };
const BUDGET = 1 * NANO_PER_USD;
const ask = (want: number, min = 0, maxFraction = 0.5) => ({ want, min, maxFraction });

/**
 * The contract of `LeaseStore` implementations (ADR 0002 §1), over two stores sharing one state:
 * - budget draws grant `leaseGrant` of what is unleased, create the row and lease on demand,
 *   never grow a missing lease when told not to create it, and refuse another holder's lease;
 * - 60 parallel draws split over both stores never lease more than the budget, and the row's
 *   leased money is always Σ (granted − consumed);
 * - settlements move min(cost, granted − consumed) from the lease to the settled spend of all
 *   four rows of the reservation's periods (settled + leased unchanged for budgeted rows);
 * - returns give back at most granted − consumed, only the holder's own;
 * - heartbeats register holders and extend only their own leases (never shorten them), and
 *   report the ones that no longer exist; `retire` only shortens;
 * - reclaim takes only leases past hold_until + grace, giving back granted − consumed, and
 *   expired holders without leases; `reclaimHolders` everything but one holder (or all, or
 *   only the holders named);
 * - rate draws keep Σ shares ≤ limit per field under 60 parallel draws from both stores;
 *   `shrinkRate` only lowers.
 */
export function describeLeaseStoreContract(name: string, setup: () => Promise<LeaseStoreSubject>): void {
  describe(`lease store contract: ${name}`, () => {
    let subject: LeaseStoreSubject;
    let a: LeaseStore;
    let b: LeaseStore;
    beforeEach(async () => {
      subject = await setup();
      [a, b] = subject.stores;
    });
    afterEach(async () => {
      await subject?.close();
    });

    const draw = (
      store: LeaseStore,
      holder: string,
      leaseId: string,
      want: number,
      extra: { min?: number; create?: boolean; budgetNano?: number; key?: BudgetKey; holdUntilMs?: number; nowMs?: number; demandUntilMs?: number } = {},
    ) =>
      store.drawBudget({
        holder,
        leaseId,
        create: extra.create ?? true,
        key: extra.key ?? MONTH,
        budgetNano: extra.budgetNano ?? BUDGET,
        ask: ask(want, extra.min ?? 0),
        holdUntilMs: extra.holdUntilMs ?? T0 + 180_000,
        nowMs: extra.nowMs ?? T0,
        ...(extra.demandUntilMs === undefined ? {} : { demandUntilMs: extra.demandUntilMs }),
      });
    const settlement = (costNano: number, leaseIds: string[], appId = 'web'): LeaseSettlement => ({
      tenantId: 'acme',
      appId,
      costNano,
      reservation: { reservationId: `rsv_${costNano}_${leaseIds.join('_')}`, worstCaseNano: costNano, monthStartsOn: '2026-11-01', dayStartsOn: '2026-11-30', leaseIds },
    });
    const invariant = async () => {
      const row = await a.readBudget(MONTH);
      const { budget } = await a.listLeases();
      const held = budget.filter((l) => l.key.scope === MONTH.scope && l.key.period === MONTH.period).reduce((s, l) => s + l.grantedNano - l.consumedNano, 0);
      expect(row?.leasedNano ?? 0).toBe(held);
      expect((row?.settledNano ?? 0) + (row?.leasedNano ?? 0)).toBeLessThanOrEqual(BUDGET);
      return row;
    };

    describe('budget leases', () => {
      it('creates the row and the lease, grants at most half of what is unleased, and reports what is left', async () => {
        expect(await a.readBudget(MONTH)).toBeUndefined();
        const first = await draw(a, 'h1', 'lse_1', 800_000_000);
        expect(first).toEqual({
          lease: { leaseId: 'lse_1', holder: 'h1', key: MONTH, grantedNano: 500_000_000, consumedNano: 0, holdUntilMs: T0 + 180_000 },
          addedNano: 500_000_000,
          unleasedNano: 500_000_000,
          othersLeasedNano: 0,
        });
        const again = await draw(b, 'h1', 'lse_1', 100_000_000, { holdUntilMs: T0 + 1 });
        expect(again).toMatchObject({ addedNano: 100_000_000, unleasedNano: 400_000_000, lease: { grantedNano: 600_000_000, holdUntilMs: T0 + 180_000 } });
        expect(await a.readBudget(MONTH)).toEqual({ settledNano: 0, reservedNano: 0, leasedNano: 600_000_000 });
      });

      it('grants the shortfall near the cap, and nothing when not even that is unleased', async () => {
        await draw(a, 'h1', 'lse_1', Infinity, { budgetNano: BUDGET });
        await draw(a, 'h1', 'lse_1', Infinity); // 500 + 250
        expect(await draw(b, 'h2', 'lse_2', 300_000_000, { min: 200_000_000 })).toMatchObject({ addedNano: 200_000_000, unleasedNano: 50_000_000, othersLeasedNano: 0 });
        expect(await draw(b, 'h2', 'lse_2', 300_000_000, { min: 50_000_001 })).toMatchObject({ addedNano: 0, unleasedNano: 50_000_000 });
        expect(await draw(b, 'h2', 'lse_2', 300_000_000, { min: 50_000_000 })).toMatchObject({ addedNano: 50_000_000, unleasedNano: 0 });
        await invariant();
      });

      it('does not recreate a lease that no longer exists unless told to, and refuses another holder\'s lease', async () => {
        expect(await draw(a, 'h1', 'lse_gone', 1_000, { create: false })).toEqual({ addedNano: 0, unleasedNano: BUDGET, othersLeasedNano: 0 });
        expect((await a.listLeases()).budget).toEqual([]);
        await draw(a, 'h1', 'lse_1', 1_000);
        await expect(draw(b, 'h2', 'lse_1', 1_000)).rejects.toThrow();
        expect((await a.readBudget(MONTH))?.leasedNano).toBe(1_000);
      });

      it('takes a burst of 60 parallel draws from both stores without leasing more than the budget', async () => {
        const results = await Promise.all(
          Array.from({ length: 60 }, (_, i) => draw(i % 2 ? a : b, `h${i % 6}`, `lse_${i % 6}`, 30_000_000 + ((i * 7_919_993) % 90_000_000), { min: i % 3 ? 10_000_000 : 0 })),
        );
        const row = await invariant();
        expect(results.reduce((s, r) => s + r.addedNano, 0)).toBe(row?.leasedNano);
        expect(row?.leasedNano).toBeGreaterThan(0.9 * BUDGET);
      });

      it('settles: cost to all four rows of the periods, moved from the lease up to what it still holds', async () => {
        await draw(a, 'h1', 'lse_1', 1_000_000);
        const day = { ...MONTH, period: 'day' as const, startsOn: '2026-11-30' };
        await draw(a, 'h1', 'lse_d', 300_000, { key: day, budgetNano: 1_000_000 });
        await subject.applySettlements([settlement(400_000, ['lse_1', 'lse_d']), settlement(100_000, ['lse_1'])]);
        expect(await a.readBudget(MONTH)).toEqual({ settledNano: 500_000, reservedNano: 0, leasedNano: 500_000 });
        expect(await a.readBudget(day)).toEqual({ settledNano: 500_000, reservedNano: 0, leasedNano: 0 }); // only 300,000 could move
        for (const key of [
          { scope: 'app:acme/web', period: 'month' as const, startsOn: '2026-11-01' },
          { scope: 'app:acme/web', period: 'day' as const, startsOn: '2026-11-30' },
        ]) {
          expect(await a.readBudget(key)).toEqual({ settledNano: 500_000, reservedNano: 0, leasedNano: 0 });
        }
        const { budget } = await a.listLeases();
        expect(budget.map((l) => [l.leaseId, l.grantedNano, l.consumedNano])).toEqual([
          ['lse_1', 1_000_000, 500_000],
          ['lse_d', 300_000, 300_000],
        ]);
        // A lease that no longer exists moves nothing; the spend is still recorded.
        await subject.applySettlements([settlement(7, ['lse_unknown'], 'batch')]);
        expect(await a.readBudget(MONTH)).toMatchObject({ settledNano: 500_007, leasedNano: 500_000 });
        await invariant();
      });

      it('records a refused holder\'s demand for the other holders\' heartbeats until it expires or is covered', async () => {
        const beat = (store: LeaseStore, holder: string, leaseIds: string[], nowMs = T0 + 1_000) =>
          store.heartbeat({ holder, mode: 'shared', nowMs, ttlMs: 10_000, leaseIds, holdUntilMs: 0 });
        const day = { ...MONTH, period: 'day' as const, startsOn: '2026-11-30' };
        await draw(a, 'h1', 'lse_1', Infinity, { budgetNano: BUDGET }); // ½ of the budget
        await draw(a, 'h1', 'lse_1', Infinity); // ¾
        await draw(a, 'h1', 'lse_d', 1_000, { key: day });
        // Without a demand time nothing is recorded, even when refused.
        expect(await draw(b, 'h2', 'lse_2', 400_000_000, { min: 300_000_000 })).toMatchObject({ addedNano: 0 });
        expect((await beat(a, 'h1', ['lse_1', 'lse_d'])).wanted).toEqual(new Set());
        // Refused with a demand time: h1's lease on that row (not its other row's) is wanted, and
        // h2 is never told its own demand.
        // h1 is live (its heartbeat above, until T0 + 11,000): its 750,000,000 on the month row may
        // come back and is reported (not its day lease); once its holder row expired, nothing is.
        expect(await draw(b, 'h2', 'lse_2', 400_000_000, { min: 300_000_000, demandUntilMs: T0 + 5_000 })).toMatchObject({ addedNano: 0, othersLeasedNano: 750_000_000 });
        expect(await beat(b, 'h1', ['lse_1', 'lse_d'])).toEqual({ live: new Set(['lse_1', 'lse_d']), wanted: new Set(['lse_1']) });
        expect(await draw(b, 'h2', 'lse_2', 400_000_000, { min: 300_000_000, nowMs: T0 + 11_001 })).toMatchObject({ addedNano: 0, othersLeasedNano: 0 });
        expect((await beat(a, 'h2', ['lse_2'])).wanted).toEqual(new Set());
        expect((await beat(a, 'h1', ['lse_1'], T0 + 5_000)).wanted).toEqual(new Set()); // expired
        // A draw of a third holder that is covered leaves h2's demand standing; h2's own covered draw clears it.
        await draw(b, 'h2', 'lse_2', 400_000_000, { min: 300_000_000, demandUntilMs: T0 + 5_000 });
        await draw(a, 'h3', 'lse_3', 1_000, { min: 1_000, nowMs: T0 + 1 });
        expect((await beat(a, 'h1', ['lse_1'])).wanted).toEqual(new Set(['lse_1']));
        await a.returnBudget({ holder: 'h1', leaseId: 'lse_1', returnNano: 500_000_000, nowMs: T0 + 1 });
        expect(await draw(b, 'h2', 'lse_2', 400_000_000, { min: 300_000_000, nowMs: T0 + 2, demandUntilMs: T0 + 5_000 })).toMatchObject({ addedNano: 374_999_500 });
        expect((await beat(a, 'h1', ['lse_1'])).wanted).toEqual(new Set());
        await invariant();
      });

      it('returns at most granted − consumed, and only the holder\'s own lease', async () => {
        await draw(a, 'h1', 'lse_1', 1_000_000);
        await subject.applySettlements([settlement(300_000, ['lse_1'])]);
        expect(await b.returnBudget({ holder: 'h2', leaseId: 'lse_1', returnNano: 1, nowMs: T0 })).toEqual({ returnedNano: 0 });
        expect(await b.returnBudget({ holder: 'h1', leaseId: 'lse_1', returnNano: 200_000, nowMs: T0 })).toMatchObject({ returnedNano: 200_000, lease: { grantedNano: 800_000 } });
        expect(await a.returnBudget({ holder: 'h1', leaseId: 'lse_1', returnNano: 10_000_000, nowMs: T0 })).toMatchObject({ returnedNano: 500_000, lease: { grantedNano: 300_000, consumedNano: 300_000 } });
        expect(await a.readBudget(MONTH)).toMatchObject({ settledNano: 300_000, leasedNano: 0 });
        expect(await a.returnBudget({ holder: 'h1', leaseId: 'lse_missing', returnNano: 1, nowMs: T0 })).toEqual({ returnedNano: 0 });
      });
    });

    describe('holders, hold_until and reclaim', () => {
      it('registers holders, extends only their own leases (never shortens), and reports the ones that are gone', async () => {
        await draw(a, 'h1', 'lse_1', 1_000, { holdUntilMs: T0 + 100_000 });
        await draw(a, 'h2', 'lse_2', 1_000, { holdUntilMs: T0 + 100_000 });
        const beat = await b.heartbeat({ holder: 'h1', mode: 'shared', nowMs: T0, ttlMs: 10_000, leaseIds: ['lse_1', 'lse_2', 'lse_gone'], holdUntilMs: T0 + 200_000 });
        expect(beat).toEqual({ live: new Set(['lse_1']), wanted: new Set() });
        await a.heartbeat({ holder: 'h1', mode: 'shared', nowMs: T0, ttlMs: 10_000, leaseIds: ['lse_1'], holdUntilMs: T0 + 50_000 });
        const byId = Object.fromEntries((await a.listLeases()).budget.map((l) => [l.leaseId, l.holdUntilMs]));
        expect(byId).toEqual({ lse_1: T0 + 200_000, lse_2: T0 + 100_000 });
        expect((await a.listLeases('h2')).budget.map((l) => l.leaseId)).toEqual(['lse_2']);
      });

      it('reclaims only leases past hold_until + grace, giving back granted − consumed, and expired holders without leases', async () => {
        await a.heartbeat({ holder: 'dead', mode: 'shared', nowMs: T0, ttlMs: 10_000, leaseIds: [], holdUntilMs: 0 });
        await a.heartbeat({ holder: 'alive', mode: 'shared', nowMs: T0 + 200_000, ttlMs: 10_000, leaseIds: [], holdUntilMs: 0 });
        await draw(a, 'dead', 'lse_dead', 1_000_000, { holdUntilMs: T0 + 180_000 });
        await draw(a, 'alive', 'lse_alive', 1_000_000, { holdUntilMs: T0 + 400_000 });
        await a.drawRate({ holder: 'dead', leaseId: 'lse_dead_rate', create: true, scope: 'tenant:acme', limits: { tokensPerMinute: 100 }, ask: { tokensPerMinute: ask(50) }, holdUntilMs: T0 + 180_000, nowMs: T0 });
        await subject.applySettlements([settlement(250_000, ['lse_dead'])]);
        expect(await b.reclaimExpired({ nowMs: T0 + 184_999, graceMs: 5_000 })).toEqual({ leases: 0, returnedNano: 0, holders: 0 });
        expect(await b.reclaimExpired({ nowMs: T0 + 185_000, graceMs: 5_000 })).toEqual({ leases: 2, returnedNano: 750_000, holders: 1 });
        expect(await a.readBudget(MONTH)).toEqual({ settledNano: 250_000, reservedNano: 0, leasedNano: 1_000_000 });
        expect((await a.listLeases()).budget.map((l) => l.leaseId)).toEqual(['lse_alive']);
        expect((await a.listLeases()).rate).toEqual([]);
        await invariant();
      });

      it('retires: shortens hold_until (never lengthens) and expires the holder', async () => {
        await a.heartbeat({ holder: 'h1', mode: 'shared', nowMs: T0, ttlMs: 10_000, leaseIds: [], holdUntilMs: 0 });
        await draw(a, 'h1', 'lse_1', 1_000, { holdUntilMs: T0 + 180_000 });
        await draw(a, 'h1', 'lse_2', 1_000, { holdUntilMs: T0 + 180_000 });
        await b.retire({ holder: 'h1', nowMs: T0 + 1_000, leases: [{ leaseId: 'lse_1', holdUntilMs: T0 + 60_000 }, { leaseId: 'lse_2', holdUntilMs: T0 + 900_000 }] });
        expect((await a.listLeases()).budget.map((l) => l.holdUntilMs)).toEqual([T0 + 60_000, T0 + 180_000]);
        expect(await a.reclaimExpired({ nowMs: T0 + 60_000, graceMs: 0 })).toEqual({ leases: 1, returnedNano: 1_000, holders: 0 });
        expect(await a.reclaimExpired({ nowMs: T0 + 180_000, graceMs: 0 })).toEqual({ leases: 1, returnedNano: 1_000, holders: 1 });
      });

      it('reclaims every other holder at once (an exclusive start), or everyone', async () => {
        await draw(a, 'old', 'lse_old', 1_000_000, { holdUntilMs: T0 + 900_000 });
        await draw(a, 'me', 'lse_me', 1_000, { holdUntilMs: T0 + 900_000 });
        await a.heartbeat({ holder: 'old', mode: 'exclusive', nowMs: T0, ttlMs: 10_000, leaseIds: [], holdUntilMs: 0 });
        await a.heartbeat({ holder: 'me', mode: 'exclusive', nowMs: T0, ttlMs: 10_000, leaseIds: [], holdUntilMs: 0 });
        expect(await b.reclaimHolders({ exceptHolder: 'me', nowMs: T0 })).toEqual({ leases: 1, returnedNano: 1_000_000, holders: 1 });
        expect((await a.listLeases()).budget.map((l) => l.leaseId)).toEqual(['lse_me']);
        expect(await b.reclaimHolders({ nowMs: T0 })).toEqual({ leases: 1, returnedNano: 1_000, holders: 1 });
        expect(await a.readBudget(MONTH)).toMatchObject({ leasedNano: 0 });
      });

      it('reclaims only the holders named (a restart proving its predecessor dead), whatever their hold_until', async () => {
        await draw(a, 'dead', 'lse_dead', 1_000_000, { holdUntilMs: T0 + 900_000 });
        await a.drawRate({ holder: 'dead', leaseId: 'lse_dead_rate', create: true, scope: 'tenant:acme', limits: { maxConcurrent: 3 }, ask: { maxConcurrent: ask(3, 0, 1) }, holdUntilMs: T0 + 900_000, nowMs: T0 });
        await draw(a, 'other', 'lse_other', 1_000, { holdUntilMs: T0 + 900_000 });
        for (const holder of ['dead', 'other']) await a.heartbeat({ holder, mode: 'shared', nowMs: T0, ttlMs: 10_000, leaseIds: [], holdUntilMs: 0 });
        expect(await b.reclaimHolders({ holders: ['dead'], nowMs: T0 })).toEqual({ leases: 2, returnedNano: 1_000_000, holders: 1 });
        expect((await a.listLeases()).budget.map((l) => l.leaseId)).toEqual(['lse_other']);
        expect((await a.listLeases()).rate).toEqual([]);
        expect(await a.readBudget(MONTH)).toMatchObject({ leasedNano: 1_000 });
        expect(await b.reclaimHolders({ holders: [], nowMs: T0 })).toEqual({ leases: 0, returnedNano: 0, holders: 0 });
        await invariant();
      });
    });

    describe('rate leases', () => {
      const limits = { requestsPerMinute: 10, tokensPerMinute: 1_000, maxConcurrent: 8 };
      const rateDraw = (store: LeaseStore, holder: string, leaseId: string, want: number, min = 0, create = true) =>
        store.drawRate({
          holder,
          leaseId,
          create,
          scope: 'tenant:acme',
          limits,
          ask: { tokensPerMinute: ask(want, min), maxConcurrent: ask(Math.ceil(want / 100), Math.min(1, min)), outputTokensPerMinute: ask(want) },
          holdUntilMs: T0 + 180_000,
          nowMs: T0,
        });

      it('grants shares of the limits asked, reports what is left, and grants nothing for a field without a limit', async () => {
        const r = await rateDraw(a, 'h1', 'lse_1', 800);
        expect(r).toEqual({
          lease: { leaseId: 'lse_1', holder: 'h1', scope: 'tenant:acme', shares: { requestsPerMinute: 0, tokensPerMinute: 500, inputTokensPerMinute: 0, outputTokensPerMinute: 0, maxConcurrent: 4 }, holdUntilMs: T0 + 180_000 },
          added: { tokensPerMinute: 500, maxConcurrent: 4 },
          unleased: { tokensPerMinute: 500, maxConcurrent: 4 },
        });
        expect(await rateDraw(b, 'h2', 'lse_2', 800, 400)).toMatchObject({ added: { tokensPerMinute: 400, maxConcurrent: 2 }, unleased: { tokensPerMinute: 100, maxConcurrent: 2 } });
        expect(await rateDraw(b, 'h3', 'lse_3', 800, 101, false)).toEqual({ added: {}, unleased: { tokensPerMinute: 100, maxConcurrent: 2 } });
      });

      it('keeps Σ shares ≤ limit under 60 parallel draws from both stores', async () => {
        await Promise.all(Array.from({ length: 60 }, (_, i) => rateDraw(i % 2 ? a : b, `h${i % 5}`, `lse_${i % 5}`, 50 + ((i * 37) % 300), i % 4 === 0 ? 30 : 0)));
        const { rate } = await a.listLeases();
        for (const f of RATE_FIELDS) {
          const limit = (limits as Record<string, number | undefined>)[f] ?? 0;
          expect(rate.reduce((s, l) => s + l.shares[f], 0)).toBeLessThanOrEqual(limit);
        }
        expect(rate.reduce((s, l) => s + l.shares.tokensPerMinute, 0)).toBeGreaterThan(900);
      });

      it('shrinks only downwards, only the holder\'s own', async () => {
        await rateDraw(a, 'h1', 'lse_1', 800);
        expect(await b.shrinkRate({ holder: 'h2', leaseId: 'lse_1', shares: { tokensPerMinute: 0 }, nowMs: T0 })).toBeUndefined();
        expect(await b.shrinkRate({ holder: 'h1', leaseId: 'lse_1', shares: { tokensPerMinute: 120, maxConcurrent: 9 }, nowMs: T0 })).toMatchObject({
          shares: { tokensPerMinute: 120, maxConcurrent: 4 },
        });
        expect(await rateDraw(b, 'h2', 'lse_2', 800)).toMatchObject({ added: { tokensPerMinute: 440 } });
      });
    });
  });
}

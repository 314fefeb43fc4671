/**
 * Admission on leases (ADR 0002 §1) over the in-memory lease store, with a fake clock and a
 * manual maintenance timer: sizing, background refill, shrinking to the edge of a budget with
 * two holders, a dead holder's reclaim, rate shares following demand, `hold_until` extension,
 * local expiry, a graceful stop, configuration changes, store faults, and — in exclusive mode —
 * decisions identical to ADR 0001's engine.
 *
 * The Postgres/PGlite versions (two holders on one real database, the lease store contract, the
 * admission port contract in exclusive mode) are in `@weir/store-pg`'s specs.
 */
import { type ReservationRequest, type ReserveResult, type TenantSpec, appKeyOf, tenantKeyOf } from '@weir/core';
import {
  type InMemoryLeaseStore,
  type LeasedAdmission,
  type LeasedAdmissionOptions,
  type MaintenanceTimer,
  NANO_PER_USD,
  createInMemoryAdmission,
  createInMemoryLeaseStore,
  createLeasedAdmission,
} from './index';

const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);
const WORST = 1_000_000; // $0.001

function tenant(id: string, limits: Partial<TenantSpec['limits']>, apps: TenantSpec['apps'] = [{ id: 'web', name: 'web', limits: {} }]): TenantSpec {
  return { id, name: id, apps, allowedAliases: ['*'], defaultDeadlineMs: 120_000, limits: { maxConcurrent: 1_000, ...limits } };
}

interface Harness {
  store: InMemoryLeaseStore;
  clock: { now(): number; advance(ms: number): void; set(ms: number): void };
  timer: MaintenanceTimer & { ticks: number };
  make(tenants: TenantSpec[], options?: Partial<LeasedAdmissionOptions>): LeasedAdmission;
}

function harness(store: InMemoryLeaseStore = createInMemoryLeaseStore()): Harness {
  let t = NOW;
  const clock = { now: () => t, advance: (ms: number) => (t += ms), set: (ms: number) => (t = ms) };
  const timer = { ticks: 0, every: () => () => undefined };
  return {
    store,
    clock,
    timer,
    make: (tenants, options = {}) => createLeasedAdmission({ tenants, mode: 'shared', ...options }, { store, clock, timer }),
  };
}

let seq = 0;
function req(tenantId: string, overrides: Partial<ReservationRequest> = {}, appId = 'web'): ReservationRequest {
  seq++;
  return {
    caller: { tenantId, appId, apiKeyId: 'key' },
    requestId: `req_${seq}`,
    generationId: `gen_${seq}`,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: WORST,
    expiresAtMs: NOW + 60_000,
    ...overrides,
  };
}

function ok(r: ReserveResult) {
  if (!r.ok) throw new Error(`expected a reservation, got ${r.reason}: ${r.message}`);
  return r;
}

const usage = (inputTokens = 10, outputTokens = 20) => ({ inputTokens, outputTokens, cachedInputTokens: 0 });
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Reserve then settle at `cost` (the applier applies it at once); resolves false when rejected. */
async function spend(a: LeasedAdmission, store: InMemoryLeaseStore, r: ReservationRequest, cost = r.worstCaseCostNanoUsd): Promise<boolean> {
  const res = await a.reserve(r);
  if (!res.ok) return false;
  await a.settle(res.reservationId, { usage: usage(), costNanoUsd: cost });
  store.applySettlements([{ tenantId: tenantKeyOf(r.caller), appId: appKeyOf(r.caller), costNano: cost, reservation: res.reservation! }]);
  return true;
}

const monthRow = (tenantId: string) => ({ scope: `tenant:${tenantId}`, period: 'month' as const, startsOn: '2026-11-01' });

describe('leased admission, shared', () => {
  it('draws a first lease of 8 worst cases (and 2 slots) in one synchronous round, then decides in memory', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })]);
    const first = ok(await a.reserve(req('acme')));
    expect(h.store.calls()).toBe(2); // the budget lease and the rate lease, drawn together
    const snap = a.snapshot();
    expect(snap.budgetLeases).toEqual([expect.objectContaining({ status: 'active', grantedNano: 8 * WORST, inFlightNano: WORST, availableNano: 7 * WORST })]);
    expect(snap.rateLeases).toEqual([expect.objectContaining({ scope: 'tenant:acme', shares: expect.objectContaining({ maxConcurrent: 2 }) })]);
    expect(first.reservation).toEqual({ reservationId: first.reservationId, worstCaseNano: WORST, monthStartsOn: '2026-11-01', dayStartsOn: '2026-11-30', leaseIds: [snap.budgetLeases[0].leaseId] });
    await a.release(first.reservationId);
    for (let i = 0; i < 4; i++) expect(await spend(a, h.store, req('acme'))).toBe(true);
    expect(h.store.calls()).toBe(2); // nothing on the request path
    expect(await h.store.readBudget(monthRow('acme'))).toEqual({ settledNano: 4 * WORST, reservedNano: 0, leasedNano: 4 * WORST });
  });

  it('refills in the background below 30 % of its target, before the lease runs dry', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })]);
    for (let i = 0; i < 5; i++) await spend(a, h.store, req('acme'));
    expect(a.snapshot().budgetLeases[0]).toMatchObject({ grantedNano: 8 * WORST, availableNano: 3 * WORST });
    // The 6th leaves 2 of a target of 8 (< 30 %): a refill to the target starts after the decision.
    await spend(a, h.store, req('acme'));
    await flush();
    expect(a.snapshot().budgetLeases[0]).toMatchObject({ grantedNano: 14 * WORST, availableNano: 8 * WORST });
    expect(a.snapshot().counters).toMatchObject({ syncDraws: 2, backgroundDraws: 1 });
  });

  it('holds about 10 s of a steady spend, and the steady state never waits for a draw', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 100 })]);
    // 20 requests a second (0.02 $/s) for 40 s, maintenance every 2 s.
    for (let i = 0; i < 800; i++) {
      expect(await spend(a, h.store, req('acme'))).toBe(true);
      h.clock.advance(50);
      if (i % 40 === 39) await a.runMaintenance();
      await flush();
    }
    const lease = a.snapshot().budgetLeases[0];
    const tenSeconds = 200 * WORST;
    expect(lease.availableNano).toBeGreaterThanOrEqual(0.3 * tenSeconds - WORST);
    expect(lease.availableNano).toBeLessThanOrEqual(2 * tenSeconds);
    expect(a.snapshot().counters.syncDraws).toBe(2); // only the first request waited
  });

  it('shrinks to the edge with two holders: the cap holds and less than one worst case per holder is stranded', async () => {
    const h = harness();
    const tenants = [tenant('acme', { monthlyBudgetUsd: 0.02 })]; // 20 worst cases
    const a = h.make(tenants);
    const b = h.make(tenants);
    expect(await a.reserve(req('acme', { worstCaseCostNanoUsd: 21 * WORST }))).toMatchObject({
      ok: false,
      message: "The tenant's monthly budget of $0.02 is exhausted: $0.02 remains unreserved and this request may cost up to $0.021. Lower max_tokens or the input, or ask for a higher budget.",
    });
    let admitted = 0;
    const sample = async () => {
      const row = (await h.store.readBudget(monthRow('acme')))!;
      expect(row.settledNano + row.leasedNano).toBeLessThanOrEqual(0.02 * NANO_PER_USD);
    };
    for (let round = 0; round < 40; round++) {
      for (const x of [a, b]) {
        if (await spend(x, h.store, req('acme'))) admitted++;
        await flush();
        await sample();
      }
    }
    expect(admitted).toBeGreaterThanOrEqual(19);
    expect(admitted).toBeLessThanOrEqual(20);
    const row = (await h.store.readBudget(monthRow('acme')))!;
    expect(row.settledNano).toBe(admitted * WORST);
    const stranded = [a, b].map((x) => x.snapshot().budgetLeases.find((l) => l.status === 'active')?.availableNano ?? 0);
    for (const s of stranded) expect(s).toBeLessThan(WORST);
    // Pieces stranded on both holders may still add up to a request: a refused holder's demand
    // makes the other give its piece back at its next pass, and the last request passes.
    for (let round = 0; round < 3; round++) {
      h.clock.advance(1_100);
      for (const [x, other] of [
        [a, b],
        [b, a],
      ]) {
        if (await spend(x, h.store, req('acme', { expiresAtMs: h.clock.now() + 60_000 }))) admitted++;
        await other.runMaintenance(); // the other holder's heartbeat, after this one's refusal
        await sample();
      }
    }
    expect(admitted).toBeLessThanOrEqual(20);
    expect((await h.store.readBudget(monthRow('acme')))!.settledNano).toBe(admitted * WORST);
    // Now truly spent: rejected exactly as ADR 0001's engine words it.
    const r = await a.reserve(req('acme', { expiresAtMs: h.clock.now() + 60_000 }));
    expect(r).toMatchObject({ ok: false, reason: 'budget_exhausted', message: expect.stringContaining("tenant's monthly budget of $0.02 is exhausted") });
  });

  it('hands a quiet holder\'s money to a refused one at its next heartbeat (demand), not after a minute idle', async () => {
    const h = harness();
    const tenants = [tenant('acme', { monthlyBudgetUsd: 0.02 })]; // 20 worst cases
    const a = h.make(tenants);
    const b = h.make(tenants);
    for (const x of [a, b]) await x.start(); // live holders (their heartbeats)
    // A leases its first 8 worst cases and then sits on them.
    await a.release(ok(await a.reserve(req('acme'))).reservationId);
    expect(a.snapshot().budgetLeases[0].availableNano).toBe(8 * WORST);
    let byB = 0;
    while (await spend(b, h.store, req('acme'))) byB++;
    expect(byB).toBeGreaterThanOrEqual(10);
    expect(byB).toBeLessThanOrEqual(12);
    // Refused again after its retry delay (the row is dry for it: A holds the rest) …
    h.clock.advance(1_100);
    expect(await b.reserve(req('acme', { expiresAtMs: h.clock.now() + 60_000 }))).toMatchObject({
      ok: false,
      reason: 'budget_exhausted',
      message: expect.stringContaining('monthly budget is nearly spent: $0.008 of what is left is held by other admission instances'),
      retryAfterMs: 4_000,
    });
    // … until A's next maintenance pass sees B's demand and gives back what it does not use.
    h.clock.advance(1_100);
    await a.runMaintenance();
    expect(a.snapshot().counters.rebalances).toBe(1);
    expect(a.snapshot().budgetLeases[0].availableNano).toBe(0);
    while (await spend(b, h.store, req('acme', { expiresAtMs: h.clock.now() + 60_000 }))) byB++;
    expect(byB).toBeGreaterThanOrEqual(18);
    const row = (await h.store.readBudget(monthRow('acme')))!;
    expect(row.settledNano).toBe(byB * WORST);
    expect(row.settledNano + row.leasedNano).toBeLessThanOrEqual(0.02 * NANO_PER_USD);
  });

  it('gives back what a dry co-row makes useless, so two holders never each hold what the other needs', async () => {
    const h = harness();
    const tenants = [
      tenant('acme', { monthlyBudgetUsd: 0.01 }, [
        { id: 'web', name: 'web', limits: { dailyBudgetUsd: 0.01 } },
        { id: 'other', name: 'other', limits: {} },
      ]),
    ]; // 10 worst cases a month for the tenant, 10 a day for web
    const a = h.make(tenants);
    const b = h.make(tenants);
    // A leases half of the tenant's month through its other app, and keeps it unused.
    await a.release(ok(await a.reserve(req('acme', {}, 'other'))).reservationId);
    // B spends through web until the month is dry for it, holding web's day money.
    let admitted = 0;
    while (await spend(b, h.store, req('acme'))) admitted++;
    expect(admitted).toBe(5);
    // A's web requests need day money B holds; B's need month money A holds. Alternating, the
    // dry rows' holders give back what they cannot use, and the rest of the budget is spent.
    for (let i = 0; i < 20; i++) {
      for (const x of [a, b]) if (await spend(x, h.store, req('acme'))) admitted++;
      await flush();
    }
    expect(admitted).toBe(10);
    const month = (await h.store.readBudget(monthRow('acme')))!;
    expect(month.settledNano).toBe(10 * WORST);
  });

  it('shares one synchronous draw among a burst waiting on the same lease, and sizes the next by their demand', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })]);
    const results = await Promise.all(Array.from({ length: 100 }, () => a.reserve(req('acme'))));
    expect(results.every((r) => r.ok)).toBe(true);
    // 8 worst cases first, then one draw for everyone who waited (capped by half of what is unleased); slots the same way.
    expect(a.snapshot().counters.syncDraws).toBeLessThanOrEqual(6);
    expect(a.snapshot().budgetLeases[0].inFlightNano).toBe(100 * WORST);
  });

  it('reclaims a dead holder\'s leases only after hold_until + grace, giving back granted − consumed', async () => {
    const h = harness();
    const tenants = [tenant('acme', { monthlyBudgetUsd: 1 })];
    const dead = h.make(tenants, { holdMs: 180_000, reclaimGraceMs: 5_000 });
    const survivor = h.make(tenants, { holdMs: 180_000, reclaimGraceMs: 5_000 });
    await dead.start();
    await spend(dead, h.store, req('acme'), 400_000);
    await spend(dead, h.store, req('acme'), 600_000);
    const inFlight = ok(await dead.reserve(req('acme')));
    const granted = dead.snapshot().budgetLeases[0].grantedNano;
    await dead.stop({ returnLeases: false }); // killed: nothing returned
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ settledNano: WORST, leasedNano: granted - WORST });

    h.clock.advance(184_000);
    expect(await survivor.reclaimExpired()).toEqual({ leases: 0, returnedNano: 0, holders: 0 });
    h.clock.advance(1_000);
    expect(await survivor.reclaimExpired()).toEqual({ leases: 2, returnedNano: granted - WORST, holders: 1 });
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ settledNano: WORST, leasedNano: 0 });
    // The in-flight reservation's settlement, if its relay's entry arrives this late, is still billed (it moves nothing).
    h.store.applySettlements([{ tenantId: 'acme', appId: 'web', costNano: 300_000, reservation: inFlight.reservation! }]);
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ settledNano: WORST + 300_000, leasedNano: 0 });
    // The survivor leases what came back.
    ok(await survivor.reserve(req('acme', { worstCaseCostNanoUsd: 0.5 * NANO_PER_USD - WORST })));
  });

  it('keeps its local figures right whether the applier has applied a settlement yet or not', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })]);
    const r = ok(await a.reserve(req('acme')));
    await a.settle(r.reservationId, { usage: usage(), costNanoUsd: 250_000 });
    const before = a.snapshot().budgetLeases[0];
    expect(before).toMatchObject({ settledNano: 250_000, inFlightNano: 0, availableNano: 8 * WORST - 250_000 });
    h.store.applySettlements([{ tenantId: 'acme', appId: 'web', costNano: 250_000, reservation: r.reservation! }]);
    expect(a.snapshot().budgetLeases[0]).toEqual(before);
    const [lease] = (await h.store.listLeases()).budget;
    expect(lease).toMatchObject({ grantedNano: 8 * WORST, consumedNano: 250_000 });
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ settledNano: 250_000, leasedNano: 8 * WORST - 250_000 });
  });

  it('extends hold_until first (one round trip, a minute past the reservation) for a reservation that would outlive its leases', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })], { holdMs: 180_000 });
    ok(await a.reserve(req('acme')));
    const calls = h.store.calls();
    ok(await a.reserve(req('acme', { expiresAtMs: NOW + 300_000 })));
    expect(h.store.calls()).toBe(calls + 1);
    expect(a.snapshot().counters.extensions).toBe(1);
    const { budget, rate } = await h.store.listLeases();
    expect(budget[0].holdUntilMs).toBe(NOW + 360_000);
    expect(rate[0].holdUntilMs).toBe(NOW + 360_000);
    // A like request right after needs no second round trip (the headroom covers it).
    ok(await a.reserve(req('acme', { expiresAtMs: NOW + 330_000 })));
    expect(a.snapshot().counters.extensions).toBe(1);
  });

  it('needs no extension for reservations of the default lifetime (a 120 s deadline + 60 s grace) made between heartbeats', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })]);
    ok(await a.reserve(req('acme', { expiresAtMs: NOW + 180_000 })));
    h.clock.advance(1_900);
    ok(await a.reserve(req('acme', { expiresAtMs: h.clock.now() + 180_000 })));
    expect(a.snapshot().counters.extensions).toBe(0);
  });

  it('counts a reservation that expires unsettled at its worst case and frees its slot', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1, maxConcurrent: 1 })]);
    const r = ok(await a.reserve(req('acme')));
    expect((await a.reserve(req('acme'))).ok).toBe(false);
    h.clock.advance(60_000);
    expect(await a.runMaintenance()).toMatchObject({ expired: 1 });
    expect(a.snapshot()).toMatchObject({ held: 0, inFlight: { 'tenant:acme': 0 }, counters: { expired: 1 } });
    expect(a.snapshot().budgetLeases[0]).toMatchObject({ settledNano: WORST, inFlightNano: 0 });
    await a.settle(r.reservationId, { usage: usage(), costNanoUsd: 1 }); // too late: nothing changes
    expect(a.snapshot().budgetLeases[0]).toMatchObject({ settledNano: WORST });
    ok(await a.reserve(req('acme', { expiresAtMs: h.clock.now() + 60_000 })));
  });

  it('stops gracefully: gives back what is unused, lets leases lapse after the last expiry + grace, refuses new work', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })], { stopGraceMs: 30_000 });
    await a.start();
    const r = ok(await a.reserve(req('acme', { expiresAtMs: NOW + 90_000 })));
    await a.stop();
    const { budget, rate } = await h.store.listLeases();
    expect(budget[0]).toMatchObject({ grantedNano: WORST, holdUntilMs: NOW + 120_000 });
    expect(rate[0]).toMatchObject({ holdUntilMs: NOW + 120_000, shares: expect.objectContaining({ maxConcurrent: 1 }) });
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ leasedNano: WORST });
    expect(h.store.holders()[0].expiresAtMs).toBe(NOW);
    await expect(a.reserve(req('acme'))).rejects.toMatchObject({ code: 'shutting_down' });
    await a.settle(r.reservationId, { usage: usage(), costNanoUsd: 10 });
    expect(a.snapshot().held).toBe(0);
  });

  it('reclaims its named predecessors at start (a restart after kill -9): their budget and slots are free at once', async () => {
    const h = harness();
    const tenants = [tenant('acme', { monthlyBudgetUsd: 0.01, maxConcurrent: 2 })];
    const before = h.make(tenants, { holderId: 'hld_aio_x', predecessors: ['hld_aio_x'] });
    await before.start();
    ok(await before.reserve(req('acme')));
    ok(await before.reserve(req('acme')));
    await before.stop({ returnLeases: false }); // killed: both slots and its budget lease stay held
    const stranger = h.make(tenants);
    await stranger.start();
    expect(await stranger.reserve(req('acme'))).toMatchObject({ ok: false, reason: 'concurrency_limited' });
    const after = h.make(tenants, { holderId: 'hld_aio_x', predecessors: ['hld_aio_x'] });
    await after.start();
    expect((await h.store.listLeases('hld_aio_x')).budget).toEqual([]);
    ok(await after.reserve(req('acme')));
    ok(await after.reserve(req('acme')));
  });

  it('returns an idle lease and draws a new one when work comes back', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })], { idleReturnMs: 60_000 });
    await spend(a, h.store, req('acme'));
    const first = a.snapshot().budgetLeases[0].leaseId;
    h.clock.advance(61_000);
    await a.runMaintenance();
    expect(a.snapshot().budgetLeases[0]).toMatchObject({ leaseId: first, status: 'retired', grantedNano: WORST, availableNano: 0 });
    expect(a.snapshot().rateLeases[0]).toMatchObject({ status: 'retired', shares: expect.objectContaining({ maxConcurrent: 0 }) });
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ leasedNano: 0 }); // the applier consumed the rest
    ok(await a.reserve(req('acme', { expiresAtMs: h.clock.now() + 60_000 })));
    expect(a.snapshot().budgetLeases.find((l) => l.status === 'active')?.leaseId).not.toBe(first);
    // The retired lease lapses at its hold_until and is reclaimed.
    h.clock.advance(250_000);
    expect((await a.reclaimExpired()).leases).toBeGreaterThanOrEqual(1);
  });

  it('takes what it gives back off its own grant before the transaction, so nothing is admitted on money on its way back', async () => {
    const h = harness();
    let opened!: () => void;
    const gate = new Promise<void>((resolve) => (opened = resolve));
    let returning = false;
    const store: InMemoryLeaseStore = {
      ...h.store,
      returnBudget: async (input) => {
        returning = true;
        await gate;
        return h.store.returnBudget(input);
      },
    };
    const a = createLeasedAdmission({ tenants: [tenant('acme', { monthlyBudgetUsd: 1 })], mode: 'shared' }, { store, clock: h.clock, timer: h.timer });
    // A burst leaves a big lease; 30 s later the spend has aged out and maintenance trims it.
    const burst = await Promise.all(Array.from({ length: 60 }, () => a.reserve(req('acme'))));
    for (const r of burst) await a.settle(ok(r).reservationId, { usage: usage(), costNanoUsd: 0 });
    h.clock.advance(30_000);
    const maintenance = a.runMaintenance();
    while (!returning) await flush();
    // Requests arriving while the return is in flight find the lease already trimmed: they wait and draw again.
    const pending = Promise.all(Array.from({ length: 80 }, () => a.reserve(req('acme', { expiresAtMs: h.clock.now() + 60_000 }))));
    await flush();
    opened();
    await maintenance;
    const during = await pending;
    await flush();
    const local = a.snapshot().budgetLeases.find((l) => l.status === 'active')!;
    const [stored] = (await h.store.listLeases()).budget;
    expect(local.grantedNano).toBe(stored.grantedNano);
    expect(local.settledNano + local.inFlightNano).toBeLessThanOrEqual(stored.grantedNano);
    expect(during.filter((r) => r.ok).length * WORST).toBe(local.inFlightNano);
  });

  it('shrinks every holder\'s share in proportion when a limit is lowered', async () => {
    const h = harness();
    const rated = [tenant('acme', { tokensPerMinute: 6_000 })];
    const a = h.make(rated);
    const b = h.make(rated);
    for (let i = 0; i < 20; i++) ok(await a.reserve(req('acme', { inputTokens: 50, maxOutputTokens: 50, worstCaseCostNanoUsd: 0 })));
    for (let i = 0; i < 10; i++) ok(await b.reserve(req('acme', { inputTokens: 50, maxOutputTokens: 50, worstCaseCostNanoUsd: 0 })));
    const before = (await h.store.listLeases()).rate.map((l) => l.shares.tokensPerMinute);
    expect(before.reduce((x, y) => x + y, 0)).toBeGreaterThan(1_500);
    const lowered = [tenant('acme', { tokensPerMinute: 1_500 })];
    a.updateTenants(lowered);
    b.updateTenants(lowered);
    await a.runMaintenance();
    await b.runMaintenance();
    const after = (await h.store.listLeases()).rate.map((l) => l.shares.tokensPerMinute);
    expect(after.reduce((x, y) => x + y, 0)).toBeLessThanOrEqual(1_500);
    after.forEach((v, i) => expect(v).toBe(Math.floor((before[i] * 1_500) / 6_000)));
  });

  it('files scopes under internal ids: a same-slug successor starts with a fresh budget, the retired one’s lease goes back (issue 14 §4)', async () => {
    const h = harness();
    const OLD = 'acme~00000000000000aa';
    const NEW = 'acme~00000000000000bb';
    const incarnation = (uid: string, appUid: string) => ({ ...tenant('acme', { monthlyBudgetUsd: 0.002 }, [{ id: 'web', uid: appUid, name: 'web', limits: {} }]), uid });
    const callerOf = (tenantUid: string, appUid: string) => ({ tenantId: 'acme', appId: 'web', apiKeyId: 'key', tenantUid, appUid });
    const a = h.make([incarnation(OLD, 'web~00000000000000a1')]);
    const oldCaller = callerOf(OLD, 'web~00000000000000a1');
    expect(await spend(a, h.store, req('acme', { caller: oldCaller }))).toBe(true);
    expect(await spend(a, h.store, req('acme', { caller: oldCaller }))).toBe(true);
    expect(await a.reserve(req('acme', { caller: oldCaller }))).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    expect(await h.store.readBudget(monthRow(OLD))).toMatchObject({ settledNano: 2 * WORST });

    // Deleted and created again: the snapshot names the new internal ids.
    a.updateTenants([incarnation(NEW, 'web~00000000000000b1')]);
    const newCaller = callerOf(NEW, 'web~00000000000000b1');
    const fresh = ok(await a.reserve(req('acme', { caller: newCaller })));
    expect(fresh.reservation?.leaseIds.length).toBeGreaterThan(0);
    // A key of the deleted tenant that still resolves (cached) is not admitted on either incarnation.
    expect(await a.reserve(req('acme', { caller: oldCaller }))).toMatchObject({ ok: false, reason: 'concurrency_limited', retryAfterMs: 1_000 });
    // The retired scopes' leases are given back at the next maintenance.
    await a.runMaintenance();
    const leases = a.snapshot().budgetLeases;
    expect(leases.filter((l) => l.status === 'active').map((l) => l.key.scope)).toEqual(expect.arrayContaining([`tenant:${NEW}`]));
    expect(leases.filter((l) => l.status === 'active' && l.key.scope.includes(OLD))).toEqual([]);
    expect(await h.store.readBudget(monthRow(NEW))).toMatchObject({ settledNano: 0 });
    expect(await h.store.readBudget(monthRow(OLD))).toMatchObject({ settledNano: 2 * WORST, leasedNano: 0 });
  });

  it('refuses an unknown tenant exactly as before', async () => {
    const a = harness().make([]);
    expect(await a.reserve(req('nobody'))).toEqual({ ok: false, reason: 'concurrency_limited', message: 'Tenant nobody has no admission policy; ask the platform team to configure it.' });
  });

  it('keeps deciding on its leases while the database is away; only a dry lease reaches it (and fails)', async () => {
    const h = harness();
    const errors: string[] = [];
    const a = createLeasedAdmission({ tenants: [tenant('acme', { monthlyBudgetUsd: 1 })], mode: 'shared' }, { store: h.store, clock: h.clock, timer: h.timer, observer: { onError: (_e, what) => errors.push(what) } });
    ok(await a.reserve(req('acme')));
    h.store.failWith(new Error('connection refused'));
    ok(await a.reserve(req('acme')));
    await expect(a.reserve(req('acme', { worstCaseCostNanoUsd: 10 * WORST }))).rejects.toThrow('connection refused');
    await a.runMaintenance();
    expect(errors).toContain('heartbeat');
    h.store.failWith(undefined);
    ok(await a.reserve(req('acme', { worstCaseCostNanoUsd: 10 * WORST })));
  });

  it('names one budget lease per budgeted row in the reservation (tenant month, app day)', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 }, [{ id: 'web', name: 'web', limits: { dailyBudgetUsd: 0.5 } }])]);
    const r = ok(await a.reserve(req('acme')));
    const leases = a.snapshot().budgetLeases;
    expect(leases.map((l) => `${l.key.scope} ${l.key.period} ${l.key.startsOn}`).sort()).toEqual(['app:acme/web day 2026-11-30', 'tenant:acme month 2026-11-01']);
    expect(r.reservation?.leaseIds.sort()).toEqual(leases.map((l) => l.leaseId).sort());
  });
});

describe('leased admission, rate shares', () => {
  const rated = [tenant('acme', { tokensPerMinute: 6_000, maxConcurrent: 100 })];
  const tokens = (n: number) => req('acme', { inputTokens: n / 2, maxOutputTokens: n / 2, worstCaseCostNanoUsd: 0 });
  const shares = async (store: InMemoryLeaseStore) => (await store.listLeases()).rate.reduce((s, l) => s + l.shares.tokensPerMinute, 0);

  it('never lets two holders together take more than the limit, and gives idle share to the busy one', async () => {
    const h = harness();
    const a = h.make(rated);
    const b = h.make(rated);
    ok(await b.reserve(tokens(100)));
    expect(b.snapshot().rateLeases[0].shares.tokensPerMinute).toBe(200);
    let admittedA = 0;
    for (let i = 0; i < 80; i++) {
      const r = await a.reserve(tokens(100));
      if (r.ok) {
        admittedA++;
        await a.settle(r.reservationId, { usage: usage(50, 50), costNanoUsd: 0 });
      } else expect(r).toMatchObject({ reason: 'rate_limited', message: expect.stringContaining('limit of 6000 tokens per minute') });
      expect(await shares(h.store)).toBeLessThanOrEqual(6_000);
    }
    // The clock stood still: A got everything B did not hold (200), in 100-token requests.
    expect(admittedA).toBe(58);
    // B idles for a minute: its maintenance gives its share back; A's bucket has drained too.
    h.clock.advance(61_000);
    await b.runMaintenance();
    expect(b.snapshot().rateLeases[0]).toMatchObject({ status: 'retired', shares: expect.objectContaining({ tokensPerMinute: 0 }) });
    let again = 0;
    for (let i = 0; i < 80; i++) if ((await a.reserve(tokens(100))).ok) again++;
    expect(again).toBe(60);
    expect(await shares(h.store)).toBe(6_000);
  });

  it('gives back the idle, full part of a share at the next heartbeat', async () => {
    const h = harness();
    const b = h.make(rated);
    ok(await b.reserve(tokens(100))); // share 200, 100 used
    h.clock.advance(20_000);
    await b.runMaintenance();
    // 20 s drained 66.7 of the 100 used; the recent use has aged out: the target is 1, so all
    // but the bucket's level goes back: 200 − ⌊166.7⌋ = 34.
    expect(b.snapshot().rateLeases[0].shares).toMatchObject({ tokensPerMinute: 34, maxConcurrent: 1 });
    expect(await shares(h.store)).toBe(34);
  });

  it('follows a busy holder\'s demand in the background', async () => {
    const h = harness();
    const a = h.make(rated);
    for (let i = 0; i < 5; i++) ok(await a.reserve(tokens(100)));
    const before = a.snapshot().rateLeases[0].shares.tokensPerMinute;
    await a.runMaintenance();
    // 500 tokens in the window → 3,000/min → a target of 4,500, at most half of what is unleased per draw.
    const after = a.snapshot().rateLeases[0].shares.tokensPerMinute;
    expect(after).toBeGreaterThan(before);
    expect(after).toBe(Math.min(4_500, before + Math.floor((6_000 - before) / 2)));
  });
});

describe('leased admission, exclusive', () => {
  it('reclaims every lease in the store at start, then leases everything in one draw per row', async () => {
    const h = harness();
    const tenants = [tenant('acme', { monthlyBudgetUsd: 1, tokensPerMinute: 1_000 })];
    const predecessor = h.make(tenants);
    ok(await predecessor.reserve(req('acme')));
    expect((await h.store.readBudget(monthRow('acme')))?.leasedNano).toBeGreaterThan(0);
    const a = h.make(tenants, { mode: 'exclusive' });
    await a.start();
    expect(await h.store.listLeases()).toEqual({ budget: [], rate: [] });
    expect(await h.store.readBudget(monthRow('acme'))).toMatchObject({ leasedNano: 0 });
    ok(await a.reserve(req('acme')));
    expect(a.snapshot().budgetLeases.find((l) => l.status === 'active')).toMatchObject({ grantedNano: NANO_PER_USD });
    expect(a.snapshot().rateLeases.find((l) => l.status === 'active')?.shares).toMatchObject({ tokensPerMinute: 1_000, maxConcurrent: 1_000 });
    const calls = h.store.calls();
    for (let i = 0; i < 30; i++) ok(await a.reserve(req('acme')));
    expect(h.store.calls()).toBe(calls);
  });

  it('decides exactly as ADR 0001\'s engine: the same admissions, rejections, messages, hints and windows', async () => {
    const tenants = [
      tenant('acme', { monthlyBudgetUsd: 0.012, tokensPerMinute: 200, requestsPerMinute: 12, maxConcurrent: 3 }, [{ id: 'web', name: 'web', limits: { dailyBudgetUsd: 0.006, outputTokensPerMinute: 150 } }]),
    ];
    const h = harness();
    const leased = h.make(tenants, { mode: 'exclusive' });
    const reference = createInMemoryAdmission({ tenants, now: h.clock.now });
    const strip = (r: ReserveResult) => (r.ok ? { ok: true, rateLimits: r.rateLimits } : r);
    const held: [string, string, number][] = [];
    const outcomes = new Set<string>();
    for (let i = 0; i < 60; i++) {
      const worst = 300_000 + ((i * 77_777) % 500_000);
      const r = req('acme', { inputTokens: 5 + (i % 7), maxOutputTokens: 10 + ((i * 13) % 40), worstCaseCostNanoUsd: worst, expiresAtMs: h.clock.now() + 60_000 });
      const [x, y] = [await leased.reserve(r), await reference.reserve(r)];
      expect(strip(x)).toEqual(strip(y));
      outcomes.add(x.ok ? 'admitted' : x.reason);
      if (x.ok && y.ok) held.push([x.reservationId, y.reservationId, worst]);
      if (i % 2 === 1 && held.length > 0) {
        const [lx, ly, w] = held.shift()!;
        const s = { usage: usage(5, 7), costNanoUsd: Math.round(0.9 * w) };
        await leased.settle(lx, s);
        await reference.settle(ly, s);
      }
      h.clock.advance(700);
    }
    expect([...outcomes].sort()).toEqual(['admitted', 'budget_exhausted', 'concurrency_limited', 'rate_limited']);
  });

  it('applies a lowered budget to the next reservation, and a raised one after a top-up', async () => {
    const h = harness();
    const a = h.make([tenant('acme', { monthlyBudgetUsd: 1 })], { mode: 'exclusive' });
    await a.start();
    const r = ok(await a.reserve(req('acme')));
    await a.settle(r.reservationId, { usage: usage(), costNanoUsd: WORST });
    a.updateTenants([tenant('acme', { monthlyBudgetUsd: 0.005 })]);
    ok(await a.reserve(req('acme', { worstCaseCostNanoUsd: 4 * WORST })));
    expect(await a.reserve(req('acme', { worstCaseCostNanoUsd: 1 }))).toMatchObject({ ok: false, reason: 'budget_exhausted', message: expect.stringContaining('monthly budget of $0.005 is exhausted: $0.00 remains') });
    a.updateTenants([tenant('acme', { monthlyBudgetUsd: 1 })]);
    await a.runMaintenance();
    await flush();
    ok(await a.reserve(req('acme', { worstCaseCostNanoUsd: 0.9 * NANO_PER_USD })));
    const row = (await h.store.readBudget(monthRow('acme')))!;
    expect(row.settledNano + row.leasedNano).toBeLessThanOrEqual(NANO_PER_USD);
  });
});

/** The admission engine around the pure decisions: validation, observer events, the reconciler loop. */
import type { ReservationRequest, TenantSpec } from '@weir/core';
import { createAdmission, createInMemoryAdmission, createInMemoryAdmissionStore, startReconciler, withStoreFaultsAsUnavailable } from './index';

// The full port and store contracts (@weir/testing) run on this store from @weir/store-pg's
// specs, beside the Postgres store (a spec here importing @weir/testing would be circular).
let seq = 0;
function reservationRequest(overrides: Partial<ReservationRequest>): ReservationRequest {
  seq++;
  return {
    caller,
    requestId: `req_${seq}`,
    generationId: `gen_${seq}`,
    expiresAtMs: Date.now() + 60_000,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: 1_000,
    ...overrides,
  };
}

function manualClock(start = Date.UTC(2026, 10, 30, 12)) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

const tenants: TenantSpec[] = [
  { id: 't', name: 'T', apps: [{ id: 'a', name: 'A', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 1_000, limits: { maxConcurrent: 5, monthlyBudgetUsd: 1 } },
];
const caller = { tenantId: 't', appId: 'a', apiKeyId: 'k' };

describe('createAdmission', () => {
  it.each([
    ['inputTokens', { inputTokens: -1 }],
    ['maxOutputTokens', { maxOutputTokens: 1.5 }],
    ['worstCaseCostNanoUsd', { worstCaseCostNanoUsd: Number.NaN }],
    ['expiresAtMs', { expiresAtMs: Number.POSITIVE_INFINITY }],
  ])('refuses a malformed %s with invalid_request and holds nothing', async (field, bad) => {
    const adm = createInMemoryAdmission({ tenants });
    await expect(adm.reserve(reservationRequest({ caller, ...bad }))).rejects.toMatchObject({ code: 'invalid_request', message: expect.stringContaining(field) });
    expect(adm.held()).toEqual([]);
  });

  it('updateTenants applies new limits to the next reservation, keeps held ones, and refuses a tenant no longer listed', async () => {
    const adm = createAdmission({ tenants }, { store: createInMemoryAdmissionStore(), clock: manualClock() });
    const held = [];
    for (let i = 0; i < 2; i++) held.push(await adm.reserve(reservationRequest({ caller })));
    expect(held.every((r) => r.ok)).toBe(true);
    adm.updateTenants([{ ...tenants[0], limits: { maxConcurrent: 2, monthlyBudgetUsd: 1 } }]);
    expect(await adm.reserve(reservationRequest({ caller }))).toMatchObject({ ok: false, reason: 'concurrency_limited' });
    const first = held[0];
    if (!first.ok) throw new Error('not admitted');
    await adm.release(first.reservationId);
    expect(await adm.reserve(reservationRequest({ caller }))).toMatchObject({ ok: true });
    adm.updateTenants([]);
    expect(await adm.reserve(reservationRequest({ caller }))).toMatchObject({ ok: false, message: expect.stringContaining('no admission policy') });
  });

  it('refuses a malformed settlement and keeps the reservation held', async () => {
    const adm = createInMemoryAdmission({ tenants });
    const r = await adm.reserve(reservationRequest({ caller, worstCaseCostNanoUsd: 10 }));
    if (!r.ok) throw new Error(r.message);
    await expect(adm.settle(r.reservationId, { usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: -5 })).rejects.toMatchObject({ code: 'invalid_request' });
    expect(adm.held()).toHaveLength(1);
  });

  it('reports decisions by outcome and reason, and a settlement above the worst case', async () => {
    const events: unknown[] = [];
    const adm = createAdmission(
      { tenants },
      {
        store: createInMemoryAdmissionStore(),
        observer: { onDecision: (d) => events.push(d), onOverspend: (o) => events.push(o), onReconciled: (r) => events.push(r) },
      },
    );
    const r = await adm.reserve(reservationRequest({ caller, worstCaseCostNanoUsd: 600_000_000 }));
    await adm.reserve(reservationRequest({ caller, worstCaseCostNanoUsd: 600_000_000 }));
    if (!r.ok) throw new Error(r.message);
    await adm.settle(r.reservationId, { usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 600_000_007 });
    await adm.reconcileReservations();
    expect(events).toEqual([
      { tenantId: 't', outcome: 'admitted' },
      { tenantId: 't', outcome: 'rejected', reason: 'budget_exhausted' },
      { tenantId: 't', appId: 'a', reservationId: r.reservationId, overspendNano: 7 },
      { expiredSettled: 0, expiredReleased: 0, corrected: 0, correctedNano: 0, skipped: 0 },
    ]);
  });
});

describe('startReconciler', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('reconciles every interval, never two passes at once, and reports failures without stopping', async () => {
    const clock = manualClock();
    const store = createInMemoryAdmissionStore();
    const adm = createAdmission({ tenants }, { store, clock });
    await adm.reserve(reservationRequest({ caller, worstCaseCostNanoUsd: 1, expiresAtMs: clock.now() + 5 }));
    clock.advance(10);
    const reports: number[] = [];
    const errors: unknown[] = [];
    let fail = true;
    const reconciler = startReconciler(
      {
        reconcileReservations: async () => {
          if (fail) {
            fail = false;
            throw new Error('db away');
          }
          return adm.reconcileReservations();
        },
      },
      { intervalMs: 1_000, onReport: (r) => reports.push(r.expiredReleased), onError: (e) => errors.push(e) },
    );
    await jest.advanceTimersByTimeAsync(999);
    expect(errors).toHaveLength(0);
    await jest.advanceTimersByTimeAsync(1);
    expect(errors).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(reports).toEqual([1]);
    await reconciler.stop();
    await jest.advanceTimersByTimeAsync(5_000);
    expect(reports).toEqual([1]);
    expect(await store.countHeld()).toBe(0);
  });
});

describe('group commit of a tenant’s reserves', () => {
  const budgetTenants: TenantSpec[] = [
    {
      id: 't',
      name: 'T',
      apps: [
        { id: 'a', name: 'A', limits: {} },
        { id: 'b', name: 'B', limits: { maxConcurrent: 3 } },
      ],
      allowedAliases: ['*'],
      defaultDeadlineMs: 1_000,
      // $0.00001 = 10,000 nano-USD: exactly 7 reserves of 1,400 fit (9,800), the 8th does not.
      limits: { maxConcurrent: 1_000, monthlyBudgetUsd: 0.00001 },
    },
  ];

  /** The in-memory store, counting its reserve transactions. */
  function countingStore() {
    const store = createInMemoryAdmissionStore();
    let transactions = 0;
    let failNext = false;
    return {
      store: {
        ...store,
        reserve: ((keys, step) => {
          transactions++;
          if (failNext) {
            failNext = false;
            return Promise.reject(new Error('connection lost'));
          }
          return store.reserve(keys, step);
        }) as typeof store.reserve,
      },
      raw: store,
      transactions: () => transactions,
      failNextReserve: () => (failNext = true),
    };
  }

  it('decides a burst in a few transactions, exactly as one after another', async () => {
    const s = countingStore();
    const adm = createAdmission({ tenants: budgetTenants }, { store: s.store, clock: manualClock() });
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => adm.reserve(reservationRequest({ caller: { tenantId: 't', appId: i % 2 ? 'a' : 'b', apiKeyId: 'k' }, worstCaseCostNanoUsd: 1_400 }))),
    );
    const admitted = results.filter((r) => r.ok);
    // Budget: floor(10,000 / 1,400) = 7, but app b holds at most 3 at once: b's first 3 and a's first 4.
    expect(admitted).toHaveLength(7);
    expect(results.filter((r) => !r.ok && r.reason === 'budget_exhausted').length + results.filter((r) => !r.ok && r.reason === 'concurrency_limited').length).toBe(93);
    expect(s.transactions()).toBeLessThanOrEqual(3);
    const held = s.raw.reservations().filter((r) => r.state === 'held');
    expect(held).toHaveLength(7);
    expect(held.filter((r) => r.appId === 'b')).toHaveLength(3);
    expect(new Set(held.map((r) => r.id)).size).toBe(7);
    const month = s.raw.budgets().find((b) => b.scope === 'tenant:t' && b.period === 'month');
    expect(month).toMatchObject({ reservedNano: 9_800, settledNano: 0 });
  });

  it('fails only the batch whose transaction failed, holding nothing for it, and goes on', async () => {
    const s = countingStore();
    const adm = createAdmission({ tenants: budgetTenants }, { store: s.store, clock: manualClock() });
    const first = adm.reserve(reservationRequest({ worstCaseCostNanoUsd: 100 }));
    s.failNextReserve();
    expect(s.transactions()).toBe(1);
    const burst = Array.from({ length: 5 }, () => adm.reserve(reservationRequest({ worstCaseCostNanoUsd: 100 })));
    // The first runs alone at once (nothing was waiting); the five wait for it, then their
    // one transaction fails and all five fail with it.
    expect((await first).ok).toBe(true);
    const settled = await Promise.allSettled(burst);
    expect(settled.every((r) => r.status === 'rejected')).toBe(true);
    const after = await adm.reserve(reservationRequest({ worstCaseCostNanoUsd: 100 }));
    expect(after.ok).toBe(true);
    expect(s.transactions()).toBe(3);
    expect(s.raw.reservations().filter((r) => r.state === 'held')).toHaveLength(2);
  });
});

describe('a reservation whose ledger row is uncertain (its relay was lost)', () => {
  it('stays held past its expiry until the row is settled from the engine, or until the hold ends', async () => {
    const clock = manualClock();
    const store = createInMemoryAdmissionStore();
    const adm = createAdmission({ tenants, uncertainHoldMs: 60_000 }, { store, clock });
    const req = reservationRequest({ caller, worstCaseCostNanoUsd: 5_000, expiresAtMs: clock.now() + 1_000 });
    const r = await adm.reserve(req);
    if (!r.ok) throw new Error(r.message);
    // The gateway recorded what it relayed (uncertain) and did not settle.
    store.recordLedger(req.generationId, { costNano: 1_000, inputTokens: 10, outputTokens: 4, uncertain: true });
    clock.advance(2_000);
    expect(await adm.reconcileReservations()).toMatchObject({ expiredSettled: 0, expiredReleased: 0 });
    expect(store.reservations()[0].state).toBe('held');
    expect(store.budgets().find((b) => b.scope === 'tenant:t' && b.period === 'month')).toMatchObject({ reservedNano: 5_000, settledNano: 0 });
    // Reconciliation reads the engine's count: the row is certain now, and the reservation settles to it.
    store.recordLedger(req.generationId, { costNano: 1_300, inputTokens: 10, outputTokens: 6 });
    expect(await adm.reconcileReservations()).toMatchObject({ expiredSettled: 1 });
    expect(store.budgets().find((b) => b.scope === 'tenant:t' && b.period === 'month')).toMatchObject({ reservedNano: 0, settledNano: 1_300 });
  });

  it('settles from the uncertain row once the hold has passed (no engine ever knew the generation)', async () => {
    const clock = manualClock();
    const store = createInMemoryAdmissionStore();
    const adm = createAdmission({ tenants, uncertainHoldMs: 60_000 }, { store, clock });
    const req = reservationRequest({ caller, worstCaseCostNanoUsd: 5_000, expiresAtMs: clock.now() + 1_000 });
    expect((await adm.reserve(req)).ok).toBe(true);
    store.recordLedger(req.generationId, { costNano: 1_000, inputTokens: 10, outputTokens: 4, uncertain: true });
    clock.advance(1_000 + 60_000);
    expect(await adm.reconcileReservations()).toMatchObject({ expiredSettled: 1 });
    expect(store.reservations()[0]).toMatchObject({ state: 'settled', settledNano: 1_000, finishedBy: 'reconciler' });
  });
});

describe('withStoreFaultsAsUnavailable', () => {
  it('turns a store fault into a retryable upstream_unavailable, and passes rejections and Weir errors through', async () => {
    const store = createInMemoryAdmissionStore();
    const faults: string[] = [];
    let broken = true;
    const failing = { ...store, reserve: ((keys, step) => (broken ? Promise.reject(new Error('Connection terminated unexpectedly')) : store.reserve(keys, step))) as typeof store.reserve };
    const adm = withStoreFaultsAsUnavailable(createAdmission({ tenants }, { store: failing, clock: manualClock() }), (_err, call) => void faults.push(call));
    await expect(adm.reserve(reservationRequest({ caller }))).rejects.toMatchObject({ code: 'upstream_unavailable', retryable: true, retryAfterMs: 1_000 });
    expect(faults).toEqual(['reserve']);
    await expect(adm.reserve(reservationRequest({ caller, inputTokens: -1 }))).rejects.toMatchObject({ code: 'invalid_request' });
    broken = false;
    expect((await adm.reserve(reservationRequest({ caller }))).ok).toBe(true);
    expect(faults).toEqual(['reserve']);
  });
});

describe('group commit of settlements and releases', () => {
  it('finishes a burst in a few transactions, with the same totals as one after another', async () => {
    const store = createInMemoryAdmissionStore();
    let finishTransactions = 0;
    const counting = { ...store, finishMany: ((items, apply) => (finishTransactions++, store.finishMany(items, apply))) as typeof store.finishMany };
    const bigTenants: TenantSpec[] = [{ ...tenants[0], limits: { maxConcurrent: 1_000, monthlyBudgetUsd: 1 } }];
    const adm = createAdmission({ tenants: bigTenants }, { store: counting, clock: manualClock() });
    const held = await Promise.all(Array.from({ length: 60 }, () => adm.reserve(reservationRequest({ caller, worstCaseCostNanoUsd: 10_000 }))));
    const ids = held.map((r) => (r.ok ? r.reservationId : ''));
    expect(ids.every(Boolean)).toBe(true);
    // Half settle at 1..30 × 100 nano, half release; each id twice (a retried call) — the repeat changes nothing.
    await Promise.all([
      ...ids.slice(0, 30).flatMap((id, i) => [adm.settle(id, { usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: (i + 1) * 100 }), adm.settle(id, { usage: { inputTokens: 9, outputTokens: 9 }, costNanoUsd: 9_999 })]),
      ...ids.slice(30).flatMap((id) => [adm.release(id), adm.release(id)]),
    ]);
    expect(finishTransactions).toBeLessThanOrEqual(3);
    const month = store.budgets().find((b) => b.scope === 'tenant:t' && b.period === 'month');
    // Σ (i + 1) × 100 for i < 30 = 46,500; nothing left reserved.
    expect(month).toMatchObject({ settledNano: 46_500, reservedNano: 0 });
    expect(store.scope('tenant:t')?.inFlight).toBe(0);
    expect(store.reservations().filter((r) => r.state === 'settled')).toHaveLength(30);
    expect(store.reservations().filter((r) => r.state === 'released')).toHaveLength(30);
  });
});

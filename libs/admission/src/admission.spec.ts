/** The admission engine around the pure decisions: validation, observer events, the reconciler loop. */
import type { ReservationRequest, TenantSpec } from '@weir/core';
import { createAdmission, createInMemoryAdmission, createInMemoryAdmissionStore, startReconciler } from './index';

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

/**
 * The use-case scope (issue 16 item 7): a request naming a use case its tenant defines must fit
 * that use case's limits and budget too (tenant → app → use case), reserved and settled like
 * the others — on ADR 0001's engine and on leases (exclusive and shared), the same table.
 */
import { type ReservationRequest, type ReserveResult, type TenantSpec, appKeyOf, tenantKeyOf } from '@weir/core';
import { type Admission, type LeasedAdmission, createInMemoryAdmission, createInMemoryLeaseStore, createLeasedAdmission } from './index';

const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);
const WORST = 1_000_000; // $0.001

function acme(useCases: TenantSpec['useCases'], limits: Partial<TenantSpec['limits']> = {}): TenantSpec {
  return {
    id: 'acme',
    name: 'Acme',
    apps: [{ id: 'web', name: 'web', limits: {} }],
    allowedAliases: ['*'],
    defaultDeadlineMs: 120_000,
    limits: { maxConcurrent: 1_000, ...limits },
    useCases,
  };
}

let seq = 0;
function req(useCase: string | undefined, overrides: Partial<ReservationRequest> = {}): ReservationRequest {
  seq++;
  return {
    caller: { tenantId: 'acme', appId: 'web', apiKeyId: 'key' },
    requestId: `req_${seq}`,
    generationId: `gen_${seq}`,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: WORST,
    expiresAtMs: NOW + 60_000,
    ...(useCase !== undefined ? { useCase } : {}),
    ...overrides,
  };
}

interface Engine {
  reserve(r: ReservationRequest): Promise<ReserveResult>;
  /** Settles at `cost` (and, on leases, applies the ledger's side at once). */
  settle(r: ReservationRequest, res: Extract<ReserveResult, { ok: true }>, cost: number): Promise<void>;
  release(id: string): Promise<void>;
  advance(ms: number): void;
}

function adr0001(tenants: TenantSpec[]): Engine {
  let t = NOW;
  const a: Admission = createInMemoryAdmission({ tenants, now: () => t });
  return {
    reserve: (r) => a.reserve(r),
    settle: (_r, res, cost) => a.settle(res.reservationId, { usage: { inputTokens: 10, outputTokens: 20, cachedInputTokens: 0 }, costNanoUsd: cost }),
    release: (id) => a.release(id),
    advance: (ms) => void (t += ms),
  };
}

function leased(mode: 'exclusive' | 'shared') {
  return (tenants: TenantSpec[]): Engine => {
    let t = NOW;
    const store = createInMemoryLeaseStore();
    const a: LeasedAdmission = createLeasedAdmission({ tenants, mode }, { store, clock: { now: () => t }, timer: { every: () => () => undefined } });
    return {
      reserve: (r) => a.reserve(r),
      async settle(r, res, cost) {
        await a.settle(res.reservationId, { usage: { inputTokens: 10, outputTokens: 20, cachedInputTokens: 0 }, costNanoUsd: cost });
        store.applySettlements([{ tenantId: tenantKeyOf(r.caller), appId: appKeyOf(r.caller), costNano: cost, reservation: res.reservation! }]);
      },
      release: (id) => a.release(id),
      advance: (ms) => void (t += ms),
    };
  };
}

function ok(r: ReserveResult) {
  if (!r.ok) throw new Error(`expected a reservation, got ${r.reason}: ${r.message}`);
  return r;
}

describe.each([
  ['ADR 0001 (per-request transactions)', adr0001],
  ['leases, exclusive holder', leased('exclusive')],
  ['leases, shared holder', leased('shared')],
])('the use-case scope on %s', (_name, make) => {
  it('a spent use-case budget refuses that use case (naming it) while the tenant’s other use cases and plain requests still run', async () => {
    const e = make([acme([{ name: 'drafts', model: 'chat', limits: { monthlyBudgetUsd: 0.0025 } }, { name: 'search', model: 'chat', limits: {} }])]);
    for (let i = 0; i < 2; i++) {
      const r = req('drafts');
      await e.settle(r, ok(await e.reserve(r)), WORST);
    }
    // $0.0005 left, the request may cost $0.001.
    const refused = await e.reserve(req('drafts'));
    expect(refused).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    expect(!refused.ok && refused.message).toMatch(/'drafts' use case's monthly budget of \$0\.0025 is exhausted/);
    expect(!refused.ok && refused.retryAfterMs).toBeUndefined();
    // A cheaper request still fits the rest of it.
    ok(await e.reserve(req('drafts', { worstCaseCostNanoUsd: WORST / 4 })));
    ok(await e.reserve(req('search')));
    ok(await e.reserve(req(undefined)));
    // A use case the tenant does not define is only a label: no scope of its own.
    ok(await e.reserve(req('not-defined')));
  });

  it('holds a use case to its tokens per minute, refunds unused tokens at settlement, refills over the minute', async () => {
    const e = make([acme([{ name: 'drafts', model: 'chat', limits: { tokensPerMinute: 60 } }, { name: 'search', model: 'chat', limits: {} }])]);
    const first = req('drafts');
    const held = ok(await e.reserve(first));
    ok(await e.reserve(req('drafts')));
    const third = await e.reserve(req('drafts'));
    expect(third).toMatchObject({ ok: false, reason: 'rate_limited' });
    expect(!third.ok && third.message).toMatch(/'drafts' use case's limit of 60 tokens per minute/);
    expect(!third.ok && third.retryAfterMs).toBeGreaterThan(0);
    ok(await e.reserve(req('search')));
    // A request larger than the whole limit can never pass, and says so.
    const huge = await e.reserve(req('drafts', { maxOutputTokens: 100 }));
    expect(!huge.ok && huge.message).toMatch(/'drafts' use case's limit is 60 tokens per minute, so it can never pass/);
    // Released: its 30 tokens go back to the use case's bucket.
    await e.release(held.reservationId);
    ok(await e.reserve(req('drafts')));
    expect(await e.reserve(req('drafts'))).toMatchObject({ ok: false, reason: 'rate_limited' });
    e.advance(60_000);
    ok(await e.reserve(req('drafts')));
  });

  it('holds a use case to its own concurrency', async () => {
    const e = make([acme([{ name: 'agent', model: 'chat', limits: { maxConcurrent: 1 } }])]);
    const one = ok(await e.reserve(req('agent')));
    const two = await e.reserve(req('agent'));
    expect(two).toMatchObject({ ok: false, reason: 'concurrency_limited' });
    expect(!two.ok && two.message).toMatch(/The 'agent' use case already has 1 requests in flight, its limit of 1/);
    ok(await e.reserve(req(undefined)));
    await e.release(one.reservationId);
    ok(await e.reserve(req('agent')));
  });

  it('the tenant’s budget still binds its use cases’ requests', async () => {
    const e = make([acme([{ name: 'agent', model: 'chat', limits: { monthlyBudgetUsd: 100 } }], { monthlyBudgetUsd: 0.002 })]);
    for (let i = 0; i < 2; i++) {
      const r = req('agent');
      await e.settle(r, ok(await e.reserve(r)), WORST);
    }
    const over = await e.reserve(req('agent'));
    expect(over).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    expect(!over.ok && over.message).toMatch(/tenant's monthly budget of \$0\.002 is exhausted/);
  });
});

import { buildReservationRef, buildUsageRecord } from '@weir/testing';
import { settlementCharge, sumCharges } from './settlement-charge';

describe('settlementCharge', () => {
  it("charges the reservation's periods and leases", () => {
    const usage = buildUsageRecord(1, {
      tenantId: 'acme',
      appId: 'web',
      costNanoUsd: 700,
      finishedAt: new Date('2026-03-01T00:00:00Z'),
      reservation: buildReservationRef('g', ['l1', 'l2', 'l1'], { monthStartsOn: '2026-02-01', dayStartsOn: '2026-02-28' }),
    });
    expect(settlementCharge(usage)).toEqual({
      generationId: usage.generationId,
      costNano: 700,
      monthStartsOn: '2026-02-01',
      dayStartsOn: '2026-02-28',
      budgets: [
        { scope: 'app:acme/web', period: 'day', startsOn: '2026-02-28' },
        { scope: 'app:acme/web', period: 'month', startsOn: '2026-02-01' },
        { scope: 'tenant:acme', period: 'day', startsOn: '2026-02-28' },
        { scope: 'tenant:acme', period: 'month', startsOn: '2026-02-01' },
      ],
      leaseIds: ['l1', 'l2'],
    });
  });

  it("charges the use case's rows too when the reservation held its scope, and only then", () => {
    const ref = buildReservationRef('g', ['l1'], { monthStartsOn: '2026-02-01', dayStartsOn: '2026-02-28' });
    const held = settlementCharge(buildUsageRecord(1, { tenantId: 'acme', appId: 'web', useCase: 'drafts', reservation: { ...ref, useCase: 'drafts' } }));
    expect(held.budgets.map((b) => `${b.scope}|${b.period}`)).toEqual([
      'app:acme/web|day',
      'app:acme/web|month',
      'tenant:acme|day',
      'tenant:acme|month',
      'usecase:acme/drafts|day',
      'usecase:acme/drafts|month',
    ]);
    // A use case only as a label (the tenant did not define it): no rows of its own.
    const label = settlementCharge(buildUsageRecord(2, { tenantId: 'acme', appId: 'web', useCase: 'drafts', reservation: ref }));
    expect(label.budgets).toHaveLength(4);
  });

  it('charges the finish time’s periods when nothing was reserved (UTC)', () => {
    const c = settlementCharge(buildUsageRecord(1, { finishedAt: new Date('2026-11-30T23:59:59.999Z') }));
    expect([c.monthStartsOn, c.dayStartsOn, c.leaseIds]).toEqual(['2026-11-01', '2026-11-30', []]);
  });
});

describe('sumCharges', () => {
  it('sums per budget row and per lease, in lock order, leaving zero costs out', () => {
    const a = settlementCharge(buildUsageRecord(1, { tenantId: 'b', appId: 'x', costNanoUsd: 10, reservation: buildReservationRef('1', ['l2']) }));
    const b = settlementCharge(buildUsageRecord(2, { tenantId: 'b', appId: 'x', costNanoUsd: 5, reservation: buildReservationRef('2', ['l2', 'l1']) }));
    const c = settlementCharge(buildUsageRecord(3, { tenantId: 'a', appId: 'x', costNanoUsd: 0, reservation: buildReservationRef('3', ['l3']) }));
    const totals = sumCharges([a, b, c]);
    expect(totals.budgets.map((r) => [r.scope, r.period, r.nano])).toEqual([
      ['app:b/x', 'day', 15],
      ['app:b/x', 'month', 15],
      ['tenant:b', 'day', 15],
      ['tenant:b', 'month', 15],
    ]);
    expect(totals.leases).toEqual([
      { leaseId: 'l1', nano: 5, generationIds: [b.generationId] },
      { leaseId: 'l2', nano: 15, generationIds: [a.generationId, b.generationId] },
    ]);
  });
});

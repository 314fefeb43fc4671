import type { TenantSpec } from '@weir/core';
import { budgetNanoOf, budgetOverruns } from './budget-check';

const tenants: TenantSpec[] = [
  {
    id: 'acme',
    name: 'Acme',
    apps: [
      { id: 'web', name: 'Web', limits: { dailyBudgetUsd: 0.0001 } },
      { id: 'etl', name: 'ETL', limits: {} },
    ],
    allowedAliases: ['*'],
    defaultDeadlineMs: 1_000,
    limits: { maxConcurrent: 4, monthlyBudgetUsd: 0.0002 },
  },
];

describe('budget check', () => {
  it('reads the budget of tenant and app scopes in nano-USD', () => {
    expect(budgetNanoOf('tenant:acme', 'month', tenants)).toBe(200_000);
    expect(budgetNanoOf('tenant:acme', 'day', tenants)).toBeUndefined();
    expect(budgetNanoOf('app:acme/web', 'day', tenants)).toBe(100_000);
    expect(budgetNanoOf('app:acme/etl', 'month', tenants)).toBeUndefined();
    expect(budgetNanoOf('app:other/x', 'month', tenants)).toBeUndefined();
  });

  it('reports every row over its budget, and only those', () => {
    const rows = [
      { scope: 'tenant:acme', period: 'month' as const, startsOn: '2026-11-01', settledNano: 150_000, reservedNano: 1_000, leasedNano: 49_000 },
      { scope: 'app:acme/web', period: 'day' as const, startsOn: '2026-11-30', settledNano: 100_200, reservedNano: 0, leasedNano: 0 },
      { scope: 'app:acme/web', period: 'day' as const, startsOn: '2026-11-29', settledNano: 90_000, reservedNano: 0, leasedNano: 10_001 },
      { scope: 'app:acme/etl', period: 'month' as const, startsOn: '2026-11-01', settledNano: 9_999_999, reservedNano: 0, leasedNano: 5 },
    ];
    expect(budgetOverruns(rows, tenants)).toEqual([
      'app:acme/web day from 2026-11-30: settled 100200 + reserved 0 + leased 0 = 100200 nano-USD is over its budget of 100000 by 200',
      'app:acme/web day from 2026-11-29: settled 90000 + reserved 0 + leased 10001 = 100001 nano-USD is over its budget of 100000 by 1',
    ]);
  });
});

import type { BurnRateAlert, TenantSpend, TenantSpendReader, Topic } from '@weir/core';
import { HOUR_MS } from './burn-rate';
import { type BurnRateMetrics, createBurnRateMonitor } from './burn-rate-monitor';

const USD = 1_000_000_000n;
const settings = { burnRateFactor: 3, burnRateBaselineHours: 24, burnRateMinHourlyUsd: 1 };
const T0 = Date.UTC(2026, 10, 30, 12, 0, 0);

/** Hand-written fakes: a spend table the test edits, a topic that keeps what was published, metrics that keep calls. */
function setup(intervalMs = 60_000) {
  const table = new Map<string, TenantSpend>();
  const queries: { baselineSince: Date; recentSince: Date; until: Date }[] = [];
  const faults = { failNext: false };
  const reader: TenantSpendReader = {
    async spendByTenant(q) {
      queries.push(q);
      if (faults.failNext) {
        faults.failNext = false;
        throw new Error('database unavailable');
      }
      return [...table.values()];
    },
  };
  const published: BurnRateAlert[] = [];
  const topic: Topic<BurnRateAlert> = { publish: (m) => void published.push(m), subscribe: () => () => undefined };
  const gauge = new Map<string, number>();
  const counted: string[] = [];
  const metrics: BurnRateMetrics = {
    recordBurnRate: ({ tenant, ratio }) => void gauge.set(tenant, ratio),
    recordBurnRateAlert: ({ tenant }) => void counted.push(tenant),
  };
  const warnings: object[] = [];
  const logger = { warn: (f: object) => void warnings.push(f), error: () => undefined };
  let now = T0;
  const monitor = createBurnRateMonitor({ settings, intervalMs }, { spend: reader, alerts: topic, metrics, logger, now: () => now });
  const set = (tenantId: string, recentUsd: bigint, baselineUsd: bigint) => table.set(tenantId, { tenantId, recentNanoUsd: recentUsd * USD, baselineNanoUsd: baselineUsd * USD });
  return { monitor, table, set, queries, faults, published, gauge, counted, warnings, advance: (ms: number) => (now += ms) };
}

describe('createBurnRateMonitor', () => {
  it('queries the last hour and the baseline hours before it, ending now', async () => {
    const t = setup();
    await t.monitor.check();
    expect(t.queries).toEqual([{ baselineSince: new Date(T0 - 25 * HOUR_MS), recentSince: new Date(T0 - HOUR_MS), until: new Date(T0) }]);
  });

  it('publishes one alert per tenant over the rule, with the amounts, and counts and logs it', async () => {
    const t = setup();
    t.set('hot', 9n, 48n); // 9 USD vs 2 USD/h
    t.set('calm', 2n, 48n);
    const alerts = await t.monitor.check();
    const expected: BurnRateAlert = { type: 'burn_rate', tenant_id: 'hot', hourly_spend_usd: 9, baseline_hourly_usd: 2, factor: 3, ratio: 4.5, at: new Date(T0).toISOString() };
    expect(alerts).toEqual([expected]);
    expect(t.published).toEqual([expected]);
    expect(t.counted).toEqual(['hot']);
    expect(t.gauge).toEqual(new Map([['hot', 4.5], ['calm', 1]]));
    expect(t.warnings).toEqual([expect.objectContaining({ tenant: 'hot', hourlyUsd: 9, baselineHourlyUsd: 2, factor: 3, ratio: 4.5 })]);
  });

  it('debounces: one alert per hour while over, a new one right after recovering', async () => {
    const t = setup();
    t.set('hot', 9n, 48n);
    await t.monitor.check();
    t.advance(60_000);
    await t.monitor.check();
    expect(t.published).toHaveLength(1);
    t.advance(HOUR_MS);
    await t.monitor.check();
    expect(t.published).toHaveLength(2);
    t.set('hot', 1n, 48n); // recovered
    t.advance(60_000);
    await t.monitor.check();
    t.set('hot', 9n, 48n);
    t.advance(60_000);
    await t.monitor.check();
    expect(t.published).toHaveLength(3);
    expect(t.counted).toEqual(['hot', 'hot', 'hot']);
  });

  it('alerts for a tenant with no baseline once its hourly spend reaches the floor (ratio null on the wire)', async () => {
    const t = setup();
    t.set('new', 1n, 0n);
    expect(await t.monitor.check()).toEqual([expect.objectContaining({ tenant_id: 'new', baseline_hourly_usd: 0, ratio: null })]);
    expect(t.gauge.get('new')).toBe(Number.POSITIVE_INFINITY);
  });

  it('sets the gauge of a tenant that left the window back to 0', async () => {
    const t = setup();
    t.set('gone', 2n, 48n);
    await t.monitor.check();
    t.table.clear();
    await t.monitor.check();
    expect(t.gauge.get('gone')).toBe(0);
  });

  it('checks every interval once started, survives a failing query, and stops', async () => {
    jest.useFakeTimers();
    try {
      const t = setup(1_000);
      t.set('hot', 9n, 48n);
      t.faults.failNext = true;
      t.monitor.start();
      t.monitor.start(); // idempotent: one loop
      await jest.advanceTimersByTimeAsync(999);
      expect(t.queries).toHaveLength(0);
      await jest.advanceTimersByTimeAsync(1);
      expect(t.queries).toHaveLength(1);
      expect(t.warnings).toEqual([expect.objectContaining({ err: expect.any(Error) })]);
      expect(t.published).toHaveLength(0);
      await jest.advanceTimersByTimeAsync(1_000);
      expect(t.queries).toHaveLength(2);
      expect(t.published).toHaveLength(1);
      await t.monitor.stop();
      await jest.advanceTimersByTimeAsync(5_000);
      expect(t.queries).toHaveLength(2);
    } finally {
      jest.useRealTimers();
    }
  });
});

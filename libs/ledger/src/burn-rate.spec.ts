import { type BurnRateSettings, type BurnRateVerdict, HOUR_MS, debounceBurnRate, evaluateBurnRate } from './burn-rate';

const USD = 1_000_000_000n; // nano-USD per USD
const settings: BurnRateSettings = { burnRateFactor: 3, burnRateBaselineHours: 24, burnRateMinHourlyUsd: 1 };
const spend = (recentNanoUsd: bigint, baselineNanoUsd: bigint) => ({ tenantId: 'acme', recentNanoUsd, baselineNanoUsd });

describe('evaluateBurnRate', () => {
  // Baseline 24 USD over 24 h = 1 USD/h; factor 3 → fires strictly above 3 USD in the last hour.
  it.each<[string, bigint, bigint, Partial<BurnRateSettings>, boolean]>([
    ['exactly factor × baseline', 3n * USD, 24n * USD, {}, false],
    ['one nano-USD above factor × baseline', 3n * USD + 1n, 24n * USD, {}, true],
    ['well below', 2n * USD, 24n * USD, {}, false],
    ['above the factor but under the floor', 5n * USD, 24n * USD, { burnRateMinHourlyUsd: 6 }, false],
    ['above the factor and exactly at the floor', 5n * USD, 24n * USD, { burnRateMinHourlyUsd: 5 }, true],
    ['a fractional factor, just above', 2_500_000_001n, 24n * USD, { burnRateFactor: 2.5 }, true],
    ['a fractional factor, exactly at it', 2_500_000_000n, 24n * USD, { burnRateFactor: 2.5 }, false],
    ['no baseline, spend at the floor', 1n * USD, 0n, {}, true],
    ['no baseline, spend under the floor', USD - 1n, 0n, {}, false],
    ['no baseline, no spend, floor 0', 0n, 0n, { burnRateMinHourlyUsd: 0 }, false],
    ['no spend at all against a baseline, floor 0', 0n, 24n * USD, { burnRateMinHourlyUsd: 0 }, false],
    ['a tiny baseline and floor 0', 4n, 24n, { burnRateMinHourlyUsd: 0 }, true],
    ['a shorter baseline window: 1 USD/h over 6 h', 3n * USD + 1n, 6n * USD, { burnRateBaselineHours: 6 }, true],
  ])('%s', (_name, recent, baseline, over, fires) => {
    expect(evaluateBurnRate(spend(recent, baseline), { ...settings, ...over }).exceeded).toBe(fires);
  });

  it('reports the amounts in USD and the ratio', () => {
    expect(evaluateBurnRate(spend(4_500_000_000n, 24n * USD), settings)).toEqual({
      tenantId: 'acme',
      hourlyNanoUsd: 4_500_000_000n,
      baselineNanoUsd: 24n * USD,
      hourlyUsd: 4.5,
      baselineHourlyUsd: 1,
      ratio: 4.5,
      exceeded: true,
    });
  });

  it('reports an infinite ratio with spend and no baseline, 0 with neither', () => {
    expect(evaluateBurnRate(spend(USD, 0n), settings)).toMatchObject({ ratio: Number.POSITIVE_INFINITY, baselineHourlyUsd: 0 });
    expect(evaluateBurnRate(spend(0n, 0n), settings)).toMatchObject({ ratio: 0, exceeded: false });
  });

  it('compares exactly beyond float precision', () => {
    // 9e15 nano-USD (9 million USD) baselines: float products would round; BigInt does not.
    const baseline = 9_000_000_000_000_001n * 24n;
    expect(evaluateBurnRate(spend(27_000_000_000_000_003n, baseline), settings).exceeded).toBe(false);
    expect(evaluateBurnRate(spend(27_000_000_000_000_004n, baseline), settings).exceeded).toBe(true);
  });

  it.each<[string, Partial<BurnRateSettings>]>([
    ['a zero factor', { burnRateFactor: 0 }],
    ['fractional baseline hours', { burnRateBaselineHours: 1.5 }],
    ['a negative floor', { burnRateMinHourlyUsd: -1 }],
  ])('refuses %s', (_name, over) => {
    expect(() => evaluateBurnRate(spend(1n, 1n), { ...settings, ...over })).toThrow(RangeError);
  });
});

describe('debounceBurnRate', () => {
  const verdict = (tenantId: string, exceeded: boolean): BurnRateVerdict => ({
    tenantId,
    hourlyNanoUsd: 0n,
    baselineNanoUsd: 0n,
    hourlyUsd: 0,
    baselineHourlyUsd: 0,
    ratio: 0,
    exceeded,
  });
  const T = 1_000_000;

  it('alerts once per tenant per hour while it stays over, then again after the hour', () => {
    let state = new Map<string, number>() as ReadonlyMap<string, number>;
    const tenantsAlerted: string[][] = [];
    for (const at of [T, T + 60_000, T + HOUR_MS - 1, T + HOUR_MS, T + HOUR_MS + 60_000]) {
      const r = debounceBurnRate(state, [verdict('a', true), verdict('b', false)], at);
      state = r.state;
      tenantsAlerted.push(r.alerts.map((v) => v.tenantId));
    }
    expect(tenantsAlerted).toEqual([['a'], [], [], ['a'], []]);
  });

  it('alerts at once on a new excursion after recovering (or dropping out of the window)', () => {
    let r = debounceBurnRate(new Map(), [verdict('a', true), verdict('b', true)], T);
    expect(r.alerts.map((v) => v.tenantId)).toEqual(['a', 'b']);
    // a recovers; b has no spend in the window any more (absent).
    r = debounceBurnRate(r.state, [verdict('a', false)], T + 60_000);
    expect(r.alerts).toEqual([]);
    r = debounceBurnRate(r.state, [verdict('a', true), verdict('b', true)], T + 120_000);
    expect(r.alerts.map((v) => v.tenantId)).toEqual(['a', 'b']);
  });

  it('does not modify the state it is given', () => {
    const state = new Map([['a', T]]);
    debounceBurnRate(state, [verdict('a', false), verdict('c', true)], T + 1);
    expect([...state]).toEqual([['a', T]]);
  });

  it('takes another repeat interval', () => {
    const first = debounceBurnRate(new Map(), [verdict('a', true)], T, 10_000);
    expect(debounceBurnRate(first.state, [verdict('a', true)], T + 9_999, 10_000).alerts).toHaveLength(0);
    expect(debounceBurnRate(first.state, [verdict('a', true)], T + 10_000, 10_000).alerts).toHaveLength(1);
  });
});

import { nanoUsdToDecimal, usagePeriod } from './usage-period';

describe('usagePeriod', () => {
  it.each<['day' | 'month', string, string, string]>([
    ['month', '2026-11-30T23:59:59.999Z', '2026-11-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z'],
    ['month', '2026-12-15T08:00:00.000Z', '2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
    ['month', '2028-02-29T12:00:00.000Z', '2028-02-01T00:00:00.000Z', '2028-03-01T00:00:00.000Z'],
    ['day', '2026-11-30T00:00:00.000Z', '2026-11-30T00:00:00.000Z', '2026-12-01T00:00:00.000Z'],
    ['day', '2026-12-31T23:59:59.999Z', '2026-12-31T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
  ])('%s at %s is [%s, %s)', (window, at, start, end) => {
    const p = usagePeriod(window, Date.parse(at));
    expect([p.start.toISOString(), p.end.toISOString()]).toEqual([start, end]);
  });
});

describe('nanoUsdToDecimal', () => {
  it.each<[bigint, string]>([
    [0n, '0.000000000'],
    [1n, '0.000000001'],
    [1_500_000_001n, '1.500000001'],
    [123_456_789_012_345_678_901n, '123456789012.345678901'],
    [-5n, '-0.000000005'],
  ])('%s → %s', (nano, text) => {
    expect(nanoUsdToDecimal(nano)).toBe(text);
  });
});

import { age, arms, formatDetail, formatTable, keyValues, orDash, time } from './format';
import { formatUsage, type UsageBody } from './system-commands';
import { tenantStatus } from './tenant-commands';

describe('formatTable', () => {
  it('aligns columns under their headings and trims trailing spaces', () => {
    const rows = [
      { id: 'acme', name: 'Acme Corp', apps: 2 },
      { id: 'b', name: 'B', apps: 10 },
    ];
    const text = formatTable(rows, [
      ['ID', (r) => r.id],
      ['NAME', (r) => r.name],
      ['APPS', (r) => String(r.apps)],
    ]);
    expect(text).toBe(['ID    NAME       APPS', 'acme  Acme Corp  2', 'b     B          10', ''].join('\n'));
  });

  it('keeps a row on one line and counts characters, not bytes', () => {
    const text = formatTable([{ a: 'x\ny', b: '→' }, { a: 'zz', b: 'w' }], [
      ['A', (r) => r.a],
      ['B', (r) => r.b],
    ]);
    expect(text).toBe(['A    B', 'x y  →', 'zz   w', ''].join('\n'));
  });

  it('says when there is nothing to list', () => {
    expect(formatTable([], [['ID', (r: { id: string }) => r.id]])).toBe('(none)\n');
    expect(formatTable([], [['ID', (r: { id: string }) => r.id]], '(no pools)')).toBe('(no pools)\n');
  });
});

describe('cells', () => {
  it.each([
    [{ max_concurrent: 8, monthly_budget_usd: 100 }, 'max_concurrent=8 monthly_budget_usd=100'],
    [{ routes: [{ alias: 'a' }] }, 'routes=[{"alias":"a"}]'],
    [{}, '-'],
    [undefined, '-'],
  ])('keyValues(%j)', (value, expected) => {
    expect(keyValues(value)).toBe(expected);
  });

  it('writes times, arms, ages, absent values and tenant status', () => {
    expect(time('2030-01-31T12:34:56.789Z')).toBe('2030-01-31 12:34:56Z');
    expect(time(null)).toBe('-');
    expect(arms({ targets: [{ revision: 'a', weight: 90 }, { revision: 'b', weight: 10 }] })).toBe('a=90,b=10');
    expect(arms({ revision: 'a' })).toBe('a');
    expect([850, 12_400, 250_000, 11_100_000, -1].map(age)).toEqual(['850ms', '12s', '4m10s', '3h5m', '-']);
    expect([null, undefined, '', 0, 'x'].map(orDash)).toEqual(['-', '-', '-', '0', 'x']);
    expect([{}, { disabled: true }, { kill_switch: true }, { disabled: true, kill_switch: true }, { disabled: false }].map(tenantStatus)).toEqual([
      'active',
      'disabled',
      'kill switch',
      'disabled, kill switch',
      'active',
    ]);
  });

  it('writes one entity as YAML', () => {
    expect(formatDetail({ id: 'acme', policy: { limits: { max_concurrent: 8 } }, apps: [] })).toBe('id: acme\npolicy:\n  limits:\n    max_concurrent: 8\napps: []\n');
  });
});

describe('formatUsage', () => {
  const sums = (requests: number, input: number, output: number, cost: number) => ({ tokens: { input, output, cached_input: 0, total: input + output }, cost_usd: cost, cost_nano_usd: '0', requests });
  it('prints the totals, then usage by model and by app', () => {
    const body: UsageBody = {
      ...sums(3, 1500, 300, 0.0042),
      tenant_id: 'acme',
      window: 'month',
      period_start: '2030-01-01T00:00:00.000Z',
      period_end: '2030-02-01T00:00:00.000Z',
      by_model: [{ ...sums(3, 1500, 300, 0.0042), model_alias: 'tiny', model_revision: 'tiny@1' }],
      by_app: [],
    };
    expect(formatUsage(body)).toBe(
      [
        'tenant acme, month 2030-01-01 00:00:00Z → 2030-02-01 00:00:00Z: 3 requests, 1,500 input + 300 output tokens (0 cached), $0.004200',
        '',
        'ALIAS  REVISION  REQUESTS  INPUT  OUTPUT  COST',
        'tiny   tiny@1    3         1,500  300     $0.004200',
        '',
        '(no requests)',
        '',
      ].join('\n'),
    );
  });
});

import { formatTable } from './format';
import { formatUsage, type UsageBody } from './system-commands';
import { formatPrices, REVISION_COLUMNS, type RevisionView } from './model-commands';

describe('revision prices in the CLI', () => {
  it.each([
    [{ input_per_mtok: 3, output_per_mtok: 15 }, 'in 3 / out 15'],
    [{ input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3, cache_write_input_per_mtok: 3.75 }, 'in 3 / out 15, cache read 0.3, cache write 3.75'],
    [{ input_per_mtok: 1.1, output_per_mtok: 4.4, reasoning_per_mtok: 8 }, 'in 1.1 / out 4.4, reasoning 8'],
    [undefined, '-'],
  ])('formats %j as %s', (pricing, text) => {
    expect(formatPrices(pricing)).toBe(text);
  });

  it('shows the prices column in `revisions list`', () => {
    const r: RevisionView = {
      id: 'claude@1',
      spec: { model: 'claude', engine: { kind: 'anthropic' }, pricing: { input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3 } },
      deprecation: null,
      created_at: '2026-12-01T00:00:00.000Z',
      updated_at: '2026-12-01T00:00:00.000Z',
    };
    const table = formatTable([r], REVISION_COLUMNS);
    expect(table.split('\n')[0]).toContain('PRICES $/MTOK');
    expect(table).toContain('in 3 / out 15, cache read 0.3');
  });
});

describe('the usage report names the token classes it has', () => {
  it('adds cache writes and reasoning beside the cached count when there are some', () => {
    const body: UsageBody = {
      tokens: { input: 4_512, output: 300, cached_input: 3_000, cache_write_input: 1_500, reasoning: 256, total: 4_812 },
      cost_usd: 0.0133,
      requests: 1,
      tenant_id: 'acme',
      window: 'day',
      period_start: '2030-01-01T00:00:00.000Z',
      period_end: '2030-01-02T00:00:00.000Z',
      by_model: [],
      by_app: [],
    };
    expect(formatUsage(body).split('\n')[0]).toBe(
      'tenant acme, day 2030-01-01 00:00:00Z → 2030-01-02 00:00:00Z: 1 requests, 4,512 input + 300 output tokens (3,000 cached, 1,500 cache-write, 256 reasoning), $0.01',
    );
  });
});

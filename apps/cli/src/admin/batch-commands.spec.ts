/**
 * `weir batches …`: the progress line (bar, counts, rate, ETA, a pause's reason), and `watch`
 * polling a batch until it ends, drawing each state, against a scripted data-plane client.
 */
import type { CommandContext } from './command';
import { type BatchView, progressLine, watchBatch } from './batch-commands';

const batch = (status: string, completed: number, failed: number, extra: Partial<BatchView> = {}): BatchView => ({
  id: 'batch_1',
  status,
  endpoint: '/v1/chat/completions',
  created_at: 1_700_000_000,
  output_file_id: null,
  error_file_id: null,
  request_counts: { total: 10, completed, failed },
  weir: { paused: null, rate_per_s: null, eta_s: null },
  ...extra,
});

describe('progressLine', () => {
  it('draws the share done, the counts, the rate and the ETA', () => {
    expect(progressLine(batch('in_progress', 4, 1, { weir: { paused: null, rate_per_s: 2.5, eta_s: 2 } }), 10)).toBe('[#####.....]   50%  5/10 done (1 failed)  2.5/s  ETA 2s  in_progress');
  });

  it('says why a batch is held', () => {
    const held = batch('in_progress', 2, 0, { weir: { paused: { reason: 'budget_exhausted', message: 'Monthly budget spent', until: 1 }, rate_per_s: null, eta_s: null } });
    expect(progressLine(held, 4)).toBe('[#...]   20%  2/10 done  in_progress, paused: budget_exhausted (Monthly budget spent)');
  });
});

describe('weir batches watch', () => {
  it('polls until the batch ends, drawing each state, and prints the final batch with its files', async () => {
    const states = [batch('validating', 0, 0), batch('in_progress', 5, 0), batch('completed', 9, 1, { output_file_id: 'file_out', error_file_id: 'file_err' })];
    const paths: string[] = [];
    const ctx: CommandContext = {
      args: { batch: 'batch_1' },
      flags: { interval: '0' },
      api: {
        async request<T>(method: string, path: string): Promise<T> {
          paths.push(`${method} ${path}`);
          return states.shift() as T;
        },
      },
      readFile: () => '',
    };
    const drawn: string[] = [];
    const result = await watchBatch(ctx, (l) => drawn.push(l));
    expect(paths).toEqual(Array(3).fill('GET /v1/batches/batch_1'));
    expect(drawn.filter((l) => l !== '\n').map((l) => l.split('  ').at(-1))).toEqual(['validating', 'in_progress', 'completed']);
    expect(result.text).toContain('10/10 done (1 failed)');
    expect(result.text).toContain('output file: file_out');
    expect(result.text).toContain('error file:  file_err');
  });
});

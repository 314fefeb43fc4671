/**
 * `weir batches list|get|cancel|watch` (docs/batch.md): a tenant's batches from the data plane,
 * with its API key (like `weir usage`). `watch` polls a batch until it ends, drawing a progress
 * bar (counts, rate, ETA, a pause's reason) on standard error while it runs.
 */
import { numberFlag, UsageError } from '../args';
import { type CommandContext, type CommandSpec, seg, stringFlag } from './command';
import { type Column, formatTable } from './format';

/** The fields of OpenAI's batch object the commands show (plus Weir's `weir`). */
export interface BatchView {
  id: string;
  status: string;
  endpoint: string;
  created_at: number;
  output_file_id: string | null;
  error_file_id: string | null;
  request_counts: { total: number; completed: number; failed: number };
  errors?: { data?: { line: number | null; code: string; message: string }[] } | null;
  weir?: { paused: { reason: string; message: string; until: number } | null; rate_per_s: number | null; eta_s: number | null };
}

const FINAL = new Set(['completed', 'failed', 'expired', 'cancelled']);

const time = (s: number) => new Date(s * 1000).toISOString().replace('.000Z', 'Z');

const BATCH_COLUMNS: readonly Column<BatchView>[] = [
  ['ID', (b) => b.id],
  ['STATUS', (b) => (b.weir?.paused ? `${b.status} (paused: ${b.weir.paused.reason})` : b.status)],
  ['ENDPOINT', (b) => b.endpoint],
  ['DONE', (b) => `${b.request_counts.completed + b.request_counts.failed}/${b.request_counts.total}`],
  ['FAILED', (b) => String(b.request_counts.failed)],
  ['CREATED', (b) => time(b.created_at)],
];

/**
 * One line of progress: `[#####.....]  50%  60/120 done (2 failed)  3.0/s  ETA 20s  in_progress`,
 * with the pause's reason while held. `width` is the bar's width in characters.
 */
export function progressLine(b: BatchView, width = 30): string {
  const { total, completed, failed } = b.request_counts;
  const done = completed + failed;
  const share = total > 0 ? done / total : FINAL.has(b.status) ? 1 : 0;
  const filled = Math.round(share * width);
  const rate = b.weir?.rate_per_s;
  const eta = b.weir?.eta_s;
  return [
    `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`,
    `${String(Math.floor(share * 100)).padStart(3)}%`,
    `${done}/${total} done${failed > 0 ? ` (${failed} failed)` : ''}`,
    ...(rate ? [`${rate.toFixed(1)}/s`] : []),
    ...(eta !== null && eta !== undefined ? [`ETA ${eta}s`] : []),
    b.weir?.paused ? `${b.status}, paused: ${b.weir.paused.reason} (${b.weir.paused.message})` : b.status,
  ].join('  ');
}

/** A batch in detail: its progress line, files and validation errors. */
function detail(b: BatchView): string {
  const lines = [`${b.id}  ${b.endpoint}  created ${time(b.created_at)}`, progressLine(b)];
  if (b.output_file_id) lines.push(`output file: ${b.output_file_id}`);
  if (b.error_file_id) lines.push(`error file:  ${b.error_file_id}`);
  for (const e of b.errors?.data ?? []) lines.push(`line ${e.line ?? '-'}: ${e.code}: ${e.message}`);
  return lines.join('\n') + '\n';
}

/** The commands. */
export const BATCH_COMMANDS: readonly CommandSpec[] = [
  {
    resource: 'batches',
    verb: 'list',
    args: [],
    target: 'data',
    flags: { limit: { value: 'N', help: 'at most N batches, newest first (default 20, at most 100)' } },
    summary: "a tenant's batches, newest first (needs the tenant's API key)",
    async run(ctx) {
      const raw = stringFlag(ctx, 'limit');
      const limit = raw === undefined ? undefined : numberFlag('limit', raw, { integer: true, min: 1, max: 100 });
      const page = await ctx.api.request<{ data: BatchView[] }>('GET', '/v1/batches', { query: { limit } });
      return { data: page, text: formatTable(page.data, BATCH_COLUMNS, '(no batches)') };
    },
  },
  {
    resource: 'batches',
    verb: 'get',
    args: ['batch'],
    target: 'data',
    summary: 'one batch: progress, rate, ETA, files, validation errors',
    async run(ctx) {
      const b = await ctx.api.request<BatchView>('GET', `/v1/batches/${seg(ctx.args.batch)}`);
      return { data: b, text: detail(b) };
    },
  },
  {
    resource: 'batches',
    verb: 'cancel',
    args: ['batch'],
    target: 'data',
    summary: 'cancels a batch (items in flight finish; the rest are not run)',
    async run(ctx) {
      const b = await ctx.api.request<BatchView>('POST', `/v1/batches/${seg(ctx.args.batch)}/cancel`);
      return { data: b, text: detail(b) };
    },
  },
  {
    resource: 'batches',
    verb: 'watch',
    args: ['batch'],
    target: 'data',
    flags: { interval: { value: 'SECONDS', help: 'seconds between polls (default 2)' } },
    summary: 'follows a batch until it ends, with a progress bar on stderr',
    run: (ctx) => watchBatch(ctx, (line) => (process.stderr.isTTY ? process.stderr.write(`\r\x1b[2K${line}`) : undefined)),
  },
];

/**
 * Polls the batch every `--interval` seconds until it is completed, failed, expired or
 * cancelled, handing each progress line to `draw`; resolves with the final batch in detail.
 */
export async function watchBatch(ctx: CommandContext, draw: (line: string) => void): Promise<{ data: unknown; text: string }> {
  const raw = stringFlag(ctx, 'interval');
  const intervalS = raw === undefined ? 2 : numberFlag('interval', raw, { min: 0, max: 3600 });
  if (!ctx.args.batch) throw new UsageError('weir batches watch: name the batch');
  for (;;) {
    const b = await ctx.api.request<BatchView>('GET', `/v1/batches/${seg(ctx.args.batch)}`);
    draw(progressLine(b));
    if (FINAL.has(b.status)) {
      draw('\n');
      return { data: b, text: detail(b) };
    }
    await new Promise((r) => setTimeout(r, intervalS * 1000));
  }
}

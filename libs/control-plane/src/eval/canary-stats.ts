/**
 * Per-arm live statistics of an alias from the usage ledger, for the canary guard.
 */
import { type Kysely, sql } from 'kysely';
import type { WeirSchema } from '@weir/store-pg';
import type { ArmStats } from './canary-judge';

/**
 * Aggregates `usage_ledger` rows of `alias` that finished in `(from, to]`, by
 * `model_revision`: rows, rows with status `failed` (the error count: cancellations,
 * deadlines and filtered requests are the caller's or policy's doing, not the revision's),
 * rows with a first token, and the 95th percentile of `ttft_ms` (Postgres `percentile_cont`,
 * linear interpolation between the closest ranks; null ttft ignored). Revisions without rows
 * are absent from the map. Uses `usage_ledger_alias_finished_idx` (migration 0009).
 */
export async function armStatsByRevision(db: Kysely<WeirSchema>, alias: string, from: Date, to: Date): Promise<Map<string, ArmStats>> {
  const rows = await db
    .selectFrom('usage_ledger')
    .select([
      'model_revision',
      sql<string>`count(*)`.as('n'),
      sql<string>`count(*) filter (where status = 'failed')`.as('errors'),
      sql<string>`count(ttft_ms)`.as('ttft_n'),
      sql<number | null>`percentile_cont(0.95) within group (order by ttft_ms)`.as('p95'),
    ])
    .where('model_alias', '=', alias)
    .where('finished_at', '>', from)
    .where('finished_at', '<=', to)
    .groupBy('model_revision')
    .execute();
  const stats = new Map<string, ArmStats>();
  for (const row of rows) {
    const n = Number(row.n);
    const errors = Number(row.errors);
    stats.set(row.model_revision, { n, errors, error_rate: n === 0 ? 0 : errors / n, ttft_n: Number(row.ttft_n), p95_ttft_ms: row.p95 === null ? null : Number(row.p95) });
  }
  return stats;
}

/** An arm without traffic. */
export const NO_TRAFFIC: Readonly<ArmStats> = Object.freeze({ n: 0, errors: 0, error_rate: 0, ttft_n: 0, p95_ttft_ms: null });

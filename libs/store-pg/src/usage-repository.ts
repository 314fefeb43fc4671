import { type Insertable, type Kysely, type Selectable, sql } from 'kysely';
import type { ApiRoute, FinishReason, UpstreamAttempt, UsageRecord, UsageRepository, UsageSource, UsageStatus } from '@weir/core';
import { nanoToDecimal, toSafeInteger } from './nano-usd';
import type { UsageLedgerTable, WeirSchema } from './schema';

/** Filter for {@link UsageLedgerRepository.listUsage}. */
export interface ListUsageQuery {
  tenantId: string;
  /** Only records that finished at or after this instant. Default: all. */
  since?: Date;
  /** Most records returned (oldest first). Default 1,000. */
  limit?: number;
}

/** Filter for {@link UsageLedgerRepository.usageTotals}. */
export interface UsageTotalsQuery {
  tenantId: string;
  /** Sum records that finished at or after this instant. */
  since: Date;
}

/** Sums over a tenant's usage records, computed in SQL. */
export interface UsageTotals {
  tokens: {
    input: number;
    output: number;
    /** Of `input`, tokens served from a prompt cache. */
    cachedInput: number;
  };
  /** Total cost, integer nano-USD (exact). */
  costNanoUsd: number;
  /** The same total as an exact decimal USD string with 9 fractional digits (`"1.250000000"`). */
  costUsd: string;
  /** Number of usage records (one per generation). */
  requests: number;
}

/**
 * The usage ledger: core's {@link UsageRepository} (the write side the batched sink uses)
 * plus the read side for `/v1/usage` and `/v1/generations/{id}`.
 */
export interface UsageLedgerRepository extends UsageRepository {
  /**
   * Inserts records, idempotently: a record whose `generationId` is already stored is
   * skipped (`ON CONFLICT (generation_id) DO NOTHING`), so a redelivered batch never bills
   * twice. One `INSERT` statement for up to {@link MAX_ROWS_PER_INSERT} records; larger
   * arrays are split into several statements inside one transaction. An empty array is a
   * no-op.
   * Timings (`queueMs`, `ttftMs`, `totalMs`) are rounded to whole ms.
   * @throws RangeError before touching the database when a record's `costNanoUsd` is not a
   *   safe integer; the driver's error when the database fails (nothing is written then).
   */
  insertMany(records: readonly UsageRecord[]): Promise<void>;
  /**
   * One record by generation id, or undefined. Cost comes back exactly as stored, with its
   * `usageSource` and its `attempts` as stored (in order, timings in whole ms) — which is only
   * when there was more than one or the only one failed (see {@link storedAttempts}): a record
   * answered by its first attempt comes back without `attempts`, the record itself being that
   * attempt. The reservation it settled is not read back (`reservation` is absent).
   */
  getUsage(generationId: string): Promise<UsageRecord | undefined>;
  /** A tenant's records, oldest `finishedAt` first (ties by generation id), read as `getUsage` reads one. */
  listUsage(query: ListUsageQuery): Promise<UsageRecord[]>;
  /**
   * A tenant's totals since an instant (`finished_at >= since`); all zeros when none.
   * @throws RangeError if the cost sum exceeds Number.MAX_SAFE_INTEGER nano-USD (≈ 9 million
   *   USD) — never a silently rounded total.
   */
  usageTotals(query: UsageTotalsQuery): Promise<UsageTotals>;
}

/**
 * Rows per INSERT statement. Postgres binds at most 65,535 parameters per statement (a count
 * above it wraps and the statement fails) and a ledger row takes 33 (migration 0017's two token
 * classes made it 33: 2,000 rows would be 66,000), so 1,500 rows (49,500 parameters) stay inside
 * the limit with room for a few more columns.
 */
export const MAX_ROWS_PER_INSERT = 1500;

/** Creates the usage ledger repository over an open database. */
export function createUsageRepository(db: Kysely<WeirSchema>): UsageLedgerRepository {
  const selectRecord = () =>
    db
      .selectFrom('usage_ledger')
      .selectAll()
      // Exact: numeric(20,9) × 1e9 is an integer, cast to bigint (a string from the driver).
      .select(sql<string>`(cost_usd * 1000000000)::bigint`.as('cost_nano'));

  return {
    async insertMany(records) {
      if (records.length === 0) return;
      const rows = records.map((r) => toRow(r));
      if (rows.length <= MAX_ROWS_PER_INSERT) {
        await insertRows(db, rows);
        return;
      }
      await db.transaction().execute(async (trx) => {
        for (let i = 0; i < rows.length; i += MAX_ROWS_PER_INSERT) {
          await insertRows(trx, rows.slice(i, i + MAX_ROWS_PER_INSERT));
        }
      });
    },

    async getUsage(generationId) {
      const row = await selectRecord().where('generation_id', '=', generationId).executeTakeFirst();
      return row ? fromRow(row) : undefined;
    },

    async listUsage({ tenantId, since, limit = 1000 }) {
      let q = selectRecord().where('tenant_id', '=', tenantId);
      if (since) q = q.where('finished_at', '>=', since);
      const rows = await q.orderBy('finished_at').orderBy('generation_id').limit(limit).execute();
      return rows.map(fromRow);
    },

    async usageTotals({ tenantId, since }) {
      const row = await db
        .selectFrom('usage_ledger')
        .select([
          sql<string>`coalesce(sum(input_tokens), 0)`.as('input'),
          sql<string>`coalesce(sum(output_tokens), 0)`.as('output'),
          sql<string>`coalesce(sum(cached_input_tokens), 0)`.as('cached_input'),
          sql<string>`(coalesce(sum(cost_usd), 0) * 1000000000)::bigint`.as('cost_nano'),
          // sum(numeric(20,9)) keeps scale 9; the scale-9 zero keeps the empty case uniform.
          sql<string>`coalesce(sum(cost_usd), 0.000000000)::text`.as('cost_usd'),
          sql<string>`count(*)`.as('requests'),
        ])
        .where('tenant_id', '=', tenantId)
        .where('finished_at', '>=', since)
        .executeTakeFirstOrThrow();
      return {
        tokens: {
          input: toSafeInteger(row.input, 'input token sum'),
          output: toSafeInteger(row.output, 'output token sum'),
          cachedInput: toSafeInteger(row.cached_input, 'cached input token sum'),
        },
        costNanoUsd: toSafeInteger(row.cost_nano, 'cost sum (nano-USD)'),
        costUsd: row.cost_usd,
        requests: toSafeInteger(row.requests, 'request count'),
      };
    },
  };
}

type InsertRow = Insertable<UsageLedgerTable>;
type SelectRow = Selectable<UsageLedgerTable> & { cost_nano: string };

async function insertRows(db: Kysely<WeirSchema>, rows: InsertRow[]): Promise<void> {
  await db
    .insertInto('usage_ledger')
    .values(rows)
    .onConflict((oc) => oc.column('generation_id').doNothing())
    .execute();
}

/**
 * The `usage_ledger` row of a record, as `insertMany` writes it: budget periods are the
 * reservation's, or null when nothing was reserved. (The settlement applier encodes its rows
 * itself, with the periods it charged.)
 */
function toRow(r: UsageRecord): InsertRow {
  const periods = r.reservation;
  const attempts = storedAttempts(r);
  return {
    generation_id: r.generationId,
    request_id: r.requestId,
    tenant_id: r.tenantId,
    app_id: r.appId,
    tenant_uid: r.tenantUid ?? null,
    app_uid: r.appUid ?? null,
    api_key_id: r.apiKeyId,
    route: r.route,
    model_alias: r.modelAlias,
    model_revision: r.modelRevision,
    input_tokens: r.inputTokens,
    output_tokens: r.outputTokens,
    cached_input_tokens: r.cachedInputTokens,
    cache_write_input_tokens: r.cacheWriteInputTokens ?? 0,
    reasoning_tokens: r.reasoningTokens ?? 0,
    cost_usd: nanoToDecimal(r.costNanoUsd),
    status: r.status,
    finish_reason: r.finishReason,
    error_code: r.errorCode,
    // The relay measures with performance.now(): fractional ms are rounded to the column's integers.
    queue_ms: Math.round(r.queueMs),
    ttft_ms: r.ttftMs === null ? null : Math.round(r.ttftMs),
    total_ms: Math.round(r.totalMs),
    started_at: r.startedAt,
    finished_at: r.finishedAt,
    uncertain: r.uncertain ?? false,
    use_case: r.useCase ?? null,
    usage_source: r.usageSource ?? 'reported',
    reservation_id: r.reservation?.reservationId ?? null,
    lease_ids: r.reservation ? [...r.reservation.leaseIds] : null,
    budget_month: periods?.monthStartsOn ?? null,
    budget_day: periods?.dayStartsOn ?? null,
    attempts: attempts ? JSON.stringify(attempts) : null,
    cache_hit: r.cacheHit ?? null,
  };
}

/**
 * The attempts a ledger row keeps (`usage_ledger.attempts`): all of them, timings rounded to
 * whole ms like the row's, when there was more than one or the only one failed; undefined when
 * the record's first attempt answered it (the row's revision, timings and tokens are that
 * attempt's) or it names none. Issue 13 asks for every attempt beside the row that bills; a
 * lone answering attempt adds nothing the row lacks but its provider and replica, and writing
 * it for every request would cost the settlement path more than anything else per row.
 */
export function storedAttempts(r: UsageRecord): UpstreamAttempt[] | undefined {
  const attempts = r.attempts;
  if (!attempts || attempts.length === 0 || (attempts.length === 1 && attempts[0].outcome === 'answered')) return undefined;
  return attempts.map((a) => ({
    ...a,
    ttftMs: a.ttftMs === null ? null : Math.round(a.ttftMs),
    durationMs: Math.round(a.durationMs),
  }));
}

function fromRow(r: SelectRow): UsageRecord {
  return {
    generationId: r.generation_id,
    requestId: r.request_id,
    tenantId: r.tenant_id,
    appId: r.app_id,
    ...(r.tenant_uid !== null && r.tenant_uid !== undefined ? { tenantUid: r.tenant_uid } : {}),
    ...(r.app_uid !== null && r.app_uid !== undefined ? { appUid: r.app_uid } : {}),
    apiKeyId: r.api_key_id,
    route: r.route as ApiRoute,
    modelAlias: r.model_alias,
    modelRevision: r.model_revision,
    inputTokens: r.input_tokens,
    outputTokens: r.output_tokens,
    cachedInputTokens: r.cached_input_tokens,
    ...(r.cache_write_input_tokens > 0 ? { cacheWriteInputTokens: r.cache_write_input_tokens } : {}),
    ...(r.reasoning_tokens > 0 ? { reasoningTokens: r.reasoning_tokens } : {}),
    costNanoUsd: toSafeInteger(r.cost_nano, 'cost (nano-USD)'),
    status: r.status as UsageStatus,
    finishReason: r.finish_reason as FinishReason,
    errorCode: r.error_code,
    queueMs: r.queue_ms,
    ttftMs: r.ttft_ms,
    totalMs: r.total_ms,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
    ...(r.uncertain ? { uncertain: true } : {}),
    ...(r.use_case !== null ? { useCase: r.use_case } : {}),
    usageSource: r.usage_source as UsageSource,
    ...(r.attempts !== null ? { attempts: r.attempts } : {}),
    ...(r.cache_hit === 'exact' || r.cache_hit === 'semantic' ? { cacheHit: r.cache_hit } : {}),
  };
}

/**
 * The ledger's aggregate reads: a tenant's usage for `GET /v1/usage`, and every tenant's
 * recent and baseline spend for the burn-rate check. Both sum in SQL; money stays exact
 * (`numeric(20,9)` sums scaled to integer nano-USD, read as bigint).
 */
import { type Kysely, sql } from 'kysely';
import type { TenantSpend, TenantSpendReader, UsageAggregate, UsageReader, UsageSummary } from '@weir/core';
import { toSafeInteger } from './nano-usd';
import type { WeirSchema } from './schema';

/** The ledger's read side for usage reports: `/v1/usage` and the burn-rate check. */
export interface UsageQueries extends UsageReader, TenantSpendReader {}

/** Sums of one group, as the driver returns them (bigint and numeric aggregates are strings). */
interface AggregateRow {
  input: string;
  output: string;
  cached_input: string;
  cache_write_input: string;
  reasoning: string;
  cost_nano: string;
  requests: string;
  cache_hits: string;
}

/**
 * Creates the usage queries over an open database.
 *
 * `summarize` is one statement: `GROUP BY GROUPING SETS ((), (model_alias, model_revision),
 * (app_id), (use_case))` over the tenant's rows with `finished_at` in `[since, until)` — the rows recorded for its
 * internal id, `coalesce(tenant_uid, tenant_id)` — which `usage_ledger_tenant_uid_finished_idx`
 * (0012) serves; one scan, one snapshot,
 * so the total always equals the sum of each breakdown. `grouping()` tells the sets apart
 * (a null `use_case` is a real group: records that named none).
 *
 * `spendByTenant` is one statement over `[baselineSince, until)` grouped by tenant, the two
 * windows split with `FILTER`, leaving out rows of a deleted tenant whose id names a new one; `usage_ledger_finished_idx` (0005) serves the range.
 */
export function createUsageQueries(db: Kysely<WeirSchema>): UsageQueries {
  return {
    async summarize({ tenantId, since, until }) {
      const rows = await db
        .selectFrom('usage_ledger')
        .select([
          'model_alias',
          'model_revision',
          'app_id',
          'use_case',
          sql<number>`grouping(model_alias)`.as('g_model'),
          sql<number>`grouping(app_id)`.as('g_app'),
          sql<number>`grouping(use_case)`.as('g_use_case'),
          sql<string>`coalesce(sum(input_tokens), 0)`.as('input'),
          sql<string>`coalesce(sum(output_tokens), 0)`.as('output'),
          sql<string>`coalesce(sum(cached_input_tokens), 0)`.as('cached_input'),
          sql<string>`coalesce(sum(cache_write_input_tokens), 0)`.as('cache_write_input'),
          sql<string>`coalesce(sum(reasoning_tokens), 0)`.as('reasoning'),
          // Exact: a sum of numeric(20,9) × 1e9 is an integer.
          sql<string>`(coalesce(sum(cost_usd), 0) * 1000000000)::bigint`.as('cost_nano'),
          sql<string>`count(*)`.as('requests'),
          sql<string>`count(*) filter (where cache_hit is not null)`.as('cache_hits'),
        ])
        // The tenant's internal id (issue 14 §4): a deleted tenant's rows stay under its
        // retired one, invisible to a later tenant with the same slug.
        .where(sql<string>`coalesce(tenant_uid, tenant_id)`, '=', tenantId)
        .where('finished_at', '>=', since)
        .where('finished_at', '<', until)
        .groupBy(sql`grouping sets ((), (model_alias, model_revision), (app_id), (use_case))`)
        .execute();

      const summary: UsageSummary = { ...emptyAggregate(), byModel: [], byApp: [], byUseCase: [] };
      for (const row of rows) {
        const sums = toAggregate(row);
        // grouping(x) is 1 when x is rolled up in this row's set, 0 when the row groups by it.
        if (Number(row.g_model) === 0) summary.byModel.push({ modelAlias: row.model_alias, modelRevision: row.model_revision, ...sums });
        else if (Number(row.g_app) === 0) summary.byApp.push({ appId: row.app_id, ...sums });
        else if (Number(row.g_use_case) === 0) summary.byUseCase.push({ useCase: row.use_case, ...sums });
        else Object.assign(summary, sums);
      }
      summary.byModel.sort((a, b) => byCostThen(a, b, `${a.modelAlias}\0${a.modelRevision}`, `${b.modelAlias}\0${b.modelRevision}`));
      summary.byApp.sort((a, b) => byCostThen(a, b, a.appId, b.appId));
      summary.byUseCase.sort((a, b) => byCostThen(a, b, a.useCase ?? '', b.useCase ?? ''));
      return summary;
    },

    async spendByTenant({ baselineSince, recentSince, until }) {
      if (!(baselineSince <= recentSince && recentSince <= until)) {
        throw new RangeError('spendByTenant needs baselineSince ≤ recentSince ≤ until');
      }
      const rows = await db
        .selectFrom('usage_ledger')
        .select([
          'tenant_id',
          sql<string>`(coalesce(sum(cost_usd) filter (where finished_at >= ${recentSince}), 0) * 1000000000)::bigint`.as('recent_nano'),
          sql<string>`(coalesce(sum(cost_usd) filter (where finished_at < ${recentSince}), 0) * 1000000000)::bigint`.as('baseline_nano'),
        ])
        .where('finished_at', '>=', baselineSince)
        .where('finished_at', '<', until)
        // Not the rows of a deleted tenant whose id now names another one (issue 14 §4): a
        // re-created tenant's baseline starts from its own spend.
        .where(({ not, exists, selectFrom }) =>
          not(exists(selectFrom('tenants').select(sql`1`.as('one')).whereRef('tenants.id', '=', 'usage_ledger.tenant_id').where(sql<boolean>`tenants.uid <> coalesce(usage_ledger.tenant_uid, usage_ledger.tenant_id)`))),
        )
        .groupBy('tenant_id')
        .orderBy('tenant_id')
        .execute();
      return rows.map(
        (r): TenantSpend => ({ tenantId: r.tenant_id, recentNanoUsd: BigInt(r.recent_nano), baselineNanoUsd: BigInt(r.baseline_nano) }),
      );
    },
  };
}

function emptyAggregate(): UsageAggregate {
  return { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, cacheWriteInputTokens: 0, reasoningTokens: 0, costNanoUsd: 0n, requests: 0, cacheHits: 0 };
}

function toAggregate(row: AggregateRow): UsageAggregate {
  return {
    inputTokens: toSafeInteger(row.input, 'input token sum'),
    outputTokens: toSafeInteger(row.output, 'output token sum'),
    cachedInputTokens: toSafeInteger(row.cached_input, 'cached input token sum'),
    cacheWriteInputTokens: toSafeInteger(row.cache_write_input, 'cache-write input token sum'),
    reasoningTokens: toSafeInteger(row.reasoning, 'reasoning token sum'),
    costNanoUsd: BigInt(row.cost_nano),
    requests: toSafeInteger(row.requests, 'request count'),
    cacheHits: toSafeInteger(row.cache_hits, 'cache hit count'),
  };
}

/** Highest cost first, then by key (ascending), so the order is stable. */
function byCostThen(a: UsageAggregate, b: UsageAggregate, keyA: string, keyB: string): number {
  if (a.costNanoUsd !== b.costNanoUsd) return a.costNanoUsd > b.costNanoUsd ? -1 : 1;
  return keyA < keyB ? -1 : keyA > keyB ? 1 : 0;
}

/**
 * The ledger's side of reconciliation (issue 4): read a window of ledger rows with what
 * reconciliation changed in them, list the rows still `uncertain`, and settle one from an
 * engine's own count, exactly once.
 */
import { type Kysely, sql } from 'kysely';
import type { LedgerUsageRow } from '@weir/ledger';
import { nanoToDecimal, toSafeInteger } from './nano-usd';
import type { WeirSchema } from './schema';

/** A time window over `usage_ledger.finished_at`: `since ≤ finished_at < until`. */
export interface LedgerWindow {
  /** Inclusive start. Default: the beginning. */
  since?: Date;
  /** Exclusive end. Default: no end. */
  until?: Date;
}

/** An `uncertain` ledger row, as settling needs it. */
export interface UncertainUsageRow {
  generationId: string;
  tenantId: string;
  modelRevision: string;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /** Integer nano-USD. */
  costNanoUsd: number;
  finishedAt: Date;
}

/** The settled counts written by {@link ReconcileQueries.settleUncertain}. */
export interface UncertainSettlementWrite {
  generationId: string;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /** Integer nano-USD, priced with the revision's prices (`@weir/ledger` `settleFromEngineCount`). */
  costNanoUsd: number;
  /** Where the count came from, e.g. `engine:stories260k@1/0`. */
  source: string;
}

/** Reconciliation's queries over the ledger. */
export interface ReconcileQueries {
  /**
   * Every ledger row in the window, oldest first, read in pages of `pageSize` (default 5,000)
   * by keyset on `(finished_at, generation_id)`. A row settled by reconciliation carries its
   * first-recorded counts in `recorded`.
   * @throws RangeError when a cost does not fit a safe integer of nano-USD.
   */
  ledgerRows(window: LedgerWindow, pageSize?: number): Promise<LedgerUsageRow[]>;
  /** Rows with `uncertain = true` in the window, oldest first (at most `limit`, default 10,000). */
  listUncertain(window: LedgerWindow, limit?: number): Promise<UncertainUsageRow[]>;
  /**
   * Settles one uncertain row: in one statement, writes the settled counts and cost, clears
   * `uncertain`, and records the first-recorded counts in `usage_reconciliations`. Guarded by
   * `WHERE uncertain`, so of concurrent reconcilers exactly one settles a row.
   * @returns true when this call settled it; false when it was not (or no longer) uncertain.
   * @throws RangeError when the cost is not a safe integer.
   */
  settleUncertain(settlement: UncertainSettlementWrite): Promise<boolean>;
  /** Reservations still `held` whose `expires_at` is before `now` (reservation reconciliation leaves none). */
  countHeldPastExpiry(now: Date): Promise<number>;
  /**
   * Reservations that expired without a usage record in the window (by `created_at`): their
   * gateway stopped before the generation's usage was recorded, so whatever it produced is not
   * billed. Their generation ids, oldest first (at most `limit`, default 1,000).
   */
  listExpiredWithoutUsage(window: LedgerWindow, limit?: number): Promise<string[]>;
  /** Every budget row (settled and reserved nano-USD per scope and UTC period), for the budget check. */
  budgetRows(): Promise<{ scope: string; period: 'month' | 'day'; startsOn: string; settledNano: number; reservedNano: number }[]>;
}

/** Creates {@link ReconcileQueries} over an open database. */
export function createReconcileQueries(db: Kysely<WeirSchema>): ReconcileQueries {
  return {
    async ledgerRows(window, pageSize = 5_000) {
      const rows: LedgerUsageRow[] = [];
      let after: { finishedAt: Date; generationId: string } | undefined;
      for (;;) {
        let q = db
          .selectFrom('usage_ledger as u')
          .leftJoin('usage_reconciliations as r', 'r.generation_id', 'u.generation_id')
          .select([
            'u.generation_id',
            'u.tenant_id',
            'u.model_revision',
            'u.input_tokens',
            'u.output_tokens',
            'u.cached_input_tokens',
            'u.uncertain',
            'u.finished_at',
            sql<string>`(u.cost_usd * 1000000000)::bigint`.as('cost_nano'),
            'r.recorded_input_tokens',
            'r.recorded_output_tokens',
            'r.recorded_cached_input_tokens',
            sql<string | null>`(r.recorded_cost_usd * 1000000000)::bigint`.as('recorded_cost_nano'),
          ]);
        if (window.since) q = q.where('u.finished_at', '>=', window.since);
        if (window.until) q = q.where('u.finished_at', '<', window.until);
        if (after) {
          const a = after;
          q = q.where((eb) => eb(eb.refTuple('u.finished_at', 'u.generation_id'), '>', eb.tuple(a.finishedAt, a.generationId)));
        }
        const page = await q.orderBy('u.finished_at').orderBy('u.generation_id').limit(pageSize).execute();
        for (const r of page) {
          rows.push({
            generationId: r.generation_id,
            tenantId: r.tenant_id,
            modelRevision: r.model_revision,
            inputTokens: r.input_tokens,
            outputTokens: r.output_tokens,
            cachedInputTokens: r.cached_input_tokens,
            costNanoUsd: toSafeInteger(r.cost_nano, 'cost (nano-USD)'),
            uncertain: r.uncertain,
            ...(r.recorded_input_tokens !== null
              ? {
                  recorded: {
                    inputTokens: r.recorded_input_tokens,
                    outputTokens: r.recorded_output_tokens ?? 0,
                    cachedInputTokens: r.recorded_cached_input_tokens ?? 0,
                    costNanoUsd: toSafeInteger(r.recorded_cost_nano, 'recorded cost (nano-USD)'),
                  },
                }
              : {}),
          });
        }
        if (page.length < pageSize) return rows;
        const last = page[page.length - 1];
        after = { finishedAt: last.finished_at, generationId: last.generation_id };
      }
    },

    async listUncertain(window, limit = 10_000) {
      let q = db
        .selectFrom('usage_ledger')
        .select([
          'generation_id',
          'tenant_id',
          'model_revision',
          'input_tokens',
          'output_tokens',
          'cached_input_tokens',
          'finished_at',
          sql<string>`(cost_usd * 1000000000)::bigint`.as('cost_nano'),
        ])
        .where('uncertain', '=', true);
      if (window.since) q = q.where('finished_at', '>=', window.since);
      if (window.until) q = q.where('finished_at', '<', window.until);
      const rows = await q.orderBy('finished_at').orderBy('generation_id').limit(limit).execute();
      return rows.map((r) => ({
        generationId: r.generation_id,
        tenantId: r.tenant_id,
        modelRevision: r.model_revision,
        inputTokens: r.input_tokens,
        outputTokens: r.output_tokens,
        cachedInputTokens: r.cached_input_tokens,
        costNanoUsd: toSafeInteger(r.cost_nano, 'cost (nano-USD)'),
        finishedAt: r.finished_at,
      }));
    },

    async settleUncertain(s) {
      const cost = nanoToDecimal(s.costNanoUsd);
      // One statement: the old values are read and locked, the row updated only while it is
      // still uncertain, and the old values recorded — all or nothing.
      const result = await sql<{ generation_id: string }>`
        with old as (
          select generation_id, input_tokens, output_tokens, cached_input_tokens, cost_usd
          from usage_ledger
          where generation_id = ${s.generationId} and uncertain
          for update
        ),
        settled as (
          update usage_ledger u
          set input_tokens = ${s.inputTokens}, output_tokens = ${s.outputTokens},
              cached_input_tokens = ${s.cachedInputTokens}, cost_usd = ${cost}::numeric(20,9), uncertain = false
          from old
          where u.generation_id = old.generation_id and u.uncertain
          returning u.generation_id
        )
        insert into usage_reconciliations
          (generation_id, source, recorded_input_tokens, recorded_output_tokens, recorded_cached_input_tokens, recorded_cost_usd)
        select old.generation_id, ${s.source}, old.input_tokens, old.output_tokens, old.cached_input_tokens, old.cost_usd
        from old join settled on settled.generation_id = old.generation_id
        returning generation_id`.execute(db);
      return result.rows.length === 1;
    },

    async listExpiredWithoutUsage(window, limit = 1_000) {
      let q = db
        .selectFrom('reservations as r')
        .select('r.generation_id')
        .where('r.state', '=', 'expired')
        .where(({ not, exists, selectFrom }) => not(exists(selectFrom('usage_ledger as u').select('u.generation_id').whereRef('u.generation_id', '=', 'r.generation_id'))));
      if (window.since) q = q.where('r.created_at', '>=', window.since);
      if (window.until) q = q.where('r.created_at', '<', window.until);
      const rows = await q.orderBy('r.created_at').limit(limit).execute();
      return rows.map((r) => r.generation_id);
    },
    async budgetRows() {
      const { rows } = await sql<{ scope: string; period: 'month' | 'day'; starts_on: string; settled_nano: string; reserved_nano: string }>`
        SELECT scope, period, starts_on::text AS starts_on, settled_nano::text AS settled_nano, reserved_nano::text AS reserved_nano
        FROM budget_periods ORDER BY scope, period, starts_on`.execute(db);
      return rows.map((r) => ({
        scope: r.scope,
        period: r.period,
        startsOn: r.starts_on,
        settledNano: toSafeInteger(r.settled_nano, 'budget_periods.settled_nano'),
        reservedNano: toSafeInteger(r.reserved_nano, 'budget_periods.reserved_nano'),
      }));
    },
    async countHeldPastExpiry(now) {
      const row = await db
        .selectFrom('reservations')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('state', '=', 'held')
        .where('expires_at', '<', now)
        .executeTakeFirstOrThrow();
      return toSafeInteger(row.n, 'held reservation count');
    },
  };
}

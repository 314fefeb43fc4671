/**
 * The database side of reconciliation (`npm run reconcile`, docs/reconciliation.md): read a
 * window of ledger rows with what reconciliation changed in them; list the rows still
 * `uncertain` or `estimated` and settle one from an engine's own count exactly once, moving the
 * cost difference through the budget rows and leases the row was settled on; read the budget
 * rows, the leases and the holds the invariants are checked on; read the configuration the
 * control plane stored (prices and budgets).
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import { lockKeys } from '@weir/admission';
import type { OverspendEvent, UsageSource } from '@weir/core';
import type { LedgerUsageRow } from '@weir/ledger';
import { nanoToDecimal, toSafeInteger } from './nano-usd';
import type { WeirSchema } from './schema';
import { settleMoney } from './settlement-applier';

/** A time window over `usage_ledger.finished_at`: `since ≤ finished_at < until`. */
export interface LedgerWindow {
  /** Inclusive start. Default: the beginning. */
  since?: Date;
  /** Exclusive end. Default: no end. */
  until?: Date;
}

/** A ledger row whose counts are not the upstream's own (`uncertain`, or `usage_source = 'estimated'`), as settling needs it. */
export interface UnsettledUsageRow {
  generationId: string;
  tenantId: string;
  appId: string;
  modelRevision: string;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /** Integer nano-USD. */
  costNanoUsd: number;
  finishedAt: Date;
  uncertain: boolean;
  usageSource: UsageSource;
  /**
   * The budget periods the settlement applier charged the row's cost to (`budget_month`,
   * `budget_day`, `YYYY-MM-DD`); null for a row written by the older usage sink, whose
   * reservation (`reservations`) carries its charge instead.
   */
  budgetPeriods: { monthStartsOn: string; dayStartsOn: string } | null;
  /** The budget leases that covered its reservation (none when nothing was reserved or for an older row). */
  leaseIds: string[];
}

/** The settled counts written by {@link ReconcileQueries.settleFromCount}. */
export interface CountSettlementWrite {
  generationId: string;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /** Integer nano-USD, priced with the revision's prices (`@weir/ledger` `settleFromEngineCount`). */
  costNanoUsd: number;
  /** Where the count came from, e.g. `engine:stories260k@1/0`. */
  source: string;
  /** The row's `usage_source` from now on: `reported` for an engine's own count. Default `reported`. */
  usageSource?: Exclude<UsageSource, 'estimated'>;
}

/** What {@link ReconcileQueries.settleFromCount} did. */
export type CountSettlementResult =
  | { settled: false }
  | {
      settled: true;
      /** New cost − old cost (nano-USD). */
      deltaNano: number;
      /**
       * True when the difference was moved through the row's budget rows (and, when positive,
       * its leases): a row the settlement applier wrote. False for a row with a per-request
       * reservation, whose correction (`reconcileReservations`) moves it.
       */
      budgetsMoved: boolean;
      /** A positive difference its leases could not hold (reclaimed or exhausted): settled anyway. */
      overspends: OverspendEvent[];
    };

/** One `budget_periods` row's money (nano-USD). */
export interface BudgetRowMoney {
  scope: string;
  period: 'month' | 'day';
  /** First day of the period, `YYYY-MM-DD` (UTC). */
  startsOn: string;
  settledNano: number;
  /** Held by per-request reservations (ADR 0001; 0 once nothing writes `reservations`). */
  reservedNano: number;
  /** Held by budget leases (ADR 0002). */
  leasedNano: number;
}

/** A budget row whose `leased_nano` is not Σ (granted − consumed) of its live budget leases. */
export interface LeasedMismatch {
  scope: string;
  period: 'month' | 'day';
  startsOn: string;
  /** `budget_periods.leased_nano` (0 when the row does not exist). */
  leasedNano: number;
  /** Σ (granted − consumed) of the row's budget leases. */
  leasesHoldNano: number;
  leases: number;
}

/** One lease (`admission_leases`) with its holder's liveness. */
export interface LeaseRow {
  leaseId: string;
  holder: string;
  kind: 'budget' | 'rate';
  scope: string;
  /** Budget leases: the row's period and start. */
  period: 'month' | 'day' | null;
  startsOn: string | null;
  /** Budget leases: granted − consumed (nano-USD); 0 for rate leases. */
  heldNano: number;
  /** Rate leases: the concurrency slots held. */
  slots: number;
  /** Epoch ms: the latest reservation expiry the holder may use it for. */
  holdUntilMs: number;
  /** Epoch ms: the holder's liveness expiry (`admission_holders.expires_at_ms`); null when its row is gone. */
  holderExpiresAtMs: number | null;
}

/** Per-request reservations still `held` (ADR 0001's `reservations`). */
export interface HeldReservations {
  held: number;
  /** Σ worst cases held (nano-USD). */
  heldNano: number;
  /** Of them, those whose `expires_at` is before the cut-off given. */
  pastExpiry: number;
  pastExpiryNano: number;
}

/** The latest configuration snapshot the control plane stored. */
export interface StoredConfigSnapshot {
  version: number;
  issuedAt: Date;
  /** The configuration-file object (snake_case), as `parseConfig` reads it. */
  config: Record<string, unknown>;
}

/** The revisions of one stored snapshot (for prices as they were). */
export interface StoredRevisionsAt {
  version: number;
  issuedAt: Date;
  /** The snapshot's `revisions` section as stored (a JSON array of revision objects; null when absent). */
  revisions: unknown;
}

/** Reconciliation's queries. */
export interface ReconcileQueries {
  /**
   * Every ledger row in the window, oldest first, read in pages of `pageSize` (default 5,000)
   * by keyset on `(finished_at, generation_id)`. A row settled by reconciliation carries its
   * first-recorded counts in `recorded`.
   * @throws RangeError when a cost does not fit a safe integer of nano-USD.
   */
  ledgerRows(window: LedgerWindow, pageSize?: number): Promise<LedgerUsageRow[]>;
  /**
   * Rows with `uncertain = true` or `usage_source = 'estimated'` in the window, oldest first
   * (at most `limit`, default 10,000).
   */
  listUnsettled(window: LedgerWindow, limit?: number): Promise<UnsettledUsageRow[]>;
  /**
   * Settles one row from a count, in one transaction: locks the row while it is still
   * `uncertain` or `estimated` (so of concurrent reconcilers exactly one settles it), records
   * its first-recorded counts in `usage_reconciliations`, writes the settled counts and cost,
   * clears `uncertain` and sets `usage_source`. For a row the settlement applier wrote (it names
   * its budget periods), the cost difference d = new − old moves as a settlement would: d > 0 is
   * added to `settled_nano` of its four budget rows (tenant and app × its month and day) and
   * moved from its leases up to what they still hold (`settleMoney`), d < 0 is taken off
   * `settled_nano` of the four rows (never below 0). A row with a per-request reservation (ADR
   * 0001: an older row, or admission not yet on leases) moves nothing here: its reservation is
   * corrected by `reconcileReservations`. Locks: the ledger row, then budget rows in key order, then
   * leases by id — the applier's order.
   * @throws RangeError when the cost is not a non-negative safe integer.
   */
  settleFromCount(settlement: CountSettlementWrite): Promise<CountSettlementResult>;
  /** Per-request reservations still held; `pastExpiry` counts those whose `expires_at` < `expiredBefore`. */
  heldReservations(expiredBefore: Date): Promise<HeldReservations>;
  /** Reservations still `held` whose `expires_at` is before `now`. */
  countHeldPastExpiry(now: Date): Promise<number>;
  /**
   * Reservations that expired without a usage record in the window (by `created_at`): their
   * gateway stopped before the generation's usage was recorded, so whatever it produced is not
   * billed. Their generation ids, oldest first (at most `limit`, default 1,000).
   */
  listExpiredWithoutUsage(window: LedgerWindow, limit?: number): Promise<string[]>;
  /** Every budget row (settled, reserved and leased nano-USD per scope and UTC period). */
  budgetRows(): Promise<BudgetRowMoney[]>;
  /** Budget rows whose `leased_nano` differs from Σ (granted − consumed) of their budget leases (including leases of a missing row). */
  leasedMismatches(): Promise<LeasedMismatch[]>;
  /** Every lease, by lease id, with its holder's liveness. */
  leases(): Promise<LeaseRow[]>;
  /** Idempotency keys still `running` (claimed by a generation that has not finished). */
  countRunningKeys(): Promise<number>;
  /** The latest stored configuration snapshot; undefined when the control plane's store has none. */
  latestConfigSnapshot(): Promise<StoredConfigSnapshot | undefined>;
  /** The `revisions` of every stored snapshot, oldest version first (only that section is read). */
  snapshotRevisions(): Promise<StoredRevisionsAt[]>;
}

const ymd = (d: Date | string): string => (typeof d === 'string' ? d.slice(0, 10) : d.toISOString().slice(0, 10));

/** Creates {@link ReconcileQueries} over an open database. */
export function createReconcileQueries(db: Kysely<WeirSchema>, options: { now?: () => number } = {}): ReconcileQueries {
  const now = options.now ?? Date.now;
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
            'u.cache_write_input_tokens',
            'u.reasoning_tokens',
            'u.uncertain',
            'u.usage_source',
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
            // The classes (migration 0017) price the row in check (d); 0 is left out, as absent.
            ...(r.cache_write_input_tokens > 0 ? { cacheWriteInputTokens: r.cache_write_input_tokens } : {}),
            ...(r.reasoning_tokens > 0 ? { reasoningTokens: r.reasoning_tokens } : {}),
            costNanoUsd: toSafeInteger(r.cost_nano, 'cost (nano-USD)'),
            uncertain: r.uncertain,
            usageSource: r.usage_source,
            finishedAt: r.finished_at,
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

    async listUnsettled(window, limit = 10_000) {
      let q = db
        .selectFrom('usage_ledger')
        .select([
          'generation_id',
          'tenant_id',
          'app_id',
          'model_revision',
          'input_tokens',
          'output_tokens',
          'cached_input_tokens',
          'finished_at',
          'uncertain',
          'usage_source',
          'budget_month',
          'budget_day',
          'lease_ids',
          sql<string>`(cost_usd * 1000000000)::bigint`.as('cost_nano'),
        ])
        // Two partial indexes (0006: uncertain, 0010: estimated) serve the two halves.
        .where((eb) => eb.or([eb('uncertain', '=', true), eb('usage_source', '=', 'estimated')]));
      if (window.since) q = q.where('finished_at', '>=', window.since);
      if (window.until) q = q.where('finished_at', '<', window.until);
      const rows = await q.orderBy('finished_at').orderBy('generation_id').limit(limit).execute();
      return rows.map((r) => ({
        generationId: r.generation_id,
        tenantId: r.tenant_id,
        appId: r.app_id,
        modelRevision: r.model_revision,
        inputTokens: r.input_tokens,
        outputTokens: r.output_tokens,
        cachedInputTokens: r.cached_input_tokens,
        costNanoUsd: toSafeInteger(r.cost_nano, 'cost (nano-USD)'),
        finishedAt: r.finished_at,
        uncertain: r.uncertain,
        usageSource: r.usage_source,
        budgetPeriods: r.budget_month && r.budget_day ? { monthStartsOn: ymd(r.budget_month), dayStartsOn: ymd(r.budget_day) } : null,
        leaseIds: r.lease_ids ?? [],
      }));
    },

    async settleFromCount(s) {
      if (!Number.isSafeInteger(s.costNanoUsd) || s.costNanoUsd < 0) throw new RangeError(`settled cost must be a non-negative safe integer of nano-USD, got ${s.costNanoUsd}`);
      const cost = nanoToDecimal(s.costNanoUsd);
      return db.transaction().execute(async (trx): Promise<CountSettlementResult> => {
        const { rows } = await sql<{
          tenant_id: string;
          app_id: string;
          cost_nano: string;
          budget_month: string | null;
          budget_day: string | null;
          lease_ids: string[] | null;
          reserved: boolean;
        }>`
          SELECT coalesce(u.tenant_uid, u.tenant_id) AS tenant_id, coalesce(u.app_uid, u.app_id) AS app_id, (u.cost_usd * 1000000000)::bigint::text AS cost_nano, u.budget_month::text AS budget_month,
            u.budget_day::text AS budget_day, u.lease_ids,
            EXISTS (SELECT 1 FROM reservations r WHERE r.generation_id = u.generation_id) AS reserved
          FROM usage_ledger u WHERE u.generation_id = ${s.generationId} AND (u.uncertain OR u.usage_source = 'estimated')
          FOR UPDATE OF u`.execute(trx);
        if (rows.length === 0) return { settled: false };
        const old = rows[0];
        // The counts as first recorded (which the usage stream carries), then the settled ones.
        await sql`
          INSERT INTO usage_reconciliations
            (generation_id, source, recorded_input_tokens, recorded_output_tokens, recorded_cached_input_tokens, recorded_cost_usd)
          SELECT generation_id, ${s.source}, input_tokens, output_tokens, cached_input_tokens, cost_usd
          FROM usage_ledger WHERE generation_id = ${s.generationId}
          ON CONFLICT (generation_id) DO NOTHING`.execute(trx);
        await sql`
          UPDATE usage_ledger SET input_tokens = ${s.inputTokens}, output_tokens = ${s.outputTokens},
            cached_input_tokens = ${s.cachedInputTokens}, cost_usd = ${cost}::numeric(20,9), uncertain = false,
            usage_source = ${s.usageSource ?? 'reported'}
          WHERE generation_id = ${s.generationId}`.execute(trx);
        const deltaNano = s.costNanoUsd - toSafeInteger(old.cost_nano, 'cost (nano-USD)');
        // A row with an ADR 0001 reservation (an older row, or admission not yet on leases) is
        // charged through its reservation: `reconcileReservations` corrects it, once.
        if (!old.budget_month || !old.budget_day || old.reserved) return { settled: true, deltaNano, budgetsMoved: false, overspends: [] };
        const { budgets } = lockKeys(old.tenant_id, old.app_id, old.budget_month, old.budget_day);
        let overspends: OverspendEvent[] = [];
        if (deltaNano > 0) {
          overspends = await settleMoney(
            trx,
            [{ generationId: s.generationId, costNano: deltaNano, monthStartsOn: old.budget_month, dayStartsOn: old.budget_day, budgets, leaseIds: [...new Set(old.lease_ids ?? [])] }],
            now(),
          );
        } else if (deltaNano < 0) await lowerSettled(trx, budgets, -deltaNano);
        return { settled: true, deltaNano, budgetsMoved: true, overspends };
      });
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
      const { rows } = await sql<{ scope: string; period: 'month' | 'day'; starts_on: string; settled_nano: string; reserved_nano: string; leased_nano: string }>`
        SELECT scope, period, starts_on::text AS starts_on, settled_nano::text AS settled_nano, reserved_nano::text AS reserved_nano,
          leased_nano::text AS leased_nano
        FROM budget_periods ORDER BY scope, period, starts_on`.execute(db);
      return rows.map((r) => ({
        scope: r.scope,
        period: r.period,
        startsOn: r.starts_on,
        settledNano: toSafeInteger(r.settled_nano, 'budget_periods.settled_nano'),
        reservedNano: toSafeInteger(r.reserved_nano, 'budget_periods.reserved_nano'),
        leasedNano: toSafeInteger(r.leased_nano, 'budget_periods.leased_nano'),
      }));
    },

    async leasedMismatches() {
      const { rows } = await sql<{ scope: string; period: 'month' | 'day'; starts_on: string; leased: string; held: string; leases: string }>`
        WITH l AS (
          SELECT scope, period, starts_on, sum(granted_nano - consumed_nano) AS held, count(*) AS leases
          FROM admission_leases WHERE kind = 'budget' GROUP BY scope, period, starts_on
        )
        SELECT coalesce(b.scope, l.scope) AS scope, coalesce(b.period, l.period) AS period, coalesce(b.starts_on, l.starts_on)::text AS starts_on,
          coalesce(b.leased_nano, 0)::text AS leased, coalesce(l.held, 0)::text AS held, coalesce(l.leases, 0)::text AS leases
        FROM budget_periods b FULL JOIN l ON l.scope = b.scope AND l.period = b.period AND l.starts_on = b.starts_on
        WHERE coalesce(b.leased_nano, 0) <> coalesce(l.held, 0)
        ORDER BY 1, 2, 3`.execute(db);
      return rows.map((r) => ({
        scope: r.scope,
        period: r.period,
        startsOn: r.starts_on,
        leasedNano: toSafeInteger(r.leased, 'budget_periods.leased_nano'),
        leasesHoldNano: toSafeInteger(r.held, 'leases held (nano-USD)'),
        leases: Number(r.leases),
      }));
    },

    async leases() {
      const { rows } = await sql<{
        lease_id: string;
        holder: string;
        kind: 'budget' | 'rate';
        scope: string;
        period: 'month' | 'day' | null;
        starts_on: string | null;
        held: string;
        slots: number;
        hold_until_ms: string;
        holder_expires_at_ms: string | null;
      }>`
        SELECT l.lease_id, l.holder, l.kind, l.scope, l.period, l.starts_on::text AS starts_on,
          CASE WHEN l.kind = 'budget' THEN (l.granted_nano - l.consumed_nano) ELSE 0 END::text AS held, l.slots,
          l.hold_until_ms::text AS hold_until_ms, h.expires_at_ms::text AS holder_expires_at_ms
        FROM admission_leases l LEFT JOIN admission_holders h ON h.holder = l.holder
        ORDER BY l.lease_id`.execute(db);
      return rows.map((r) => ({
        leaseId: r.lease_id,
        holder: r.holder,
        kind: r.kind,
        scope: r.scope,
        period: r.period,
        startsOn: r.starts_on,
        heldNano: toSafeInteger(r.held, 'lease held (nano-USD)'),
        slots: Number(r.slots),
        holdUntilMs: toSafeInteger(r.hold_until_ms, 'admission_leases.hold_until_ms'),
        holderExpiresAtMs: r.holder_expires_at_ms === null ? null : toSafeInteger(r.holder_expires_at_ms, 'admission_holders.expires_at_ms'),
      }));
    },

    async heldReservations(expiredBefore) {
      const { rows } = await sql<{ held: string; held_nano: string; past: string; past_nano: string }>`
        SELECT count(*)::text AS held, coalesce(sum(worst_case_nano), 0)::text AS held_nano,
          (count(*) FILTER (WHERE expires_at < ${expiredBefore}))::text AS past,
          coalesce(sum(worst_case_nano) FILTER (WHERE expires_at < ${expiredBefore}), 0)::text AS past_nano
        FROM reservations WHERE state = 'held'`.execute(db);
      const r = rows[0];
      return {
        held: toSafeInteger(r.held, 'held reservations'),
        heldNano: toSafeInteger(r.held_nano, 'held worst cases (nano-USD)'),
        pastExpiry: toSafeInteger(r.past, 'held reservations past expiry'),
        pastExpiryNano: toSafeInteger(r.past_nano, 'held worst cases past expiry (nano-USD)'),
      };
    },

    async countHeldPastExpiry(at) {
      const row = await db
        .selectFrom('reservations')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('state', '=', 'held')
        .where('expires_at', '<', at)
        .executeTakeFirstOrThrow();
      return toSafeInteger(row.n, 'held reservation count');
    },

    async countRunningKeys() {
      const row = await db.selectFrom('idempotency_keys').select((eb) => eb.fn.countAll<string>().as('n')).where('state', '=', 'running').executeTakeFirstOrThrow();
      return toSafeInteger(row.n, 'running idempotency keys');
    },

    async latestConfigSnapshot() {
      const row = await db.selectFrom('config_snapshots').select(['version', 'issued_at', 'config']).orderBy('version', 'desc').limit(1).executeTakeFirst();
      return row ? { version: Number(row.version), issuedAt: row.issued_at, config: row.config } : undefined;
    },

    async snapshotRevisions() {
      const { rows } = await sql<{ version: string; issued_at: Date; revisions: unknown }>`
        SELECT version::text AS version, issued_at, config -> 'revisions' AS revisions FROM config_snapshots ORDER BY version`.execute(db);
      return rows.map((r) => ({ version: Number(r.version), issuedAt: r.issued_at, revisions: r.revisions }));
    },
  };
}

/** Takes `nano` off `settled_nano` of `budgets` (already sorted in lock order), never below 0. */
async function lowerSettled(trx: Transaction<WeirSchema>, budgets: readonly { scope: string; period: string; startsOn: string }[], nano: number): Promise<void> {
  // One statement per row, in key order: the lock order every money transaction uses.
  for (const b of budgets) {
    await sql`UPDATE budget_periods SET settled_nano = greatest(settled_nano - ${nano}::bigint, 0)
      WHERE scope = ${b.scope} AND period = ${b.period} AND starts_on = ${b.startsOn}::date`.execute(trx);
  }
}

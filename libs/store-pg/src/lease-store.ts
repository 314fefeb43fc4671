/**
 * Budget and rate leases in Postgres or PGlite (ADR 0002 §1): the `LeaseStore` port of
 * `@weir/admission` over `admission_holders`, `admission_leases`, `budget_periods.leased_nano`
 * and `admission_scopes` (migrations 0003 and 0010), and {@link applyLeaseSettlements}, the
 * database side of a settlement for the ledger's applier.
 *
 * Every lease change is one transaction that keeps the invariants of the port (settled +
 * reserved + leased ≤ budget; leased = Σ (granted − consumed) of a row's live budget leases;
 * Σ shares ≤ limit per scope and field). What to grant is decided by `leaseGrant` of
 * `@weir/admission` on the locked figures; the store only executes it.
 *
 * **Lock order**, the same for every transaction here, in the ledger's applier and in ADR 0001's
 * admission store, so none of them can deadlock with another: `admission_scopes` rows (by
 * scope) → `budget_periods` rows (by scope, period, start) → `admission_leases` rows (by lease
 * id) → `admission_holders` rows. Missing scope and budget rows are created and locked in one
 * statement (`INSERT … ON CONFLICT DO UPDATE … RETURNING` takes the row lock whether it
 * inserted or not). PGlite has one connection: its transactions simply run one at a time.
 */
import { type Kysely, type RawBuilder, type Transaction, sql } from 'kysely';
import type { SettlementCharge } from '@weir/ledger';
import {
  type BudgetKey,
  type BudgetLeaseRow,
  type LeaseSettlement,
  type LeaseStore,
  RATE_FIELDS,
  type RateField,
  type RateLeaseRow,
  type RateShares,
  type ReclaimReport,
  lockKeys,
  budgetKeyString,
  leaseGrant,
} from '@weir/admission';
import { toSafeInteger } from './nano-usd';
import { settleMoney } from './settlement-applier';
import type { WeirSchema } from './schema';

type Db = Kysely<WeirSchema> | Transaction<WeirSchema>;

/** `admission_leases` columns of each rate field. */
const RATE_COLUMN: Record<RateField, string> = {
  requestsPerMinute: 'requests_per_minute',
  tokensPerMinute: 'tokens_per_minute',
  inputTokensPerMinute: 'input_tokens_per_minute',
  outputTokensPerMinute: 'output_tokens_per_minute',
  maxConcurrent: 'slots',
};

interface LeaseRowDb {
  lease_id: string;
  holder: string;
  scope: string;
  kind: 'budget' | 'rate';
  period: 'month' | 'day' | null;
  starts_on: string | null;
  granted_nano: string;
  consumed_nano: string;
  requests_per_minute: number;
  tokens_per_minute: number;
  input_tokens_per_minute: number;
  output_tokens_per_minute: number;
  slots: number;
  hold_until_ms: string;
}

interface MoneyRowDb {
  settled_nano: string;
  reserved_nano: string;
  leased_nano: string;
}

const LEASE_COLUMNS = sql`lease_id, holder, scope, kind, period, starts_on::text AS starts_on, granted_nano::text AS granted_nano,
  consumed_nano::text AS consumed_nano, requests_per_minute, tokens_per_minute, input_tokens_per_minute, output_tokens_per_minute,
  slots, hold_until_ms::text AS hold_until_ms`;

/**
 * Creates the lease store over an open database (see `openDatabase`). Two stores over two pools
 * on one database behave as two holders sharing one truth. Queries throw the driver's errors
 * (e.g. the server is away); a failed transaction changed nothing.
 */
export function createPgLeaseStore(db: Kysely<WeirSchema>): LeaseStore {
  return {
    heartbeat: ({ holder, mode, nowMs, ttlMs, leaseIds, holdUntilMs }) =>
      db.transaction().execute(async (trx) => {
        const live = new Set<string>();
        const wanted = new Set<string>();
        if (leaseIds.length > 0) {
          // A budget lease is wanted when its row records another holder's unexpired demand (0011).
          const { rows } = await sql<{ lease_id: string; wanted: boolean }>`
            UPDATE admission_leases a SET hold_until_ms = greatest(hold_until_ms, ${holdUntilMs}::bigint), updated_at_ms = ${nowMs}::bigint
            WHERE lease_id IN (SELECT lease_id FROM admission_leases WHERE holder = ${holder} AND lease_id = ANY(${[...leaseIds]}::text[]) ORDER BY lease_id FOR UPDATE)
            RETURNING a.lease_id, (a.kind = 'budget' AND EXISTS (
              SELECT 1 FROM budget_periods b WHERE b.scope = a.scope AND b.period = a.period AND b.starts_on = a.starts_on
                AND b.demand_until_ms > ${nowMs}::bigint AND b.demand_holder IS DISTINCT FROM ${holder})) AS wanted`.execute(trx);
          for (const r of rows) {
            live.add(r.lease_id);
            if (r.wanted) wanted.add(r.lease_id);
          }
        }
        await sql`
          INSERT INTO admission_holders (holder, mode, started_at_ms, heartbeat_at_ms, expires_at_ms)
          VALUES (${holder}, ${mode}, ${nowMs}::bigint, ${nowMs}::bigint, ${nowMs + ttlMs}::bigint)
          ON CONFLICT (holder) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms, expires_at_ms = excluded.expires_at_ms`.execute(trx);
        return { live, wanted };
      }),

    drawBudget: (d) =>
      db.transaction().execute(async (trx) => {
        const money = await lockBudgetRows(trx, [d.key]);
        const row = money.get(budgetKeyString(d.key)) as { settled: number; reserved: number; leased: number };
        const unleased = d.budgetNano - row.settled - row.reserved - row.leased;
        const existing = await lockLease(trx, d.leaseId);
        if (existing && (existing.holder !== d.holder || existing.kind !== 'budget')) throw new Error(`lease ${d.leaseId} is not a budget lease of holder ${d.holder}`);
        if (!existing && !d.create) return { addedNano: 0, unleasedNano: unleased, othersLeasedNano: 0 };
        const added = leaseGrant(unleased, d.ask);
        let lease: LeaseRowDb;
        if (existing) {
          const { rows } = await sql<LeaseRowDb>`
            UPDATE admission_leases SET granted_nano = granted_nano + ${added}::bigint,
              hold_until_ms = greatest(hold_until_ms, ${d.holdUntilMs}::bigint), updated_at_ms = ${d.nowMs}::bigint
            WHERE lease_id = ${d.leaseId} RETURNING ${LEASE_COLUMNS}`.execute(trx);
          lease = rows[0];
        } else {
          const { rows } = await sql<LeaseRowDb>`
            INSERT INTO admission_leases (lease_id, holder, scope, kind, period, starts_on, granted_nano, hold_until_ms, created_at_ms, updated_at_ms)
            VALUES (${d.leaseId}, ${d.holder}, ${d.key.scope}, 'budget', ${d.key.period}, ${d.key.startsOn}::date, ${added}::bigint,
              ${d.holdUntilMs}::bigint, ${d.nowMs}::bigint, ${d.nowMs}::bigint)
            RETURNING ${LEASE_COLUMNS}`.execute(trx);
          lease = rows[0];
        }
        // Demand (0011): set when a shared holder's waiting request was not covered; a draw that
        // covers the holder's own demand (or finds it expired) clears it. SET sees the old values.
        const demand = d.demandUntilMs !== undefined && added < d.ask.min;
        if (added > 0 || demand) {
          await sql`UPDATE budget_periods SET leased_nano = leased_nano + ${added}::bigint,
              demand_until_ms = CASE WHEN ${demand} THEN ${d.demandUntilMs ?? 0}::bigint
                WHEN demand_until_ms <= ${d.nowMs}::bigint OR demand_holder = ${d.holder} THEN 0 ELSE demand_until_ms END,
              demand_holder = CASE WHEN ${demand} THEN ${d.holder}
                WHEN demand_until_ms <= ${d.nowMs}::bigint OR demand_holder = ${d.holder} THEN NULL ELSE demand_holder END
            WHERE scope = ${d.key.scope} AND period = ${d.key.period} AND starts_on = ${d.key.startsOn}::date`.execute(trx);
        }
        let others = 0;
        if (added < d.ask.min) {
          // Only live holders' money may come back (a dead one's waits for its reclaim).
          const { rows: held } = await sql<{ n: string }>`
            SELECT coalesce(sum(l.granted_nano - l.consumed_nano), 0)::text AS n FROM admission_leases l
            JOIN admission_holders h ON h.holder = l.holder AND h.expires_at_ms > ${d.nowMs}::bigint
            WHERE l.kind = 'budget' AND l.scope = ${d.key.scope} AND l.period = ${d.key.period} AND l.starts_on = ${d.key.startsOn}::date
              AND l.holder <> ${d.holder}`.execute(trx);
          others = Math.max(0, toSafeInteger(held[0].n, 'leased by others'));
        }
        return { lease: toBudgetLease(lease), addedNano: added, unleasedNano: unleased - added, othersLeasedNano: others };
      }),

    returnBudget: ({ holder, leaseId, returnNano, nowMs }) =>
      db.transaction().execute(async (trx) => {
        // The lease's row is immutable: read it unlocked, then lock the row before the lease.
        const found = await readLease(trx, leaseId);
        if (!found || found.holder !== holder || found.kind !== 'budget') return { returnedNano: 0 };
        const key = budgetKeyOf(found);
        await lockBudgetRows(trx, [key]);
        const { rows } = await sql<LeaseRowDb & { back: string }>`
          WITH l AS (
            SELECT lease_id, greatest(0, least(${Math.floor(returnNano)}::bigint, granted_nano - consumed_nano)) AS back
            FROM admission_leases WHERE lease_id = ${leaseId} FOR UPDATE
          )
          UPDATE admission_leases a SET granted_nano = a.granted_nano - l.back, updated_at_ms = ${nowMs}::bigint
          FROM l WHERE a.lease_id = l.lease_id
          RETURNING ${sql.raw(LEASE_COLUMN_LIST.map((c) => `a.${c}`).join(', '))}, l.back::text AS back`.execute(trx);
        if (rows.length === 0) return { returnedNano: 0 };
        const back = toSafeInteger(rows[0].back, 'returned nano');
        if (back > 0) {
          await sql`UPDATE budget_periods SET leased_nano = leased_nano - ${back}::bigint
            WHERE scope = ${key.scope} AND period = ${key.period} AND starts_on = ${key.startsOn}::date`.execute(trx);
        }
        return { returnedNano: back, lease: toBudgetLease(rows[0]) };
      }),

    drawRate: (d) =>
      db.transaction().execute(async (trx) => {
        await sql`INSERT INTO admission_scopes (scope) VALUES (${d.scope}) ON CONFLICT (scope) DO UPDATE SET scope = excluded.scope`.execute(trx);
        const { rows: sumRows } = await sql<Record<string, number>>`
          SELECT ${sql.raw(RATE_FIELDS.map((f) => `coalesce(sum(${RATE_COLUMN[f]}), 0)::double precision AS "${f}"`).join(', '))}
          FROM admission_leases WHERE scope = ${d.scope} AND kind = 'rate'`.execute(trx);
        const sums = sumRows[0];
        const existing = await lockLease(trx, d.leaseId);
        if (existing && (existing.holder !== d.holder || existing.kind !== 'rate')) throw new Error(`lease ${d.leaseId} is not a rate lease of holder ${d.holder}`);
        const added: Partial<RateShares> = {};
        const unleased: Partial<RateShares> = {};
        for (const f of RATE_FIELDS) {
          const ask = d.ask[f];
          const limit = d.limits[f];
          if (!ask || limit === undefined) continue;
          const free = limit - Number(sums[f]);
          unleased[f] = free;
          if (!existing && !d.create) continue;
          added[f] = leaseGrant(free, ask);
          unleased[f] = free - (added[f] as number);
        }
        if (!existing && !d.create) return { added: {}, unleased };
        const delta = (f: RateField) => added[f] ?? 0;
        let lease: LeaseRowDb;
        if (existing) {
          const { rows } = await sql<LeaseRowDb>`
            UPDATE admission_leases SET
              requests_per_minute = requests_per_minute + ${delta('requestsPerMinute')}::double precision,
              tokens_per_minute = tokens_per_minute + ${delta('tokensPerMinute')}::double precision,
              input_tokens_per_minute = input_tokens_per_minute + ${delta('inputTokensPerMinute')}::double precision,
              output_tokens_per_minute = output_tokens_per_minute + ${delta('outputTokensPerMinute')}::double precision,
              slots = slots + ${delta('maxConcurrent')}::integer,
              hold_until_ms = greatest(hold_until_ms, ${d.holdUntilMs}::bigint), updated_at_ms = ${d.nowMs}::bigint
            WHERE lease_id = ${d.leaseId} RETURNING ${LEASE_COLUMNS}`.execute(trx);
          lease = rows[0];
        } else {
          const { rows } = await sql<LeaseRowDb>`
            INSERT INTO admission_leases (lease_id, holder, scope, kind, requests_per_minute, tokens_per_minute, input_tokens_per_minute,
              output_tokens_per_minute, slots, hold_until_ms, created_at_ms, updated_at_ms)
            VALUES (${d.leaseId}, ${d.holder}, ${d.scope}, 'rate', ${delta('requestsPerMinute')}::double precision, ${delta('tokensPerMinute')}::double precision,
              ${delta('inputTokensPerMinute')}::double precision, ${delta('outputTokensPerMinute')}::double precision, ${delta('maxConcurrent')}::integer,
              ${d.holdUntilMs}::bigint, ${d.nowMs}::bigint, ${d.nowMs}::bigint)
            RETURNING ${LEASE_COLUMNS}`.execute(trx);
          lease = rows[0];
        }
        return { lease: toRateLease(lease), added, unleased };
      }),

    async shrinkRate({ holder, leaseId, shares, nowMs }) {
      // Only lowers shares: Σ shares can only fall, so no scope lock is needed.
      const set = RATE_FIELDS.filter((f) => shares[f] !== undefined).map(
        (f) => sql`${sql.raw(RATE_COLUMN[f])} = greatest(0, least(${sql.raw(RATE_COLUMN[f])}, ${shares[f]}::double precision))`,
      );
      const { rows } = await sql<LeaseRowDb>`
        UPDATE admission_leases SET ${sql.join([...set, sql`updated_at_ms = ${nowMs}::bigint`])}
        WHERE lease_id = ${leaseId} AND holder = ${holder} AND kind = 'rate'
        RETURNING ${LEASE_COLUMNS}`.execute(db);
      return rows.length > 0 ? toRateLease(rows[0]) : undefined;
    },

    retire: ({ holder, nowMs, leases }) =>
      db.transaction().execute(async (trx) => {
        if (leases.length > 0) {
          const sorted = [...leases].sort((a, b) => (a.leaseId < b.leaseId ? -1 : a.leaseId > b.leaseId ? 1 : 0));
          const values = sorted.map((l) => sql`(${l.leaseId}::text, ${Math.round(l.holdUntilMs)}::bigint)`);
          await sql`
            UPDATE admission_leases a SET hold_until_ms = least(a.hold_until_ms, v.hold_until_ms), updated_at_ms = ${nowMs}::bigint
            FROM (VALUES ${sql.join(values)}) AS v(lease_id, hold_until_ms)
            WHERE a.lease_id = v.lease_id AND a.holder = ${holder}
              AND a.lease_id IN (SELECT lease_id FROM admission_leases WHERE holder = ${holder} ORDER BY lease_id FOR UPDATE)`.execute(trx);
        }
        await sql`UPDATE admission_holders SET expires_at_ms = least(expires_at_ms, ${nowMs}::bigint) WHERE holder = ${holder}`.execute(trx);
      }),

    reclaimExpired: ({ nowMs, graceMs }) =>
      db.transaction().execute((trx) =>
        reclaim(trx, sql`hold_until_ms + ${graceMs}::bigint <= ${nowMs}::bigint`, sql`expires_at_ms + ${graceMs}::bigint <= ${nowMs}::bigint AND NOT EXISTS (SELECT 1 FROM admission_leases l WHERE l.holder = h.holder)`),
      ),

    reclaimHolders: ({ exceptHolder, holders }) =>
      db.transaction().execute((trx) =>
        holders !== undefined
          ? reclaim(trx, sql`holder = ANY(${[...holders]}::text[])`, sql`h.holder = ANY(${[...holders]}::text[])`)
          : exceptHolder === undefined
            ? reclaim(trx, sql`true`, sql`true`)
            : reclaim(trx, sql`holder <> ${exceptHolder}`, sql`h.holder <> ${exceptHolder}`),
      ),

    async readBudget(key) {
      const { rows } = await sql<MoneyRowDb>`
        SELECT settled_nano::text AS settled_nano, reserved_nano::text AS reserved_nano, leased_nano::text AS leased_nano FROM budget_periods
        WHERE scope = ${key.scope} AND period = ${key.period} AND starts_on = ${key.startsOn}::date`.execute(db);
      if (rows.length === 0) return undefined;
      return {
        settledNano: toSafeInteger(rows[0].settled_nano, 'budget_periods.settled_nano'),
        reservedNano: toSafeInteger(rows[0].reserved_nano, 'budget_periods.reserved_nano'),
        leasedNano: toSafeInteger(rows[0].leased_nano, 'budget_periods.leased_nano'),
      };
    },

    async listLeases(holder) {
      const { rows } = await sql<LeaseRowDb>`
        SELECT ${LEASE_COLUMNS} FROM admission_leases ${holder === undefined ? sql`` : sql`WHERE holder = ${holder}`} ORDER BY lease_id`.execute(db);
      return { budget: rows.filter((r) => r.kind === 'budget').map(toBudgetLease), rate: rows.filter((r) => r.kind === 'rate').map(toRateLease) };
    },
  };
}

const LEASE_COLUMN_LIST = [
  'lease_id',
  'holder',
  'scope',
  'kind',
  'period',
  'starts_on::text AS starts_on',
  'granted_nano::text AS granted_nano',
  'consumed_nano::text AS consumed_nano',
  'requests_per_minute',
  'tokens_per_minute',
  'input_tokens_per_minute',
  'output_tokens_per_minute',
  'slots',
  'hold_until_ms::text AS hold_until_ms',
];

/**
 * Deletes the leases matching `leaseWhere` (budget leases give granted − consumed back to their
 * rows, locked first in key order), then the holders matching `holderWhere` (alias `h`).
 */
async function reclaim(trx: Transaction<WeirSchema>, leaseWhere: RawBuilder<unknown>, holderWhere: RawBuilder<unknown>): Promise<ReclaimReport> {
  const report: ReclaimReport = { leases: 0, returnedNano: 0, holders: 0 };
  const { rows: candidates } = await sql<LeaseRowDb>`SELECT ${LEASE_COLUMNS} FROM admission_leases WHERE ${leaseWhere}`.execute(trx);
  if (candidates.length > 0) {
    const keys = new Map<string, BudgetKey>();
    for (const c of candidates) if (c.kind === 'budget') keys.set(budgetKeyString(budgetKeyOf(c)), budgetKeyOf(c));
    await lockBudgetRows(trx, [...keys.values()]);
    // The condition is checked again under the lease's lock: a heartbeat that extended it first wins.
    const { rows: deleted } = await sql<LeaseRowDb>`
      DELETE FROM admission_leases WHERE lease_id IN (
        SELECT lease_id FROM admission_leases WHERE lease_id = ANY(${candidates.map((c) => c.lease_id)}::text[]) ORDER BY lease_id FOR UPDATE
      ) AND ${leaseWhere}
      RETURNING ${LEASE_COLUMNS}`.execute(trx);
    const back = new Map<string, { key: BudgetKey; nano: number }>();
    for (const l of deleted) {
      report.leases++;
      if (l.kind !== 'budget') continue;
      const lease = toBudgetLease(l);
      const nano = lease.grantedNano - lease.consumedNano;
      report.returnedNano += nano;
      const k = budgetKeyString(lease.key);
      back.set(k, { key: lease.key, nano: (back.get(k)?.nano ?? 0) + nano });
    }
    const values = [...back.values()].filter((b) => b.nano !== 0).map((b) => sql`(${b.key.scope}::text, ${b.key.period}::text, ${b.key.startsOn}::date, ${b.nano}::bigint)`);
    if (values.length > 0) {
      await sql`
        UPDATE budget_periods b SET leased_nano = b.leased_nano - v.nano
        FROM (VALUES ${sql.join(values)}) AS v(scope, period, starts_on, nano)
        WHERE b.scope = v.scope AND b.period = v.period AND b.starts_on = v.starts_on`.execute(trx);
    }
  }
  const { rows: holders } = await sql<{ holder: string }>`
    DELETE FROM admission_holders h WHERE ${holderWhere} RETURNING holder`.execute(trx);
  report.holders = holders.length;
  return report;
}

/** Creates the missing budget rows of `keys` and locks all of them, in key order; their money by key string. */
async function lockBudgetRows(trx: Db, keys: readonly BudgetKey[]): Promise<Map<string, { settled: number; reserved: number; leased: number }>> {
  const out = new Map<string, { settled: number; reserved: number; leased: number }>();
  if (keys.length === 0) return out;
  const sorted = [...new Map(keys.map((k) => [budgetKeyString(k), k])).entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, k]) => k);
  const { rows } = await sql<MoneyRowDb & { scope: string; period: 'month' | 'day'; starts_on: string }>`
    INSERT INTO budget_periods (scope, period, starts_on)
    VALUES ${sql.join(sorted.map((k) => sql`(${k.scope}, ${k.period}, ${k.startsOn}::date)`))}
    ON CONFLICT (scope, period, starts_on) DO UPDATE SET scope = excluded.scope
    RETURNING scope, period, starts_on::text AS starts_on, settled_nano::text AS settled_nano, reserved_nano::text AS reserved_nano, leased_nano::text AS leased_nano`.execute(trx);
  for (const r of rows) {
    out.set(budgetKeyString({ scope: r.scope, period: r.period, startsOn: r.starts_on }), {
      settled: toSafeInteger(r.settled_nano, 'budget_periods.settled_nano'),
      reserved: toSafeInteger(r.reserved_nano, 'budget_periods.reserved_nano'),
      leased: toSafeInteger(r.leased_nano, 'budget_periods.leased_nano'),
    });
  }
  return out;
}

async function lockLease(trx: Db, leaseId: string): Promise<LeaseRowDb | undefined> {
  const { rows } = await sql<LeaseRowDb>`SELECT ${LEASE_COLUMNS} FROM admission_leases WHERE lease_id = ${leaseId} FOR UPDATE`.execute(trx);
  return rows[0];
}

async function readLease(trx: Db, leaseId: string): Promise<LeaseRowDb | undefined> {
  const { rows } = await sql<LeaseRowDb>`SELECT ${LEASE_COLUMNS} FROM admission_leases WHERE lease_id = ${leaseId}`.execute(trx);
  return rows[0];
}

function budgetKeyOf(r: LeaseRowDb): BudgetKey {
  return { scope: r.scope, period: r.period as 'month' | 'day', startsOn: r.starts_on as string };
}

function toBudgetLease(r: LeaseRowDb): BudgetLeaseRow {
  return {
    leaseId: r.lease_id,
    holder: r.holder,
    key: budgetKeyOf(r),
    grantedNano: toSafeInteger(r.granted_nano, 'admission_leases.granted_nano'),
    consumedNano: toSafeInteger(r.consumed_nano, 'admission_leases.consumed_nano'),
    holdUntilMs: toSafeInteger(r.hold_until_ms, 'admission_leases.hold_until_ms'),
  };
}

function toRateLease(r: LeaseRowDb): RateLeaseRow {
  return {
    leaseId: r.lease_id,
    holder: r.holder,
    scope: r.scope,
    shares: {
      requestsPerMinute: Number(r.requests_per_minute),
      tokensPerMinute: Number(r.tokens_per_minute),
      inputTokensPerMinute: Number(r.input_tokens_per_minute),
      outputTokensPerMinute: Number(r.output_tokens_per_minute),
      maxConcurrent: Number(r.slots),
    },
    holdUntilMs: toSafeInteger(r.hold_until_ms, 'admission_leases.hold_until_ms'),
  };
}

/**
 * The database side of settlements (ADR 0002 §2), for the ledger's applier: call it inside the
 * transaction that inserts the usage rows, with exactly the rows that transaction inserted
 * (`ON CONFLICT (generation_id) DO NOTHING … RETURNING` tells which), so each settlement is
 * applied once. For each item, in two statements for the whole batch:
 *
 * 1. `costNano` is added to `settled_nano` of the four budget rows of the reservation's tenant
 *    and app for its month and day (`reservation.monthStartsOn` / `dayStartsOn`, not today's),
 *    created on demand (a scope without a configured budget still records its spend);
 * 2. from each lease of `reservation.leaseIds` that still exists, m = min(cost, granted −
 *    consumed) moves from the lease to the row: `consumed_nano += m`, the lease's row's
 *    `leased_nano −= m`. So settled + leased of a budgeted row does not change. A cost above
 *    what the lease still holds (an overspend above the worst case, or a lease a dead holder's
 *    reclaim already gave back) is settled but moves nothing; a missing lease moves nothing.
 *
 * Locks rows in the store's order (budget rows by key, then leases by id). Costs are integer
 * nano-USD ≥ 0; items of several tenants may be mixed. Throws the driver's errors (the caller's
 * transaction then rolls back).
 */
export async function applyLeaseSettlements(trx: Transaction<WeirSchema>, items: readonly LeaseSettlement[]): Promise<void> {
  const charges = items.map((it, i): SettlementCharge => {
    if (!Number.isSafeInteger(it.costNano) || it.costNano < 0) throw new RangeError(`settlement cost must be a non-negative safe integer of nano-USD, got ${it.costNano}`);
    const { monthStartsOn, dayStartsOn, leaseIds, useCase } = it.reservation;
    return {
      generationId: `lease-settlement-${i}`,
      costNano: it.costNano,
      monthStartsOn,
      dayStartsOn,
      budgets: lockKeys(it.tenantId, it.appId, monthStartsOn, dayStartsOn, useCase).budgets,
      leaseIds: [...new Set(leaseIds)],
    };
  });
  // One implementation of the money a settlement moves: the ledger's applier's.
  await settleMoney(trx, charges, Date.now());
}

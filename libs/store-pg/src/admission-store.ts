/**
 * Admission's state in Postgres (ADR 0001: Postgres is the atomic arbiter): the
 * `AdmissionStore` port of `@weir/admission` over `admission_scopes`, `budget_periods` and
 * `reservations` (migration 0003), on a `pg` pool or PGlite.
 *
 * Every transaction locks the rows it decides on, always in one order — the reservation row
 * first (settle, release, reconcile), then scope rows sorted by key, then budget rows sorted
 * by (scope, period, start) — so concurrent transactions from any number of admission
 * instances serialise per tenant and app and never deadlock. Missing rows are created and
 * locked in one statement (`INSERT … ON CONFLICT DO UPDATE … RETURNING`, which takes the row
 * lock whether it inserted or not). PGlite has one connection, so its transactions simply run
 * one at a time.
 */
import { type Kysely, type Transaction, sql } from 'kysely';
import {
  type AdmissionStore,
  type BudgetKey,
  type BudgetState,
  type LedgerFacts,
  type LedgerMismatch,
  type LockKeys,
  type LockedState,
  type ReservationRecord,
  type ScopeState,
  type StateWrites,
  budgetKeyString,
  reservationLockKeys,
} from '@weir/admission';
import { toSafeInteger } from './nano-usd';
import type { WeirSchema } from './schema';

type Db = Kysely<WeirSchema> | Transaction<WeirSchema>;

interface ScopeRow {
  scope: string;
  in_flight: number;
  requests_used: number;
  tokens_used: number;
  input_tokens_used: number;
  output_tokens_used: number;
  used_at_ms: string;
}

interface BudgetRow {
  scope: string;
  period: 'month' | 'day';
  starts_on: string;
  settled_nano: string;
  reserved_nano: string;
}

interface ReservationRow {
  id: string;
  tenant_id: string;
  app_id: string;
  use_case: string | null;
  request_id: string;
  generation_id: string;
  state: ReservationRecord['state'];
  input_tokens: number;
  max_output_tokens: number;
  worst_case_nano: string;
  month_starts_on: string;
  day_starts_on: string;
  created_at: Date;
  expires_at: Date;
  settled_nano: string | null;
  settled_input_tokens: number | null;
  settled_output_tokens: number | null;
  finished_at: Date | null;
  finished_by: string | null;
}

interface LedgerRow {
  generation_id: string;
  cost_nano: string;
  input_tokens: number;
  output_tokens: number;
  uncertain?: boolean;
}

/** The columns of a {@link ReservationRow}, qualified by the table alias `r`. */
const RESERVATION_COLUMNS = sql`r.id, r.tenant_id, r.app_id, r.use_case, r.request_id, r.generation_id, r.state, r.input_tokens, r.max_output_tokens,
  r.worst_case_nano::text AS worst_case_nano, r.month_starts_on::text AS month_starts_on, r.day_starts_on::text AS day_starts_on,
  r.created_at, r.expires_at, r.settled_nano::text AS settled_nano, r.settled_input_tokens, r.settled_output_tokens, r.finished_at, r.finished_by`;

/** `usage_ledger.cost_usd` (numeric(20,9) USD) as integer nano-USD, exactly. */
const LEDGER_COST_NANO = sql`(u.cost_usd * 1000000000)::bigint`;

/**
 * Creates the Postgres admission store over an open database (see `openDatabase`). Two stores
 * over two pools on one database behave as two admission instances sharing one truth.
 * Queries throw the driver's errors (e.g. the server is away); a failed transaction changes
 * nothing.
 */
export function createPgAdmissionStore(db: Kysely<WeirSchema>): AdmissionStore {
  return {
    reserve: (keys, step) =>
      db.transaction().execute(async (trx) => {
        const out = step(await lockRows(trx, keys));
        if (out.writes) await writeRows(trx, out.writes);
        const inserts = [...(out.insert ? [out.insert] : []), ...(out.inserts ?? [])];
        if (inserts.length > 0) await insertReservations(trx, inserts);
        return out.result;
      }),

    finish: (id, transition, apply) =>
      db.transaction().execute(async (trx) => {
        const settled = transition.state === 'settled' ? transition : undefined;
        const { rows } = await sql<ReservationRow>`
          UPDATE reservations AS r SET
            state = ${transition.state},
            settled_nano = ${settled ? settled.settledNano : null}::bigint,
            settled_input_tokens = ${settled ? settled.inputTokens : null}::integer,
            settled_output_tokens = ${settled ? settled.outputTokens : null}::integer,
            finished_at = ${new Date(transition.finishedAtMs)},
            finished_by = ${transition.finishedBy}
          WHERE r.id = ${id} AND r.state = 'held'
          RETURNING ${RESERVATION_COLUMNS}`.execute(trx);
        if (rows.length === 0) return undefined;
        const held = asHeld(toRecord(rows[0]));
        await writeRows(trx, apply(held, await lockRows(trx, reservationLockKeys(held))));
        return held;
      }),

    finishMany: (items, apply) =>
      db.transaction().execute(async (trx) => {
        if (items.length === 0) return [];
        const values = items.map(({ id, transition: t }) => {
          const settled = t.state === 'settled' ? t : undefined;
          return sql`(${id}::text, ${t.state}::text, ${settled ? settled.settledNano : null}::bigint, ${settled ? settled.inputTokens : null}::integer,
            ${settled ? settled.outputTokens : null}::integer, ${new Date(t.finishedAtMs)}::timestamptz, ${t.finishedBy}::text)`;
        });
        const { rows } = await sql<ReservationRow>`
          UPDATE reservations AS r SET state = v.state, settled_nano = v.settled_nano, settled_input_tokens = v.settled_input_tokens,
            settled_output_tokens = v.settled_output_tokens, finished_at = v.finished_at, finished_by = v.finished_by
          FROM (VALUES ${sql.join(values)}) AS v(id, state, settled_nano, settled_input_tokens, settled_output_tokens, finished_at, finished_by)
          WHERE r.id = v.id AND r.state = 'held'
          RETURNING ${RESERVATION_COLUMNS}`.execute(trx);
        if (rows.length === 0) return [];
        const order = new Map(items.map((it, i) => [it.id, i]));
        const held = rows.map((r) => asHeld(toRecord(r))).sort((a, b) => (order.get(a.id) ?? 0) - (order.get(b.id) ?? 0));
        const keys = held.map(reservationLockKeys);
        const merged = {
          scopes: [...new Set(keys.flatMap((k) => k.scopes))],
          budgets: [...new Map(keys.flatMap((k) => k.budgets).map((b) => [budgetKeyString(b), b])).values()],
        };
        await writeRows(trx, apply(held, await lockRows(trx, merged)));
        return held;
      }),

    async listExpired(nowMs, limit) {
      const { rows } = await sql<ReservationRow>`
        SELECT ${RESERVATION_COLUMNS} FROM reservations r
        WHERE r.state = 'held' AND r.expires_at <= ${new Date(nowMs)}
        ORDER BY r.expires_at LIMIT ${limit}`.execute(db);
      return rows.map(toRecord);
    },

    async ledgerFacts(generationIds) {
      const out = new Map<string, LedgerFacts>();
      if (generationIds.length === 0) return out;
      const { rows } = await sql<LedgerRow>`
        SELECT u.generation_id, ${LEDGER_COST_NANO}::text AS cost_nano, u.input_tokens, u.output_tokens, u.uncertain
        FROM usage_ledger u WHERE u.generation_id = ANY(${[...generationIds]}::text[])`.execute(db);
      for (const r of rows) out.set(r.generation_id, ledgerOf(r));
      return out;
    },

    async listLedgerMismatches(sinceMs, limit): Promise<LedgerMismatch[]> {
      const { rows } = await sql<ReservationRow & { ledger_cost_nano: string; ledger_input_tokens: number; ledger_output_tokens: number }>`
        SELECT ${RESERVATION_COLUMNS}, ${LEDGER_COST_NANO}::text AS ledger_cost_nano,
          u.input_tokens AS ledger_input_tokens, u.output_tokens AS ledger_output_tokens
        FROM reservations r JOIN usage_ledger u ON u.generation_id = r.generation_id
        WHERE r.state <> 'held' AND r.finished_at >= ${new Date(sinceMs)}
          AND ${LEDGER_COST_NANO} <> coalesce(r.settled_nano, 0)
        ORDER BY r.finished_at LIMIT ${limit}`.execute(db);
      return rows.map((r) => ({
        reservation: toRecord(r),
        ledger: ledgerOf({ generation_id: r.generation_id, cost_nano: r.ledger_cost_nano, input_tokens: r.ledger_input_tokens, output_tokens: r.ledger_output_tokens }),
      }));
    },

    correct: (id, expectedNano, ledger, nowMs, apply) =>
      db.transaction().execute(async (trx) => {
        const { rows } = await sql<ReservationRow>`
          WITH before AS (
            SELECT ${RESERVATION_COLUMNS} FROM reservations r
            WHERE r.id = ${id} AND r.state <> 'held' AND coalesce(r.settled_nano, 0) = ${expectedNano}::bigint
            FOR UPDATE
          )
          UPDATE reservations r SET
            state = 'settled',
            settled_nano = ${ledger.costNano}::bigint,
            settled_input_tokens = ${ledger.inputTokens}::integer,
            settled_output_tokens = ${ledger.outputTokens}::integer,
            finished_at = ${new Date(nowMs)},
            finished_by = 'reconciler'
          FROM before WHERE r.id = before.id
          RETURNING before.*`.execute(trx);
        if (rows.length === 0) return undefined;
        const before = toRecord(rows[0]);
        await writeRows(trx, apply(before, await lockRows(trx, { scopes: [], budgets: reservationLockKeys(before).budgets })));
        return before;
      }),

    async countHeld() {
      const row = await db.selectFrom('reservations').select((eb) => eb.fn.countAll<string>().as('n')).where('state', '=', 'held').executeTakeFirstOrThrow();
      return Number(row.n);
    },
  };
}

/** Creates missing rows and locks all of them, scopes then budgets, each in key order. */
async function lockRows(trx: Db, keys: LockKeys): Promise<LockedState> {
  const scopes = new Map<string, ScopeState>();
  const budgets = new Map<string, BudgetState>();
  const scopeKeys = [...keys.scopes].sort();
  if (scopeKeys.length > 0) {
    const { rows } = await sql<ScopeRow>`
      INSERT INTO admission_scopes (scope) VALUES ${sql.join(scopeKeys.map((s) => sql`(${s})`))}
      ON CONFLICT (scope) DO UPDATE SET scope = excluded.scope
      RETURNING scope, in_flight, requests_used, tokens_used, input_tokens_used, output_tokens_used, used_at_ms::text AS used_at_ms`.execute(trx);
    for (const r of rows) scopes.set(r.scope, toScope(r));
  }
  const budgetKeys = [...keys.budgets].sort((a, b) => (budgetKeyString(a) < budgetKeyString(b) ? -1 : 1));
  if (budgetKeys.length > 0) {
    const { rows } = await sql<BudgetRow>`
      INSERT INTO budget_periods (scope, period, starts_on)
      VALUES ${sql.join(budgetKeys.map((k: BudgetKey) => sql`(${k.scope}, ${k.period}, ${k.startsOn}::date)`))}
      ON CONFLICT (scope, period, starts_on) DO UPDATE SET scope = excluded.scope
      RETURNING scope, period, starts_on::text AS starts_on, settled_nano::text AS settled_nano, reserved_nano::text AS reserved_nano`.execute(trx);
    for (const r of rows) {
      const b = toBudget(r);
      budgets.set(budgetKeyString(b), b);
    }
  }
  return { scopes, budgets };
}

/** Writes back scope and budget rows (one statement each). */
async function writeRows(trx: Db, writes: StateWrites): Promise<void> {
  if (writes.scopes.length > 0) {
    const values = writes.scopes.map(
      (s) =>
        sql`(${s.scope}::text, ${s.inFlight}::integer, ${s.requestsUsed}::double precision, ${s.tokensUsed}::double precision,
          ${s.inputTokensUsed}::double precision, ${s.outputTokensUsed}::double precision, ${Math.round(s.usedAtMs)}::bigint)`,
    );
    await sql`
      UPDATE admission_scopes AS s SET in_flight = v.in_flight, requests_used = v.requests_used, tokens_used = v.tokens_used,
        input_tokens_used = v.input_tokens_used, output_tokens_used = v.output_tokens_used, used_at_ms = v.used_at_ms
      FROM (VALUES ${sql.join(values)}) AS v(scope, in_flight, requests_used, tokens_used, input_tokens_used, output_tokens_used, used_at_ms)
      WHERE s.scope = v.scope`.execute(trx);
  }
  if (writes.budgets.length > 0) {
    const values = writes.budgets.map((b) => sql`(${b.scope}::text, ${b.period}::text, ${b.startsOn}::date, ${b.settledNano}::bigint, ${b.reservedNano}::bigint)`);
    await sql`
      UPDATE budget_periods AS b SET settled_nano = v.settled_nano, reserved_nano = v.reserved_nano
      FROM (VALUES ${sql.join(values)}) AS v(scope, period, starts_on, settled_nano, reserved_nano)
      WHERE b.scope = v.scope AND b.period = v.period AND b.starts_on = v.starts_on`.execute(trx);
  }
}

/** Inserts held reservations, one statement. */
async function insertReservations(trx: Db, records: readonly ReservationRecord[]): Promise<void> {
  await trx
    .insertInto('reservations')
    .values(records.map((r) => ({
      id: r.id,
      tenant_id: r.tenantId,
      app_id: r.appId,
      use_case: r.useCase ?? null,
      request_id: r.requestId,
      generation_id: r.generationId,
      state: r.state,
      input_tokens: r.inputTokens,
      max_output_tokens: r.maxOutputTokens,
      worst_case_nano: r.worstCaseNano,
      month_starts_on: r.monthStartsOn,
      day_starts_on: r.dayStartsOn,
      created_at: new Date(r.createdAtMs),
      expires_at: new Date(r.expiresAtMs),
    })) as never)
    .execute();
}

function toScope(r: ScopeRow): ScopeState {
  return {
    scope: r.scope,
    inFlight: r.in_flight,
    requestsUsed: r.requests_used,
    tokensUsed: r.tokens_used,
    inputTokensUsed: r.input_tokens_used,
    outputTokensUsed: r.output_tokens_used,
    usedAtMs: toSafeInteger(r.used_at_ms, 'admission_scopes.used_at_ms'),
  };
}

function toBudget(r: BudgetRow): BudgetState {
  return {
    scope: r.scope,
    period: r.period,
    startsOn: r.starts_on,
    settledNano: toSafeInteger(r.settled_nano, 'budget_periods.settled_nano'),
    reservedNano: toSafeInteger(r.reserved_nano, 'budget_periods.reserved_nano'),
  };
}

function toRecord(r: ReservationRow): ReservationRecord {
  const out: ReservationRecord = {
    id: r.id,
    tenantId: r.tenant_id,
    appId: r.app_id,
    ...(r.use_case !== null && r.use_case !== undefined ? { useCase: r.use_case } : {}),
    requestId: r.request_id,
    generationId: r.generation_id,
    state: r.state,
    inputTokens: r.input_tokens,
    maxOutputTokens: r.max_output_tokens,
    worstCaseNano: toSafeInteger(r.worst_case_nano, 'reservations.worst_case_nano'),
    monthStartsOn: r.month_starts_on,
    dayStartsOn: r.day_starts_on,
    createdAtMs: r.created_at.getTime(),
    expiresAtMs: r.expires_at.getTime(),
  };
  if (r.settled_nano !== null) out.settledNano = toSafeInteger(r.settled_nano, 'reservations.settled_nano');
  if (r.settled_input_tokens !== null) out.settledInputTokens = r.settled_input_tokens;
  if (r.settled_output_tokens !== null) out.settledOutputTokens = r.settled_output_tokens;
  if (r.finished_at) out.finishedAtMs = r.finished_at.getTime();
  if (r.finished_by === 'gateway' || r.finished_by === 'reconciler') out.finishedBy = r.finished_by;
  return out;
}

/** The record as it was while held (RETURNING gives the row after the transition). */
function asHeld(r: ReservationRecord): ReservationRecord {
  const { settledNano: _s, settledInputTokens: _i, settledOutputTokens: _o, finishedAtMs: _f, finishedBy: _b, ...held } = r;
  return { ...held, state: 'held' };
}

function ledgerOf(r: LedgerRow): LedgerFacts {
  return {
    costNano: toSafeInteger(r.cost_nano, 'usage_ledger.cost_usd (nano-USD)'),
    inputTokens: r.input_tokens,
    outputTokens: r.output_tokens,
    ...(r.uncertain ? { uncertain: true } : {}),
  };
}

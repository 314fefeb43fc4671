/**
 * The settlement applier (ADR 0002 §2): what a settlement journal's entries do to the ledger's
 * database, one transaction per batch and each generation exactly once.
 */
import { type Kysely, type Transaction, sql } from 'kysely';
import type {
  IdempotencySettlement,
  OverspendEvent,
  SettlementApplier,
  SettlementApplyResult,
  SettlementBatch,
  SettlementEntry,
  UsageRecord,
} from '@weir/core';
import { type ChargeTotals, type SettlementCharge, settlementCharge, sumCharges } from '@weir/ledger';
import { toSafeInteger } from './nano-usd';
import type { WeirSchema } from './schema';
import { type Statement, type StatementRunner, executeStatements, statementRunnerFor } from './statement-runner';
import { storedAttempts } from './usage-repository';

type Trx = Transaction<WeirSchema>;

/** Options of {@link createPgSettlementApplier}. */
export interface PgSettlementApplierOptions {
  /** Epoch ms for `admission_leases.updated_at_ms`; default `Date.now`. */
  now?: () => number;
}

/**
 * How often a batch whose usage insert met rows already stored is tried again (each time without
 * the generations found stored) before the error is thrown. Only a concurrent applier inserting
 * the same generations between the look-up and the insert makes a second try fail too.
 */
const DUPLICATE_TRIES = 4;

/**
 * Creates the settlement applier on an open database (PGlite or Postgres, migration 0010).
 *
 * `apply(batch)` runs one transaction of at most five statements whatever the batch size — on
 * PGlite one call into the database (see `statement-runner.ts`), on Postgres one round trip per
 * statement:
 * 1. insert the usage rows of the batch's `settle` items (within a batch the first item of a
 *    generation wins) — a plain `INSERT`, the rows travelling as one JSON array of positional
 *    arrays;
 * 2. their cost added to `budget_periods.settled_nano` of the four rows (tenant/app × month/day
 *    of the reservation's periods, of the finish time when nothing was reserved), summed per
 *    row, rows created on demand, locked in key order;
 * 3. their cost moved from their budget leases, summed per lease, in lease-id order:
 *    `consumed_nano += moved` and the lease's row `leased_nano -= moved`, where moved is the
 *    cost up to what the lease still holds (granted − consumed). A lease that no longer exists
 *    (reclaimed) or holds less than the cost yields an {@link OverspendEvent}: the cost stays
 *    settled on the rows (money spent is spent), the excess is reported;
 * 4. the idempotency keys: their results (`done`, or `interrupted` with its message), and the
 *    batch's `interrupted` items (no usage row);
 * 5. the journal's position (never moved back).
 *
 * Exactly once: a generation already stored makes the whole transaction fail on the primary key
 * (nothing is applied); the applier then looks up which of the batch's generations are stored,
 * counts them as duplicates and applies the rest — their rows, money and keys — in a new
 * transaction. So a duplicate (a batch applied again, an entry journaled twice) costs a second
 * transaction, and every other batch pays for no conflict check and no `RETURNING`.
 *
 * A key is written only while the generation holds it: an update where `generation_id`
 * matches, or — when the item carries the claim's body hash and route — an insert if no row
 * exists. A key taken over by another generation is left alone. A duplicate's key is not touched.
 */
export function createPgSettlementApplier(db: Kysely<WeirSchema>, options: PgSettlementApplierOptions = {}): SettlementApplier {
  const now = options.now ?? Date.now;
  const runner = statementRunnerFor(db);
  return {
    apply: (batch) => applyBatch(db, runner, batch, now()),

    async position(journal) {
      const row = await db
        .selectFrom('journal_positions')
        .select([sql<string>`segment::text`.as('segment'), sql<string>`"offset"::text`.as('offset')])
        .where('journal', '=', journal)
        .executeTakeFirst();
      return row ? { segment: toSafeInteger(row.segment, 'journal_positions.segment'), offset: toSafeInteger(row.offset, 'journal_positions.offset') } : undefined;
    },
  };
}

async function applyBatch(db: Kysely<WeirSchema>, runner: StatementRunner, batch: SettlementBatch, nowMs: number): Promise<SettlementApplyResult> {
  // The first settle item per generation wins (the ledger keeps the first entry per generation).
  const settles = new Map<string, SettlementEntry>();
  const interrupted: IdempotencySettlement[] = [];
  let duplicates = 0;
  for (const item of batch.items) {
    if (item.kind === 'interrupted') interrupted.push(item.idempotency);
    else if (settles.has(item.entry.usage.generationId)) duplicates++;
    else settles.set(item.entry.usage.generationId, item.entry);
  }

  let entries = [...settles.values()];
  for (let tries = 1; ; tries++) {
    const plan = planBatch(entries, interrupted, batch, nowMs);
    try {
      const results = await runner.run(plan.statements);
      const leaseRows = plan.leaseStatement === undefined ? [] : results[plan.leaseStatement].rows;
      const written = plan.keyStatement === undefined ? 0 : Number(results[plan.keyStatement].rows[0]?.written ?? 0);
      return { inserted: entries.length, duplicates, idempotencyWritten: written, overspends: overspendsOf(plan.totals, leaseRows) };
    } catch (error) {
      if (!isStoredGeneration(error) || tries >= DUPLICATE_TRIES) throw error;
      const stored = await storedGenerations(db, entries.map((e) => e.usage.generationId));
      duplicates += stored.size;
      entries = entries.filter((e) => !stored.has(e.usage.generationId));
    }
  }
}

/** True for the usage insert's primary-key violation: a generation of the batch is already stored. */
function isStoredGeneration(error: unknown): boolean {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return e?.code === '23505' && e.constraint === 'usage_ledger_pkey';
}

async function storedGenerations(db: Kysely<WeirSchema>, generationIds: string[]): Promise<Set<string>> {
  if (generationIds.length === 0) return new Set();
  const rows = await db.selectFrom('usage_ledger').select('generation_id').where('generation_id', 'in', generationIds).execute();
  return new Set(rows.map((r) => r.generation_id));
}

interface BatchPlan {
  statements: Statement[];
  totals: ChargeTotals;
  /** Index in `statements` of the lease statement / the key statement, when present. */
  leaseStatement?: number;
  keyStatement?: number;
}

function planBatch(entries: readonly SettlementEntry[], interrupted: readonly IdempotencySettlement[], batch: SettlementBatch, nowMs: number): BatchPlan {
  const statements: Statement[] = [];
  const charges: SettlementCharge[] = [];
  const keys: KeyWrite[] = [];
  if (entries.length > 0) {
    const rows: unknown[] = [];
    for (const e of entries) {
      const charge = settlementCharge(e.usage);
      charges.push(charge);
      rows.push(usageRow(e.usage, charge));
      if (e.idempotency) keys.push(keyWrite(e.idempotency));
    }
    statements.push({ ...INSERT_USAGE, values: [pgJson(rows)] });
  }
  const totals = sumCharges(charges);
  const money = moneyStatements(totals, nowMs);
  const plan: BatchPlan = { statements, totals };
  statements.push(...money.statements);
  if (money.leaseStatement !== undefined) plan.leaseStatement = statements.length - money.statements.length + money.leaseStatement;
  for (const s of interrupted) keys.push(keyWrite(s));
  if (keys.length > 0) {
    plan.keyStatement = statements.length;
    statements.push({ ...WRITE_KEYS, values: [pgJson(uniqueKeys(keys))] });
  }
  if (batch.position) statements.push({ ...STORE_POSITION, values: [batch.journal, String(batch.position.segment), String(batch.position.offset)] });
  return plan;
}

// ---- Usage rows -------------------------------------------------------------------------------

/**
 * The usage insert. Each row is a positional JSON array (see {@link usageRow}); positional
 * rather than objects because turning JSON into a row is most of a row's cost on PGlite, and it
 * grows with the bytes parsed (measured: ~14 µs a row as positional `jsonb`, ~25 µs through
 * `json_populate_recordset` of keyed objects).
 */
const INSERT_USAGE = {
  name: 'weir_settle_usage_v4',
  text: `INSERT INTO usage_ledger (generation_id, request_id, tenant_id, app_id, api_key_id, route, model_alias, model_revision,
      input_tokens, output_tokens, cached_input_tokens, cost_usd, status, finish_reason, error_code, queue_ms, ttft_ms, total_ms,
      started_at, finished_at, uncertain, use_case, usage_source, reservation_id, lease_ids, budget_month, budget_day, attempts,
      tenant_uid, app_uid, cache_hit, cache_write_input_tokens, reasoning_tokens)
    SELECT r->>0, coalesce(r->>1, r->>0), r->>2, r->>3, r->>4, r->>5, r->>6, r->>7,
      (r->>8)::int, (r->>9)::int, (r->>10)::int, (r->>11)::numeric * 0.000000001, r->>12, r->>13, r->>14, (r->>15)::int, (r->>16)::int, (r->>17)::int,
      to_timestamp((r->>18)::float8 / 1000), to_timestamp((r->>19)::float8 / 1000), (r->>20)::boolean, r->>21, r->>22, r->>23, (r->>24)::text[],
      (r->>25)::date, (r->>26)::date, nullif(r->27, 'null'::jsonb), r->>28, r->>29, r->>30,
      (r->>31)::int, (r->>32)::int
    FROM jsonb_array_elements($1::jsonb) AS r`,
};

/**
 * A usage row for {@link INSERT_USAGE}: `[generation_id, request_id (null when it is the
 * generation id), tenant, app, key, route, alias, revision, input, output, cached input, cost
 * (integer nano-USD), status, finish reason, error code, queue ms, ttft ms, total ms, started
 * (epoch ms), finished (epoch ms), uncertain, use case, usage source, reservation id, lease ids
 * (a Postgres array literal), budget month, budget day, attempts, tenant internal id, app internal
 * id, cache tier (null for a live answer), cache-write input tokens, reasoning tokens]` (the internal ids null when the record names none: then the slugs are the internal ids). Timings are rounded to whole
 * ms; the budget periods are the ones the charge used.
 */
function usageRow(u: UsageRecord, charge: SettlementCharge): unknown[] {
  const attempts = storedAttempts(u);
  return [
    u.generationId,
    u.requestId === u.generationId ? null : u.requestId,
    u.tenantId,
    u.appId,
    u.apiKeyId,
    u.route,
    u.modelAlias,
    u.modelRevision,
    u.inputTokens,
    u.outputTokens,
    u.cachedInputTokens,
    u.costNanoUsd,
    u.status,
    u.finishReason,
    u.errorCode,
    // The relay measures with performance.now(): fractional ms are rounded to the columns' integers.
    Math.round(u.queueMs),
    u.ttftMs === null ? null : Math.round(u.ttftMs),
    Math.round(u.totalMs),
    u.startedAt.getTime(),
    u.finishedAt.getTime(),
    u.uncertain ?? false,
    u.useCase ?? null,
    u.usageSource ?? 'reported',
    u.reservation?.reservationId ?? null,
    u.reservation ? pgTextArray(u.reservation.leaseIds) : null,
    charge.monthStartsOn,
    charge.dayStartsOn,
    attempts ?? null,
    u.tenantUid ?? null,
    u.appUid ?? null,
    u.cacheHit ?? null,
    u.cacheWriteInputTokens ?? 0,
    u.reasoningTokens ?? 0,
  ];
}

/** A Postgres array literal of text (`{"a","b"}`): every element quoted, `"` and `\` escaped. */
function pgTextArray(values: readonly string[]): string {
  return `{${values.map((v) => `"${v.replace(/["\\]/g, '\\$&')}"`).join(',')}}`;
}

/** `\u0000` escapes preceded by an even number of backslashes: NUL characters, not literal text. */
const JSON_NUL = /(?<=(?:^|[^\\])(?:\\\\)*)\\u0000/g;

/**
 * JSON text Postgres accepts: `jsonb` and `text` cannot hold NUL (U+0000), which model output
 * (a retained result) may contain; it becomes U+FFFD rather than fail the whole batch.
 */
export function pgJson(value: unknown): string {
  const json = JSON.stringify(value);
  return json.includes('\\u0000') ? json.replace(JSON_NUL, '\\ufffd') : json;
}

// ---- Money ------------------------------------------------------------------------------------

/**
 * Adds costs to the budget rows' settled spend, in the order given (the domain's lock order:
 * `sumCharges` sorts by `budgetKeyString`). `$1`: `[[scope, period, starts_on, nano], …]`.
 */
const SETTLE_BUDGETS = {
  name: 'weir_settle_budgets_v1',
  text: `INSERT INTO budget_periods (scope, period, starts_on, settled_nano)
    SELECT v->>0, v->>1, (v->>2)::date, (v->>3)::bigint FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(v, n) ORDER BY n
    ON CONFLICT (scope, period, starts_on) DO UPDATE SET settled_nano = budget_periods.settled_nano + excluded.settled_nano`,
};

/**
 * Moves costs from budget leases, locked in lease-id order, and takes what moved off their
 * rows' leased spend; returns each lease that still exists with what moved from it.
 * `$1`: `[[lease_id, nano], …]` sorted by lease id; `$2`: now (epoch ms).
 * `greatest(…, 0)`: a row whose leased spend is already lower than its leases say (a fault
 * elsewhere) must not wedge the ledger on the check constraint; reconciliation finds it.
 */
const MOVE_FROM_LEASES = {
  name: 'weir_settle_leases_v1',
  text: `WITH v AS (SELECT e->>0 AS lease_id, (e->>1)::bigint AS nano FROM jsonb_array_elements($1::jsonb) AS e),
    locked AS (
      SELECT l.lease_id, l.scope, l.period, l.starts_on, least(v.nano, greatest(l.granted_nano - l.consumed_nano, 0)) AS moved
      FROM admission_leases l JOIN v ON v.lease_id = l.lease_id
      WHERE l.kind = 'budget'
      ORDER BY l.lease_id
      FOR UPDATE OF l
    ),
    moves AS (
      UPDATE admission_leases l SET consumed_nano = l.consumed_nano + locked.moved, updated_at_ms = $2::bigint
      FROM locked WHERE l.lease_id = locked.lease_id
      RETURNING l.lease_id, locked.scope, locked.period, locked.starts_on, locked.moved
    ),
    rows AS (
      UPDATE budget_periods b SET leased_nano = greatest(b.leased_nano - m.nano, 0)
      FROM (SELECT scope, period, starts_on, sum(moved) AS nano FROM moves GROUP BY scope, period, starts_on) m
      WHERE m.nano > 0 AND b.scope = m.scope AND b.period = m.period AND b.starts_on = m.starts_on
      RETURNING 1
    )
    SELECT lease_id, moved::text AS moved FROM moves`,
};

/**
 * The statements that move a batch's money (budget rows, then leases — the order the lease
 * store locks in, so the two never deadlock), and which of them returns the lease moves.
 */
function moneyStatements(totals: ChargeTotals, nowMs: number): { statements: Statement[]; leaseStatement?: number } {
  const statements: Statement[] = [];
  if (totals.budgets.length > 0) {
    statements.push({ ...SETTLE_BUDGETS, values: [JSON.stringify(totals.budgets.map((b) => [b.scope, b.period, b.startsOn, b.nano]))] });
  }
  if (totals.leases.length === 0) return { statements };
  statements.push({ ...MOVE_FROM_LEASES, values: [JSON.stringify(totals.leases.map((l) => [l.leaseId, l.nano])), String(nowMs)] });
  return { statements, leaseStatement: statements.length - 1 };
}

/** What each lease could not cover: gone (reclaimed) or holding less than its share of the batch. */
function overspendsOf(totals: ChargeTotals, leaseRows: readonly Record<string, string | null>[]): OverspendEvent[] {
  const moved = new Map(leaseRows.map((r) => [r.lease_id as string, toSafeInteger(r.moved, 'moved nano')]));
  const overspends: OverspendEvent[] = [];
  for (const l of totals.leases) {
    const m = moved.get(l.leaseId);
    if (m === undefined) overspends.push({ leaseId: l.leaseId, reason: 'lease_gone', excessNano: l.nano, generationIds: l.generationIds });
    else if (m < l.nano) overspends.push({ leaseId: l.leaseId, reason: 'lease_exhausted', excessNano: l.nano - m, generationIds: l.generationIds });
  }
  return overspends;
}

/**
 * Adds the costs to the budget rows' settled spend and moves them from the leases, inside the
 * caller's transaction (the lease store's `applyLeaseSettlements`): the applier's own statements,
 * run one by one.
 */
export async function settleMoney(trx: Trx, charges: readonly SettlementCharge[], nowMs: number): Promise<OverspendEvent[]> {
  const totals = sumCharges(charges);
  const money = moneyStatements(totals, nowMs);
  const results = await executeStatements(trx, money.statements);
  return overspendsOf(totals, money.leaseStatement === undefined ? [] : results[money.leaseStatement].rows);
}

// ---- Idempotency keys and position ------------------------------------------------------------

interface KeyWrite {
  tenantId: string;
  key: string;
  generationId: string;
  state: 'done' | 'interrupted';
  /** The `result` column's value. */
  result: unknown;
  expiresAtMs: number;
  bodySha256?: string;
  route?: string;
}

/**
 * The `idempotency_keys` write of a settlement. `done` keeps the result as the JSON of a
 * `RetainedResult`; `interrupted` keeps `{"interrupted": {"generationId", "message"}}`, which
 * `createPgIdempotencyStore` reads back as the claim's `interruption`.
 */
function keyWrite(s: IdempotencySettlement): KeyWrite {
  const o = s.outcome;
  const base = { tenantId: s.tenantId, key: s.key, expiresAtMs: s.retainUntilMs, ...(s.bodySha256 && s.route ? { bodySha256: s.bodySha256, route: s.route } : {}) };
  return o.kind === 'result'
    ? { ...base, generationId: o.result.generationId, state: 'done', result: o.result }
    : { ...base, generationId: o.generationId, state: 'interrupted', result: { interrupted: { generationId: o.generationId, message: o.message } } };
}

/** One write per key (the last wins), so the statement never touches a row twice; as `WRITE_KEYS` rows. */
function uniqueKeys(keys: readonly KeyWrite[]): unknown[] {
  const unique = new Map(keys.map((k) => [`${k.tenantId}\u0000${k.key}`, k]));
  return [...unique.values()].map((k) => [k.tenantId, k.key, k.generationId, k.state, k.result, k.expiresAtMs, k.bodySha256 ?? null, k.route ?? null]);
}

/**
 * Writes keys still held by their generation — or absent, when the entry carries the claim's
 * body hash and route (a claim held in memory) — and returns how many were written.
 * `$1`: `[[tenant, key, generation, state, result, expires (epoch ms), body sha256 | null, route | null], …]`.
 */
const WRITE_KEYS = {
  name: 'weir_settle_keys_v1',
  text: `WITH v AS (
      SELECT e->>0 AS tenant_id, e->>1 AS request_id, e->>2 AS generation_id, e->>3 AS state, e->4 AS result,
        to_timestamp((e->>5)::float8 / 1000) AS expires_at, e->>6 AS body_sha256, e->>7 AS route
      FROM jsonb_array_elements($1::jsonb) AS e
    ),
    claimed AS (
      INSERT INTO idempotency_keys (tenant_id, request_id, body_sha256, generation_id, route, state, result, expires_at)
      SELECT tenant_id, request_id, body_sha256, generation_id, route, state, result, expires_at FROM v WHERE body_sha256 IS NOT NULL
      ON CONFLICT (tenant_id, request_id) DO UPDATE SET state = excluded.state, result = excluded.result, expires_at = excluded.expires_at, holder = NULL
      WHERE idempotency_keys.generation_id = excluded.generation_id
      RETURNING 1
    ),
    held AS (
      UPDATE idempotency_keys AS k SET state = v.state, result = v.result, expires_at = v.expires_at, holder = NULL
      FROM v
      WHERE v.body_sha256 IS NULL AND k.tenant_id = v.tenant_id AND k.request_id = v.request_id AND k.generation_id = v.generation_id
      RETURNING 1
    )
    SELECT ((SELECT count(*) FROM claimed) + (SELECT count(*) FROM held))::text AS written`,
};

/** Records a journal's position; never moves it back. `$1` journal, `$2` segment, `$3` offset. */
const STORE_POSITION = {
  name: 'weir_settle_position_v1',
  text: `INSERT INTO journal_positions (journal, segment, "offset", updated_at)
    VALUES ($1, $2::bigint, $3::bigint, now())
    ON CONFLICT (journal) DO UPDATE SET segment = excluded.segment, "offset" = excluded."offset", updated_at = excluded.updated_at
    WHERE (journal_positions.segment, journal_positions."offset") < (excluded.segment, excluded."offset")`,
};

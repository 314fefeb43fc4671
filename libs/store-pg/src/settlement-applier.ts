/**
 * The settlement applier (ADR 0002 §2): what a settlement journal's entries do to the ledger's
 * database, one transaction per batch and each generation exactly once.
 */
import { type Kysely, type Transaction, sql } from 'kysely';
import type {
  IdempotencySettlement,
  JournalPosition,
  OverspendEvent,
  SettlementApplier,
  SettlementApplyResult,
  SettlementBatch,
  SettlementEntry,
} from '@weir/core';
import { type SettlementCharge, settlementCharge, sumCharges } from '@weir/ledger';
import { toSafeInteger } from './nano-usd';
import type { WeirSchema } from './schema';
import { attemptRows, toRow } from './usage-repository';

type Trx = Transaction<WeirSchema>;

/** Options of {@link createPgSettlementApplier}. */
export interface PgSettlementApplierOptions {
  /** Epoch ms for `admission_leases.updated_at_ms`; default `Date.now`. */
  now?: () => number;
}

/**
 * Creates the settlement applier on an open database (PGlite or Postgres, migration 0010).
 *
 * `apply(batch)` runs one transaction:
 * 1. insert the usage rows of the batch's `settle` items (`ON CONFLICT (generation_id) DO
 *    NOTHING RETURNING generation_id`; within a batch the first item of a generation wins);
 * 2. only for the rows actually inserted:
 *    - their `usage_attempts`;
 *    - their cost added to `budget_periods.settled_nano` of the four rows (tenant/app ×
 *      month/day of the reservation's periods, of the finish time when nothing was reserved),
 *      summed per row, rows created on demand, locked in key order;
 *    - their cost moved from their budget leases, summed per lease, in lease-id order:
 *      `consumed_nano += moved` and the lease's row `leased_nano -= moved`, where moved is the
 *      cost up to what the lease still holds (granted − consumed). A lease that no longer
 *      exists (reclaimed) or holds less than the cost yields an {@link OverspendEvent}: the
 *      cost stays settled on the rows (money spent is spent), the excess is reported;
 *    - their idempotency results (`done` with the result, or `interrupted` with its message);
 * 3. the batch's `interrupted` items: the key becomes `interrupted` (no usage row);
 * 4. the journal's position (never moved back).
 *
 * A key is written only while the generation holds it: an update where `generation_id`
 * matches, or — when the item carries the claim's body hash and route — an insert if no row
 * exists. A key taken over by another generation is left alone.
 *
 * Statements per batch: at most eight (usage, attempts, budget rows, leases, leased spend,
 * keys by update, keys by upsert, position), whatever the batch size.
 */
export function createPgSettlementApplier(db: Kysely<WeirSchema>, options: PgSettlementApplierOptions = {}): SettlementApplier {
  const now = options.now ?? Date.now;
  return {
    apply: (batch) => db.transaction().execute((trx) => applyBatch(trx, batch, now())),

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

async function applyBatch(trx: Trx, batch: SettlementBatch, nowMs: number): Promise<SettlementApplyResult> {
  // The first settle item per generation wins (the ledger keeps the first entry per generation).
  const settles = new Map<string, { entry: SettlementEntry; charge: SettlementCharge }>();
  const interrupted: IdempotencySettlement[] = [];
  let duplicates = 0;
  for (const item of batch.items) {
    if (item.kind === 'interrupted') interrupted.push(item.idempotency);
    else if (settles.has(item.entry.usage.generationId)) duplicates++;
    else settles.set(item.entry.usage.generationId, { entry: item.entry, charge: settlementCharge(item.entry.usage) });
  }

  const inserted = await insertUsage(trx, [...settles.values()]);
  duplicates += settles.size - inserted.size;
  const applied = [...settles.values()].filter((s) => inserted.has(s.entry.usage.generationId));

  const attempts = applied.flatMap((s) => attemptRows(s.entry.usage));
  if (attempts.length > 0) {
    await sql`
      INSERT INTO usage_attempts (${columns(attempts[0])})
      SELECT ${columns(attempts[0])} FROM jsonb_populate_recordset(NULL::usage_attempts, ${pgJson(attempts)}::jsonb)
      ON CONFLICT (generation_id, attempt) DO NOTHING`.execute(trx);
  }

  const overspends = await settleMoney(trx, applied.map((s) => s.charge), nowMs);

  const keys = [...applied.flatMap((s) => (s.entry.idempotency ? [keyWrite(s.entry.idempotency)] : [])), ...interrupted.map(keyWrite)];
  const idempotencyWritten = await writeKeys(trx, keys);

  if (batch.position) await storePosition(trx, batch.journal, batch.position);
  return { inserted: inserted.size, duplicates, idempotencyWritten, overspends };
}

/**
 * Inserts usage rows; returns the generation ids actually inserted. The rows travel as one JSON
 * parameter (`jsonb_populate_recordset`) rather than 27 bound parameters a row: on PGlite that
 * roughly halves the statement's cost, and no batch can reach Postgres's 65,535-parameter limit.
 */
async function insertUsage(trx: Trx, settles: { entry: SettlementEntry; charge: SettlementCharge }[]): Promise<Set<string>> {
  const inserted = new Set<string>();
  if (settles.length === 0) return inserted;
  const rows = settles.map(({ entry, charge }) => toRow(entry.usage, charge));
  const { rows: out } = await sql<{ generation_id: string }>`
    INSERT INTO usage_ledger (${columns(rows[0])})
    SELECT ${columns(rows[0])} FROM jsonb_populate_recordset(NULL::usage_ledger, ${pgJson(rows)}::jsonb)
    ON CONFLICT (generation_id) DO NOTHING
    RETURNING generation_id`.execute(trx);
  for (const r of out) inserted.add(r.generation_id);
  return inserted;
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

/** The column list of a row object (every row of a batch has the same keys). */
function columns(row: object) {
  return sql.join(Object.keys(row).map((k) => sql.ref(k)));
}

interface LeaseMove {
  lease_id: string;
  scope: string;
  period: 'month' | 'day';
  starts_on: string;
  moved: string;
}

/**
 * Adds the costs to the budget rows' settled spend and moves them from the leases. Locks budget
 * rows first (key order: the insert takes them in VALUES order), then leases (id order), the
 * order the lease store takes them in, so the two never deadlock.
 */
export async function settleMoney(trx: Trx, charges: readonly SettlementCharge[], nowMs: number): Promise<OverspendEvent[]> {
  const totals = sumCharges(charges);
  if (totals.budgets.length > 0) {
    const values = totals.budgets.map((b) => sql`(${b.scope}::text, ${b.period}::text, ${b.startsOn}::date, ${b.nano}::bigint)`);
    await sql`
      INSERT INTO budget_periods (scope, period, starts_on, settled_nano)
      VALUES ${sql.join(values)}
      ON CONFLICT (scope, period, starts_on) DO UPDATE SET settled_nano = budget_periods.settled_nano + excluded.settled_nano`.execute(trx);
  }
  if (totals.leases.length === 0) return [];

  const values = totals.leases.map((l) => sql`(${l.leaseId}::text, ${l.nano}::bigint)`);
  const { rows } = await sql<LeaseMove>`
    WITH v(lease_id, nano) AS (VALUES ${sql.join(values)}),
    locked AS (
      SELECT l.lease_id, l.scope, l.period, l.starts_on,
        least(v.nano, greatest(l.granted_nano - l.consumed_nano, 0)) AS moved
      FROM admission_leases l JOIN v ON v.lease_id = l.lease_id
      WHERE l.kind = 'budget'
      ORDER BY l.lease_id
      FOR UPDATE OF l
    )
    UPDATE admission_leases l SET consumed_nano = l.consumed_nano + locked.moved, updated_at_ms = ${nowMs}::bigint
    FROM locked WHERE l.lease_id = locked.lease_id
    RETURNING l.lease_id, locked.scope, locked.period, locked.starts_on::text AS starts_on, locked.moved::text AS moved`.execute(trx);

  const moves = new Map(rows.map((r) => [r.lease_id, r]));
  const overspends: OverspendEvent[] = [];
  const byRow = new Map<string, { scope: string; period: string; startsOn: string; nano: number }>();
  for (const l of totals.leases) {
    const m = moves.get(l.leaseId);
    if (!m) {
      overspends.push({ leaseId: l.leaseId, reason: 'lease_gone', excessNano: l.nano, generationIds: l.generationIds });
      continue;
    }
    const moved = toSafeInteger(m.moved, 'moved nano');
    if (moved < l.nano) overspends.push({ leaseId: l.leaseId, reason: 'lease_exhausted', excessNano: l.nano - moved, generationIds: l.generationIds });
    if (moved === 0) continue;
    const k = `${m.scope}|${m.period}|${m.starts_on}`;
    const row = byRow.get(k);
    if (row) row.nano += moved;
    else byRow.set(k, { scope: m.scope, period: m.period, startsOn: m.starts_on, nano: moved });
  }
  if (byRow.size > 0) {
    const rowValues = [...byRow.entries()]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([, r]) => sql`(${r.scope}::text, ${r.period}::text, ${r.startsOn}::date, ${r.nano}::bigint)`);
    // greatest(…, 0): a row whose leased spend is already lower than its leases say (a fault
    // elsewhere) must not wedge the ledger on the check constraint; reconciliation finds it.
    await sql`
      UPDATE budget_periods AS b SET leased_nano = greatest(b.leased_nano - v.nano, 0)
      FROM (VALUES ${sql.join(rowValues)}) AS v(scope, period, starts_on, nano)
      WHERE b.scope = v.scope AND b.period = v.period AND b.starts_on = v.starts_on`.execute(trx);
  }
  return overspends;
}

interface KeyWrite {
  tenantId: string;
  key: string;
  generationId: string;
  state: 'done' | 'interrupted';
  /** The `result` column's JSON. */
  result: string;
  expiresAt: Date;
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
  const base = { tenantId: s.tenantId, key: s.key, expiresAt: new Date(s.retainUntilMs), ...(s.bodySha256 && s.route ? { bodySha256: s.bodySha256, route: s.route } : {}) };
  return o.kind === 'result'
    ? { ...base, generationId: o.result.generationId, state: 'done', result: pgJson(o.result) }
    : { ...base, generationId: o.generationId, state: 'interrupted', result: pgJson({ interrupted: { generationId: o.generationId, message: o.message } }) };
}

/** Writes keys still held by their generation (or absent, when the claim is known); returns how many. */
async function writeKeys(trx: Trx, keys: KeyWrite[]): Promise<number> {
  if (keys.length === 0) return 0;
  // One write per key (the last wins), so a statement never touches a row twice.
  const unique = [...new Map(keys.map((k) => [`${k.tenantId}\u0000${k.key}`, k])).values()];
  const withClaim = unique.filter((k) => k.bodySha256 !== undefined);
  const withoutClaim = unique.filter((k) => k.bodySha256 === undefined);
  let written = 0;
  if (withClaim.length > 0) {
    const values = withClaim.map(
      (k) => sql`(${k.tenantId}::text, ${k.key}::text, ${k.bodySha256}::text, ${k.generationId}::text, ${k.route}::text, ${k.state}::text, ${k.result}::jsonb, ${k.expiresAt}::timestamptz)`,
    );
    const { rows } = await sql<{ request_id: string }>`
      INSERT INTO idempotency_keys (tenant_id, request_id, body_sha256, generation_id, route, state, result, expires_at)
      VALUES ${sql.join(values)}
      ON CONFLICT (tenant_id, request_id) DO UPDATE SET state = excluded.state, result = excluded.result, expires_at = excluded.expires_at, holder = NULL
      WHERE idempotency_keys.generation_id = excluded.generation_id
      RETURNING request_id`.execute(trx);
    written += rows.length;
  }
  if (withoutClaim.length > 0) {
    const values = withoutClaim.map(
      (k) => sql`(${k.tenantId}::text, ${k.key}::text, ${k.generationId}::text, ${k.state}::text, ${k.result}::jsonb, ${k.expiresAt}::timestamptz)`,
    );
    const { rows } = await sql<{ request_id: string }>`
      UPDATE idempotency_keys AS k SET state = v.state, result = v.result, expires_at = v.expires_at, holder = NULL
      FROM (VALUES ${sql.join(values)}) AS v(tenant_id, request_id, generation_id, state, result, expires_at)
      WHERE k.tenant_id = v.tenant_id AND k.request_id = v.request_id AND k.generation_id = v.generation_id
      RETURNING k.request_id`.execute(trx);
    written += rows.length;
  }
  return written;
}

async function storePosition(trx: Trx, journal: string, position: JournalPosition): Promise<void> {
  await sql`
    INSERT INTO journal_positions (journal, segment, "offset", updated_at)
    VALUES (${journal}, ${position.segment}::bigint, ${position.offset}::bigint, now())
    ON CONFLICT (journal) DO UPDATE SET segment = excluded.segment, "offset" = excluded."offset", updated_at = excluded.updated_at
    WHERE (journal_positions.segment, journal_positions."offset") < (excluded.segment, excluded."offset")`.execute(trx);
}

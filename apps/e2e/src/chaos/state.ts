/**
 * What the chaos run reads from Weir's database: the ledger, the holds (per-request reservations
 * of ADR 0001, budget leases and holders of ADR 0002), idempotency keys, and the budget rows.
 * Raw SQL over `select *`, so the reader works on the schema before and after migration 0010's
 * columns are written (a missing table reads as absent, not as an error).
 */
import { sql } from 'kysely';
import type { WeirDatabase } from '@weir/store-pg';

/** One `usage_ledger` row, as the checks read it. */
export interface LedgerRow {
  generationId: string;
  requestId: string;
  tenantId: string;
  modelRevision: string;
  inputTokens: number;
  outputTokens: number;
  costNano: number;
  status: string;
  finishReason: string;
  /** `reported` / `counted` / `estimated`; null before migration 0010. */
  usageSource: string | null;
  /** The pre-0010 uncertainty marker. */
  uncertain: boolean;
}

/** A per-request reservation (`reservations`, ADR 0001). */
export interface ReservationRow {
  id: string;
  generationId: string;
  state: string;
  inputTokens: number;
  expiresAtMs: number;
}

/** A budget or rate lease with its holder's liveness (`admission_leases` ⋈ `admission_holders`, ADR 0002). */
export interface LeaseRow {
  leaseId: string;
  holder: string;
  kind: string;
  scope: string;
  outstandingNano: number;
  slots: number;
  holdUntilMs: number;
  /** The holder's `expires_at_ms`; null when it has no row (gone). */
  holderExpiresAtMs: number | null;
}

/** The tenant's monthly budget row at one instant. */
export interface BudgetSample {
  atMs: number;
  /** `db`: `budget_periods`; `usage-api`: `GET /v1/usage?window=month` (the ledger's cost, settled only). */
  source: 'db' | 'usage-api';
  settledNano: number;
  reservedNano: number;
  leasedNano: number;
}

/** An idempotency key of the tenant. */
export interface IdempotencyRow {
  requestId: string;
  generationId: string;
  state: string;
  expiresAtMs: number;
}

/** Everything read at the end of a run. */
export interface FinalState {
  readAtMs: number;
  ledger: LedgerRow[];
  /** Generation ids that reconciliation settled (`usage_reconciliations`). */
  reconciled: Set<string>;
  reservations?: ReservationRow[];
  leases?: LeaseRow[];
  idempotency: IdempotencyRow[];
  budget?: BudgetSample;
}

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const ms = (v: unknown): number => (v instanceof Date ? v.getTime() : typeof v === 'string' ? new Date(v).getTime() : num(v));

async function rows(db: WeirDatabase, query: ReturnType<typeof sql>): Promise<Record<string, unknown>[] | undefined> {
  try {
    return (await query.execute(db.db)).rows as Record<string, unknown>[];
  } catch (err) {
    if (/does not exist/.test(String((err as Error).message))) return undefined;
    throw err;
  }
}

/** Samples the tenant's monthly budget row (undefined when it has none yet). */
export async function sampleBudget(db: WeirDatabase, tenantId: string): Promise<BudgetSample | undefined> {
  // Budget rows are filed under the tenant's internal id (docs/security.md §4).
  const found = await rows(
    db,
    sql`select * from budget_periods where scope = 'tenant:' || coalesce((select uid from tenants where id = ${tenantId}), ${tenantId}) and period = 'month' order by starts_on desc limit 1`,
  );
  const r = found?.[0];
  if (!r) return undefined;
  return { atMs: Date.now(), source: 'db', settledNano: num(r.settled_nano), reservedNano: num(r.reserved_nano), leasedNano: num(r.leased_nano) };
}

/** Reads the end state of a run. */
export async function readFinalState(db: WeirDatabase, tenantId: string): Promise<FinalState> {
  const readAtMs = Date.now();
  const ledger = ((await rows(db, sql`select * from usage_ledger where tenant_id = ${tenantId}`)) ?? []).map(
    (r): LedgerRow => ({
      generationId: String(r.generation_id),
      requestId: String(r.request_id),
      tenantId: String(r.tenant_id),
      modelRevision: String(r.model_revision),
      inputTokens: num(r.input_tokens),
      outputTokens: num(r.output_tokens),
      costNano: Math.round(Number(r.cost_usd) * 1e9),
      status: String(r.status),
      finishReason: String(r.finish_reason),
      usageSource: typeof r.usage_source === 'string' ? r.usage_source : null,
      uncertain: r.uncertain === true,
    }),
  );
  const reconciled = new Set(((await rows(db, sql`select generation_id from usage_reconciliations`)) ?? []).map((r) => String(r.generation_id)));
  const reservations = (await rows(db, sql`select * from reservations where tenant_id = ${tenantId}`))?.map(
    (r): ReservationRow => ({ id: String(r.id), generationId: String(r.generation_id), state: String(r.state), inputTokens: num(r.input_tokens), expiresAtMs: ms(r.expires_at) }),
  );
  const leases = (await rows(db, sql`select l.*, h.expires_at_ms as holder_expires_at_ms from admission_leases l left join admission_holders h on h.holder = l.holder`))?.map(
    (r): LeaseRow => ({
      leaseId: String(r.lease_id),
      holder: String(r.holder),
      kind: String(r.kind),
      scope: String(r.scope),
      outstandingNano: num(r.granted_nano) - num(r.consumed_nano),
      slots: num(r.slots),
      holdUntilMs: num(r.hold_until_ms),
      holderExpiresAtMs: r.holder_expires_at_ms === null || r.holder_expires_at_ms === undefined ? null : num(r.holder_expires_at_ms),
    }),
  );
  const idempotency = ((await rows(db, sql`select * from idempotency_keys where tenant_id = ${tenantId}`)) ?? []).map(
    (r): IdempotencyRow => ({ requestId: String(r.request_id), generationId: String(r.generation_id), state: String(r.state), expiresAtMs: ms(r.expires_at) }),
  );
  const budget = await sampleBudget(db, tenantId);
  return { readAtMs, ledger, reconciled, ...(reservations ? { reservations } : {}), ...(leases ? { leases } : {}), idempotency, ...(budget ? { budget } : {}) };
}

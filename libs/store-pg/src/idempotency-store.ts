import type { Kysely, Selectable } from 'kysely';
import type { ApiRoute, ClaimResult, IdempotencyClaim, IdempotencyStore, RetainedResult } from '@weir/core';
import type { IdempotencyKeysTable, WeirSchema } from './schema';

/** Options of {@link createPgIdempotencyStore}. */
export interface PgIdempotencyStoreOptions {
  /** Epoch ms; default `Date.now`. Expiry compares against this clock, not the server's. */
  now?: () => number;
  /**
   * This process's id in `key_holders` (a split gateway, kept alive by {@link startKeyHolder}):
   * written on every claim, so a retry elsewhere can tell a key whose process died. Default none
   * (claims name no holder, and a retry waits for the claim's lease as before).
   */
  holder?: string;
  /**
   * A running key whose holder's heartbeat expired more than this long ago (ms) is marked
   * `interrupted` by the next claim that finds it: the holder is dead, and its relay's
   * settlement (which would have written the result) did not arrive in that time. Default 1,000.
   */
  deadHolderWaitMs?: number;
  /** How long such an `interrupted` mark is kept (ms). Default 86,400,000 (`defaults.admission.idempotency_retention_ms`). */
  interruptedRetentionMs?: number;
  /**
   * Results reach the database through the settlement journal (the relay's entry, applied by the
   * ledger: ADR 0002 §2), so `complete` writes nothing — one writer per result. Default false.
   */
  resultsFromJournal?: boolean;
}

/**
 * {@link IdempotencyStore} on the `idempotency_keys` table (migration 0003), shared by every
 * gateway of a deployment. A claim is one statement — `INSERT … ON CONFLICT DO UPDATE … WHERE
 * expired` — so two gateways racing on one key cannot both win: the row lock taken by the
 * conflicting insert serialises them, and only an expired claim is taken over.
 *
 * Retained results hold output text (the client asked for idempotency); they are deleted by
 * {@link IdempotencyStore.purgeExpired} after the retention window.
 *
 * With `holder`, each claim names the claiming process; a claim that finds a running key whose
 * holder has been dead (its `key_holders` heartbeat expired, or no row) for `deadHolderWaitMs`
 * marks it `interrupted` — only while that generation still holds it, so the ledger's write of
 * its relay's result (which clears `holder`) always wins — and answers with the mark: the
 * retry is told at once, never run again, never made to wait out the lease (issue 13).
 */
export function createPgIdempotencyStore(db: Kysely<WeirSchema>, options: PgIdempotencyStoreOptions = {}): IdempotencyStore {
  const now = options.now ?? Date.now;
  const holder = options.holder ?? null;
  const deadWaitMs = options.deadHolderWaitMs ?? 1_000;
  const interruptedRetentionMs = options.interruptedRetentionMs ?? 86_400_000;

  /** The key with its holder's liveness (null: no holder row). */
  const select = (tenantId: string, requestId: string) =>
    db
      .selectFrom('idempotency_keys as k')
      .leftJoin('key_holders as h', 'h.holder', 'k.holder')
      .selectAll('k')
      .select('h.expires_at_ms as holder_expires_at_ms')
      .where('k.tenant_id', '=', tenantId)
      .where('k.request_id', '=', requestId)
      .executeTakeFirst();

  /** Marks a dead holder's running key interrupted (only while `generationId` still holds it); the row as it is after. */
  const interruptDead = async (row: Selectable<IdempotencyKeysTable>): Promise<Selectable<IdempotencyKeysTable> | undefined> => {
    const message = `The generation for this idempotency key (${row.generation_id}) was interrupted: the gateway running it stopped before it finished and no result was recorded (what it had produced is billed only where its usage was recorded; see GET /v1/usage). Send a new key to run it again.`;
    const marked = await db
      .updateTable('idempotency_keys')
      .set({ state: 'interrupted', result: JSON.stringify({ interrupted: { generationId: row.generation_id, message } }), expires_at: new Date(now() + interruptedRetentionMs), holder: null })
      .where('tenant_id', '=', row.tenant_id)
      .where('request_id', '=', row.request_id)
      .where('generation_id', '=', row.generation_id)
      .where('state', '=', 'running')
      .returningAll()
      .executeTakeFirst();
    return marked ?? (await select(row.tenant_id, row.request_id));
  };

  return {
    async claim(c) {
      const at = new Date(now());
      const won = await db
        .insertInto('idempotency_keys')
        .values({
          tenant_id: c.tenantId,
          request_id: c.requestId,
          body_sha256: c.bodySha256,
          generation_id: c.generationId,
          route: c.route,
          state: 'running',
          result: null,
          holder,
          created_at: at,
          expires_at: new Date(c.leaseUntilMs),
        })
        .onConflict((oc) =>
          oc
            .columns(['tenant_id', 'request_id'])
            .doUpdateSet({
              body_sha256: (eb) => eb.ref('excluded.body_sha256'),
              generation_id: (eb) => eb.ref('excluded.generation_id'),
              route: (eb) => eb.ref('excluded.route'),
              state: 'running',
              result: null,
              holder: (eb) => eb.ref('excluded.holder'),
              created_at: (eb) => eb.ref('excluded.created_at'),
              expires_at: (eb) => eb.ref('excluded.expires_at'),
            })
            .where('idempotency_keys.expires_at', '<', at),
        )
        .returning('generation_id')
        .executeTakeFirst();
      if (won?.generation_id === c.generationId) return { claimed: true } satisfies ClaimResult;
      const found = await select(c.tenantId, c.requestId);
      // Deleted between the two statements (abandoned): claim again.
      if (!found) return this.claim(c);
      let existing: Selectable<IdempotencyKeysTable> | undefined = found;
      if (found.state === 'running' && found.holder !== null) {
        const holderExpiresAt = found.holder_expires_at_ms === null ? 0 : Number(found.holder_expires_at_ms);
        if (holderExpiresAt + deadWaitMs < now()) existing = await interruptDead(found);
        if (!existing) return this.claim(c);
      }
      return { claimed: false, existing: toClaim(existing) };
    },
    async complete(tenantId, requestId, result, retainUntilMs) {
      if (options.resultsFromJournal) return;
      await db
        .updateTable('idempotency_keys')
        .set({ state: 'done', result: JSON.stringify(result), expires_at: new Date(retainUntilMs) })
        .where('tenant_id', '=', tenantId)
        .where('request_id', '=', requestId)
        .where('generation_id', '=', result.generationId)
        .execute();
    },
    async interrupt(tenantId, requestId, generationId, message, retainUntilMs) {
      await db
        .updateTable('idempotency_keys')
        .set({ state: 'interrupted', result: JSON.stringify({ interrupted: { generationId, message } }), expires_at: new Date(retainUntilMs) })
        .where('tenant_id', '=', tenantId)
        .where('request_id', '=', requestId)
        .where('generation_id', '=', generationId)
        .execute();
    },
    async abandon(tenantId, requestId, generationId) {
      await db
        .deleteFrom('idempotency_keys')
        .where('tenant_id', '=', tenantId)
        .where('request_id', '=', requestId)
        .where('generation_id', '=', generationId)
        .execute();
    },
    async get(tenantId, requestId) {
      const row = await db
        .selectFrom('idempotency_keys')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('request_id', '=', requestId)
        .where('expires_at', '>=', new Date(now()))
        .executeTakeFirst();
      return row ? toClaim(row) : undefined;
    },
    async findClaimByGeneration(tenantId, generationId) {
      const row = await db
        .selectFrom('idempotency_keys')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('generation_id', '=', generationId)
        .where('expires_at', '>=', new Date(now()))
        .executeTakeFirst();
      return row ? toClaim(row) : undefined;
    },
    async findResult(tenantId, generationId) {
      const row = await db
        .selectFrom('idempotency_keys')
        .select(['result'])
        .where('tenant_id', '=', tenantId)
        .where('generation_id', '=', generationId)
        .where('state', '=', 'done')
        .where('expires_at', '>=', new Date(now()))
        .executeTakeFirst();
      return row?.result ? parseResult(row.result) : undefined;
    },
    async purgeExpired(nowMs) {
      const r = await db.deleteFrom('idempotency_keys').where('expires_at', '<', new Date(nowMs)).executeTakeFirst();
      return Number(r.numDeletedRows);
    },
  };
}

function toClaim(row: Selectable<IdempotencyKeysTable>): IdempotencyClaim {
  return {
    tenantId: row.tenant_id,
    requestId: row.request_id,
    bodySha256: row.body_sha256,
    generationId: row.generation_id,
    route: row.route as ApiRoute,
    state: row.state,
    ...(row.state === 'done' && row.result ? { result: parseResult(row.result) } : {}),
    ...(row.state === 'interrupted' ? { interruption: interruptionOf(row.result) } : {}),
  };
}

/**
 * The message of an `interrupted` key: the settlement applier stores
 * `{"interrupted": {"generationId", "message"}}` in `result`.
 */
function interruptionOf(value: unknown): string {
  const parsed = (typeof value === 'string' ? JSON.parse(value) : value) as { interrupted?: { message?: unknown } } | null;
  const message = parsed?.interrupted?.message;
  return typeof message === 'string' ? message : 'the generation was interrupted';
}

/** `jsonb` comes back parsed from `pg`; PGlite's adapter may hand back text. */
function parseResult(value: unknown): RetainedResult {
  return (typeof value === 'string' ? JSON.parse(value) : value) as RetainedResult;
}


import type { Kysely, Selectable } from 'kysely';
import type { ApiRoute, ClaimResult, IdempotencyClaim, IdempotencyStore, RetainedResult } from '@weir/core';
import type { IdempotencyKeysTable, WeirSchema } from './schema';

/** Options of {@link createPgIdempotencyStore}. */
export interface PgIdempotencyStoreOptions {
  /** Epoch ms; default `Date.now`. Expiry compares against this clock, not the server's. */
  now?: () => number;
}

/**
 * {@link IdempotencyStore} on the `idempotency_keys` table (migration 0003), shared by every
 * gateway of a deployment. A claim is one statement — `INSERT … ON CONFLICT DO UPDATE … WHERE
 * expired` — so two gateways racing on one key cannot both win: the row lock taken by the
 * conflicting insert serialises them, and only an expired claim is taken over.
 *
 * Retained results hold output text (the client asked for idempotency); they are deleted by
 * {@link IdempotencyStore.purgeExpired} after the retention window.
 */
export function createPgIdempotencyStore(db: Kysely<WeirSchema>, options: PgIdempotencyStoreOptions = {}): IdempotencyStore {
  const now = options.now ?? Date.now;
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
              created_at: (eb) => eb.ref('excluded.created_at'),
              expires_at: (eb) => eb.ref('excluded.expires_at'),
            })
            .where('idempotency_keys.expires_at', '<', at),
        )
        .returning('generation_id')
        .executeTakeFirst();
      if (won?.generation_id === c.generationId) return { claimed: true } satisfies ClaimResult;
      const existing = await db
        .selectFrom('idempotency_keys')
        .selectAll()
        .where('tenant_id', '=', c.tenantId)
        .where('request_id', '=', c.requestId)
        .executeTakeFirst();
      // Deleted between the two statements (abandoned): claim again.
      if (!existing) return this.claim(c);
      return { claimed: false, existing: toClaim(existing) };
    },
    async complete(tenantId, requestId, result, retainUntilMs) {
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


/**
 * The exact cache tier in Postgres (`response_cache`, migration 0013): the same port as the
 * in-process tier (`CacheTier` of `@weir/cache`), shared by every gateway of a fleet. A lookup is
 * one primary-key read that also compares the partition and the expiry, so neither an expired
 * entry nor another partition's is ever returned; a store is one upsert. Expired rows are
 * deleted by {@link PgExactCacheTier.purgeExpired} (the gateway runs it periodically).
 */
import { type Kysely, sql } from 'kysely';
import type { CachedAnswer, CacheHit, CacheQuery, CacheTier } from '@weir/cache';
import type { WeirSchema } from './schema';

/** Options of {@link createPgExactCacheTier}. */
export interface PgExactCacheTierOptions {
  /** An answer larger than this (bytes of its JSON) is not stored. Default 1 MiB. */
  maxEntryBytes?: number;
  /** Epoch ms now. Default `Date.now`. */
  now?: () => number;
  /** A failed store or drop (logged by the caller; never content). Default none. */
  onFault?: (op: 'store' | 'drop', err: unknown) => void;
}

/** The Postgres tier, plus its purge. */
export interface PgExactCacheTier extends CacheTier {
  /** Deletes expired rows; resolves how many. */
  purgeExpired(): Promise<number>;
}

/** Creates the Postgres exact tier over an open database (migration 0013 applied). */
export function createPgExactCacheTier(db: Kysely<WeirSchema>, options: PgExactCacheTierOptions = {}): PgExactCacheTier {
  const maxEntryBytes = options.maxEntryBytes ?? 1024 * 1024;
  const now = options.now ?? Date.now;
  const fault = options.onFault ?? (() => undefined);
  return {
    tier: 'exact',
    async lookup(q: CacheQuery): Promise<CacheHit | undefined> {
      const p = q.partition;
      const row = await db
        .selectFrom('response_cache')
        .select('answer')
        .where('exact_key', '=', q.exactKey)
        .where('tenant_key', '=', p.tenantKey)
        .where('revision_id', '=', p.revisionId)
        .where('template', '=', p.template)
        .where('params_key', '=', p.paramsKey)
        .where('expires_at', '>', new Date(now()))
        .executeTakeFirst();
      return row ? { tier: 'exact', answer: row.answer as CachedAnswer } : undefined;
    },
    async store(q: CacheQuery, answer: CachedAnswer, ttlMs: number): Promise<void> {
      if (!(ttlMs > 0)) return;
      const json = JSON.stringify(answer);
      if (json.length > maxEntryBytes) return;
      const p = q.partition;
      const expiresAt = new Date(now() + ttlMs);
      try {
        await db
          .insertInto('response_cache')
          .values({ exact_key: q.exactKey, tenant_key: p.tenantKey, revision_id: p.revisionId, template: p.template, params_key: p.paramsKey, answer: json, bytes: json.length, stored_at: new Date(now()), expires_at: expiresAt })
          .onConflict((oc) =>
            oc.column('exact_key').doUpdateSet({
              tenant_key: p.tenantKey,
              revision_id: p.revisionId,
              template: p.template,
              params_key: p.paramsKey,
              answer: json,
              bytes: json.length,
              stored_at: new Date(now()),
              expires_at: expiresAt,
            }),
          )
          .execute();
      } catch (err) {
        fault('store', err);
      }
    },
    forget(q: CacheQuery): void {
      db.deleteFrom('response_cache')
        .where('exact_key', '=', q.exactKey)
        .where('tenant_key', '=', q.partition.tenantKey)
        .execute()
        .catch((err: unknown) => fault('drop', err));
    },
    dropTenant(tenantKey: string): void {
      db.deleteFrom('response_cache')
        .where('tenant_key', '=', tenantKey)
        .execute()
        .catch((err: unknown) => fault('drop', err));
    },
    async purgeExpired(): Promise<number> {
      const r = await db.deleteFrom('response_cache').where('expires_at', '<=', sql<Date>`${new Date(now())}`).executeTakeFirst();
      return Number(r.numDeletedRows);
    },
  };
}

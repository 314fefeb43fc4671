/**
 * The exact cache tier in Postgres (`response_cache`, migration 0013): the same port as the
 * in-process tier (`CacheTier` of `@weir/cache`), shared by every gateway of a fleet. A lookup is
 * one primary-key read that also compares the partition and the expiry, so neither an expired
 * entry nor another partition's is ever returned. A store is one statement: the upsert and the
 * eviction of the tenant's oldest entries past its byte cap (`maxBytesPerTenant`). Expired rows,
 * and the oldest rows while the table is over its total cap (`maxBytes`), are deleted by
 * {@link PgExactCacheTier.purgeExpired} (the gateway runs it every minute).
 */
import { type Kysely, sql } from 'kysely';
import type { CachedAnswer, CacheHit, CacheQuery, CacheTier } from '@weir/cache';
import type { WeirSchema } from './schema';

/** Options of {@link createPgExactCacheTier}. */
export interface PgExactCacheTierOptions {
  /** An answer larger than this (bytes of its JSON) is not stored. Default 1 MiB (at most `maxBytesPerTenant`). */
  maxEntryBytes?: number;
  /**
   * The whole table's cap (bytes of the answers' JSON): each purge deletes the oldest entries
   * (any tenant's) past it. Default 64 MiB (`defaults.cache.max_bytes`).
   */
  maxBytes?: number;
  /**
   * One tenant's cap (bytes): a store deletes the tenant's oldest entries past it, never another
   * tenant's. Default a quarter of `maxBytes` (`defaults.cache.max_bytes_per_tenant`).
   */
  maxBytesPerTenant?: number;
  /** Epoch ms now. Default `Date.now`. */
  now?: () => number;
  /** A failed store or drop (logged by the caller; never content). Default none. */
  onFault?: (op: 'store' | 'drop', err: unknown) => void;
}

/** The Postgres tier, plus its purge. */
export interface PgExactCacheTier extends CacheTier {
  /** Deletes expired rows, then the oldest rows past the total cap; resolves how many in all. */
  purgeExpired(): Promise<number>;
}

/** Creates the Postgres exact tier over an open database (migration 0013 applied). */
export function createPgExactCacheTier(db: Kysely<WeirSchema>, options: PgExactCacheTierOptions = {}): PgExactCacheTier {
  const maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
  const maxBytesPerTenant = Math.min(options.maxBytesPerTenant ?? Math.floor(maxBytes / 4), maxBytes);
  const maxEntryBytes = Math.min(options.maxEntryBytes ?? 1024 * 1024, maxBytesPerTenant);
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
      const storedAt = new Date(now());
      try {
        // One statement: the upsert, and the deletion of this tenant's oldest entries past its cap
        // (newest first, the new entry counted first). Both read the snapshot before the upsert,
        // so the key being written is left out of the sum and never deleted.
        await sql`
          WITH upsert AS (
            INSERT INTO response_cache (exact_key, tenant_key, revision_id, template, params_key, answer, bytes, stored_at, expires_at)
            VALUES (${q.exactKey}, ${p.tenantKey}, ${p.revisionId}, ${p.template}, ${p.paramsKey}, ${json}::jsonb, ${json.length}, ${storedAt}, ${expiresAt})
            ON CONFLICT (exact_key) DO UPDATE SET tenant_key = EXCLUDED.tenant_key, revision_id = EXCLUDED.revision_id, template = EXCLUDED.template,
              params_key = EXCLUDED.params_key, answer = EXCLUDED.answer, bytes = EXCLUDED.bytes, stored_at = EXCLUDED.stored_at, expires_at = EXCLUDED.expires_at
            RETURNING 1
          )
          DELETE FROM response_cache WHERE exact_key IN (
            SELECT exact_key FROM (
              SELECT exact_key, sum(bytes) OVER (ORDER BY stored_at DESC, exact_key DESC) AS newer_bytes
              FROM response_cache WHERE tenant_key = ${p.tenantKey} AND exact_key <> ${q.exactKey}
            ) AS mine WHERE newer_bytes > ${maxBytesPerTenant - json.length}
          )`.execute(db);
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
      const over = await sql`
        DELETE FROM response_cache WHERE exact_key IN (
          SELECT exact_key FROM (
            SELECT exact_key, sum(bytes) OVER (ORDER BY stored_at DESC, exact_key DESC) AS newer_bytes FROM response_cache
          ) AS every WHERE newer_bytes > ${maxBytes}
        )`.execute(db);
      return Number(r.numDeletedRows) + Number(over.numAffectedRows ?? 0n);
    },
  };
}

import { type CachedAnswer, type GuardSignature, partitionKeyOf, type SemanticCandidate, type SemanticEntry, type SemanticPartition, type SemanticStore, dot } from '@weir/cache';
import { type Kysely, sql } from 'kysely';
import type { WeirSchema } from './schema';

/** Options of {@link createPgSemanticStore}. */
export interface PgSemanticStoreOptions {
  /** Entries kept per partition; the least recently used go first. Default 1,000. */
  maxEntriesPerPartition?: number;
  /** Entries kept per tenant over its partitions; the least recently used go first. Default 10,000. */
  maxEntriesPerTenant?: number;
}

/**
 * The semantic cache's {@link SemanticStore} on Postgres or PGlite (table
 * `semantic_cache_entries`, migration 0014), for gateways that share one cache. A search reads
 * only the rows filed under the query's partition key (`WHERE partition_key = $1`, indexed),
 * then computes the exact cosine of each in this process — the partition is structural, never
 * a filter after a global nearest-neighbour search. Vectors are `float4` bytes; no pgvector.
 * A search costs one round trip plus one `UPDATE` touching what it returns (LRU); a put costs an
 * insert and two bounded deletes (expired rows of the partition, rows past the bounds).
 * Rejects with the driver's error when the database fails: the tier treats it as a miss.
 */
export function createPgSemanticStore(db: Kysely<WeirSchema>, options: PgSemanticStoreOptions = {}): SemanticStore {
  const perPartition = options.maxEntriesPerPartition ?? 1_000;
  const perTenant = options.maxEntriesPerTenant ?? 10_000;
  if (!(perPartition >= 1) || !(perTenant >= 1)) throw new RangeError('semantic store bounds must be at least 1');

  return {
    async search(partition: SemanticPartition, vector: Float32Array, minSimilarity: number, limit: number, nowMs: number): Promise<SemanticCandidate[]> {
      if (limit < 1) return [];
      const rows = await db
        .selectFrom('semantic_cache_entries')
        .select(['id', 'vector', 'guard', 'answer', 'stored_at_ms', 'expires_at_ms'])
        .where('partition_key', '=', partitionKeyOf(partition))
        .where('dims', '=', vector.length)
        .where('expires_at_ms', '>', String(nowMs))
        .execute();
      const found: Array<{ id: string; candidate: SemanticCandidate }> = [];
      for (const row of rows) {
        const v = vectorFromBytes(row.vector, vector.length);
        const similarity = dot(v, vector);
        if (similarity < minSimilarity) continue;
        found.push({
          id: row.id,
          candidate: {
            similarity,
            entry: { vector: v, guard: parseJson(row.guard) as unknown as GuardSignature, answer: parseJson(row.answer) as unknown as CachedAnswer, storedAtMs: Number(row.stored_at_ms), expiresAtMs: Number(row.expires_at_ms) },
          },
        });
      }
      found.sort((a, b) => b.candidate.similarity - a.candidate.similarity);
      const best = found.slice(0, limit);
      if (best.length > 0) {
        await db
          .updateTable('semantic_cache_entries')
          .set({ last_used_ms: nowMs })
          .where('id', 'in', best.map((b) => b.id))
          .execute();
      }
      return best.map((b) => b.candidate);
    },

    async put(partition: SemanticPartition, entry: SemanticEntry, nowMs: number): Promise<void> {
      if (entry.expiresAtMs <= nowMs) return;
      const partitionKey = partitionKeyOf(partition);
      await db.transaction().execute(async (trx) => {
        await trx
          .insertInto('semantic_cache_entries')
          .values({
            tenant_key: partition.tenantKey,
            partition_key: partitionKey,
            dims: entry.vector.length,
            vector: vectorToBytes(entry.vector),
            guard: JSON.stringify(entry.guard),
            answer: JSON.stringify(entry.answer),
            stored_at_ms: entry.storedAtMs,
            expires_at_ms: entry.expiresAtMs,
            last_used_ms: nowMs,
          })
          .execute();
        await trx.deleteFrom('semantic_cache_entries').where('partition_key', '=', partitionKey).where('expires_at_ms', '<=', String(nowMs)).execute();
        // Past the bounds: the least recently used rows of the partition, then of the tenant.
        await sql`DELETE FROM semantic_cache_entries WHERE id IN (
          SELECT id FROM semantic_cache_entries WHERE partition_key = ${partitionKey} ORDER BY last_used_ms DESC, id DESC OFFSET ${perPartition})`.execute(trx);
        await sql`DELETE FROM semantic_cache_entries WHERE id IN (
          SELECT id FROM semantic_cache_entries WHERE tenant_key = ${partition.tenantKey} ORDER BY last_used_ms DESC, id DESC OFFSET ${perTenant})`.execute(trx);
      });
    },

    async dropTenant(tenantKey: string): Promise<void> {
      await db.deleteFrom('semantic_cache_entries').where('tenant_key', '=', tenantKey).execute();
    },
  };
}

/** Removes expired entries of every partition (a periodic sweep; searches already skip them). Returns how many. */
export async function purgeExpiredSemanticEntries(db: Kysely<WeirSchema>, nowMs: number): Promise<number> {
  const r = await db.deleteFrom('semantic_cache_entries').where('expires_at_ms', '<=', String(nowMs)).executeTakeFirst();
  return Number(r.numDeletedRows);
}

function vectorToBytes(v: Float32Array): Buffer {
  const b = Buffer.allocUnsafe(v.length * 4);
  for (let i = 0; i < v.length; i++) b.writeFloatLE(v[i], i * 4);
  return b;
}

function vectorFromBytes(b: Uint8Array, dims: number): Float32Array {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const v = new Float32Array(dims);
  for (let i = 0; i < dims; i++) v[i] = view.getFloat32(i * 4, true);
  return v;
}

/** `jsonb` comes back parsed from `pg`; PGlite's adapter may hand back text. */
function parseJson(value: unknown): Record<string, unknown> {
  return (typeof value === 'string' ? JSON.parse(value) : value) as Record<string, unknown>;
}

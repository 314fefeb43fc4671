/**
 * The in-process exact tier (the embedded default; docs/caching.md): a map from exact key to
 * answer, bounded by bytes (least recently used goes first) and by time (every entry has a TTL),
 * with a per-tenant byte cap so one tenant's traffic cannot evict every other tenant's entries.
 */
import type { CacheHit, CachedAnswer, CachePartition, CacheQuery, CacheTier } from './cache-tier';

/** Options of {@link createMemoryExactTier}. */
export interface MemoryExactTierOptions {
  /** Total bytes the entries may take (estimated: UTF-16 text plus a fixed overhead per entry). Default 64 MiB. */
  maxBytes?: number;
  /** Bytes one tenant's entries may take. Default a quarter of `maxBytes`. */
  maxBytesPerTenant?: number;
  /** Epoch ms now (a fake clock in tests). Default `Date.now`. */
  now?: () => number;
}

/** The tier, plus what operators and tests read of it. */
export interface MemoryExactTier extends CacheTier {
  /** Entries and bytes held now (expired entries still held until touched or evicted count). */
  stats(): { entries: number; bytes: number; tenants: number };
  /** Bytes held for one tenant (internal id). */
  tenantBytes(tenantKey: string): number;
}

/** Default size budget: 64 MiB. */
export const DEFAULT_EXACT_CACHE_BYTES = 64 * 1024 * 1024;

/** Fixed bytes an entry costs beyond its text (key, partition, object headers). */
const ENTRY_OVERHEAD_BYTES = 512;

interface Entry {
  key: string;
  partition: CachePartition;
  answer: CachedAnswer;
  expiresAtMs: number;
  bytes: number;
}

/** Estimated bytes of an answer held in memory (JS strings are UTF-16: 2 bytes a code unit). */
function bytesOf(key: string, answer: CachedAnswer): number {
  let chars = key.length;
  for (const d of answer.deltas) chars += d.length + 16;
  if (answer.deltaToolCalls) chars += JSON.stringify(answer.deltaToolCalls).length;
  return ENTRY_OVERHEAD_BYTES + chars * 2;
}

function samePartition(a: CachePartition, b: CachePartition): boolean {
  return a.tenantKey === b.tenantKey && a.revisionId === b.revisionId && a.template === b.template && a.paramsKey === b.paramsKey;
}

/**
 * Creates the in-process exact tier. `lookup` is synchronous work (a map read) and never throws;
 * a hit moves the entry to the most recently used end; an expired entry is dropped when found.
 * `store` replaces an entry under the same key, refuses an answer larger than the tenant cap,
 * then evicts the tenant's least recently used entries until it fits the tenant cap, then the
 * least recently used entries of anyone until it fits the total.
 * @throws RangeError for a non-positive `maxBytes` or `maxBytesPerTenant`.
 */
export function createMemoryExactTier(options: MemoryExactTierOptions = {}): MemoryExactTier {
  const maxBytes = options.maxBytes ?? DEFAULT_EXACT_CACHE_BYTES;
  const perTenant = options.maxBytesPerTenant ?? Math.floor(maxBytes / 4);
  if (!(maxBytes > 0) || !(perTenant > 0)) throw new RangeError('createMemoryExactTier: maxBytes and maxBytesPerTenant must be > 0');
  const now = options.now ?? Date.now;
  // Insertion order is recency order: a hit deletes and re-inserts.
  const all = new Map<string, Entry>();
  const byTenant = new Map<string, { bytes: number; entries: Map<string, Entry> }>();
  let bytes = 0;

  const remove = (e: Entry) => {
    all.delete(e.key);
    bytes -= e.bytes;
    const t = byTenant.get(e.partition.tenantKey);
    if (!t) return;
    t.entries.delete(e.key);
    t.bytes -= e.bytes;
    if (t.entries.size === 0) byTenant.delete(e.partition.tenantKey);
  };
  const touch = (e: Entry) => {
    all.delete(e.key);
    all.set(e.key, e);
    const t = byTenant.get(e.partition.tenantKey);
    if (t) {
      t.entries.delete(e.key);
      t.entries.set(e.key, e);
    }
  };

  return {
    tier: 'exact',
    async lookup(q: CacheQuery): Promise<CacheHit | undefined> {
      const e = all.get(q.exactKey);
      if (!e) return undefined;
      if (e.expiresAtMs <= now()) {
        remove(e);
        return undefined;
      }
      // The key hashes the partition; comparing it too makes a crossing impossible even on a hash collision.
      if (!samePartition(e.partition, q.partition)) return undefined;
      touch(e);
      return { tier: 'exact', answer: e.answer };
    },
    async store(q: CacheQuery, answer: CachedAnswer, ttlMs: number): Promise<void> {
      if (!(ttlMs > 0)) return;
      const size = bytesOf(q.exactKey, answer);
      if (size > perTenant || size > maxBytes) return;
      const old = all.get(q.exactKey);
      if (old) remove(old);
      const tenantKey = q.partition.tenantKey;
      let t = byTenant.get(tenantKey);
      // The tenant's own least recently used entries make room under its cap first.
      if (t) {
        for (const e of t.entries.values()) {
          if (t.bytes + size <= perTenant) break;
          remove(e);
        }
      }
      const nowMs = now();
      // Then anyone's, expired entries first (they are worth nothing), then least recently used.
      if (bytes + size > maxBytes) {
        for (const e of all.values()) if (e.expiresAtMs <= nowMs) remove(e);
        for (const e of all.values()) {
          if (bytes + size <= maxBytes) break;
          remove(e);
        }
      }
      t = byTenant.get(tenantKey);
      if (!t) {
        t = { bytes: 0, entries: new Map() };
        byTenant.set(tenantKey, t);
      }
      const entry: Entry = { key: q.exactKey, partition: { ...q.partition }, answer, expiresAtMs: nowMs + ttlMs, bytes: size };
      all.set(entry.key, entry);
      t.entries.set(entry.key, entry);
      t.bytes += size;
      bytes += size;
    },
    forget(q: CacheQuery): void {
      const e = all.get(q.exactKey);
      if (e && samePartition(e.partition, q.partition)) remove(e);
    },
    dropTenant(tenantKey: string): void {
      const t = byTenant.get(tenantKey);
      if (!t) return;
      for (const e of [...t.entries.values()]) remove(e);
    },
    stats: () => ({ entries: all.size, bytes, tenants: byTenant.size }),
    tenantBytes: (tenantKey) => byTenant.get(tenantKey)?.bytes ?? 0,
  };
}

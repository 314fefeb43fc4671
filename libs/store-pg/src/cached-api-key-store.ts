import { type ApiKeyIdentity, type ApiKeyStore, type Clock, systemClock } from '@weir/core';

/** Options for {@link createCachedApiKeyStore}. */
export interface CachedApiKeyStoreOptions {
  /**
   * How long a found key is served from memory (ms). Default 30,000. This is also the
   * worst-case revocation latency of this cache: a key revoked in the database keeps
   * working here for up to `ttlMs` unless {@link CachedApiKeyStore.invalidate} is called
   * (the revocation fast path does that).
   */
  ttlMs?: number;
  /**
   * How long an unknown (or revoked) hash is remembered (ms), so a client retrying a bad key
   * does not reach the database each time. Default 2,000: a newly created key works within
   * this delay even if someone tried it before it existed.
   */
  negativeTtlMs?: number;
  /**
   * Most entries kept for found keys, and separately for unknown hashes (so a flood of random
   * keys cannot evict the good ones). Least recently used entries go first. Default 10,000.
   */
  maxEntries?: number;
}

/** Dependencies of {@link createCachedApiKeyStore}. */
export interface CachedApiKeyStoreDeps {
  /** Monotonic ms clock. Default: core's `systemClock`. */
  clock?: Clock;
}

/** An {@link ApiKeyStore} answered from memory, with cache controls. */
export interface CachedApiKeyStore extends ApiKeyStore {
  /**
   * Resolves a key hash: a map lookup while the entry is fresh; otherwise one call to the
   * underlying store, shared by all concurrent lookups of the same hash. Errors of the
   * underlying store are passed through and never cached.
   */
  findByHash(sha256Hex: string): Promise<ApiKeyIdentity | undefined>;
  /** Forgets one hash (e.g. on a revocation message), or everything when called without one. */
  invalidate(sha256Hex?: string): void;
  /**
   * Forgets every cached hash whose identity has this key id (a revocation message that names
   * the key by id only), and makes lookups in flight not cache their answers. O(entries).
   */
  invalidateKeyId(keyId: string): void;
  /** Entries currently held (found + unknown). */
  size(): number;
}

interface Entry {
  identity: ApiKeyIdentity | undefined;
  expiresAt: number;
}

/**
 * Puts an in-memory TTL cache in front of any {@link ApiKeyStore}, so authenticating a
 * request is usually a map lookup and the database sees at most one query per key per
 * `ttlMs` (ARCHITECTURE.md §8: keys are "cached"). Revocation latency = `ttlMs` (default
 * 30 s) unless `invalidate` is called.
 */
export function createCachedApiKeyStore(
  store: ApiKeyStore,
  options: CachedApiKeyStoreOptions = {},
  deps: CachedApiKeyStoreDeps = {},
): CachedApiKeyStore {
  const ttlMs = options.ttlMs ?? 30_000;
  const negativeTtlMs = options.negativeTtlMs ?? 2_000;
  const maxEntries = Math.max(1, options.maxEntries ?? 10_000);
  const clock = deps.clock ?? systemClock;
  // Map iteration order is insertion order: re-inserting on a hit makes the first key the
  // least recently used one.
  const found = new Map<string, Entry>();
  const unknown = new Map<string, Entry>();
  const inFlight = new Map<string, Promise<ApiKeyIdentity | undefined>>();
  let generation = 0;

  function put(map: Map<string, Entry>, hash: string, entry: Entry): void {
    map.delete(hash);
    map.set(hash, entry);
    while (map.size > maxEntries) map.delete(map.keys().next().value as string);
  }

  function fresh(map: Map<string, Entry>, hash: string, now: number): Entry | undefined {
    const entry = map.get(hash);
    if (!entry) return undefined;
    if (entry.expiresAt <= now) {
      map.delete(hash);
      return undefined;
    }
    map.delete(hash);
    map.set(hash, entry);
    return entry;
  }

  return {
    findByHash(hash) {
      const now = clock.now();
      const hit = fresh(found, hash, now) ?? fresh(unknown, hash, now);
      if (hit) return Promise.resolve(hit.identity);
      const pending = inFlight.get(hash);
      if (pending) return pending;
      const startedIn = generation;
      const lookup = store.findByHash(hash).then(
        (identity) => {
          if (inFlight.get(hash) === lookup) inFlight.delete(hash);
          // An invalidate() during the lookup wins: do not cache an answer that may predate it.
          if (startedIn === generation) {
            const at = clock.now();
            if (identity) put(found, hash, { identity, expiresAt: at + ttlMs });
            else put(unknown, hash, { identity: undefined, expiresAt: at + negativeTtlMs });
          }
          return identity;
        },
        (err: unknown) => {
          if (inFlight.get(hash) === lookup) inFlight.delete(hash);
          throw err;
        },
      );
      inFlight.set(hash, lookup);
      return lookup;
    },

    invalidate(hash) {
      // Later lookups must not join (or cache) an answer fetched before the invalidation.
      generation++;
      if (hash === undefined) {
        found.clear();
        unknown.clear();
        inFlight.clear();
      } else {
        found.delete(hash);
        unknown.delete(hash);
        inFlight.delete(hash);
      }
    },

    invalidateKeyId(keyId) {
      generation++;
      for (const [hash, entry] of found) if (entry.identity?.keyId === keyId) found.delete(hash);
      // A lookup in flight may return this key; it is not joined any more (nor cached, above).
      inFlight.clear();
    },

    size: () => found.size + unknown.size,
  };
}

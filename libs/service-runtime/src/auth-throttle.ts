/**
 * Throttling of failed authentication (docs/security.md §7), in memory: failures are counted per
 * client address and per API-key prefix in fixed windows; past the limit, the address is refused
 * with 429 and `Retry-After` until its window ends, before any key lookup (no database round
 * trip for a guessed key). The gateway asks about a prefix (`refusal` with the key) only once
 * the key's lookup has failed, so a right key is never refused by its (public) prefix's count;
 * `succeeded` keeps a key known for callers that ask before the lookup. Bounded: at most `maxEntries` addresses, prefixes and known keys each (the
 * oldest entry is dropped first); entries whose window has passed are swept every window.
 */
import { parseApiKey, WeirError } from '@weir/core';

/** Settings of {@link createAuthThrottle}. */
export interface AuthThrottleOptions {
  /** Failures allowed per address, and per prefix, within a window; 0 = no throttling. */
  limit: number;
  /** The window (ms). */
  windowMs: number;
  /** Most addresses (and, separately, prefixes) tracked. Default 10,000. */
  maxEntries?: number;
  /** Clock (ms). Default `Date.now`. */
  now?: () => number;
}

/** The throttle. Addresses are the caller's keys for a client (see `addressKey`). */
export interface AuthThrottle {
  /** True while any failure is on record: only then do the other calls do anything. One field read. */
  readonly active: boolean;
  /**
   * The refusal for a request from `address` presenting `key` (its SHA-256 `sha256`), or
   * undefined when it may be authenticated. A `rate_limited` WeirError (429) with `retryAfterMs`.
   */
  refusal(address: string, key: string | undefined, sha256: string | undefined): WeirError | undefined;
  /** Records a failed authentication from `address` with `key` (undefined: no key or no Bearer scheme). */
  failed(address: string, key: string | undefined): void;
  /**
   * Records that the key with SHA-256 `sha256` authenticated, so its prefix's throttle never
   * refuses it. Called on every success: one set lookup in the steady state, no allocation.
   */
  succeeded(sha256: string): void;
  /** Stops the sweep timer. */
  close(): void;
}

interface Entry {
  count: number;
  /** Start of the window (ms). */
  start: number;
}


/** Creates the throttle (see the module comment). */
export function createAuthThrottle(options: AuthThrottleOptions): AuthThrottle {
  const { limit, windowMs } = options;
  const maxEntries = Math.max(1, options.maxEntries ?? 10_000);
  const now = options.now ?? Date.now;
  const addresses = new Map<string, Entry>();
  const prefixes = new Map<string, Entry>();
  /** SHA-256 of keys that authenticated (insertion order: the oldest first). */
  const known = new Set<string>();
  let active = false;
  const sweep = setInterval(() => {
    const t = now();
    for (const map of [addresses, prefixes]) for (const [k, e] of map) if (t - e.start >= windowMs) map.delete(k);
    active = addresses.size + prefixes.size > 0;
  }, windowMs);
  sweep.unref();

  /** The live entry of `k` (a passed window counts as none). */
  const current = (map: Map<string, Entry>, k: string, t: number): Entry | undefined => {
    const e = map.get(k);
    if (e && t - e.start >= windowMs) {
      map.delete(k);
      return undefined;
    }
    return e;
  };
  const count = (map: Map<string, Entry>, k: string, t: number) => {
    const e = current(map, k, t);
    if (e) e.count++;
    else {
      if (map.size >= maxEntries) map.delete(map.keys().next().value as string);
      map.set(k, { count: 1, start: t });
    }
    active = true;
  };
  const refuse = (e: Entry, t: number, what: string) => {
    const retryAfterMs = Math.max(1, e.start + windowMs - t);
    return new WeirError('rate_limited', `Too many failed authentication attempts ${what}; retry in ${Math.ceil(retryAfterMs / 1000)} s with a valid API key.`, {
      retryable: true,
      retryAfterMs,
    });
  };

  return {
    get active() {
      return active;
    },
    refusal(address, key, sha256) {
      if (limit <= 0 || !active) return undefined;
      const t = now();
      const a = current(addresses, address, t);
      if (a && a.count >= limit) return refuse(a, t, 'from this address');
      const prefix = key !== undefined ? parseApiKey(key)?.prefix : undefined;
      if (prefix === undefined) return undefined;
      const p = current(prefixes, prefix, t);
      if (p && p.count >= limit && (sha256 === undefined || !known.has(sha256))) return refuse(p, t, `with the key prefix wk_${prefix}`);
      return undefined;
    },
    failed(address, key) {
      if (limit <= 0) return;
      const t = now();
      count(addresses, address, t);
      const prefix = key !== undefined ? parseApiKey(key)?.prefix : undefined;
      if (prefix !== undefined) count(prefixes, prefix, t);
    },
    succeeded(sha256) {
      if (limit <= 0 || known.has(sha256)) return;
      if (known.size >= maxEntries) known.delete(known.values().next().value as string);
      known.add(sha256);
    },
    close() {
      clearInterval(sweep);
    },
  };
}

/**
 * The store configuration envelopes travel through: a small key/value port with a watch, one
 * in-memory implementation (the all-in-one and unit tests) and one over a NATS JetStream KV
 * bucket (`nats-config-bucket.ts`). Keys: `snapshot`, `heartbeat`, `revocations.<seq>`.
 */
import { WeirError } from '@weir/core';

/** Bucket keys of the snapshot contract. */
export const CONFIG_BUCKET_KEYS = {
  snapshot: 'snapshot',
  heartbeat: 'heartbeat',
  /** Prefix of revocation keys: `revocations.<seq>`. */
  revocationPrefix: 'revocations.',
  /** The key of revocation `seq`. */
  revocation: (seq: number): string => `revocations.${seq}`,
} as const;

/**
 * The bucket name of namespace `ns` (`WEIR_NATS_NAMESPACE`, lowercase letters, digits and `-`,
 * at most 32; default `weir`): `<ns>_config`, e.g. `weir_config`.
 * @throws WeirError `invalid_request` for a malformed namespace.
 */
export function configBucketName(ns = 'weir'): string {
  if (!/^[a-z0-9][a-z0-9-]{0,31}$/.test(ns)) {
    throw new WeirError('invalid_request', `WEIR_NATS_NAMESPACE must be 1–32 lowercase letters, digits or '-', got ${JSON.stringify(ns)}`);
  }
  return `${ns}_config`;
}

/**
 * Called for each entry a watch delivers: `bytes` undefined means the key was deleted or
 * purged. `revision` is the bucket's sequence number, increasing across all keys.
 */
export type ConfigBucketEntryHandler = (key: string, bytes: Uint8Array | undefined, revision: number) => void;

/** A running watch. */
export interface ConfigBucketWatch {
  /** Stops delivering; idempotent. */
  stop(): void;
}

/**
 * A key/value bucket of envelopes. Values are opaque bytes here: verification is the
 * subscriber's job, so a bucket never trusts what it holds.
 */
export interface ConfigBucket {
  /** Stores `bytes` under `key`; resolves with the new revision. Rejects when the store cannot be reached. */
  put(key: string, bytes: Uint8Array): Promise<number>;
  /** The current value of `key`, or undefined when absent or deleted. */
  get(key: string): Promise<Uint8Array | undefined>;
  /** Removes `key` (a watch sees it with `bytes` undefined). */
  delete(key: string): Promise<void>;
  /**
   * The values the bucket still retains for `key` (oldest first, the current one last; deletes
   * left out): NATS KV keeps `history` values per key. A data plane starting without a saved
   * snapshot reads it to learn the newest snapshot version ever published, so a replayed older
   * one cannot pass for current. Optional: a bucket without history omits it.
   */
  history?(key: string): Promise<Uint8Array[]>;
  /** Current keys, optionally only those starting with `prefix` (e.g. `revocations.`), sorted. */
  keys(prefix?: string): Promise<string[]>;
  /**
   * Delivers every key's current value (in revision order), then every later change, to
   * `onEntry`, one call at a time. Implementations keep the watch alive across connection loss
   * and never deliver the same (key, revision) twice. Resolves once the watch is set up; the
   * NATS one resolves at once and keeps retrying in the background while NATS is unreachable.
   */
  watch(onEntry: ConfigBucketEntryHandler): Promise<ConfigBucketWatch>;
  /** Stops every watch made here. Does not close a NATS connection it was given. */
  close(): Promise<void>;
}

interface MemoryEntry {
  bytes: Uint8Array;
  revision: number;
}

/**
 * A {@link ConfigBucket} in memory. Watchers get the current values synchronously inside
 * `watch()`, then each change in order on a microtask after the `put`/`delete` that made it.
 * Values are copied in and out, so a caller cannot change stored bytes behind the bucket's back.
 * Keeps the last `history` values per key (default 5, as the NATS bucket).
 */
export function createMemoryConfigBucket(options: { history?: number } = {}): ConfigBucket {
  const historyDepth = options.history ?? 5;
  const entries = new Map<string, MemoryEntry>();
  const histories = new Map<string, Uint8Array[]>();
  const watchers = new Set<{ active: boolean; onEntry: ConfigBucketEntryHandler }>();
  let revision = 0;
  let closed = false;

  const notify = (key: string, bytes: Uint8Array | undefined, rev: number): void => {
    for (const w of watchers) {
      queueMicrotask(() => {
        if (w.active) w.onEntry(key, bytes === undefined ? undefined : Uint8Array.from(bytes), rev);
      });
    }
  };
  const ensureOpen = (): void => {
    if (closed) throw new WeirError('internal', 'config bucket is closed');
  };

  return {
    async put(key, bytes) {
      ensureOpen();
      revision += 1;
      const copy = Uint8Array.from(bytes);
      entries.set(key, { bytes: copy, revision });
      const kept = [...(histories.get(key) ?? []), copy].slice(-historyDepth);
      histories.set(key, kept);
      notify(key, copy, revision);
      return revision;
    },
    async get(key) {
      const e = entries.get(key);
      return e ? Uint8Array.from(e.bytes) : undefined;
    },
    async delete(key) {
      ensureOpen();
      if (!entries.delete(key)) return;
      revision += 1;
      notify(key, undefined, revision);
    },
    async history(key) {
      return (histories.get(key) ?? []).map((b) => Uint8Array.from(b));
    },
    async keys(prefix = '') {
      return [...entries.keys()].filter((k) => k.startsWith(prefix)).sort();
    },
    async watch(onEntry) {
      ensureOpen();
      const w = { active: true, onEntry };
      watchers.add(w);
      const current = [...entries.entries()].sort((a, b) => a[1].revision - b[1].revision);
      for (const [key, e] of current) onEntry(key, Uint8Array.from(e.bytes), e.revision);
      return {
        stop() {
          w.active = false;
          watchers.delete(w);
        },
      };
    },
    async close() {
      closed = true;
      for (const w of watchers) w.active = false;
      watchers.clear();
    },
  };
}

/**
 * {@link ConfigBucket} over a NATS JetStream KV bucket (`@nats-io/kv` 3.3.1). The KV handle is
 * opened lazily and reopened after a failure, so a data plane can be built while NATS is still
 * unreachable (it serves its last-good snapshot meanwhile). Watches survive a NATS restart: on
 * every reconnect the KV watcher is recreated (last value per key) and entries already delivered
 * (same key and revision) are skipped.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm, KvWatchInclude, type KV, type KvWatchEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { configBucketName, type ConfigBucket, type ConfigBucketEntryHandler, type ConfigBucketWatch } from './bucket';
import { silentConfigSyncLogger, type ConfigSyncLogger } from './logger';

/** Options for {@link createNatsConfigBucket}. */
export interface NatsConfigBucketOptions {
  /** Deployment namespace (`WEIR_NATS_NAMESPACE`); the bucket is `<namespace>_config`. Default `weir`. */
  namespace?: string;
  /** Values kept per key (JetStream `max_msgs_per_subject`), applied when this call creates the bucket. Default 5. */
  history?: number;
  /**
   * Create the bucket when it does not exist (an existing bucket is opened as is, whatever its
   * history). Default true. With false, operations fail (and watches retry) until it exists.
   */
  create?: boolean;
  /** Watch restarts and failures go here (never values). Default: silent. */
  logger?: ConfigSyncLogger;
  /** Timeout of one KV request (put, get, watch set-up) in ms. Default 5,000. */
  timeoutMs?: number;
  /** First wait before re-creating a failed watch (ms); doubles up to `watchRetryMaxMs`. Default 200. */
  watchRetryBaseMs?: number;
  /** Longest wait between watch attempts (ms). Default 5,000. */
  watchRetryMaxMs?: number;
}

/**
 * Creates the NATS-backed bucket on connection `nc` (which stays the caller's: `close()` does
 * not close it). Nothing is sent until the first operation.
 * @throws WeirError `invalid_request` for a malformed namespace.
 */
export function createNatsConfigBucket(nc: NatsConnection, options: NatsConfigBucketOptions = {}): ConfigBucket {
  const name = configBucketName(options.namespace ?? 'weir');
  const history = options.history ?? 5;
  const create = options.create ?? true;
  const logger = options.logger ?? silentConfigSyncLogger;
  const retryBaseMs = options.watchRetryBaseMs ?? 200;
  const retryMaxMs = options.watchRetryMaxMs ?? 5_000;
  const kvm = new Kvm(jetstream(nc, { timeout: options.timeoutMs ?? 5_000 }));
  let kvPromise: Promise<KV> | undefined;
  const watches = new Set<ConfigBucketWatch>();

  const kv = (): Promise<KV> => {
    if (!kvPromise) {
      const opening = create ? kvm.create(name, { history }) : kvm.open(name);
      kvPromise = opening;
      // A failed open must not stick: the next call tries again.
      opening.catch(() => {
        if (kvPromise === opening) kvPromise = undefined;
      });
    }
    return kvPromise;
  };

  return {
    async put(key, bytes) {
      return (await kv()).put(key, bytes);
    },
    async get(key) {
      const e = await (await kv()).get(key);
      return e && e.operation === 'PUT' ? e.value : undefined;
    },
    async delete(key) {
      await (await kv()).delete(key);
    },
    async history(key) {
      const iter = await (await kv()).history({ key });
      const out: Uint8Array[] = [];
      for await (const e of iter) if (e.operation === 'PUT') out.push(e.value);
      return out;
    },
    async keys(prefix = '') {
      const iter = await (await kv()).keys();
      const out: string[] = [];
      for await (const k of iter) if (k.startsWith(prefix)) out.push(k);
      return out.sort();
    },
    async watch(onEntry) {
      const w = startWatch(nc, kv, onEntry, { logger, retryBaseMs, retryMaxMs, bucket: name });
      const handle: ConfigBucketWatch = {
        stop() {
          watches.delete(handle);
          w.stop();
        },
      };
      watches.add(handle);
      return handle;
    },
    async close() {
      for (const w of [...watches]) w.stop();
    },
  };
}

interface WatchSettings {
  logger: ConfigSyncLogger;
  retryBaseMs: number;
  retryMaxMs: number;
  bucket: string;
}

function startWatch(nc: NatsConnection, kv: () => Promise<KV>, onEntry: ConfigBucketEntryHandler, s: WatchSettings): ConfigBucketWatch {
  const delivered = new Map<string, number>();
  let stopped = false;
  let current: { stop(): void } | undefined;
  let wake: (() => void) | undefined;

  const deliver = (e: KvWatchEntry): void => {
    // A re-created watcher replays each key's last value; skip what was already handed over.
    if (delivered.get(e.key) === e.revision) return;
    delivered.set(e.key, e.revision);
    try {
      onEntry(e.key, e.operation === 'PUT' ? e.value : undefined, e.revision);
    } catch (error) {
      s.logger.error({ bucket: s.bucket, key: e.key, revision: e.revision, err: error }, 'config bucket watch handler threw');
    }
  };

  // The ordered consumer behind a KV watch only notices a restarted server after missed idle
  // heartbeats (10 s or more), and may give up; re-creating it on reconnect is prompt and sure.
  const statusIter = nc.status();
  void (async () => {
    try {
      for await (const st of statusIter) {
        if (stopped) break;
        if (st.type === 'reconnect') {
          s.logger.info({ bucket: s.bucket }, 'nats reconnected; re-creating the config watch');
          current?.stop();
          wake?.();
        }
      }
    } catch {
      // the connection closed: nothing more to watch
    }
  })();

  void (async () => {
    let attempt = 0;
    while (!stopped && !nc.isClosed()) {
      try {
        const iter = await (await kv()).watch({ include: KvWatchInclude.LastValue });
        if (stopped) {
          iter.stop();
          break;
        }
        current = iter;
        attempt = 0;
        for await (const e of iter) {
          if (stopped) break;
          deliver(e);
        }
      } catch (error) {
        attempt += 1;
        s.logger.warn({ bucket: s.bucket, attempt, err: error }, 'config watch failed; retrying');
      }
      current = undefined;
      if (stopped || nc.isClosed()) break;
      const waitMs = Math.min(s.retryMaxMs, s.retryBaseMs * 2 ** Math.min(attempt, 16));
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, waitMs);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wake = undefined;
    }
  })();

  return {
    stop() {
      if (stopped) return;
      stopped = true;
      current?.stop();
      wake?.();
      (statusIter as { stop?: () => void }).stop?.();
    },
  };
}

/**
 * Deletes namespace `namespace`'s config bucket (its JetStream stream `KV_<ns>_config`), for
 * throw-away test and local topologies. Stop every watch on it first, or a watch creates it
 * again. Resolves false when it did not exist.
 */
export async function deleteConfigBucket(nc: NatsConnection, namespace: string): Promise<boolean> {
  const jsm = await jetstreamManager(nc);
  try {
    return await jsm.streams.delete(`KV_${configBucketName(namespace)}`);
  } catch (err) {
    if (err instanceof Error && /stream not found/i.test(err.message)) return false;
    throw err;
  }
}

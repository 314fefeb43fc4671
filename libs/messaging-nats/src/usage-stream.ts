import type { NatsConnection } from '@nats-io/transport-node';
import { DiscardPolicy, jetstreamManager, JetStreamApiError, RetentionPolicy, StorageType, type StreamConfig } from '@nats-io/jetstream';

/** Default name of the usage stream. */
export const USAGE_STREAM = 'WEIR_USAGE';
/** Default subject prefix of usage records (`weir.usage.<tenantId>`). */
export const USAGE_SUBJECT_PREFIX = 'weir.usage';

/** Options for {@link ensureUsageStream}. */
export interface UsageStreamOptions {
  /** Stream name. Default `WEIR_USAGE`. */
  stream?: string;
  /** Subjects the stream captures. Default `['weir.usage.>']`. */
  subjects?: string[];
  /**
   * Window in which JetStream drops a message whose `Nats-Msg-Id` (the generation id) it has
   * already stored (ms). Default 120,000 (NATS's default). Retries later than this are still
   * billed once: the ledger's insert is idempotent on `generationId`.
   */
  duplicateWindowMs?: number;
  /**
   * Oldest record kept (ms); 0 keeps records until `maxBytes`. Default 30 days. The ledger must
   * consume records within this, or they expire unbilled: alert on consumer lag well before.
   */
  maxAgeMs?: number;
  /**
   * Largest stream size (bytes); -1 is unlimited. Default -1. When full, new publishes are
   * refused (discard `new`), so the sinks buffer and report saturation instead of the stream
   * discarding unbilled records.
   */
  maxBytes?: number;
}

/** What {@link ensureUsageStream} did. */
export interface EnsureUsageStreamResult {
  stream: string;
  created: boolean;
}

const NS_PER_MS = 1_000_000;

/**
 * Creates the usage stream if missing, else updates its subjects, duplicate window and limits to
 * the options (idempotent; safe to call from every producer and consumer at startup). File
 * storage, limits retention, discard `new`, one replica.
 * @throws the JetStream API error when the server refuses (e.g. JetStream disabled, subjects
 *   overlapping another stream).
 */
export async function ensureUsageStream(nc: NatsConnection, options: UsageStreamOptions = {}): Promise<EnsureUsageStreamResult> {
  const name = options.stream ?? USAGE_STREAM;
  const config: Partial<StreamConfig> & { name: string } = {
    name,
    subjects: options.subjects ?? [`${USAGE_SUBJECT_PREFIX}.>`],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.New,
    duplicate_window: (options.duplicateWindowMs ?? 120_000) * NS_PER_MS,
    max_age: (options.maxAgeMs ?? 30 * 24 * 3_600_000) * NS_PER_MS,
    max_bytes: options.maxBytes ?? -1,
    num_replicas: 1,
  };
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(name);
  } catch (error) {
    if (!isNotFound(error)) throw error;
    try {
      await jsm.streams.add(config);
      return { stream: name, created: true };
    } catch (addError) {
      // Another process created it between our info and add: fall through to the update.
      if (!(addError instanceof JetStreamApiError)) throw addError;
    }
  }
  await jsm.streams.update(name, config);
  return { stream: name, created: false };
}

/** Deletes a stream if it exists (for tests and tooling). Returns whether it existed. */
export async function deleteStream(nc: NatsConnection, stream: string): Promise<boolean> {
  const jsm = await jetstreamManager(nc);
  try {
    return await jsm.streams.delete(stream);
  } catch (error) {
    if (isNotFound(error)) return false;
    throw error;
  }
}

/**
 * The subject a tenant's usage records go to: `<prefix>.<tenantId>`, with any character outside
 * `[A-Za-z0-9_-]` in the tenant id written as `~XX` (hex of each UTF-8 byte), so a `.` or a
 * wildcard in an id can never change the subject's shape.
 */
export function usageSubject(prefix: string, tenantId: string): string {
  const token = /^[A-Za-z0-9_-]+$/.test(tenantId)
    ? tenantId
    : Array.from(new TextEncoder().encode(tenantId), (b) => {
        const c = String.fromCharCode(b);
        return /[A-Za-z0-9_-]/.test(c) ? c : `~${b.toString(16).padStart(2, '0')}`;
      }).join('');
  return `${prefix}.${token}`;
}

function isNotFound(error: unknown): boolean {
  return error instanceof JetStreamApiError && (error.status === 404 || error.code === 10059 || error.code === 10014);
}

/**
 * The port through which the control plane publishes what it commits: full configuration
 * snapshots and fast-path revocations. `@weir/config-sync` signs them (Ed25519) into envelopes
 * and writes them to the NATS KV bucket (`snapshot`, `revocations.<seq>`); this library never
 * imports it, so tests use {@link createInMemorySnapshotSink}.
 */

/** A committed snapshot: `config` is a configuration-file object (snake_case) that `parseConfig` accepts. */
export interface SnapshotToPublish {
  /** Monotonic, ≥ 1. */
  version: number;
  config: object;
  /** ISO-8601 UTC. */
  issuedAt: string;
  /**
   * The latest revocation committed when this snapshot is published (the snapshot includes it),
   * absent when there is none. The snapshot and the heartbeats after it name its seq and content
   * digest, so data planes refuse a different revocation re-sent under that seq (issue 14, part 11).
   */
  lastRevocation?: RevocationToPublish;
}

/**
 * A fast-path revocation, in the snapshot contract's payload fields (snake_case):
 * - `api_key`: that key (`api_key_id`, `api_key_sha256`) stops authenticating;
 * - `tenant`: every request of `tenant_id` is refused until a later snapshot re-enables it;
 * - `kill_switch`: `enabled: true` refuses `tenant_id`'s requests (503), `false` lifts it.
 */
export interface RevocationToPublish {
  /** Monotonic, ≥ 1. */
  seq: number;
  kind: 'api_key' | 'tenant' | 'kill_switch';
  tenant_id?: string;
  api_key_id?: string;
  api_key_sha256?: string;
  enabled?: boolean;
  /** ISO-8601 UTC. */
  issued_at: string;
}

/**
 * Where committed snapshots and revocations go. Both calls may throw (a NATS outage): the
 * control plane logs the failure and retries on its next change or retry tick; Postgres stays
 * the source of truth.
 */
export interface SnapshotSink {
  publishSnapshot(snapshot: SnapshotToPublish): Promise<void>;
  publishRevocation(revocation: RevocationToPublish): Promise<void>;
}

/** An in-memory {@link SnapshotSink} that records what it was given (tests, a control plane without NATS). */
export interface InMemorySnapshotSink extends SnapshotSink {
  readonly snapshots: SnapshotToPublish[];
  readonly revocations: RevocationToPublish[];
  /** While set, every publish call rejects with this error (and records nothing). */
  failWith: Error | undefined;
}

/** Creates an {@link InMemorySnapshotSink}. */
export function createInMemorySnapshotSink(): InMemorySnapshotSink {
  const sink: InMemorySnapshotSink = {
    snapshots: [],
    revocations: [],
    failWith: undefined,
    async publishSnapshot(snapshot) {
      if (sink.failWith) throw sink.failWith;
      sink.snapshots.push(structuredClone(snapshot));
    },
    async publishRevocation(revocation) {
      if (sink.failWith) throw sink.failWith;
      sink.revocations.push({ ...revocation });
    },
  };
  return sink;
}

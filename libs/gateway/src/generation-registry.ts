/**
 * Live and recently finished generations of this gateway, by generation id: what
 * `GET /v1/generations/{id}` and `POST /v1/generations/{id}/cancel` act on. Finished
 * generations are kept within time, count and memory budgets (see {@link createGenerationRegistry}).
 */
import type { FinishReason, GenerationOutcome, StopCause } from '@weir/core';
import type { Transcript } from './transcript';

/** Where a generation is. */
export type GenerationState = 'queued' | 'running' | 'finished';

/** One tracked generation. */
export interface TrackedGeneration {
  generationId: string;
  requestId: string;
  tenantId: string;
  /**
   * The tenant's internal id (`tenantKeyOf(caller)`, issue 14 §4): only that tenant finds the
   * generation — not a later tenant with the same slug. Absent: `tenantId`.
   */
  tenantKey?: string;
  /** The API key it was made with (a revoked key's generations are stopped). */
  apiKeyId?: string;
  /** Set when a revocation stopped it: the error its client is told instead of a plain cancel. */
  revoked?: { code: 'authentication_failed' | 'tenant_disabled' | 'kill_switch'; message: string };
  /** The revision answering (the first choice until an attempt answers; once finished, the outcome's). */
  modelRevision: string;
  state: GenerationState;
  outcome?: GenerationOutcome;
  /** Its events, for repeats of its idempotency key and `GET /v1/generations/{id}/events`. */
  transcript?: Transcript;
  /** When its response was created (Unix s). */
  createdS?: number;
  /** Stops it (no-op once finished). */
  stop(cause: StopCause): void;
}

/** The registry. */
export interface GenerationRegistry {
  add(entry: TrackedGeneration): void;
  /**
   * The entry, only if it belongs to the tenant whose internal id is `tenantKey` (another
   * tenant's generation — a deleted same-slug tenant's included — is "not found").
   */
  get(tenantKey: string, generationId: string): TrackedGeneration | undefined;
  /**
   * Forgets every generation of the tenants whose internal ids `retired` accepts (a deleted
   * tenant): stops those still running and drops the finished ones with their transcripts.
   * Returns how many were dropped or stopped. O(entries); called when a configuration snapshot
   * retires internal ids, never per request.
   */
  purgeTenants(retired: (tenantKey: string) => boolean): number;
  finish(generationId: string, outcome: GenerationOutcome): void;
  /** Generations not yet finished. */
  active(): TrackedGeneration[];
  /** Finished generations held, and the memory they hold (estimated bytes, {@link retainedBytesOf}). */
  retained(): { finished: number; bytes: number };
  close(): void;
}

/** The public status of a finish reason. */
export function statusOf(reason: FinishReason): string {
  switch (reason) {
    case 'stop':
    case 'length':
    case 'tool_calls':
      return 'completed';
    case 'error':
      return 'failed';
    case 'content_filter':
      return 'filtered';
    case 'cancelled':
    case 'deadline':
      return reason;
  }
}

/** Retention of finished generations (see {@link createGenerationRegistry}). */
export interface GenerationRegistryOptions {
  /** How long a finished generation stays (ms). Default 600,000 (10 min). */
  retentionMs?: number;
  /** Most finished generations kept. Default 10,000. */
  maxFinished?: number;
  /**
   * Most memory the finished generations may hold, estimated (bytes; see
   * {@link retainedBytesOf}). Default 32 MiB.
   */
  maxRetainedBytes?: number;
  /** Wall clock (ms). Default `Date.now`. */
  now?: () => number;
}

/** Bytes a finished entry holds besides its transcript: the entry, its outcome and ids (an estimate from heap snapshots). */
const ENTRY_BYTES = 1_024;
/** Bytes a transcript delta holds besides its text: the string header and its array slots. */
const DELTA_BYTES = 48;

/**
 * The memory a finished generation holds, estimated: {@link ENTRY_BYTES}, plus per delta
 * {@link DELTA_BYTES} and its text at 2 bytes per UTF-16 unit (V8 keeps Latin-1 text in one,
 * so this is an upper bound for most text).
 */
export function retainedBytesOf(entry: Pick<TrackedGeneration, 'transcript'>): number {
  const t = entry.transcript;
  return ENTRY_BYTES + (t ? 2 * t.size + DELTA_BYTES * t.deltas.length : 0);
}

/** A finished generation's `stop`: nothing to stop. */
const STOPPED = (): void => undefined;

/**
 * Creates a registry with a periodic (unref'd) sweep. Finished entries are kept for
 * `retentionMs` (default 10 min) but at most `maxFinished` of them (default 10,000) holding at
 * most `maxRetainedBytes` (default 32 MiB, estimated with {@link retainedBytesOf}); the oldest
 * go first, so memory stays bounded at any request rate. A finished entry keeps only its ids,
 * state, outcome and transcript: its `stop` — a closure over the request it was made for — is
 * replaced, so the request, the response and the relay's state can be collected.
 */
export function createGenerationRegistry(options: GenerationRegistryOptions = {}): GenerationRegistry {
  const retentionMs = options.retentionMs ?? 600_000;
  const maxFinished = options.maxFinished ?? 10_000;
  const maxRetainedBytes = options.maxRetainedBytes ?? 32 * 1024 * 1024;
  let retainedBytes = 0;
  const now = options.now ?? Date.now;
  const entries = new Map<string, TrackedGeneration & { finishedAt?: number; retained?: number }>();
  // Finished ids in finishing order (Map iteration order), for the caps.
  const finishedOrder = new Map<string, true>();
  const forget = (id: string) => {
    const e = entries.get(id);
    entries.delete(id);
    finishedOrder.delete(id);
    retainedBytes -= e?.retained ?? 0;
  };
  const sweep = setInterval(() => {
    const cutoff = now() - retentionMs;
    // Finished entries in finishing order: the first one not yet expired ends the sweep.
    for (const id of finishedOrder.keys()) {
      const e = entries.get(id);
      if (e?.finishedAt !== undefined && e.finishedAt >= cutoff) break;
      forget(id);
    }
  }, Math.min(retentionMs, 60_000));
  sweep.unref();
  return {
    add(entry) {
      entries.set(entry.generationId, entry);
    },
    get(tenantKey, generationId) {
      const e = entries.get(generationId);
      return e && (e.tenantKey ?? e.tenantId) === tenantKey ? e : undefined;
    },
    purgeTenants(retired) {
      let n = 0;
      for (const e of [...entries.values()]) {
        if (!retired(e.tenantKey ?? e.tenantId)) continue;
        n++;
        if (e.state === 'finished') forget(e.generationId);
        else e.stop('cancel_requested');
      }
      return n;
    },
    finish(generationId, outcome) {
      const e = entries.get(generationId);
      if (!e || e.state === 'finished') return;
      e.state = 'finished';
      e.outcome = outcome;
      // The revision that answered (after a fallback, not the first choice), or the last tried.
      e.modelRevision = outcome.modelRevision;
      e.stop = STOPPED;
      e.finishedAt = now();
      e.retained = retainedBytesOf(e);
      finishedOrder.set(generationId, true);
      retainedBytes += e.retained;
      while (finishedOrder.size > maxFinished || (retainedBytes > maxRetainedBytes && finishedOrder.size > 0)) {
        forget(finishedOrder.keys().next().value as string);
      }
    },
    active() {
      const out: TrackedGeneration[] = [];
      for (const e of entries.values()) if (e.state !== 'finished') out.push(e);
      return out;
    },
    retained() {
      return { finished: finishedOrder.size, bytes: retainedBytes };
    },
    close() {
      clearInterval(sweep);
    },
  };
}

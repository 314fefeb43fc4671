/**
 * Live and recently finished generations of this gateway, by generation id: what
 * `GET /v1/generations/{id}` and `POST /v1/generations/{id}/cancel` act on. Entries of
 * finished generations are kept for `retentionMs` (default 10 min), then swept.
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
  /** The entry, only if it belongs to `tenantId` (another tenant's id is "not found"). */
  get(tenantId: string, generationId: string): TrackedGeneration | undefined;
  finish(generationId: string, outcome: GenerationOutcome): void;
  /** Generations not yet finished. */
  active(): TrackedGeneration[];
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
  /** How long a finished generation stays (ms). Default 600,000. */
  retentionMs?: number;
  /** Most finished generations kept. Default 10,000. */
  maxFinished?: number;
  /** Most transcript text kept over all finished generations (UTF-16 units). Default 32 Mi. */
  maxRetainedChars?: number;
  /** Wall clock (ms). Default `Date.now`. */
  now?: () => number;
}

/**
 * Creates a registry with a periodic (unref'd) sweep. Finished entries are kept for
 * `retentionMs` (default 10 min) but at most `maxFinished` of them (default 10,000) holding at
 * most `maxRetainedChars` of transcript text (default 32 Mi UTF-16 units, ≈ 64 MiB); the
 * oldest go first, so memory stays bounded at any request rate.
 */
export function createGenerationRegistry(options: GenerationRegistryOptions = {}): GenerationRegistry {
  const retentionMs = options.retentionMs ?? 600_000;
  const maxFinished = options.maxFinished ?? 10_000;
  const maxRetainedChars = options.maxRetainedChars ?? 32 * 1024 * 1024;
  let retainedChars = 0;
  const now = options.now ?? Date.now;
  const entries = new Map<string, TrackedGeneration & { finishedAt?: number }>();
  // Finished ids in finishing order (Map iteration order), for the cap.
  const finishedOrder = new Map<string, true>();
  const sweep = setInterval(() => {
    const cutoff = now() - retentionMs;
    for (const [id, e] of entries) {
      if (e.finishedAt !== undefined && e.finishedAt < cutoff) {
        entries.delete(id);
        finishedOrder.delete(id);
        retainedChars -= e.transcript?.size ?? 0;
      }
    }
  }, Math.min(retentionMs, 60_000));
  sweep.unref();
  return {
    add(entry) {
      entries.set(entry.generationId, entry);
    },
    get(tenantId, generationId) {
      const e = entries.get(generationId);
      return e && e.tenantId === tenantId ? e : undefined;
    },
    finish(generationId, outcome) {
      const e = entries.get(generationId);
      if (!e) return;
      e.state = 'finished';
      e.outcome = outcome;
      // The revision that answered (after a fallback, not the first choice), or the last tried.
      e.modelRevision = outcome.modelRevision;
      e.finishedAt = now();
      finishedOrder.set(generationId, true);
      retainedChars += e.transcript?.size ?? 0;
      while (finishedOrder.size > maxFinished || (retainedChars > maxRetainedChars && finishedOrder.size > 0)) {
        const oldest = finishedOrder.keys().next().value as string;
        finishedOrder.delete(oldest);
        retainedChars -= entries.get(oldest)?.transcript?.size ?? 0;
        entries.delete(oldest);
      }
    },
    active() {
      return [...entries.values()].filter((e) => e.state !== 'finished');
    },
    close() {
      clearInterval(sweep);
    },
  };
}

/**
 * Scheduler pushback at the gateway: a small in-memory memo of the scheduler's recent
 * refusals, so a tenant flooding a full pool is refused cheaply by the gateway itself instead
 * of paying, for every refused request, a tokenizer call, an admission reservation (a
 * transaction), a scheduler call and a release (another transaction) on the front end every
 * tenant shares (see `defaults.scheduling.pushback_ms` and docs/architecture.md, Scheduling).
 *
 * It is the server-pushback idea of gRPC's retry design (proposal A6: a server that is
 * overloaded tells its clients to hold off for a while, and they do, instead of retrying into
 * it), applied between the gateway and the scheduler; and the usual load-shedding rule of
 * Envoy's overload manager and Netflix's concurrency limits: refuse as early and as cheaply as
 * possible once it is known that the work will be refused anyway.
 *
 * The memo is only a shortcut for a verdict the scheduler just gave: it is per gateway
 * process, bounded, and forgets a refusal after at most `holdMs` or at the first grant for the
 * same key, whichever comes first. A stale memo therefore costs at most `holdMs` of refusals
 * that the scheduler might have accepted, all of them retryable.
 */
import type { Clock, RequestPriority } from '@weir/core';

/** What a refusal is remembered for: one tenant's requests of one scheduling class to one revision. */
export interface PushbackKey {
  tenantId: string;
  revisionId: string;
  /** The request's scheduling class (a batch refusal never holds back interactive work, nor the reverse). */
  priority: RequestPriority;
}

/** The refusals that are remembered (`shed` batch work is noted as `queue_full`, as the pipeline answers it). */
export type PushbackCode = 'queue_full' | 'deadline_unmeetable';

/** A scheduler refusal, as {@link SchedulerPushback.noteRefusal} takes it. */
export interface PushbackRefusal {
  code: PushbackCode;
  /** The scheduler's message (actionable; it is repeated to the requests the memo refuses). */
  message: string;
  /**
   * The scheduler's `Retry-After` hint (ms from the refusal), absent when it gave none. The
   * memo holds the refusal for `min(holdMs, retryAfterMs ?? holdMs)`, and answers with what is
   * left of the hint.
   */
  retryAfterMs?: number;
  /**
   * The refused request's time left to its deadline (ms), measured at the same point of the
   * request path as the `slackMs` later given to `check` (the pipeline: where it consults the
   * memo, before the token count and the reservation), so that like requests compare equal.
   * For `deadline_unmeetable` only requests with at most this much slack are refused from
   * memory; unused for `queue_full`.
   */
  slackMs: number;
  /**
   * The refused request's output limit (tokens). A `deadline_unmeetable` memo refuses only
   * requests asking for at least as much output (a shorter answer may fit where a longer did
   * not). Default 0 (every request).
   */
  outputTokens?: number;
}

/** A remembered refusal that applies to a request, as {@link SchedulerPushback.check} returns it. */
export interface PushbackMemo {
  code: PushbackCode;
  /** The scheduler's message of the remembered refusal. */
  message: string;
  /** How much longer the memo holds the refusal (ms, > 0, rounded up). */
  remainingMs: number;
  /**
   * The hint to give the refused client (ms, ≥ `remainingMs`, rounded up): what is left of the
   * scheduler's own `Retry-After` hint, never less than the time the memo still holds (a client
   * that retries earlier is refused from memory again); `remainingMs` when the scheduler gave none.
   */
  retryAfterMs: number;
}

/** Options of {@link createSchedulerPushback}. */
export interface SchedulerPushbackOptions {
  /**
   * The longest a refusal is remembered (ms); 0 turns the memo off (`check` always answers
   * undefined and nothing is stored). The configuration's `defaults.scheduling.pushback_ms`,
   * default 250 (`DEFAULT_SCHEDULING.pushbackMs`).
   */
  holdMs: number;
  /** The clock refusals are timed on (ms); the pipeline's clock. */
  clock: Clock;
  /**
   * The most keys remembered at once; noting a refusal beyond it forgets the oldest noted one
   * first (forgetting early only lets requests through to the scheduler). Default 10,000.
   */
  maxKeys?: number;
}

/** The memo of recent scheduler refusals (see the module comment). */
export interface SchedulerPushback {
  /**
   * Remembers a refusal for `key` until `now + min(holdMs, refusal.retryAfterMs ?? holdMs)`,
   * replacing what was remembered for it (the latest verdict wins). A hold of 0 or less
   * stores nothing.
   */
  noteRefusal(key: PushbackKey, refusal: PushbackRefusal): void;
  /**
   * Forgets `key`'s refusal: the scheduler just granted a request of that key *at once*, so
   * there is free capacity. (A grant to a request that had queued says only that the queue
   * moves, not that a new one would fit: the pipeline does not call this for those.)
   */
  noteGrant(key: PushbackKey): void;
  /**
   * The remembered refusal that applies to a request of `key` with `slackMs` (ms) left to its
   * deadline, or undefined when it should go to the scheduler. A `queue_full` memo applies to
   * every request of the key; a `deadline_unmeetable` memo only to requests with no more slack
   * than the refused one had plus the scheduler's `Retry-After` hint (which is at least how far
   * its estimate overshot the deadline: a request with more slack than that might still be
   * met). Expired entries are dropped here.
   */
  check(key: PushbackKey, slackMs: number, outputTokens?: number): PushbackMemo | undefined;
  /** Keys currently stored, expired ones not yet dropped included (for tests and metrics). */
  readonly size: number;
}

interface Entry {
  code: PushbackCode;
  message: string;
  slackMs: number;
  /** The scheduler's hint (ms), 0 without one: how much more slack would still be refused. */
  overshootMs: number;
  /** The refused request's output limit (tokens). */
  outputTokens: number;
  /** Clock time (ms) the memo stops holding the refusal. */
  expiresAt: number;
  /** Clock time (ms) the scheduler's hint points at; undefined when it gave none. */
  retryAt: number | undefined;
}

/** Default of {@link SchedulerPushbackOptions.maxKeys}. */
export const DEFAULT_PUSHBACK_MAX_KEYS = 10_000;

const keyOf = (key: PushbackKey): string => `${key.tenantId}\u0000${key.revisionId}\u0000${key.priority}`;

/**
 * Creates the memo. Throws `RangeError` for a negative or non-finite `holdMs`, or a `maxKeys`
 * that is not a positive integer.
 */
export function createSchedulerPushback(options: SchedulerPushbackOptions): SchedulerPushback {
  const { holdMs, clock } = options;
  const maxKeys = options.maxKeys ?? DEFAULT_PUSHBACK_MAX_KEYS;
  if (!Number.isFinite(holdMs) || holdMs < 0) throw new RangeError(`holdMs must be a finite number >= 0 (ms), got ${holdMs}`);
  if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new RangeError(`maxKeys must be a positive integer, got ${maxKeys}`);
  // Insertion order = order of noting (a re-noted key is moved to the end), so the first key is the oldest.
  const entries = new Map<string, Entry>();

  /** Drops expired entries at the front (amortized: each entry is dropped once). */
  const dropExpiredHead = (now: number) => {
    for (const [k, e] of entries) {
      if (e.expiresAt > now) return;
      entries.delete(k);
    }
  };

  return {
    noteRefusal(key, refusal) {
      if (holdMs === 0) return;
      const now = clock.now();
      const hold = Math.min(holdMs, refusal.retryAfterMs ?? holdMs);
      const k = keyOf(key);
      entries.delete(k);
      dropExpiredHead(now);
      if (!(hold > 0)) return;
      while (entries.size >= maxKeys) {
        const oldest = entries.keys().next().value as string;
        entries.delete(oldest);
      }
      entries.set(k, {
        code: refusal.code,
        message: refusal.message,
        slackMs: refusal.slackMs,
        overshootMs: refusal.retryAfterMs ?? 0,
        outputTokens: refusal.outputTokens ?? 0,
        expiresAt: now + hold,
        retryAt: refusal.retryAfterMs === undefined ? undefined : now + refusal.retryAfterMs,
      });
    },

    noteGrant(key) {
      entries.delete(keyOf(key));
    },

    check(key, slackMs, outputTokens) {
      if (holdMs === 0) return undefined;
      const k = keyOf(key);
      const e = entries.get(k);
      if (!e) return undefined;
      const now = clock.now();
      if (e.expiresAt <= now) {
        entries.delete(k);
        return undefined;
      }
      if (e.code === 'deadline_unmeetable' && (slackMs > e.slackMs + e.overshootMs || (outputTokens ?? Infinity) < e.outputTokens)) return undefined;
      const remainingMs = Math.ceil(e.expiresAt - now);
      const retryAfterMs = e.retryAt === undefined ? remainingMs : Math.max(remainingMs, Math.ceil(e.retryAt - now));
      return { code: e.code, message: e.message, remainingMs, retryAfterMs };
    },

    get size() {
      return entries.size;
    },
  };
}

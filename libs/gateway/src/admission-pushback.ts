/**
 * Admission pushback (issue 14 part 2): a small in-memory memo of admission's recent refusals
 * that any further request of the same caller would get too, so that a tenant already refused
 * is refused again before its input is tokenized and its output schema compiled — the CPU other
 * tenants need — and not after. The scheduler's equivalent is `scheduler-pushback.ts`.
 *
 * Only refusals that hold for every request of the caller are remembered:
 * - `rate_limited` with the requests window empty (`rateLimits.requests.remaining < 1`): every
 *   request needs one; held for admission's retry hint (a token-window refusal is not held: a
 *   smaller request may pass);
 * - `concurrency_limited`: held until a generation of the tenant ends on this gateway, or for
 *   `holdMs` (a slot freed behind another gateway is not seen here);
 * - `budget_exhausted`: held for `holdMs` (a raised budget takes effect within it), or for
 *   admission's hint when shorter (the budget's rest is held by other admission instances).
 *
 * Keyed by tenant and app (a refusal of one app never holds back another), bounded in size,
 * per gateway process. A stale memo costs at most `holdMs` (or the rate window's own hint) of
 * refusals admission might have accepted.
 */
import { appKeyOf, type Caller, type RateLimitStatus, type RejectReason, tenantKeyOf } from '@weir/core';

/** A refusal as admission gave it. */
export interface AdmissionRefusal {
  reason: RejectReason;
  message: string;
  retryAfterMs?: number;
  rateLimits?: RateLimitStatus;
}

/** A remembered refusal that applies now: what to answer, and for how much longer (ms). */
export interface AdmissionMemo extends AdmissionRefusal {
  retryAfterMs: number;
  /** Whether admission gave a retry hint (a spent budget gives none: retrying cannot help). */
  hinted: boolean;
}

/** The memo. */
export interface AdmissionPushback {
  /** The refusal `caller` gets now without further work, if one is remembered (`nowMs` on the pipeline's clock). */
  check(caller: Caller, nowMs: number): AdmissionMemo | undefined;
  /** Notes a refusal of `caller` by admission; refusals that do not hold for every request are ignored. */
  noteRefusal(caller: Caller, refusal: AdmissionRefusal, nowMs: number): void;
  /** A generation of the tenant (`tenantKeyOf`: its internal id) ended here: concurrency refusals of its apps are forgotten. */
  noteEnded(tenantKey: string): void;
}

/** Callers remembered at most (the oldest is forgotten first). */
const MAX_ENTRIES = 10_000;

interface Entry extends AdmissionRefusal {
  tenantId: string;
  untilMs: number;
}

/**
 * Creates the memo. `holdMs` (ms, 0 = off) bounds how long a concurrency or budget refusal is
 * held; a rate refusal is held for admission's own retry hint (at most a minute).
 */
export function createAdmissionPushback(options: { holdMs: number }): AdmissionPushback {
  const entries = new Map<string, Entry>();
  /** Keys of concurrency refusals by tenant, so that an ending generation forgets them in O(1). */
  const concurrency = new Map<string, Set<string>>();
  const forget = (key: string, entry: Entry) => {
    entries.delete(key);
    const keys = concurrency.get(entry.tenantId);
    if (keys?.delete(key) && keys.size === 0) concurrency.delete(entry.tenantId);
  };
  // Filed under the internal ids: a tenant created again under a deleted one's slug inherits none of its refusals.
  const keyOf = (caller: Caller) => `${tenantKeyOf(caller)}\u0000${appKeyOf(caller)}`;
  const off = options.holdMs <= 0;
  return {
    check(caller, nowMs) {
      if (entries.size === 0) return undefined;
      const key = keyOf(caller);
      const entry = entries.get(key);
      if (!entry) return undefined;
      if (nowMs >= entry.untilMs) {
        forget(key, entry);
        return undefined;
      }
      return {
        reason: entry.reason,
        message: entry.message,
        retryAfterMs: Math.ceil(entry.untilMs - nowMs),
        hinted: entry.retryAfterMs !== undefined,
        ...(entry.rateLimits ? { rateLimits: entry.rateLimits } : {}),
      };
    },
    noteRefusal(caller, refusal, nowMs) {
      if (off) return;
      let holdMs: number;
      if (refusal.reason === 'rate_limited') {
        const requests = refusal.rateLimits?.requests;
        if (!requests || requests.remaining >= 1 || refusal.retryAfterMs === undefined) return;
        holdMs = Math.min(refusal.retryAfterMs, 60_000);
      } else if (refusal.reason === 'concurrency_limited') {
        holdMs = Math.min(refusal.retryAfterMs ?? options.holdMs, options.holdMs);
      } else holdMs = Math.min(refusal.retryAfterMs ?? options.holdMs, options.holdMs);
      const key = keyOf(caller);
      const old = entries.get(key);
      if (old) forget(key, old);
      const entry: Entry = { ...refusal, tenantId: tenantKeyOf(caller), untilMs: nowMs + holdMs };
      entries.set(key, entry);
      if (refusal.reason === 'concurrency_limited') {
        let keys = concurrency.get(entry.tenantId);
        if (!keys) concurrency.set(entry.tenantId, (keys = new Set()));
        keys.add(key);
      }
      if (entries.size > MAX_ENTRIES) {
        const oldest = entries.keys().next().value as string;
        forget(oldest, entries.get(oldest) as Entry);
      }
    },
    noteEnded(tenantId) {
      if (concurrency.size === 0) return;
      const keys = concurrency.get(tenantId);
      if (!keys) return;
      concurrency.delete(tenantId);
      for (const key of keys) entries.delete(key);
    },
  };
}

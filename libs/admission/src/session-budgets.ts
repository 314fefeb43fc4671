/**
 * Session budgets (issue 16 item 6): an agent run or session names itself with
 * `x-weir-session-id` (`ReservationRequest.sessionId`), and — when the caller's app allows
 * sessions (`AdmissionLimits.sessionMaxTokens` and/or `sessionBudgetUsd`) — its lifetime tokens
 * and dollars are capped under the same reserve-then-settle rules as every other scope: a
 * request's worst case (input tokens + output limit; its worst-case cost) is held against the
 * session before admission reserves anything else, and settled to the measured tokens and cost
 * (or released) when the request ends. A runaway agent loop stops at its cap with a 429
 * `budget_exhausted` naming the session; it cannot spend its app's month.
 *
 * State is in memory, in the process that decides admission (the all-in-one; each admission
 * service instance of the split), bounded: at most `maxSessions` sessions (the least recently
 * used idle one is forgotten first), each forgotten after its app's idle TTL. A reservation that
 * is never settled nor released (its gateway died) counts at its whole worst case once it is
 * past its `expiresAtMs`, as an expired lease reservation does.
 */
import { type AdmissionService, type Caller, type ReservationRequest, type ReserveResult, type Settlement, type TenantSpec, appKeyOf, tenantKeyOf } from '@weir/core';
import { NANO_PER_USD } from './admission-state';
import { formatUsd } from './decide';

/** Default idle TTL of a session (ms): 1 h. */
export const DEFAULT_SESSION_IDLE_TTL_MS = 3_600_000;
/** Default most sessions remembered at once. */
export const DEFAULT_MAX_SESSIONS = 100_000;

/** Options of {@link createSessionBudgets}. */
export interface SessionBudgetOptions {
  /** The configured tenants: each app's session caps are read from its limits. */
  tenants: readonly TenantSpec[];
  /** Most sessions remembered at once. Default {@link DEFAULT_MAX_SESSIONS}. */
  maxSessions?: number;
  /** Wall clock, epoch ms. Default `Date.now`. */
  clock?: { now(): number };
}

/** Session budgets over an admission port (see the module comment). */
export interface SessionBudgets {
  /** `inner` with session caps checked, held and settled around its reserve, settle and release. */
  wrap<T extends AdmissionService>(inner: T): T;
  /** Replaces the tenants (a new configuration snapshot): the next reserve uses their caps. */
  updateTenants(tenants: readonly TenantSpec[]): void;
  /** Sessions remembered now (for tests and a gauge). */
  size(): number;
  /** A session's usage as held now: tokens and nano-USD used and in flight; undefined when unknown. */
  usage(caller: Caller, sessionId: string): { usedTokens: number; usedNano: number; heldTokens: number; heldNano: number } | undefined;
}

interface Hold {
  tokens: number;
  nano: number;
  expiresAtMs: number;
}

interface Session {
  usedTokens: number;
  usedNano: number;
  heldTokens: number;
  heldNano: number;
  /** Held reservations by id. */
  holds: Map<string, Hold>;
  lastUsedMs: number;
  idleTtlMs: number;
}

interface Policy {
  maxTokens?: number;
  maxNano?: number;
  idleTtlMs: number;
}

/**
 * Creates session budgets. `wrap(inner).reserve` refuses (a value, nothing held) with
 * `budget_exhausted` when the session's used + in-flight + this request's worst case would pass
 * its token or dollar cap, and with `concurrency_limited` (retry hint 1 s) when `maxSessions`
 * sessions all have requests in flight; otherwise it holds the worst case and calls `inner`
 * (releasing the hold when `inner` refuses or throws). A request without a session id, or of an
 * app without session caps, goes to `inner` unchanged.
 */
export function createSessionBudgets(options: SessionBudgetOptions): SessionBudgets {
  const clock = options.clock ?? { now: () => Date.now() };
  const maxSessions = Math.max(1, options.maxSessions ?? DEFAULT_MAX_SESSIONS);
  let policies = policiesOf(options.tenants);
  /** By `tenant key \0 app key \0 session id`; Map order is the LRU order (touched ones move last). */
  const sessions = new Map<string, Session>();
  /** Held reservation id → its session's key. */
  const byReservation = new Map<string, string>();

  const keyOf = (caller: Caller, sessionId: string) => `${tenantKeyOf(caller)}\u0000${appKeyOf(caller)}\u0000${sessionId}`;

  /** Holds past their expiry count at their whole worst case (their settlement never came). */
  const expireHolds = (s: Session, nowMs: number) => {
    for (const [id, h] of s.holds) {
      if (h.expiresAtMs > nowMs) continue;
      s.holds.delete(id);
      byReservation.delete(id);
      s.heldTokens -= h.tokens;
      s.heldNano -= h.nano;
      s.usedTokens += h.tokens;
      s.usedNano += h.nano;
    }
  };
  const idle = (s: Session, nowMs: number) => s.holds.size === 0 && nowMs - s.lastUsedMs >= s.idleTtlMs;

  /** The session of `key`, fresh when unknown or idle past its TTL; undefined when none can be made room for. */
  const sessionFor = (key: string, policy: Policy, nowMs: number): Session | undefined => {
    let s = sessions.get(key);
    if (s) {
      expireHolds(s, nowMs);
      if (idle(s, nowMs)) {
        sessions.delete(key);
        s = undefined;
      }
    }
    if (!s) {
      if (sessions.size >= maxSessions && !evictOne(nowMs)) return undefined;
      s = { usedTokens: 0, usedNano: 0, heldTokens: 0, heldNano: 0, holds: new Map(), lastUsedMs: nowMs, idleTtlMs: policy.idleTtlMs };
    } else sessions.delete(key);
    s.lastUsedMs = nowMs;
    s.idleTtlMs = policy.idleTtlMs;
    sessions.set(key, s);
    return s;
  };

  /** Forgets the least recently used session with nothing in flight (expired holds counted first); false when every one has requests in flight. */
  const evictOne = (nowMs: number): boolean => {
    for (const [key, s] of sessions) {
      expireHolds(s, nowMs);
      if (s.holds.size === 0) {
        sessions.delete(key);
        return true;
      }
    }
    return false;
  };

  const unhold = (id: string): { session: Session; hold: Hold } | undefined => {
    const key = byReservation.get(id);
    if (key === undefined) return undefined;
    byReservation.delete(id);
    const session = sessions.get(key);
    const hold = session?.holds.get(id);
    if (!session || !hold) return undefined;
    session.holds.delete(id);
    session.heldTokens -= hold.tokens;
    session.heldNano -= hold.nano;
    session.lastUsedMs = clock.now();
    return { session, hold };
  };

  const refusal = (request: ReservationRequest, s: Session, policy: Policy, need: number, worst: number): string | undefined => {
    const id = request.sessionId as string;
    if (policy.maxTokens !== undefined && s.usedTokens + s.heldTokens + need > policy.maxTokens) {
      return (
        `Session '${id}' has reached its cap of ${policy.maxTokens} tokens: ${s.usedTokens} used and ${s.heldTokens} held by requests in flight, ` +
        `and this request may use up to ${need} (input + max_tokens). Start a new session (x-weir-session-id), or ask for a higher session cap.`
      );
    }
    if (policy.maxNano !== undefined && s.usedNano + s.heldNano + worst > policy.maxNano) {
      return (
        `Session '${id}' has reached its budget of ${formatUsd(policy.maxNano)}: ${formatUsd(s.usedNano)} spent and ${formatUsd(s.heldNano)} held by requests in flight, ` +
        `and this request may cost up to ${formatUsd(worst)}. Start a new session (x-weir-session-id), or ask for a higher session budget.`
      );
    }
    return undefined;
  };

  return {
    updateTenants(tenants) {
      policies = policiesOf(tenants);
    },
    size: () => sessions.size,
    usage(caller, sessionId) {
      const s = sessions.get(keyOf(caller, sessionId));
      return s ? { usedTokens: s.usedTokens, usedNano: s.usedNano, heldTokens: s.heldTokens, heldNano: s.heldNano } : undefined;
    },
    wrap<T extends AdmissionService>(inner: T): T {
      return {
        ...inner,
        async reserve(request: ReservationRequest): Promise<ReserveResult> {
          const policy = request.sessionId === undefined ? undefined : policies.get(`${request.caller.tenantId}\u0000${request.caller.appId}`);
          if (!policy) return inner.reserve(request);
          const nowMs = clock.now();
          const key = keyOf(request.caller, request.sessionId as string);
          const s = sessionFor(key, policy, nowMs);
          if (!s) {
            return { ok: false, reason: 'concurrency_limited', message: `Too many sessions have requests in flight (${maxSessions}); retry when one finishes.`, retryAfterMs: 1_000 };
          }
          const need = request.inputTokens + request.maxOutputTokens;
          const worst = request.worstCaseCostNanoUsd;
          const refused = refusal(request, s, policy, need, worst);
          if (refused) return { ok: false, reason: 'budget_exhausted', message: refused };
          // Held before admission decides, so concurrent requests of one session never both pass.
          const pending = `pending:${request.generationId}`;
          s.holds.set(pending, { tokens: need, nano: worst, expiresAtMs: request.expiresAtMs });
          s.heldTokens += need;
          s.heldNano += worst;
          byReservation.set(pending, key);
          let result: ReserveResult;
          try {
            result = await inner.reserve(request);
          } catch (err) {
            unhold(pending);
            throw err;
          }
          const hold = unhold(pending);
          if (!result.ok || !hold) return result;
          hold.session.holds.set(result.reservationId, hold.hold);
          hold.session.heldTokens += hold.hold.tokens;
          hold.session.heldNano += hold.hold.nano;
          byReservation.set(result.reservationId, key);
          if (!sessions.has(key)) sessions.set(key, hold.session);
          return result;
        },
        async settle(reservationId: string, settlement: Settlement): Promise<void> {
          await inner.settle(reservationId, settlement);
          const done = unhold(reservationId);
          if (!done) return;
          done.session.usedTokens += settlement.usage.inputTokens + settlement.usage.outputTokens;
          done.session.usedNano += settlement.costNanoUsd;
        },
        async release(reservationId: string): Promise<void> {
          await inner.release(reservationId);
          unhold(reservationId);
        },
      };
    },
  };
}

/** Session caps by `tenant id \0 app id`, for the apps that allow sessions. */
function policiesOf(tenants: readonly TenantSpec[]): Map<string, Policy> {
  const out = new Map<string, Policy>();
  for (const t of tenants) {
    for (const app of t.apps) {
      const l = app.limits;
      if (l.sessionMaxTokens === undefined && l.sessionBudgetUsd === undefined) continue;
      out.set(`${t.id}\u0000${app.id}`, {
        ...(l.sessionMaxTokens !== undefined ? { maxTokens: l.sessionMaxTokens } : {}),
        ...(l.sessionBudgetUsd !== undefined ? { maxNano: Math.round(l.sessionBudgetUsd * NANO_PER_USD) } : {}),
        idleTtlMs: l.sessionIdleTtlMs ?? DEFAULT_SESSION_IDLE_TTL_MS,
      });
    }
  }
  return out;
}

/**
 * Idempotency helpers for the gateway: the canonical hash that tells a repeat of a request
 * from a different request under the same key, and an in-memory {@link IdempotencyStore} for
 * a single process without a database (and for tests). Deployments use the Postgres store
 * (`@weir/store-pg` `createPgIdempotencyStore`), shared by every gateway.
 */
import { createHash } from 'node:crypto';
import type { ApiRoute, IdempotencyClaim, IdempotencyStore, SettlementJournal } from '@weir/core';
import { stringify } from 'safe-stable-stringify';

/**
 * Fields that change how a result is delivered, not what is generated (a client may fetch a
 * streamed result as JSON, or the other way round, under the same key), plus the ones Weir
 * ignores (`user`) and the use-case label, which is hashed separately so the body field and
 * the `x-weir-use-case` header count alike.
 */
const DELIVERY_FIELDS = new Set(['stream', 'stream_options', 'request_id', 'user', 'use_case']);

/**
 * SHA-256 (hex) of the route, the effective use case (body field or header; undefined = none)
 * and the request body in canonical JSON (keys sorted at every level, delivery and ignored
 * fields left out): equal for a repeat of the same request whatever its key order or
 * whitespace.
 */
export function requestBodySha256(route: ApiRoute, body: unknown, useCase?: string): string {
  const material =
    body !== null && typeof body === 'object' && !Array.isArray(body)
      ? Object.fromEntries(Object.entries(body as Record<string, unknown>).filter(([k]) => !DELIVERY_FIELDS.has(k)))
      : body;
  return createHash('sha256').update(`${route}\n${useCase ?? ''}\n${stringify(material) ?? ''}`).digest('hex');
}

/**
 * An in-memory {@link IdempotencyStore}: the same semantics as the Postgres store (claims
 * taken over only when expired, completion only by the claiming generation), for one process.
 */
export function createMemoryIdempotencyStore(
  options: {
    now?: () => number;
    /** `purgeExpired` also drops keys that finished (done or interrupted) this long ago (ms), because they are kept durably elsewhere. Default never. */
    forgetFinishedAfterMs?: number;
  } = {},
): IdempotencyStore {
  const now = options.now ?? Date.now;
  const forgetAfter = options.forgetFinishedAfterMs ?? Number.POSITIVE_INFINITY;
  const keys = new Map<string, IdempotencyClaim & { expiresAtMs: number; finishedAtMs?: number }>();
  const k = (tenantId: string, requestId: string) => `${tenantId}\u0000${requestId}`;
  const live = (tenantId: string, requestId: string) => {
    const c = keys.get(k(tenantId, requestId));
    return c && c.expiresAtMs >= now() ? c : undefined;
  };
  const strip = ({ expiresAtMs: _e, finishedAtMs: _f, ...claim }: IdempotencyClaim & { expiresAtMs: number; finishedAtMs?: number }): IdempotencyClaim => claim;
  return {
    async claim(c) {
      const existing = live(c.tenantId, c.requestId);
      if (existing) return { claimed: false, existing: strip(existing) };
      keys.set(k(c.tenantId, c.requestId), {
        tenantId: c.tenantId,
        requestId: c.requestId,
        bodySha256: c.bodySha256,
        generationId: c.generationId,
        route: c.route as ApiRoute,
        state: 'running',
        expiresAtMs: c.leaseUntilMs,
      });
      return { claimed: true };
    },
    async complete(tenantId, requestId, result, retainUntilMs) {
      const c = keys.get(k(tenantId, requestId));
      if (!c || c.generationId !== result.generationId) return;
      c.state = 'done';
      c.result = result;
      c.expiresAtMs = retainUntilMs;
      c.finishedAtMs = now();
    },
    async interrupt(tenantId, requestId, generationId, message, retainUntilMs) {
      const c = keys.get(k(tenantId, requestId));
      if (!c || c.generationId !== generationId) return;
      c.state = 'interrupted';
      c.interruption = message;
      c.expiresAtMs = retainUntilMs;
      c.finishedAtMs = now();
    },
    async abandon(tenantId, requestId, generationId) {
      const c = keys.get(k(tenantId, requestId));
      if (c && c.generationId === generationId) keys.delete(k(tenantId, requestId));
    },
    async get(tenantId, requestId) {
      const c = live(tenantId, requestId);
      return c ? strip(c) : undefined;
    },
    async findClaimByGeneration(tenantId, generationId) {
      for (const c of keys.values()) {
        if (c.tenantId === tenantId && c.generationId === generationId && c.expiresAtMs >= now()) return strip(c);
      }
      return undefined;
    },
    async findResult(tenantId, generationId) {
      for (const c of keys.values()) {
        if (c.tenantId === tenantId && c.generationId === generationId && c.state === 'done' && c.expiresAtMs >= now()) return c.result;
      }
      return undefined;
    },
    async purgeExpired(nowMs) {
      let n = 0;
      for (const [key, c] of keys) {
        if (c.expiresAtMs < nowMs || (c.finishedAtMs !== undefined && c.finishedAtMs + forgetAfter < nowMs)) {
          keys.delete(key);
          n++;
        }
      }
      return n;
    },
  };
}

/** Options of {@link createJournaledIdempotencyStore}. */
export interface JournaledIdempotencyStoreOptions {
  /** The settlement journal: claims are journaled (recovery marks a dead generation's key `interrupted`), abandons released. */
  journal: Pick<SettlementJournal, 'claim' | 'release'>;
  /** Where finished keys live durably (the Postgres store over the ledger's database): looked up on a miss, purged. */
  durable: IdempotencyStore;
  /**
   * How long a finished key stays in memory after it finished (ms): longer than the journal's
   * applier needs to make it durable, so a retry never misses it (the gateway's purge, every
   * minute by default, drops it after). Default 60,000.
   */
  keepFinishedMs?: number;
  /** Wall clock (epoch ms). Default `Date.now`. */
  now?: () => number;
}

/**
 * Idempotency for a process that owns its keys (the all-in-one; ADR 0002 §2): live claims are
 * decided in memory — no database round trip on the request path — and journaled (`journal.claim`),
 * so that a crash leaves the key `interrupted` rather than free; results and interruptions reach the
 * database through the settlement journal (the relay's entry), so this store keeps them in memory
 * only until they are durable (`keepFinishedMs`) and reads the durable store on a miss. A key the
 * durable store shows `running` was claimed by a process that is gone (this one owns the keys) and
 * is taken over. Two processes sharing one database and one tenant's keys need the Postgres store.
 */
export function createJournaledIdempotencyStore(options: JournaledIdempotencyStoreOptions): IdempotencyStore {
  const now = options.now ?? Date.now;
  const keepMs = options.keepFinishedMs ?? 60_000;
  const { journal, durable } = options;
  // Finished keys leave memory once durable (the gateway's periodic purge drops them).
  const live = createMemoryIdempotencyStore({ now, forgetFinishedAfterMs: keepMs });
  return {
    async claim(c) {
      const mem = await live.get(c.tenantId, c.requestId);
      if (mem) return { claimed: false, existing: mem };
      const stored = await durable.get(c.tenantId, c.requestId);
      if (stored && stored.state !== 'running') return { claimed: false, existing: stored };
      const taken = await live.claim(c);
      if (!taken.claimed) return taken;
      await journal.claim({
        tenantId: c.tenantId,
        key: c.requestId,
        generationId: c.generationId,
        bodySha256: c.bodySha256,
        route: c.route,
        retainUntilMs: c.leaseUntilMs,
        atMs: now(),
      });
      return taken;
    },
    complete: (tenantId, requestId, result, retainUntilMs) => live.complete(tenantId, requestId, result, retainUntilMs),
    interrupt: (tenantId, requestId, generationId, message, retainUntilMs) => live.interrupt(tenantId, requestId, generationId, message, retainUntilMs),
    async abandon(tenantId, requestId, generationId) {
      await live.abandon(tenantId, requestId, generationId);
      journal.release(generationId);
    },
    async get(tenantId, requestId) {
      return (await live.get(tenantId, requestId)) ?? durable.get(tenantId, requestId);
    },
    async findClaimByGeneration(tenantId, generationId) {
      return (await live.findClaimByGeneration(tenantId, generationId)) ?? durable.findClaimByGeneration(tenantId, generationId);
    },
    async findResult(tenantId, generationId) {
      return (await live.findResult(tenantId, generationId)) ?? durable.findResult(tenantId, generationId);
    },
    async purgeExpired(nowMs) {
      return (await live.purgeExpired(nowMs)) + (await durable.purgeExpired(nowMs));
    },
  };
}

/**
 * Idempotency helpers for the gateway: the canonical hash that tells a repeat of a request
 * from a different request under the same key, and an in-memory {@link IdempotencyStore} for
 * a single process without a database (and for tests). Deployments use the Postgres store
 * (`@weir/store-pg` `createPgIdempotencyStore`), shared by every gateway.
 */
import { createHash } from 'node:crypto';
import type { ApiRoute, IdempotencyClaim, IdempotencyStore } from '@weir/core';
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
export function createMemoryIdempotencyStore(options: { now?: () => number } = {}): IdempotencyStore {
  const now = options.now ?? Date.now;
  const keys = new Map<string, IdempotencyClaim & { expiresAtMs: number }>();
  const k = (tenantId: string, requestId: string) => `${tenantId}\u0000${requestId}`;
  const live = (tenantId: string, requestId: string) => {
    const c = keys.get(k(tenantId, requestId));
    return c && c.expiresAtMs >= now() ? c : undefined;
  };
  const strip = ({ expiresAtMs: _e, ...claim }: IdempotencyClaim & { expiresAtMs: number }): IdempotencyClaim => claim;
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
        if (c.expiresAtMs < nowMs) {
          keys.delete(key);
          n++;
        }
      }
      return n;
    },
  };
}

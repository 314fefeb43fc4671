/**
 * In-process admission enforcing each tenant's concurrent-request limit with reservations:
 * `reserve` holds a slot (and records the worst-case tokens and cost the request may use),
 * `settle` and `release` free it, each exactly once. Rejections are values with a retry hint.
 *
 * Token-per-minute, request-per-minute and dollar budgets with durable reservations arrive
 * with issue 4 behind the same `AdmissionService` port.
 */
import { type AdmissionService, type ReservationRequest, type Settlement, type TenantSpec, newId } from '@weir/core';

/** A held reservation, as admission sees it. */
export interface Reservation {
  id: string;
  request: ReservationRequest;
  createdAtMs: number;
}

/** Admission plus a read-only view of what it holds (for metrics, tests and reconciliation). */
export interface InMemoryAdmission extends AdmissionService {
  /** Reservations currently held. */
  held(): Reservation[];
  /** Concurrent requests held for a tenant. */
  inFlight(tenantId: string): number;
}

/** Options of {@link createConcurrencyAdmission}. */
export interface ConcurrencyAdmissionOptions {
  tenants: TenantSpec[];
  /** Suggested wait before retrying a concurrency rejection (ms). Default 1,000. */
  retryAfterMs?: number;
  now?: () => number;
}

/** Creates in-process concurrency admission. */
export function createConcurrencyAdmission(options: ConcurrencyAdmissionOptions): InMemoryAdmission {
  const limits = new Map(options.tenants.map((t) => [t.id, t.limits.maxConcurrent]));
  const retryAfterMs = options.retryAfterMs ?? 1_000;
  const now = options.now ?? Date.now;
  const reservations = new Map<string, Reservation>();
  const perTenant = new Map<string, number>();

  const free = (id: string) => {
    const r = reservations.get(id);
    if (!r) return;
    reservations.delete(id);
    const t = r.request.caller.tenantId;
    perTenant.set(t, (perTenant.get(t) ?? 1) - 1);
  };

  return {
    async reserve(request) {
      const tenantId = request.caller.tenantId;
      const limit = limits.get(tenantId);
      if (limit === undefined) {
        return { ok: false, reason: 'concurrency_limited', message: `tenant ${tenantId} has no admission policy` };
      }
      const current = perTenant.get(tenantId) ?? 0;
      if (current >= limit) {
        return {
          ok: false,
          reason: 'concurrency_limited',
          message: `Your tenant already has ${current} requests in flight, its limit; retry when one finishes.`,
          retryAfterMs,
        };
      }
      const id = newId('rsv');
      reservations.set(id, { id, request, createdAtMs: now() });
      perTenant.set(tenantId, current + 1);
      return { ok: true, reservationId: id };
    },
    async settle(reservationId: string, _settlement: Settlement) {
      free(reservationId);
    },
    async release(reservationId) {
      free(reservationId);
    },
    held: () => [...reservations.values()],
    inFlight: (tenantId) => perTenant.get(tenantId) ?? 0,
  };
}

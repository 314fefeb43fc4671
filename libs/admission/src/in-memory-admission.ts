/**
 * Admission in one process, over the in-memory store: the full engine (every limit, budgets,
 * reserve → settle → release) without durability. For unit tests and embedders that need no
 * Postgres; the all-in-one and the admission service use the Postgres store.
 */
import type { TenantSpec } from '@weir/core';
import { type ReservationRecord, tenantScope } from './admission-state';
import { type Admission, type AdmissionObserver, createAdmission } from './admission';
import { type InMemoryAdmissionStore, createInMemoryAdmissionStore } from './in-memory-admission-store';

/** Admission plus synchronous read-only views of what it holds (for tests and metrics). */
export interface InMemoryAdmission extends Admission {
  /** Reservations currently held. */
  held(): ReservationRecord[];
  /** Concurrent requests held for a tenant. */
  inFlight(tenantId: string): number;
  /** The store underneath (tests record ledger rows on it). */
  store: InMemoryAdmissionStore;
}

/** Options of {@link createInMemoryAdmission}. */
export interface InMemoryAdmissionOptions {
  tenants: readonly TenantSpec[];
  /** Retry hint for a concurrency rejection (ms). Default 1,000. */
  retryAfterMs?: number;
  /** Wall clock (epoch ms). Default `Date.now`. */
  now?: () => number;
  observer?: AdmissionObserver;
}

/** Creates admission over a fresh in-memory store. */
export function createInMemoryAdmission(options: InMemoryAdmissionOptions): InMemoryAdmission {
  const store = createInMemoryAdmissionStore();
  const admission = createAdmission(
    { tenants: options.tenants, concurrencyRetryAfterMs: options.retryAfterMs },
    { store, clock: options.now ? { now: options.now } : undefined, observer: options.observer },
  );
  return {
    ...admission,
    store,
    held: () => store.reservations().filter((r) => r.state === 'held'),
    inFlight: (tenantId) => store.scope(tenantScope(tenantId))?.inFlight ?? 0,
  };
}

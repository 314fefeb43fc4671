import type { AdmissionService, ReservationRequest, TenantSpec } from '@weir/core';
import { type ContractSubject, contractCallers, contractPlatformConfig } from './port-contract-fixtures';

/** A reservation request for the contract suites (acme, 10 input + 20 output tokens). */
export function reservationRequest(overrides: Partial<ReservationRequest> = {}): ReservationRequest {
  return {
    caller: contractCallers.acme,
    requestId: `req_${Math.random().toString(36).slice(2, 10)}`,
    generationId: `gen_${Math.random().toString(36).slice(2, 10)}`,
    expiresAtMs: Date.now() + 60_000,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: 9_000_000_000,
    ...overrides,
  };
}

/**
 * The contract every `AdmissionService` binding passes (a jest `describe` block), with the
 * semantics of the in-process concurrency admission over the fixture tenants (`acme` holds
 * at most 2, `globex` 1):
 * - reservations within the limit succeed with distinct ids;
 * - one over the limit is rejected `concurrency_limited` with a message and a positive
 *   `retryAfterMs`; an unknown tenant is rejected;
 * - `settle` and `release` each free one held reservation, are idempotent (a second call
 *   frees nothing more) and accept unknown ids;
 * - tenants are independent.
 *
 * `setup` receives the fixture tenants and runs before each test (fresh state).
 */
export function describeAdmissionContract(name: string, setup: (tenants: TenantSpec[]) => Promise<ContractSubject<AdmissionService>>): void {
  describe(`admission contract: ${name}`, () => {
    let subject: ContractSubject<AdmissionService>;
    const admission = () => subject.service;

    beforeEach(async () => {
      subject = await setup(contractPlatformConfig().tenants);
    });
    afterEach(async () => {
      await subject?.close?.();
    });

    const reserveOk = async (overrides: Partial<ReservationRequest> = {}) => {
      const result = await admission().reserve(reservationRequest(overrides));
      if (!result.ok) throw new Error(`expected a reservation, got ${result.reason}: ${result.message}`);
      return result.reservationId;
    };

    it('reserves within the limit with distinct ids', async () => {
      const a = await reserveOk();
      const b = await reserveOk();
      expect(a).not.toBe(b);
      expect(a.length).toBeGreaterThan(0);
    });

    it('rejects over the limit with concurrency_limited and a retry hint', async () => {
      await reserveOk();
      await reserveOk();
      const third = await admission().reserve(reservationRequest());
      expect(third.ok).toBe(false);
      if (third.ok) return;
      expect(third.reason).toBe('concurrency_limited');
      expect(third.message.length).toBeGreaterThan(0);
      expect(third.retryAfterMs).toBeGreaterThan(0);
    });

    it('rejects an unknown tenant', async () => {
      const result = await admission().reserve(reservationRequest({ caller: contractCallers.stranger }));
      expect(result.ok).toBe(false);
    });

    it('frees one reservation per release, idempotently', async () => {
      const a = await reserveOk();
      await reserveOk();
      await admission().release(a);
      await admission().release(a);
      await reserveOk();
      expect((await admission().reserve(reservationRequest())).ok).toBe(false);
    });

    it('frees one reservation per settle, idempotently', async () => {
      const a = await reserveOk();
      await reserveOk();
      const settlement = { usage: { inputTokens: 10, outputTokens: 7, cachedInputTokens: 2 }, costNanoUsd: 123_456 };
      await admission().settle(a, settlement);
      await admission().settle(a, settlement);
      await admission().release(a);
      await reserveOk();
      expect((await admission().reserve(reservationRequest())).ok).toBe(false);
    });

    it('accepts settle and release of unknown ids', async () => {
      await expect(admission().release('rsv_unknown')).resolves.toBeUndefined();
      await expect(admission().settle('rsv_unknown', { usage: { inputTokens: 0, outputTokens: 0 }, costNanoUsd: 0 })).resolves.toBeUndefined();
    });

    it('keeps tenants independent', async () => {
      await reserveOk({ caller: contractCallers.globex });
      expect((await admission().reserve(reservationRequest({ caller: contractCallers.globex }))).ok).toBe(false);
      await reserveOk();
      await reserveOk();
    });
  });
}

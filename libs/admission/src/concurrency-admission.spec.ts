import type { ReservationRequest, TenantSpec } from '@weir/core';
import { createConcurrencyAdmission } from './concurrency-admission';

const tenant = (id: string, maxConcurrent: number): TenantSpec => ({
  id,
  name: id,
  apps: [],
  allowedAliases: ['*'],
  defaultDeadlineMs: 120_000,
  limits: { maxConcurrent },
});
const request = (tenantId: string): ReservationRequest => ({
  caller: { tenantId, appId: 'app', apiKeyId: 'key' },
  requestId: 'r',
  inputTokens: 10,
  maxOutputTokens: 20,
  worstCaseCostNanoUsd: 30,
});

describe('createConcurrencyAdmission', () => {
  it('admits up to the limit, rejects with a retry hint, and frees on settle and release', async () => {
    const adm = createConcurrencyAdmission({ tenants: [tenant('a', 2)], retryAfterMs: 500 });
    const r1 = await adm.reserve(request('a'));
    const r2 = await adm.reserve(request('a'));
    expect(r1.ok && r2.ok).toBe(true);
    await expect(adm.reserve(request('a'))).resolves.toMatchObject({ ok: false, reason: 'concurrency_limited', retryAfterMs: 500 });
    if (r1.ok) await adm.settle(r1.reservationId, { usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 1 });
    expect(adm.inFlight('a')).toBe(1);
    if (r2.ok) {
      await adm.release(r2.reservationId);
      await adm.release(r2.reservationId);
    }
    expect(adm.inFlight('a')).toBe(0);
    expect(adm.held()).toEqual([]);
  });

  it('keeps tenants independent and refuses tenants without a policy', async () => {
    const adm = createConcurrencyAdmission({ tenants: [tenant('a', 1), tenant('b', 1)] });
    expect((await adm.reserve(request('a'))).ok).toBe(true);
    expect((await adm.reserve(request('b'))).ok).toBe(true);
    expect((await adm.reserve(request('ghost'))).ok).toBe(false);
  });

  it('never admits past the limit under a burst', async () => {
    const adm = createConcurrencyAdmission({ tenants: [tenant('a', 7)] });
    const results = await Promise.all(Array.from({ length: 100 }, () => adm.reserve(request('a'))));
    expect(results.filter((r) => r.ok)).toHaveLength(7);
  });
});

/**
 * Session budgets (issue 16 item 6) over ADR 0001's in-memory admission: a session's lifetime
 * tokens and dollars are held and settled around each request, a runaway loop stops at its cap
 * with `budget_exhausted` naming the session, other sessions and requests without one run on,
 * apps without session caps ignore the id, and sessions are forgotten when idle and bounded.
 */
import type { ReservationRequest, ReserveResult, TenantSpec } from '@weir/core';
import { createInMemoryAdmission, createSessionBudgets } from './index';

const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);
const WORST = 1_000_000; // $0.001

function tenant(appLimits: TenantSpec['apps'][number]['limits']): TenantSpec {
  return {
    id: 'acme',
    name: 'Acme',
    apps: [
      { id: 'agents', name: 'agents', limits: appLimits },
      { id: 'web', name: 'web', limits: {} },
    ],
    allowedAliases: ['*'],
    defaultDeadlineMs: 120_000,
    limits: { maxConcurrent: 100 },
  };
}

let seq = 0;
function req(sessionId: string | undefined, appId = 'agents', over: Partial<ReservationRequest> = {}): ReservationRequest {
  seq++;
  return {
    caller: { tenantId: 'acme', appId, apiKeyId: 'k' },
    requestId: `r${seq}`,
    generationId: `gen_${seq}`,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: WORST,
    expiresAtMs: NOW + 60_000,
    ...(sessionId !== undefined ? { sessionId } : {}),
    ...over,
  };
}
function ok(r: ReserveResult) {
  if (!r.ok) throw new Error(`expected a reservation, got ${r.reason}: ${r.message}`);
  return r;
}
const settlement = (tokens: number, cost: number) => ({ usage: { inputTokens: 10, outputTokens: tokens - 10, cachedInputTokens: 0 }, costNanoUsd: cost });

function setup(limits: TenantSpec['apps'][number]['limits'], maxSessions?: number) {
  let t = NOW;
  const tenants = [tenant(limits)];
  const inner = createInMemoryAdmission({ tenants, now: () => t });
  const sessions = createSessionBudgets({ tenants, clock: { now: () => t }, ...(maxSessions !== undefined ? { maxSessions } : {}) });
  return { admission: sessions.wrap(inner), inner, sessions, advance: (ms: number) => void (t += ms) };
}

describe('session budgets', () => {
  it('a runaway loop stops at its token cap, naming the session; settlement counts actual tokens; other sessions run on', async () => {
    const { admission, sessions } = setup({ sessionMaxTokens: 100 });
    // Each request holds 30 (10 + 20) and settles at 25.
    for (let i = 0; i < 3; i++) {
      const r = ok(await admission.reserve(req('run-1')));
      await admission.settle(r.reservationId, settlement(25, WORST / 2));
    }
    expect(sessions.usage({ tenantId: 'acme', appId: 'agents', apiKeyId: 'k' }, 'run-1')).toEqual({ usedTokens: 75, usedNano: 1_500_000, heldTokens: 0, heldNano: 0 });
    const refused = await admission.reserve(req('run-1'));
    expect(refused).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    expect(!refused.ok && refused.message).toMatch(/^Session 'run-1' has reached its cap of 100 tokens: 75 used and 0 held by requests in flight, and this request may use up to 30/);
    expect(!refused.ok && refused.retryAfterMs).toBeUndefined();
    ok(await admission.reserve(req('run-2')));
    ok(await admission.reserve(req(undefined)));
  });

  it('holds worst cases of requests in flight, so concurrent requests of one session cannot pass the cap together', async () => {
    const { admission } = setup({ sessionBudgetUsd: 0.0025 });
    const results = await Promise.all([0, 1, 2, 3].map(() => admission.reserve(req('burst'))));
    expect(results.filter((r) => r.ok)).toHaveLength(2);
    const refused = results.find((r) => !r.ok);
    expect(refused && !refused.ok && refused.message).toMatch(/Session 'burst' has reached its budget of \$0\.0025: \$0\.00 spent and \$0\.002 held/);
    // A release gives its hold back.
    const first = results.find((r) => r.ok) as Extract<ReserveResult, { ok: true }>;
    await admission.release(first.reservationId);
    ok(await admission.reserve(req('burst')));
  });

  it('a refusal by admission itself gives the session hold back', async () => {
    const tenants = [{ ...tenant({ sessionMaxTokens: 60 }), limits: { maxConcurrent: 1 } }];
    const sessions = createSessionBudgets({ tenants, clock: { now: () => NOW } });
    const admission = sessions.wrap(createInMemoryAdmission({ tenants, now: () => NOW }));
    const one = ok(await admission.reserve(req('s')));
    expect(await admission.reserve(req('s'))).toMatchObject({ ok: false, reason: 'concurrency_limited' });
    expect(sessions.usage({ tenantId: 'acme', appId: 'agents', apiKeyId: 'k' }, 's')?.heldTokens).toBe(30);
    await admission.settle(one.reservationId, settlement(30, WORST));
    ok(await admission.reserve(req('s')));
  });

  it('an app without session caps ignores the session id', async () => {
    const { admission, sessions } = setup({ sessionMaxTokens: 30 });
    for (let i = 0; i < 3; i++) ok(await admission.reserve(req('any', 'web')));
    expect(sessions.size()).toBe(0);
  });

  it('a session idle past its TTL is forgotten (a new run may reuse the id); an unsettled hold past its expiry counts at its worst case', async () => {
    const { admission, advance, sessions } = setup({ sessionMaxTokens: 60, sessionIdleTtlMs: 10_000 });
    ok(await admission.reserve(req('s', 'agents', { expiresAtMs: NOW + 5_000 })));
    advance(6_000);
    // The first never settled: it now counts 30 used; 30 + 30 fits, 30 + 30 + 30 does not.
    const second = ok(await admission.reserve(req('s', 'agents', { expiresAtMs: NOW + 60_000 })));
    await admission.settle(second.reservationId, settlement(30, WORST));
    expect(await admission.reserve(req('s'))).toMatchObject({ ok: false, reason: 'budget_exhausted' });
    advance(10_000);
    ok(await admission.reserve(req('s', 'agents', { expiresAtMs: NOW + 120_000 })));
    expect(sessions.usage({ tenantId: 'acme', appId: 'agents', apiKeyId: 'k' }, 's')).toMatchObject({ usedTokens: 0, heldTokens: 30 });
  });

  it('remembers at most maxSessions: the least recently used idle one goes first; when all are in flight, a new one is refused', async () => {
    const { admission, sessions } = setup({ sessionMaxTokens: 1_000 }, 2);
    const a = ok(await admission.reserve(req('a')));
    await admission.settle(a.reservationId, settlement(30, WORST));
    ok(await admission.reserve(req('b')));
    ok(await admission.reserve(req('c'))); // evicts idle `a`
    expect(sessions.size()).toBe(2);
    expect(sessions.usage({ tenantId: 'acme', appId: 'agents', apiKeyId: 'k' }, 'a')).toBeUndefined();
    const d = await admission.reserve(req('d'));
    expect(d).toMatchObject({ ok: false, reason: 'concurrency_limited', retryAfterMs: 1_000 });
  });
});

/**
 * The pure decision functions, table-driven: every limit at both scopes and its boundary,
 * retry-after and refund arithmetic, UTC period boundaries.
 */
import type { AdmissionLimits } from '@weir/core';
import {
  type BudgetState,
  type ReservationRecord,
  type ScopeCheck,
  type ScopeState,
  correctBudgets,
  decideReservation,
  drainedLevel,
  emptyBudget,
  emptyScope,
  finishReservation,
  formatUsd,
  lockKeys,
  periodStarts,
  refundOf,
  retryAfterMsFor,
} from './index';

const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);

function scope(kind: 'tenant' | 'app', limits: AdmissionLimits, state: Partial<ScopeState> = {}, money: { month?: Partial<BudgetState>; day?: Partial<BudgetState> } = {}): ScopeCheck {
  const key = kind === 'tenant' ? 'tenant:t' : 'app:t/a';
  return {
    kind,
    limits,
    state: { ...emptyScope(key), usedAtMs: NOW, ...state },
    budgets: {
      month: { ...emptyBudget({ scope: key, period: 'month', startsOn: '2026-11-01' }), ...money.month },
      day: { ...emptyBudget({ scope: key, period: 'day', startsOn: '2026-11-30' }), ...money.day },
    },
  };
}

const request = (inputTokens = 10, maxOutputTokens = 20, worstCaseCostNanoUsd = 1_000) => ({ inputTokens, maxOutputTokens, worstCaseCostNanoUsd });

function decide(tenant: ScopeCheck, app: ScopeCheck = scope('app', {}), req = request(), nowMs = NOW) {
  return decideReservation({ request: req, scopes: [tenant, app], nowMs, concurrencyRetryAfterMs: 1_000 });
}

describe('drainedLevel and retryAfterMsFor', () => {
  it.each([
    // level, limit/min, elapsed ms, drained
    [60, 60, 0, 60],
    [60, 60, 1_000, 59],
    [60, 60, 30_000, 30],
    [60, 60, 60_000, 0],
    [60, 60, 120_000, 0],
    [10, 600, -5_000, 10], // a clock behind the row drains nothing
  ])('level %p at %p/min after %p ms → %p', (level, limit, elapsed, expected) => {
    expect(drainedLevel(level, limit, NOW, NOW + elapsed)).toBeCloseTo(expected, 9);
  });

  it.each([
    // level, need, limit, wait ms
    [0, 100, 100, 0],
    [50, 50, 100, 0],
    [50, 51, 100, 600],
    [99.5, 1, 100, 300],
    [3, 1, 3, 20_000],
    [1, 1, 1, 60_000],
  ])('level %p needing %p of %p → wait %p ms', (level, need, limit, wait) => {
    expect(retryAfterMsFor(level, need, limit)).toBe(wait);
  });
});

describe('decideReservation', () => {
  describe.each(['tenant', 'app'] as const)('at the %s scope', (kind) => {
    const at = (limits: AdmissionLimits, state: Partial<ScopeState> = {}, money: Parameters<typeof scope>[3] = {}) =>
      kind === 'tenant' ? decide(scope('tenant', limits, state, money)) : decide(scope('tenant', {}), scope('app', limits, state, money));

    it.each([
      // limits, state before, admitted?
      [{ maxConcurrent: 2 }, { inFlight: 1 }, true],
      [{ maxConcurrent: 2 }, { inFlight: 2 }, false],
      [{ requestsPerMinute: 5 }, { requestsUsed: 4 }, true],
      [{ requestsPerMinute: 5 }, { requestsUsed: 4.01 }, false],
      [{ tokensPerMinute: 100 }, { tokensUsed: 70 }, true],
      [{ tokensPerMinute: 100 }, { tokensUsed: 71 }, false],
      [{ inputTokensPerMinute: 100 }, { inputTokensUsed: 90 }, true],
      [{ inputTokensPerMinute: 100 }, { inputTokensUsed: 91 }, false],
      [{ outputTokensPerMinute: 100 }, { outputTokensUsed: 80 }, true],
      [{ outputTokensPerMinute: 100 }, { outputTokensUsed: 81 }, false],
    ])('%p with %p → admitted %p', (limits, state, admitted) => {
      const d = at(limits, state);
      expect(d.ok).toBe(admitted);
      if (!d.ok) {
        expect(d.reason).toBe('maxConcurrent' in limits ? 'concurrency_limited' : 'rate_limited');
        expect(d.message).toContain(kind);
        expect(d.retryAfterMs).toBeGreaterThan(0);
      }
    });

    it.each([
      // limits, month/day money before, admitted?
      [{ monthlyBudgetUsd: 0.000002 }, { month: { settledNano: 500, reservedNano: 500 } }, true],
      [{ monthlyBudgetUsd: 0.000002 }, { month: { settledNano: 500, reservedNano: 501 } }, false],
      [{ dailyBudgetUsd: 0.000002 }, { day: { settledNano: 1_000 } }, true],
      [{ dailyBudgetUsd: 0.000002 }, { day: { reservedNano: 1_001 } }, false],
      [{ monthlyBudgetUsd: 0 }, {}, false],
    ])('budget %p with %p → admitted %p', (limits, money, admitted) => {
      const d = at(limits, {}, money);
      expect(d.ok).toBe(admitted);
      if (!d.ok) {
        expect(d.reason).toBe('budget_exhausted');
        expect(d.retryAfterMs).toBeUndefined();
        expect(d.message).toContain(`${kind}'s ${'monthlyBudgetUsd' in limits ? 'monthly' : 'daily'} budget`);
      }
    });
  });

  it('charges the worst case to every configured bucket, 1 in flight and the cost to all four budget rows', () => {
    const d = decide(scope('tenant', { tokensPerMinute: 1_000, requestsPerMinute: 10 }, { inFlight: 3 }), scope('app', { inputTokensPerMinute: 50, outputTokensPerMinute: 50 }));
    if (!d.ok) throw new Error(d.message);
    expect(d.scopes[0]).toMatchObject({ inFlight: 4, requestsUsed: 1, tokensUsed: 30, inputTokensUsed: 0, outputTokensUsed: 0, usedAtMs: NOW });
    expect(d.scopes[1]).toMatchObject({ inFlight: 1, requestsUsed: 0, tokensUsed: 0, inputTokensUsed: 10, outputTokensUsed: 20 });
    expect(d.budgets.map((b) => b.reservedNano)).toEqual([1_000, 1_000, 1_000, 1_000]);
    expect(d.rateLimits).toEqual({ requests: { limit: 10, remaining: 9, resetMs: 6_000 }, tokens: { limit: 50, remaining: 30, resetMs: 24_000 } });
  });

  it('drains buckets by the time since the row was written before deciding', () => {
    const d = decide(scope('tenant', { tokensPerMinute: 60 }, { tokensUsed: 60, usedAtMs: NOW - 30_000 }));
    expect(d).toMatchObject({ ok: true, scopes: [{ tokensUsed: 60 }, {}] });
    const tooSoon = decide(scope('tenant', { tokensPerMinute: 60 }, { tokensUsed: 60, usedAtMs: NOW - 29_000 }));
    expect(tooSoon).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 1_000 });
  });

  it('waits for the slowest failing bucket across both scopes', () => {
    const d = decide(scope('tenant', { tokensPerMinute: 60 }, { tokensUsed: 40 }), scope('app', { requestsPerMinute: 1 }, { requestsUsed: 1 }));
    // tokens: 40 + 30 − 60 = 10 → 10 s; requests: 1 + 1 − 1 = 1 → 60 s
    expect(d).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 60_000, message: expect.stringContaining('1 requests per minute') });
  });

  it('rejects a request larger than a bucket without a retry hint', () => {
    const d = decide(scope('tenant', { outputTokensPerMinute: 19 }));
    expect(d).toMatchObject({ ok: false, reason: 'rate_limited', message: expect.stringContaining('lower max_tokens') });
    expect(d.ok || d.retryAfterMs).toBeUndefined();
  });

  it('reports a budget before a rate limit and a rate limit before concurrency', () => {
    const all = (money: number) =>
      scope('tenant', { monthlyBudgetUsd: 0.000001, tokensPerMinute: 10, maxConcurrent: 1 }, { inFlight: 1, tokensUsed: 10 }, { month: { settledNano: money } });
    expect(decide(all(1_000))).toMatchObject({ reason: 'budget_exhausted' });
    expect(decide(all(0), undefined, request(1, 1, 0))).toMatchObject({ reason: 'rate_limited' });
    expect(decide(scope('tenant', { tokensPerMinute: 10, maxConcurrent: 1 }, { inFlight: 1 }), undefined, request(1, 1))).toMatchObject({
      reason: 'concurrency_limited',
      retryAfterMs: 1_000,
    });
  });

  it('leaves unconfigured buckets at 0 and reports no windows without rate limits', () => {
    const d = decide(scope('tenant', { maxConcurrent: 5 }, { tokensUsed: 999 }));
    expect(d).toMatchObject({ ok: true, rateLimits: {}, scopes: [{ tokensUsed: 0, requestsUsed: 0 }, {}] });
  });

  it('reports the windows before the request on a rejection', () => {
    const d = decide(scope('tenant', { requestsPerMinute: 2 }, { requestsUsed: 2 }));
    expect(d).toMatchObject({ ok: false, rateLimits: { requests: { limit: 2, remaining: 0, resetMs: 60_000 } } });
  });
});

describe('decideReservation on a holder\'s leases (ADR 0002)', () => {
  const leased = (limits: AdmissionLimits, lease: ScopeCheck['lease'], state: Partial<ScopeState> = {}, money: Parameters<typeof scope>[3] = {}): ScopeCheck => ({
    ...scope('tenant', limits, state, money),
    lease,
  });

  it.each([
    // grant, settled here, in flight here, worst, admitted?
    [5_000, 1_000, 3_000, 1_000, true],
    [5_000, 1_000, 3_000, 1_001, false],
    [0, 0, 0, 1, false], // no lease yet: nothing may be committed
    [0, 0, 0, 0, true],
  ])('a budget lease of %p with %p settled and %p in flight, worst %p → admitted %p', (grant, settledNano, reservedNano, worst, admitted) => {
    const d = decide(leased({ monthlyBudgetUsd: 1 }, { budgetNano: { month: grant } }, {}, { month: { settledNano, reservedNano } }), undefined, request(10, 20, worst));
    expect(d.ok).toBe(admitted);
  });

  it('rejects on the lease with the configured budget in the message and what the lease has left', () => {
    const d = decide(leased({ monthlyBudgetUsd: 1 }, { budgetNano: { month: 5_000 } }, {}, { month: { settledNano: 1_000, reservedNano: 3_500 } }));
    expect(d).toMatchObject({ ok: false, reason: 'budget_exhausted', message: expect.stringContaining("tenant's monthly budget of $1.00 is exhausted: $0.0000005 remains") });
    expect(d.ok || d.retryAfterMs).toBeUndefined();
  });

  it('runs each bucket on the share: capacity, refill, retry hint and reported window', () => {
    // Share 60 of a 600/min limit: 40 used, 30 needed → 10 over the share, 10 × 60,000 / 60 = 10 s.
    const d = decide(leased({ tokensPerMinute: 600 }, { shares: { tokensPerMinute: 60 } }, { tokensUsed: 40 }));
    expect(d).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 10_000, message: expect.stringContaining('limit of 600 tokens per minute') });
    expect(d.rateLimits.tokens).toEqual({ limit: 600, remaining: 20, resetMs: 40_000 });
    // It drains at the share's rate: 10 s later 10 tokens are back.
    const later = decide(leased({ tokensPerMinute: 600 }, { shares: { tokensPerMinute: 60 } }, { tokensUsed: 40, usedAtMs: NOW - 10_000 }));
    expect(later).toMatchObject({ ok: true, scopes: [{ tokensUsed: 60 }, {}] });
  });

  it('waits as long as the whole limit takes to produce the request when the share is smaller than the request', () => {
    const d = decide(leased({ tokensPerMinute: 600 }, { shares: { tokensPerMinute: 20 } }));
    expect(d).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 3_000 }); // 30 tokens at 600/min
  });

  it('still judges "can never pass" on the whole limit', () => {
    const d = decide(leased({ tokensPerMinute: 25 }, { shares: { tokensPerMinute: 25 } }));
    expect(d).toMatchObject({ ok: false, reason: 'rate_limited', message: expect.stringContaining('can never pass') });
    expect(d.ok || d.retryAfterMs).toBeUndefined();
  });

  it.each([
    // slots held, in flight here, admitted?
    [3, 2, true],
    [3, 3, false],
    [0, 0, false],
  ])('%p slots with %p in flight → admitted %p', (slots, inFlight, admitted) => {
    expect(decide(leased({ maxConcurrent: 10 }, { slots }, { inFlight })).ok).toBe(admitted);
  });

  it('counts slots leased elsewhere as in flight in the message', () => {
    const d = decide(leased({ maxConcurrent: 10 }, { slots: 4 }, { inFlight: 4 }));
    expect(d).toMatchObject({ ok: false, reason: 'concurrency_limited', message: expect.stringContaining('already has 10 requests in flight, its limit of 10') });
  });

  it('decides exactly as without leases when the lease holds the whole scope', () => {
    const limits = { monthlyBudgetUsd: 0.000002, tokensPerMinute: 100, requestsPerMinute: 5, maxConcurrent: 3 };
    const state = { tokensUsed: 70, requestsUsed: 4, inFlight: 2, usedAtMs: NOW - 1_000 };
    const money = { month: { settledNano: 500, reservedNano: 400 } };
    const whole = { budgetNano: { month: 2_000 }, shares: { tokensPerMinute: 100, requestsPerMinute: 5 }, slots: 3 };
    for (const req of [request(), request(10, 20, 1_100), request(10, 21), request(1, 1)]) {
      expect(decide(leased(limits, whole, state, money), undefined, req)).toEqual(decide(scope('tenant', limits, state, money), undefined, req));
    }
  });
});

describe('finishReservation and refunds', () => {
  const reservation: ReservationRecord = {
    id: 'rsv_1',
    tenantId: 't',
    appId: 'a',
    requestId: 'r',
    generationId: 'g',
    state: 'held',
    inputTokens: 10,
    maxOutputTokens: 50,
    worstCaseNano: 1_000,
    monthStartsOn: '2026-11-01',
    dayStartsOn: '2026-11-30',
    createdAtMs: NOW,
    expiresAtMs: NOW + 60_000,
  };
  const scopes: ScopeState[] = [
    { ...emptyScope('app:t/a'), inFlight: 1, requestsUsed: 1, tokensUsed: 60, inputTokensUsed: 10, outputTokensUsed: 50 },
    { ...emptyScope('tenant:t'), inFlight: 3, tokensUsed: 20, inputTokensUsed: 5, outputTokensUsed: 5 },
  ];
  const budgets = [{ ...emptyBudget({ scope: 'tenant:t', period: 'month', startsOn: '2026-11-01' }), reservedNano: 1_500, settledNano: 100 }];

  it.each([
    // outcome, refund input, refund output
    [{ kind: 'settle' as const, costNano: 0, inputTokens: 10, outputTokens: 50 }, 0, 0],
    [{ kind: 'settle' as const, costNano: 0, inputTokens: 10, outputTokens: 7 }, 0, 43],
    [{ kind: 'settle' as const, costNano: 0, inputTokens: 4, outputTokens: 0 }, 6, 50],
    [{ kind: 'settle' as const, costNano: 0, inputTokens: 12, outputTokens: 60 }, 0, 0],
    [{ kind: 'release' as const }, 10, 50],
  ])('%p refunds %p input and %p output tokens', (outcome, input, output) => {
    expect(refundOf(reservation, outcome)).toEqual({ input, output });
  });

  it('settles: in flight −1, reserved −= worst case, settled += cost, token levels refunded but never below 0; the request stays counted', () => {
    const effect = finishReservation(reservation, { kind: 'settle', costNano: 400, inputTokens: 10, outputTokens: 7 }, scopes, budgets);
    expect(effect.overspendNano).toBe(0);
    expect(effect.budgets).toEqual([expect.objectContaining({ reservedNano: 500, settledNano: 500 })]);
    expect(effect.scopes[0]).toMatchObject({ inFlight: 0, requestsUsed: 1, tokensUsed: 17, inputTokensUsed: 10, outputTokensUsed: 7 });
    expect(effect.scopes[1]).toMatchObject({ inFlight: 2, tokensUsed: 0, inputTokensUsed: 5, outputTokensUsed: 0 });
  });

  it('bills a cost above the worst case and reports the overspend', () => {
    const effect = finishReservation(reservation, { kind: 'settle', costNano: 1_250, inputTokens: 10, outputTokens: 50 }, scopes, budgets);
    expect(effect.overspendNano).toBe(250);
    expect(effect.budgets[0]).toMatchObject({ reservedNano: 500, settledNano: 1_350 });
  });

  it('releases: nothing settled, every reserved token refunded', () => {
    const effect = finishReservation(reservation, { kind: 'release' }, scopes, budgets);
    expect(effect.budgets[0]).toMatchObject({ reservedNano: 500, settledNano: 100 });
    expect(effect.scopes[0]).toMatchObject({ inFlight: 0, tokensUsed: 0, inputTokensUsed: 0, outputTokensUsed: 0, requestsUsed: 1 });
  });

  it('corrects settled money to the ledger by the difference', () => {
    expect(correctBudgets(400, { costNano: 650, inputTokens: 1, outputTokens: 1 }, budgets)[0].settledNano).toBe(350);
    expect(correctBudgets(100, { costNano: 0, inputTokens: 0, outputTokens: 0 }, budgets)[0].settledNano).toBe(0);
  });
});

describe('UTC calendar periods', () => {
  it.each([
    ['2026-11-30T23:59:59.999Z', '2026-11-01', '2026-11-30'],
    ['2026-12-01T00:00:00.000Z', '2026-12-01', '2026-12-01'],
    ['2026-12-31T23:59:59.999Z', '2026-12-01', '2026-12-31'],
    ['2027-01-01T00:00:00.000Z', '2027-01-01', '2027-01-01'],
    ['2028-02-29T12:00:00.000Z', '2028-02-01', '2028-02-29'],
    ['2026-03-29T01:30:00.000Z', '2026-03-01', '2026-03-29'], // a European DST change: UTC is unaffected
  ])('%s is in the month from %s and the day %s', (iso, month, day) => {
    expect(periodStarts(Date.parse(iso))).toEqual({ month, day });
  });

  it('sorts lock keys: scopes, then budget rows', () => {
    const keys = lockKeys('t', 'a', '2026-11-01', '2026-11-30');
    expect(keys.scopes).toEqual(['app:t/a', 'tenant:t']);
    expect(keys.budgets.map((b) => `${b.scope} ${b.period}`)).toEqual(['app:t/a day', 'app:t/a month', 'tenant:t day', 'tenant:t month']);
  });
});

describe('formatUsd', () => {
  it.each([
    [0, '$0.00'],
    [1_000_000_000, '$1.00'],
    [1_250_000_000, '$1.25'],
    [12_345, '$0.000012345'],
    [100_000_000, '$0.10'],
  ])('%p nano-USD → %s', (nano, text) => {
    expect(formatUsd(nano)).toBe(text);
  });
});

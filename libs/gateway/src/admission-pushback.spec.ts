import type { Caller } from '@weir/core';
import { createAdmissionPushback } from './admission-pushback';

const caller = (tenantId = 't', appId = 'a'): Caller => ({ tenantId, appId, apiKeyId: 'k' });
const requestsEmpty = { requests: { limit: 1, remaining: 0, resetMs: 60_000 } };

describe('admission pushback', () => {
  it('holds a refusal for the requests window (every request needs one) for its retry hint, per tenant and app', () => {
    const memo = createAdmissionPushback({ holdMs: 1_000 });
    memo.noteRefusal(caller(), { reason: 'rate_limited', message: 'Rate limit reached', retryAfterMs: 30_000, rateLimits: requestsEmpty }, 0);
    expect(memo.check(caller(), 10_000)).toEqual({ reason: 'rate_limited', message: 'Rate limit reached', retryAfterMs: 20_000, hinted: true, rateLimits: requestsEmpty });
    expect(memo.check(caller('t', 'other'), 10_000)).toBeUndefined();
    expect(memo.check(caller('u', 'a'), 10_000)).toBeUndefined();
    expect(memo.check(caller(), 30_000)).toBeUndefined();
  });

  it.each<[string, object]>([
    ['a token window refusal (a smaller request may pass)', { reason: 'rate_limited', message: 'm', retryAfterMs: 5_000, rateLimits: { requests: { limit: 10, remaining: 4, resetMs: 1 }, tokens: { limit: 100, remaining: 3, resetMs: 1 } } }],
    ['a request larger than the window (no hint)', { reason: 'rate_limited', message: 'm', rateLimits: requestsEmpty }],
  ])('does not hold %s', (_name, refusal) => {
    const memo = createAdmissionPushback({ holdMs: 1_000 });
    memo.noteRefusal(caller(), refusal as never, 0);
    expect(memo.check(caller(), 1)).toBeUndefined();
  });

  it('holds a concurrency refusal until a generation of the tenant ends, at most holdMs', () => {
    const memo = createAdmissionPushback({ holdMs: 1_000 });
    memo.noteRefusal(caller(), { reason: 'concurrency_limited', message: 'c', retryAfterMs: 5_000 }, 0);
    expect(memo.check(caller(), 500)).toMatchObject({ reason: 'concurrency_limited', retryAfterMs: 500 });
    expect(memo.check(caller(), 1_000)).toBeUndefined();
    memo.noteRefusal(caller(), { reason: 'concurrency_limited', message: 'c', retryAfterMs: 5_000 }, 2_000);
    memo.noteEnded('u');
    expect(memo.check(caller(), 2_001)).toBeDefined();
    memo.noteEnded('t');
    expect(memo.check(caller(), 2_002)).toBeUndefined();
  });

  it('files refusals under the internal ids: a tenant created again under a deleted slug inherits none', () => {
    const memo = createAdmissionPushback({ holdMs: 1_000 });
    const old: Caller = { tenantId: 'acme', appId: 'web', apiKeyId: 'k1', tenantUid: 'acme~1', appUid: 'web~1' };
    const successor: Caller = { tenantId: 'acme', appId: 'web', apiKeyId: 'k2', tenantUid: 'acme~2', appUid: 'web~2' };
    memo.noteRefusal(old, { reason: 'budget_exhausted', message: 'b' }, 0);
    memo.noteRefusal(old, { reason: 'concurrency_limited', message: 'c' }, 0);
    expect(memo.check(old, 10)).toMatchObject({ reason: 'concurrency_limited' });
    expect(memo.check(successor, 10)).toBeUndefined();
    memo.noteEnded('acme');
    expect(memo.check(old, 20)).toBeDefined();
    memo.noteEnded('acme~1');
    expect(memo.check(old, 30)).toBeUndefined();
  });

  it('holds a spent budget for holdMs; holds nothing when off', () => {
    const memo = createAdmissionPushback({ holdMs: 1_000 });
    memo.noteRefusal(caller(), { reason: 'budget_exhausted', message: 'b' }, 0);
    expect(memo.check(caller(), 999)).toMatchObject({ reason: 'budget_exhausted', hinted: false });
    expect(memo.check(caller(), 1_000)).toBeUndefined();
    // The rest of the budget held by other admission instances: retry soon, as admission said.
    memo.noteRefusal(caller(), { reason: 'budget_exhausted', message: 'b', retryAfterMs: 200 }, 2_000);
    expect(memo.check(caller(), 2_100)).toMatchObject({ reason: 'budget_exhausted', hinted: true, retryAfterMs: 100 });
    expect(memo.check(caller(), 2_200)).toBeUndefined();
    const off = createAdmissionPushback({ holdMs: 0 });
    off.noteRefusal(caller(), { reason: 'budget_exhausted', message: 'b' }, 0);
    expect(off.check(caller(), 1)).toBeUndefined();
  });
});

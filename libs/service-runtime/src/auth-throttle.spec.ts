import { createAuthThrottle } from './auth-throttle';

const key = (prefix: string, secret = 'x') => `wk_${prefix}_${secret.repeat(43)}`;

describe('createAuthThrottle', () => {
  let t = 0;
  const make = (maxEntries?: number) => createAuthThrottle({ limit: 2, windowMs: 1_000, now: () => t, ...(maxEntries ? { maxEntries } : {}) });
  beforeEach(() => {
    t = 1_000_000;
  });

  it('is inactive and refuses nothing until a failure is recorded', () => {
    const th = make();
    expect(th.active).toBe(false);
    expect(th.refusal('a', key('aaaaaaaa'), 'h')).toBeUndefined();
    th.failed('a', undefined);
    expect(th.active).toBe(true);
    th.close();
  });

  it('refuses an address at its limit until its window passes, with the time left as retryAfterMs', () => {
    const th = make();
    th.failed('a', undefined);
    expect(th.refusal('a', undefined, undefined)).toBeUndefined();
    th.failed('a', 'not-a-weir-key');
    t += 400;
    const refusal = th.refusal('a', key('bbbbbbbb'), 'h');
    expect(refusal).toMatchObject({ code: 'rate_limited', retryAfterMs: 600, retryable: true });
    expect(th.refusal('b', undefined, undefined)).toBeUndefined();
    t += 600;
    expect(th.refusal('a', undefined, undefined)).toBeUndefined();
    th.close();
  });

  it('refuses a prefix at its limit from any address, except a key that authenticated', () => {
    const th = make();
    th.succeeded('owner-hash');
    th.failed('a', key('cccccccc', 'y'));
    th.failed('b', key('cccccccc', 'z'));
    expect(th.refusal('c', key('cccccccc', 'w'), 'guess-hash')?.message).toContain('with the key prefix wk_cccccccc');
    expect(th.refusal('c', key('cccccccc'), 'owner-hash')).toBeUndefined();
    expect(th.refusal('c', key('dddddddd'), 'other')).toBeUndefined();
    th.close();
  });

  it('keeps at most maxEntries addresses, dropping the oldest', () => {
    const th = make(2);
    th.failed('a', undefined);
    th.failed('a', undefined);
    th.failed('b', undefined);
    th.failed('c', undefined); // evicts a
    expect(th.refusal('a', undefined, undefined)).toBeUndefined();
    th.failed('c', undefined);
    expect(th.refusal('c', undefined, undefined)).toBeDefined();
    th.close();
  });

  it('does nothing with a limit of 0', () => {
    const th = createAuthThrottle({ limit: 0, windowMs: 1_000, now: () => t });
    for (let i = 0; i < 5; i++) th.failed('a', key('eeeeeeee'));
    expect(th.refusal('a', key('eeeeeeee'), 'h')).toBeUndefined();
    th.close();
  });
});

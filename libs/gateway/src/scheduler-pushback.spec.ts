import { createSchedulerPushback, type PushbackKey } from './scheduler-pushback';

const fakeClock = (start = 1_000) => {
  let t = start;
  return { now: () => t, advance: (ms: number) => void (t += ms) };
};

const key = (tenantId = 'acme', revisionId = 'm@1', priority: PushbackKey['priority'] = 'interactive'): PushbackKey => ({ tenantId, revisionId, priority });

describe('createSchedulerPushback', () => {
  it('refuses every request of a key after queue_full until holdMs has passed, whatever its slack', () => {
    const clock = fakeClock();
    const memo = createSchedulerPushback({ holdMs: 250, clock });
    expect(memo.check(key(), 1_000)).toBeUndefined();
    memo.noteRefusal(key(), { code: 'queue_full', message: 'the queue is full; retry later', slackMs: 1_000 });
    expect(memo.check(key(), 1_000)).toEqual({ code: 'queue_full', message: 'the queue is full; retry later', remainingMs: 250, retryAfterMs: 250 });
    expect(memo.check(key(), 60_000)).toMatchObject({ code: 'queue_full' });
    clock.advance(249);
    expect(memo.check(key(), 10)).toMatchObject({ code: 'queue_full', remainingMs: 1 });
    clock.advance(1);
    expect(memo.check(key(), 10)).toBeUndefined();
    expect(memo.size).toBe(0); // dropped lazily by the check
  });

  it('keeps tenants, revisions and priorities apart', () => {
    const memo = createSchedulerPushback({ holdMs: 250, clock: fakeClock() });
    memo.noteRefusal(key('acme', 'm@1', 'interactive'), { code: 'queue_full', message: 'full', slackMs: 0 });
    expect(memo.check(key('acme', 'm@1', 'interactive'), 0)).toBeDefined();
    expect(memo.check(key('globex', 'm@1', 'interactive'), 0)).toBeUndefined();
    expect(memo.check(key('acme', 'm@2', 'interactive'), 0)).toBeUndefined();
    expect(memo.check(key('acme', 'm@1', 'batch'), 0)).toBeUndefined();
  });

  it('holds for min(holdMs, retryAfterMs) and answers with what is left of the scheduler hint', () => {
    const clock = fakeClock();
    const memo = createSchedulerPushback({ holdMs: 250, clock });
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', retryAfterMs: 100, slackMs: 0 });
    clock.advance(99);
    expect(memo.check(key(), 0)).toEqual({ code: 'queue_full', message: 'full', remainingMs: 1, retryAfterMs: 1 });
    clock.advance(1);
    expect(memo.check(key(), 0)).toBeUndefined();

    // A longer hint than the hold: held for holdMs, but the client is told the scheduler's time.
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', retryAfterMs: 1_000, slackMs: 0 });
    clock.advance(200);
    expect(memo.check(key(), 0)).toEqual({ code: 'queue_full', message: 'full', remainingMs: 50, retryAfterMs: 800 });
    clock.advance(50);
    expect(memo.check(key(), 0)).toBeUndefined();
  });

  it('stores nothing for a refusal whose hint is 0, and that refusal replaces an older memo', () => {
    const memo = createSchedulerPushback({ holdMs: 250, clock: fakeClock() });
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', slackMs: 0 });
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', retryAfterMs: 0, slackMs: 0 });
    expect(memo.check(key(), 0)).toBeUndefined();
    expect(memo.size).toBe(0);
  });

  it('refuses after deadline_unmeetable only requests with no more slack than the refused one plus its overshoot hint', () => {
    const memo = createSchedulerPushback({ holdMs: 250, clock: fakeClock() });
    memo.noteRefusal(key(), { code: 'deadline_unmeetable', message: 'the estimated start is past the deadline; raise deadline_ms or retry later', retryAfterMs: 2_000, slackMs: 1_000 });
    expect(memo.check(key(), 500)).toMatchObject({ code: 'deadline_unmeetable', retryAfterMs: 2_000 });
    expect(memo.check(key(), 1_000)).toMatchObject({ code: 'deadline_unmeetable' });
    // The scheduler's 2 s hint is at least its overshoot: up to 1 s + 2 s of slack is refused too.
    expect(memo.check(key(), 3_000)).toMatchObject({ code: 'deadline_unmeetable' });
    expect(memo.check(key(), 3_001)).toBeUndefined();
    expect(memo.check(key(), 30_000)).toBeUndefined();
    // A longer deadline passing does not forget the memo for shorter ones.
    expect(memo.check(key(), 900)).toMatchObject({ code: 'deadline_unmeetable' });
  });

  it('refuses after deadline_unmeetable only requests asking for at least the refused output limit', () => {
    const memo = createSchedulerPushback({ holdMs: 250, clock: fakeClock() });
    memo.noteRefusal(key(), { code: 'deadline_unmeetable', message: 'late', retryAfterMs: 1_000, slackMs: 1_000, outputTokens: 300 });
    expect(memo.check(key(), 1_000, 300)).toMatchObject({ code: 'deadline_unmeetable' });
    expect(memo.check(key(), 1_000, 4_000)).toMatchObject({ code: 'deadline_unmeetable' });
    expect(memo.check(key(), 1_000, 299)).toBeUndefined();
    // A queue_full memo refuses whatever the output limit.
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', slackMs: 0, outputTokens: 300 });
    expect(memo.check(key(), 1_000, 1)).toMatchObject({ code: 'queue_full' });
  });

  it('lets the latest refusal of a key replace the earlier one', () => {
    const memo = createSchedulerPushback({ holdMs: 250, clock: fakeClock() });
    memo.noteRefusal(key(), { code: 'deadline_unmeetable', message: 'late', slackMs: 1_000 });
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', slackMs: 1_000 });
    expect(memo.check(key(), 60_000)).toMatchObject({ code: 'queue_full', message: 'full' });
    expect(memo.size).toBe(1);
  });

  it('forgets a key at its grant, and only that key', () => {
    const memo = createSchedulerPushback({ holdMs: 250, clock: fakeClock() });
    memo.noteRefusal(key('acme'), { code: 'queue_full', message: 'full', slackMs: 0 });
    memo.noteRefusal(key('globex'), { code: 'queue_full', message: 'full', slackMs: 0 });
    memo.noteGrant(key('acme'));
    expect(memo.check(key('acme'), 0)).toBeUndefined();
    expect(memo.check(key('globex'), 0)).toMatchObject({ code: 'queue_full' });
    memo.noteGrant(key('nobody')); // a grant for an unknown key is a no-op
    expect(memo.size).toBe(1);
  });

  it('holds at most maxKeys keys, forgetting the oldest noted one first', () => {
    const clock = fakeClock();
    const memo = createSchedulerPushback({ holdMs: 250, clock, maxKeys: 2 });
    memo.noteRefusal(key('a'), { code: 'queue_full', message: 'full', slackMs: 0 });
    clock.advance(1);
    memo.noteRefusal(key('b'), { code: 'queue_full', message: 'full', slackMs: 0 });
    clock.advance(1);
    memo.noteRefusal(key('a'), { code: 'queue_full', message: 'full', slackMs: 0 }); // re-noted: now the newest
    memo.noteRefusal(key('c'), { code: 'queue_full', message: 'full', slackMs: 0 });
    expect(memo.size).toBe(2);
    expect(memo.check(key('b'), 0)).toBeUndefined();
    expect(memo.check(key('a'), 0)).toBeDefined();
    expect(memo.check(key('c'), 0)).toBeDefined();
  });

  it('drops expired keys when a refusal is noted, so they do not crowd out live ones', () => {
    const clock = fakeClock();
    const memo = createSchedulerPushback({ holdMs: 250, clock, maxKeys: 2 });
    memo.noteRefusal(key('a'), { code: 'queue_full', message: 'full', slackMs: 0 });
    memo.noteRefusal(key('b'), { code: 'queue_full', message: 'full', slackMs: 0 });
    clock.advance(300);
    memo.noteRefusal(key('c'), { code: 'queue_full', message: 'full', slackMs: 0 });
    expect(memo.size).toBe(1);
    expect(memo.check(key('c'), 0)).toBeDefined();
  });

  it('is off at holdMs 0: nothing is stored and nothing is refused', () => {
    const memo = createSchedulerPushback({ holdMs: 0, clock: fakeClock() });
    memo.noteRefusal(key(), { code: 'queue_full', message: 'full', retryAfterMs: 1_000, slackMs: 0 });
    expect(memo.check(key(), 0)).toBeUndefined();
    expect(memo.size).toBe(0);
  });

  it('rejects a negative holdMs and a maxKeys below 1', () => {
    const clock = fakeClock();
    expect(() => createSchedulerPushback({ holdMs: -1, clock })).toThrow(RangeError);
    expect(() => createSchedulerPushback({ holdMs: Number.NaN, clock })).toThrow(RangeError);
    expect(() => createSchedulerPushback({ holdMs: 250, clock, maxKeys: 0 })).toThrow(RangeError);
  });
});

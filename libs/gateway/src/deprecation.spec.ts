/** The date arithmetic of `deprecation.ts` (UTC days) and the headers without an announcement day. */
import { aliasDeprecation, countdownHeaders, countdownOf, daysUntil, isRetired } from './deprecation';

const at = (iso: string) => Date.parse(iso);

describe('deprecation dates', () => {
  it.each([
    ['2026-03-19T23:59:59Z', 1, false],
    ['2026-03-20T00:00:00Z', 0, true],
    ['2026-03-25T08:00:00Z', -5, true],
    ['2025-12-31T12:00:00Z', 79, false],
  ])('at %s: %i days until 2026-03-20, retired %s', (now, days, retired) => {
    expect(daysUntil('2026-03-20', at(now))).toBe(days);
    expect(isRetired({ deprecation: { retiresOn: '2026-03-20', replacement: 'x' } }, at(now))).toBe(retired);
  });

  it('counts down at once without announcedOn, with Sunset but no Deprecation header', () => {
    const c = countdownOf({ deprecation: { retiresOn: '2026-03-20', replacement: 'x@2' } }, at('2026-03-17T10:00:00Z'));
    expect(c?.daysLeft).toBe(3);
    expect(countdownHeaders(c!)).toEqual({ sunset: 'Fri, 20 Mar 2026 00:00:00 GMT', 'x-weir-retires-in-days': '3' });
    expect(countdownOf({}, at('2026-03-17T10:00:00Z'))).toBeUndefined();
  });

  it('gives an alias the earliest countdown only when every weighted arm counts down', () => {
    const revisions = new Map([
      ['a@1', { deprecation: { retiresOn: '2026-04-01', replacement: 'c@3' } }],
      ['b@1', { deprecation: { retiresOn: '2026-03-20', replacement: 'c@3' } }],
      ['c@3', {}],
    ]);
    const now = at('2026-03-10T00:00:00Z');
    const alias = (targets: [string, number][]) => ({ name: 'm', targets: targets.map(([revision, weight]) => ({ revision, weight })) });
    expect(aliasDeprecation(alias([['a@1', 1], ['b@1', 1]]), undefined, revisions, now)).toEqual({ retires_on: '2026-03-20', replacement: 'c@3', days_left: 10 });
    expect(aliasDeprecation(alias([['a@1', 1], ['c@3', 1]]), undefined, revisions, now)).toBeUndefined();
    // An arm at weight 0 does not count; a pin replaces the arms.
    expect(aliasDeprecation(alias([['a@1', 1], ['c@3', 0]]), undefined, revisions, now)?.retires_on).toBe('2026-04-01');
    expect(aliasDeprecation(alias([['c@3', 1]]), { routes: [{ alias: 'm', pin: 'b@1' }] }, revisions, now)?.days_left).toBe(10);
  });
});

import type { HeldReservations, LeaseRow } from '@weir/store-pg';
import { checkHolds, type HoldsCheckInput } from './holds-check';

const NOW = 1_000_000;
const lease = (id: string, over: Partial<LeaseRow> = {}): LeaseRow => ({
  leaseId: id,
  holder: 'h1',
  kind: 'budget',
  scope: 'tenant:acme',
  period: 'month',
  startsOn: '2026-01-01',
  heldNano: 1_000,
  slots: 0,
  holdUntilMs: NOW + 60_000,
  holderExpiresAtMs: NOW + 5_000,
  ...over,
});
const none: HeldReservations = { held: 0, heldNano: 0, pastExpiry: 0, pastExpiryNano: 0 };
const input = (over: Partial<HoldsCheckInput>): HoldsCheckInput => ({ nowMs: NOW, ownerStopped: false, fixed: false, graceMs: 5_000, slackMs: 10_000, leases: [], reservations: none, ...over });

describe('checkHolds', () => {
  it('on a running deployment, calls a lease a fault only once it is past hold_until + grace + slack, whatever it holds', () => {
    const leases = [
      lease('live'),
      lease('recent', { holdUntilMs: NOW - 14_000 }), // lapsed 14 s ago: a live holder reclaims it within 10 s of the grace
      lease('stale', { holdUntilMs: NOW - 15_000, holder: 'dead' }),
      lease('stale-rate', { holdUntilMs: NOW - 60_000, holder: 'dead', kind: 'rate', heldNano: 0, slots: 2 }),
    ];
    const r = checkHolds(input({ leases }));
    expect(r.leases).toMatchObject({ outstanding: 4, heldNano: 3_000, lapsed: 2 });
    expect(r.leases.stuck.map((l) => l.leaseId)).toEqual(['stale', 'stale-rate']);
    expect(r.differences).toEqual([expect.stringMatching(/^2 lease\(s\) past hold_until \+ 5000 ms grace still outstanding, holding \$0\.000001000 \(holders dead\): --fix reclaims them/)]);
    // After a fix (no slack), the recent one counts too.
    expect(checkHolds(input({ leases, fixed: true, slackMs: 0 })).leases.stuck.map((l) => l.leaseId)).toEqual(['recent', 'stale', 'stale-rate']);
    expect(checkHolds(input({ leases: [lease('live')] })).differences).toEqual([]);
  });

  it('when the owner is stopped, calls every budget lease still holding money a fault, and after a fix any lease left', () => {
    const leases = [lease('money'), lease('spent', { heldNano: 0 }), lease('rate', { kind: 'rate', heldNano: 0, slots: 1 })];
    const before = checkHolds(input({ ownerStopped: true, leases }));
    expect(before.differences).toEqual([expect.stringMatching(/^1 budget lease\(s\) of the stopped all-in-one hold \$0\.000001000 .*--fix reclaims them, as its next start would \(money\)/)]);
    expect(before.notes).toEqual([expect.stringMatching(/^2 lease\(s\) of the stopped all-in-one hold no money/)]);
    expect(checkHolds(input({ ownerStopped: true, leases: leases.slice(1) })).differences).toEqual([]);
    expect(checkHolds(input({ ownerStopped: true, fixed: true, slackMs: 0, leases: leases.slice(2) })).differences).toEqual([
      expect.stringMatching(/^1 lease\(s\) of the stopped all-in-one remain after the fix/),
    ]);
    expect(checkHolds(input({ ownerStopped: true, fixed: true, slackMs: 0, leases: [] })).differences).toEqual([]);
  });

  it('calls reservations held past expiry a fault, and every held reservation and running key of a stopped owner', () => {
    const reservations = { held: 3, heldNano: 300, pastExpiry: 1, pastExpiryNano: 100 };
    expect(checkHolds(input({ reservations })).differences).toEqual([
      '1 reservation(s) held past their expiry, holding $0.000000100: --fix settles them from their ledger rows or releases them',
    ]);
    expect(checkHolds(input({ reservations: { ...reservations, pastExpiry: 0, pastExpiryNano: 0 } }))).toMatchObject({ differences: [], notes: [expect.stringMatching(/^3 reservation\(s\) held within their expiry/)] });
    expect(checkHolds(input({ reservations, ownerStopped: true, runningKeys: 2 })).differences).toEqual([
      '3 reservation(s) of the stopped all-in-one still held, holding $0.000000300: --fix settles them from their ledger rows or releases them, as its next start would',
      '2 idempotency key(s) still running from the stopped all-in-one (a retry of them waits for their claim): --fix frees them, as its next start would',
    ]);
    // Running keys of a live deployment are requests in flight.
    expect(checkHolds(input({ runningKeys: 2 })).differences).toEqual([]);
  });
});

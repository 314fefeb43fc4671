import { encodeJournalRecord } from '@weir/ledger';
import { buildClaimMark, buildSettlementEntry, buildUsageRecord } from '@weir/testing';
import { decodeUsageMessage, encodeSettlementMessage } from './settlement-codec';
import { encodeUsageRecord } from './usage-record-codec';

describe('usage stream messages', () => {
  it('reads a settlement whole', () => {
    const entry = buildSettlementEntry(1, { usageSource: 'estimated', errorCode: 'x "kind": y' });
    expect(decodeUsageMessage(encodeSettlementMessage({ kind: 'settle', entry }))).toEqual({ ok: true, kind: 'settlement', item: { kind: 'settle', entry } });
  });

  it('carries a cache hit whole: its tier and the reservation it settles (the split gateway journals hits on the stream)', () => {
    const reservation = { reservationId: 'rsv_1', worstCaseNano: 1_250, monthStartsOn: '2026-12-01', dayStartsOn: '2026-12-07', leaseIds: ['lse_t', 'lse_a'] };
    const entry = buildSettlementEntry(3, { cacheHit: 'exact', costNanoUsd: 1_250, reservation });
    const decoded = decodeUsageMessage(encodeSettlementMessage({ kind: 'settle', entry }));
    expect(decoded).toEqual({ ok: true, kind: 'settlement', item: { kind: 'settle', entry } });
    expect(decoded.ok && decoded.kind === 'settlement' && decoded.item.kind === 'settle' && decoded.item.entry.usage.cacheHit).toBe('exact');
  });

  it('reads a usage record of the older format, even one whose text mentions "kind":', () => {
    const record = buildUsageRecord(2, { modelAlias: '"kind": "settle"' });
    expect(decodeUsageMessage(encodeUsageRecord(record))).toEqual({ ok: true, kind: 'usage', record });
  });

  it.each([
    ['invalid UTF-8', new Uint8Array([0xff, 0xfe]), 'not UTF-8 JSON'],
    ['a claim', new TextEncoder().encode(encodeJournalRecord({ kind: 'claim', claim: buildClaimMark(1) })), 'a claim record does not belong on the usage stream'],
    ['a broken settlement', new TextEncoder().encode('{"v":1,"kind":"settle","entry":{}}'), 'entry.usage: must be an object'],
  ])('refuses %s', (_what, data, reason) => {
    expect(decodeUsageMessage(data)).toEqual({ ok: false, reason });
  });
});

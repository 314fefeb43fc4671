import { encodeJournalRecord } from '@weir/ledger';
import { buildClaimMark, buildSettlementEntry, buildUsageRecord } from '@weir/testing';
import { decodeUsageMessage, encodeSettlementMessage } from './settlement-codec';
import { encodeUsageRecord } from './usage-record-codec';

describe('usage stream messages', () => {
  it('reads a settlement whole', () => {
    const entry = buildSettlementEntry(1, { usageSource: 'estimated', errorCode: 'x "kind": y' });
    expect(decodeUsageMessage(encodeSettlementMessage({ kind: 'settle', entry }))).toEqual({ ok: true, kind: 'settlement', item: { kind: 'settle', entry } });
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

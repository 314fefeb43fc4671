import { crc32 } from 'node:zlib';
import { buildClaimMark, buildSettlementEntry } from '@weir/testing';
import type { JournalRecord } from '@weir/ledger';
import { encodeJournalRecord } from '@weir/ledger';
import { LINE_OVERHEAD_BYTES, encodeJournalLine, parseJournalSegment, writeJournalLine } from './journal-line';

const records: JournalRecord[] = [
  { kind: 'settle', entry: buildSettlementEntry(1, { modelAlias: 'ünïcode ✓' }) },
  { kind: 'claim', claim: buildClaimMark(2) },
  { kind: 'release', generationId: 'gen_3' },
];
const lines = records.map(encodeJournalLine);
const bytes = (s: string) => Buffer.from(s, 'utf8');

describe('journal lines', () => {
  it('is `<crc32 hex> <json>\\n`, and reads back every record with its byte offsets', () => {
    expect(lines[2]).toMatch(/^[0-9a-f]{8} \{"v":1,"kind":"release","generationId":"gen_3"\}\n$/);
    const parsed = parseJournalSegment(bytes(lines.join('')));
    expect(parsed.lines.map((l) => l.record)).toEqual(records);
    const ends = lines.map((l) => Buffer.byteLength(l)).map((_, i, a) => a.slice(0, i + 1).reduce((x, y) => x + y));
    expect(parsed.lines.map((l) => l.end)).toEqual(ends);
    expect(parsed.lines.map((l) => l.start)).toEqual([0, ends[0], ends[1]]);
    expect([parsed.invalid, parsed.tornTailBytes]).toEqual([0, 0]);
  });

  it('writes into a buffer the same bytes encodeJournalLine gives, and refuses a buffer too small', () => {
    const buf = Buffer.alloc(4_096, 0xff);
    let at = 3;
    for (const r of records) at += writeJournalLine(buf, at, encodeJournalRecord(r));
    expect(buf.subarray(3, at).toString('utf8')).toBe(lines.join(''));
    const json = encodeJournalRecord(records[0]);
    expect(() => writeJournalLine(Buffer.alloc(Buffer.byteLength(json) + LINE_OVERHEAD_BYTES - 1), 0, json)).toThrow(RangeError);
    expect(writeJournalLine(Buffer.alloc(Buffer.byteLength(json) + LINE_OVERHEAD_BYTES), 0, json)).toBe(Buffer.byteLength(lines[0]));
  });

  it('detects a torn last line and keeps the lines before it', () => {
    const whole = lines.join('');
    const torn = bytes(whole + lines[0].slice(0, 40));
    const parsed = parseJournalSegment(torn);
    expect(parsed.lines.map((l) => l.record)).toEqual(records);
    expect(parsed.tornTailBytes).toBe(40);
  });

  it('skips a corrupted line (bad checksum) and reads on from the next newline', () => {
    const buf = bytes(lines.join(''));
    // Flip one byte inside the first line's JSON.
    const at = Buffer.byteLength(lines[0]) - 10;
    buf[at] = buf[at] ^ 0x01;
    const parsed = parseJournalSegment(buf);
    expect(parsed.lines.map((l) => l.record)).toEqual(records.slice(1));
    expect([parsed.invalid, parsed.firstInvalidReason]).toEqual([1, 'checksum mismatch']);
  });

  it.each([
    ['a line without a checksum header', 'hello world\n', 'no checksum header'],
    ['a blank line', '\n', 'no checksum header'],
    ['a line edited after its checksum', encodeJournalLine({ kind: 'release', generationId: 'g' }).replace('"v":1', '"v":9'), 'checksum mismatch'],
  ])('skips %s', (_what, text, reason) => {
    const parsed = parseJournalSegment(bytes(text + lines[1]));
    expect(parsed.lines.map((l) => l.record)).toEqual([records[1]]);
    expect([parsed.invalid, parsed.firstInvalidReason]).toEqual([1, reason]);
  });

  it('reports a checksummed line whose JSON is not a valid record', () => {
    const json = '{"v":1,"kind":"claim","claim":{}}';
    const line = `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
    const parsed = parseJournalSegment(bytes(line));
    expect([parsed.lines.length, parsed.invalid, parsed.firstInvalidReason]).toEqual([0, 1, 'claim: tenantId must be a string']);
  });
});

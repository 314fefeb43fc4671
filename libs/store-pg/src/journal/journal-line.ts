/**
 * The settlement journal's line format: `<crc32 of the JSON, 8 lowercase hex> <JSON>\n`, one
 * record per line, UTF-8. The JSON (from `encodeJournalRecord`) never contains a newline, so a
 * reader can always find the next line; the checksum tells a whole line from a torn one (a
 * machine crash can leave the last lines of a segment partly written) or a corrupted one.
 */
import { crc32 } from 'node:zlib';
import { type JournalRecord, decodeJournalRecord, encodeJournalRecord } from '@weir/ledger';

const NEWLINE = 0x0a;
const SPACE = 0x20;
/** 8 hex digits and a space. */
const HEADER_BYTES = 9;
const HEX = Buffer.from('0123456789abcdef', 'latin1');

/** One journal line for a record (see the module comment). */
export function encodeJournalLine(record: JournalRecord): string {
  const json = encodeJournalRecord(record);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

/** Bytes a line adds to its JSON's UTF-8: the checksum header and the newline. */
export const LINE_OVERHEAD_BYTES = HEADER_BYTES + 1;

/**
 * Writes the line of `json` (the text of `encodeJournalRecord`) into `buf` at `offset`, the same
 * bytes as {@link encodeJournalLine}, and returns how many it wrote. The checksum is computed on
 * the UTF-8 already in `buf`, so a line costs no intermediate string or buffer.
 * @throws RangeError when `buf` has fewer than `Buffer.byteLength(json) + LINE_OVERHEAD_BYTES`
 *   bytes from `offset`.
 */
export function writeJournalLine(buf: Buffer, offset: number, json: string): number {
  const bodyStart = offset + HEADER_BYTES;
  const bodyBytes = Buffer.byteLength(json);
  if (bodyStart + bodyBytes + 1 > buf.length) throw new RangeError('journal line does not fit the buffer');
  buf.write(json, bodyStart, 'utf8');
  const crc = crc32(buf.subarray(bodyStart, bodyStart + bodyBytes));
  for (let i = 7, v = crc; i >= 0; i--, v >>>= 4) buf[offset + i] = HEX[v & 0xf];
  buf[offset + HEADER_BYTES - 1] = SPACE;
  buf[bodyStart + bodyBytes] = NEWLINE;
  return HEADER_BYTES + bodyBytes + 1;
}

/** A whole, valid line read back: its record and the byte offset just past its newline. */
export interface JournalLine {
  record: JournalRecord;
  /** Byte offset of the line's first byte in the segment. */
  start: number;
  /** Byte offset just past the line's newline (the position after applying it). */
  end: number;
}

/** What {@link parseJournalSegment} found in one segment's bytes. */
export interface ParsedSegment {
  lines: JournalLine[];
  /** Lines skipped: bad checksum, bad header, or JSON that is not a record (with the reason of the first). */
  invalid: number;
  firstInvalidReason?: string;
  /** Bytes after the last newline: a line torn by a crash while it was being written (0 when none). */
  tornTailBytes: number;
}

/**
 * Reads every line of a segment. Never throws: a line with a bad checksum or header, or whose
 * JSON is not a valid record, is counted in `invalid` and skipped (reading goes on at the next
 * newline); bytes after the last newline are a torn tail, reported and ignored.
 */
export function parseJournalSegment(bytes: Uint8Array): ParsedSegment {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: ParsedSegment = { lines: [], invalid: 0, tornTailBytes: 0 };
  let start = 0;
  while (start < buf.length) {
    const nl = buf.indexOf(NEWLINE, start);
    if (nl < 0) {
      out.tornTailBytes = buf.length - start;
      break;
    }
    const parsed = parseLine(buf, start, nl);
    if (typeof parsed === 'string') {
      out.invalid++;
      out.firstInvalidReason ??= parsed;
    } else out.lines.push({ record: parsed, start, end: nl + 1 });
    start = nl + 1;
  }
  return out;
}

/** The record of the line `buf[start, nl)`, or why it is not one. */
function parseLine(buf: Buffer, start: number, nl: number): JournalRecord | string {
  if (nl - start <= HEADER_BYTES || buf[start + HEADER_BYTES - 1] !== SPACE) return 'no checksum header';
  const header = buf.toString('latin1', start, start + HEADER_BYTES - 1);
  if (!/^[0-9a-f]{8}$/.test(header)) return 'no checksum header';
  const body = buf.subarray(start + HEADER_BYTES, nl);
  if (crc32(body) !== parseInt(header, 16)) return 'checksum mismatch';
  const decoded = decodeJournalRecord(body.toString('utf8'));
  return decoded.ok ? decoded.record : decoded.reason;
}

import { createSseDataReader } from './sse-data-reader';

/** Feeds `parts` (strings or bytes) and the end; returns every event's data in order. */
function read(parts: Array<string | Uint8Array>): string[] {
  const reader = createSseDataReader();
  const out: string[] = [];
  for (const p of parts) out.push(...reader.push(Buffer.from(p)));
  out.push(...reader.end());
  return out;
}

/** Every split of `text` into bytes one at a time. */
const bytewise = (text: string) => [...Buffer.from(text)].map((b) => Uint8Array.of(b));

describe('createSseDataReader', () => {
  it.each([
    ['LF', 'data: a\n\ndata: b\n\n'],
    ['CRLF', 'data: a\r\n\r\ndata: b\r\n\r\n'],
    ['lone CR', 'data: a\r\rdata: b\r\r'],
    ['mixed', 'data: a\r\n\ndata: b\r\r\n'],
  ])('splits events on %s line ends, whole or byte by byte', (_name, text) => {
    expect(read([text])).toEqual(['a', 'b']);
    expect(read(bytewise(text))).toEqual(['a', 'b']);
  });

  it('counts a CRLF split across reads once (no empty line between the halves)', () => {
    expect(read(['data: a\r', '\ndata: b\r', '\n\r\n'])).toEqual(['a\nb']);
  });

  it('joins data lines with LF, drops one space after the colon, keeps the rest', () => {
    expect(read(['data:x\ndata:  two spaces\ndata\n\n'])).toEqual(['x\n two spaces\n']);
  });

  it('ignores comments, event, id, retry and unknown fields, and events without data', () => {
    expect(read([': ping\n\nevent: message\nid: 7\nretry: 10\ndatax: no\ndata: yes\n\nevent: only\n\n'])).toEqual(['yes']);
  });

  it('drops one leading BOM, even split across reads', () => {
    const bom = Buffer.from('\uFEFFdata: a\n\n');
    expect(read([bom.subarray(0, 2), bom.subarray(2)])).toEqual(['a']);
    expect(read(['\uFEFF\uFEFFdata: a\n\n'])).toEqual([]);
  });

  it('decodes UTF-8 characters split across reads', () => {
    const text = 'data: {"content":"héllo wörld 🌍 日本語"}\n\n';
    expect(read(bytewise(text))).toEqual(['{"content":"héllo wörld 🌍 日本語"}']);
  });

  it('dispatches an unterminated last event at the end, and nothing twice', () => {
    const reader = createSseDataReader();
    expect(reader.push(Buffer.from('data: a\n\ndata: [DONE]'))).toEqual(['a']);
    expect(reader.end()).toEqual(['[DONE]']);
    expect(read(['data: a\n'])).toEqual(['a']);
    expect(read(['data: a\n\n'])).toEqual(['a']);
  });

  it('returns the events a read completes, several at once', () => {
    const reader = createSseDataReader();
    expect(reader.push(Buffer.from('data: 1\n\ndata: 2\n\ndata: 3'))).toEqual(['1', '2']);
    expect(reader.push(Buffer.from('\n\n'))).toEqual(['3']);
    expect(reader.end()).toEqual([]);
  });
});

/**
 * The streaming multipart reader: parts and fields split at every possible chunk boundary,
 * a file delivered in pieces (never whole), a preamble and epilogue ignored, malformed bodies
 * refused with 400, and only `multipart/form-data` accepted.
 */
import { WeirError } from '@weir/core';
import { multipartBoundary, type PartInfo, readMultipart } from './multipart';

const B = '----weir7MA4YWxk';
const body = (file: string) =>
  `preamble\r\n--${B}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${B}\r\nContent-Disposition: form-data; name="file"; filename="in put.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n${file}\r\n--${B}--\r\nepilogue`;

async function* chunks(text: string, size: number): AsyncIterable<Buffer> {
  const b = Buffer.from(text);
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

async function parse(text: string, size: number) {
  const parts: { info: PartInfo; data: string; writes: number }[] = [];
  await readMultipart(chunks(text, size), B, (info) => {
    const p = { info, data: '', writes: 0 };
    parts.push(p);
    return {
      write(c) {
        p.writes += 1;
        p.data += c.toString('latin1');
      },
      end() {},
    };
  });
  return parts;
}

describe('readMultipart', () => {
  const file = '{"a":1}\r\n{"b":"--' + B.slice(0, 8) + '"}\n';

  it('reads the same parts whatever the chunk size', async () => {
    for (const size of [1, 2, 3, 5, 8, 13, 64, 4096]) {
      const parts = await parse(body(file), size);
      expect(parts.map((p) => [p.info.name, p.info.filename, p.data])).toEqual([
        ['purpose', undefined, 'batch'],
        ['file', 'in put.jsonl', file],
      ]);
      expect(parts[1].info.contentType).toBe('application/octet-stream');
    }
  });

  it('delivers a large file in pieces as it arrives', async () => {
    const big = 'x'.repeat(100_000);
    const parts = await parse(body(big), 16_384);
    expect(parts[1].data).toBe(big);
    expect(parts[1].writes).toBeGreaterThan(3);
  });

  it('refuses a body without its closing boundary, or a part without a name', async () => {
    await expect(parse(`--${B}\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc`, 4)).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(parse(`--${B}\r\nContent-Type: text/plain\r\n\r\nabc\r\n--${B}--`, 4)).rejects.toBeInstanceOf(WeirError);
  });

  it('takes the boundary of multipart/form-data only', () => {
    expect(multipartBoundary(`multipart/form-data; boundary=${B}`)).toBe(B);
    expect(multipartBoundary(`multipart/form-data; charset=utf-8; boundary="${B}"`)).toBe(B);
    expect(() => multipartBoundary('application/json')).toThrow(expect.objectContaining({ code: 'unsupported_media_type' }));
    expect(() => multipartBoundary(undefined)).toThrow(WeirError);
  });
});

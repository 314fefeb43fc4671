/**
 * A streaming `multipart/form-data` reader (RFC 7578) for `POST /v1/files`: parts are delivered
 * as they arrive — a file part chunk by chunk, never whole — with back-pressure (the next read
 * waits for the sink).
 */
import { WeirError } from '@weir/core';

/** Where a part's body goes. */
export interface PartSink {
  write(chunk: Buffer): Promise<void> | void;
  end(): Promise<void> | void;
}

/** A part's headers, as read. */
export interface PartInfo {
  /** `name` of its `Content-Disposition`. */
  name: string;
  /** `filename`, for a file part. */
  filename?: string;
  contentType?: string;
}

/** The boundary of a `multipart/form-data` content type; throws 415 `unsupported_media_type` for any other. */
export function multipartBoundary(contentType: string | undefined): string {
  const m = contentType ? /^\s*multipart\/form-data\s*;(?:.*;)?\s*boundary\s*=\s*(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType) : null;
  if (!m) throw new WeirError('unsupported_media_type', 'Upload the file as `multipart/form-data` with the fields `purpose` and `file`.');
  return m[1] ?? m[2];
}

const MAX_HEADER_BYTES = 16 * 1024;
const MAX_PARTS = 16;
const CRLF2 = Buffer.from('\r\n\r\n');

/**
 * Reads a multipart body from `source`; each part's body goes to the sink `open` returns for it.
 * Throws `invalid_request` (400) on a malformed body (no closing boundary, oversized headers,
 * too many parts, a part without a name).
 */
export async function readMultipart(source: AsyncIterable<Buffer | string>, boundary: string, open: (part: PartInfo) => PartSink): Promise<void> {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  // The body starts with `--boundary`: read it as if a CRLF came first.
  let buf: Buffer = Buffer.from('\r\n');
  let state: 'preamble' | 'after' | 'headers' | 'body' | 'done' = 'preamble';
  let sink: PartSink | undefined;
  let parts = 0;
  const malformed = (why: string) => new WeirError('invalid_request', `The multipart body is malformed (${why}); upload with a standard client (e.g. the OpenAI SDK's files.create).`);

  const step = async (): Promise<boolean> => {
    switch (state) {
      case 'preamble': {
        const at = buf.indexOf(delimiter);
        if (at < 0) {
          buf = buf.subarray(Math.max(0, buf.length - delimiter.length + 1));
          return false;
        }
        buf = buf.subarray(at + delimiter.length);
        state = 'after';
        return true;
      }
      case 'after': {
        if (buf.length < 2) return false;
        if (buf[0] === 0x2d && buf[1] === 0x2d) {
          state = 'done';
          return false;
        }
        const eol = buf.indexOf('\r\n');
        if (eol < 0) {
          if (buf.length > 256) throw malformed('bad boundary line');
          return false;
        }
        // Transport padding (spaces or tabs) may follow the boundary.
        if (buf.subarray(0, eol).toString('latin1').trim() !== '') throw malformed('bad boundary line');
        buf = buf.subarray(eol + 2);
        state = 'headers';
        return true;
      }
      case 'headers': {
        const end = buf.indexOf(CRLF2);
        if (end < 0) {
          if (buf.length > MAX_HEADER_BYTES) throw malformed('part headers too long');
          return false;
        }
        const info = parseHeaders(buf.subarray(0, end).toString('utf8'));
        if (!info) throw malformed('a part has no Content-Disposition name');
        if (++parts > MAX_PARTS) throw malformed('too many parts');
        buf = buf.subarray(end + 4);
        sink = open(info);
        state = 'body';
        return true;
      }
      case 'body': {
        const at = buf.indexOf(delimiter);
        const s = sink as PartSink;
        if (at >= 0) {
          if (at > 0) await s.write(Buffer.from(buf.subarray(0, at)));
          await s.end();
          sink = undefined;
          buf = buf.subarray(at + delimiter.length);
          state = 'after';
          return true;
        }
        const safe = buf.length - delimiter.length + 1;
        if (safe > 0) {
          await s.write(Buffer.from(buf.subarray(0, safe)));
          buf = buf.subarray(safe);
        }
        return false;
      }
      default:
        return false;
    }
  };

  for await (const chunk of source) {
    if ((state as string) === 'done') continue; // the epilogue is ignored
    const c = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    buf = buf.length === 0 ? c : Buffer.concat([buf, c]);
    while (await step());
  }
  if ((state as string) !== 'done') throw malformed('the closing boundary is missing');
}

/** The name, filename and type of a part, from its header block. */
function parseHeaders(block: string): PartInfo | undefined {
  let name: string | undefined;
  let filename: string | undefined;
  let contentType: string | undefined;
  for (const line of block.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const key = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (key === 'content-disposition') {
      name = paramOf(value, 'name');
      filename = paramOf(value, 'filename');
    } else if (key === 'content-type') contentType = value;
  }
  if (name === undefined) return undefined;
  return { name, ...(filename !== undefined ? { filename } : {}), ...(contentType !== undefined ? { contentType } : {}) };
}

function paramOf(value: string, param: string): string | undefined {
  const m = new RegExp(`;\\s*${param}\\s*=\\s*(?:"((?:[^"\\\\]|\\\\.)*)"|([^;\\s]*))`, 'i').exec(value);
  if (!m) return undefined;
  return m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2];
}

/**
 * The frames of `weir.mux.v1` (see mux.ts): many logical calls on one long-lived gRPC bidi
 * stream. Each gRPC message carries one or more frames, each `[u32 length][frame]`; a frame
 * is `[u8 type][u32 call id]` then its body. Hand-encoded: no reflection, no per-frame objects
 * beyond the one decoded.
 *
 * Client → server
 * - START  `[u32 deadline ms from now, 0xffffffff = none][u16 path length][path][metadata][payload…]`
 * - CANCEL (no body)
 *
 * Server → client
 * - DATA   `[payload…]` (one response message)
 * - STATUS `[u8 grpc status][u32 details length][details][metadata]` (0 = OK: the call's end)
 *
 * Metadata: `[u8 count]` then per entry `[u16 key length][key][u32 value length][value]`;
 * a key ending in `-bin` carries bytes, any other a UTF-8 string (as in gRPC).
 */

export const FRAME_START = 1;
export const FRAME_CANCEL = 2;
export const FRAME_DATA = 3;
export const FRAME_STATUS = 4;

/** The deadline field's value for "no deadline". */
export const NO_DEADLINE = 0xffffffff;

/** Metadata as it crosses the mux: key → values (strings, or Buffers for `-bin` keys). */
export type MuxMetadata = ReadonlyArray<readonly [string, string | Buffer]>;

export type Frame =
  | { type: typeof FRAME_START; id: number; deadlineMs: number; path: string; metadata: MuxMetadata; payload: Buffer }
  | { type: typeof FRAME_CANCEL; id: number }
  | { type: typeof FRAME_DATA; id: number; payload: Buffer }
  | { type: typeof FRAME_STATUS; id: number; code: number; details: string; metadata: MuxMetadata };

const EMPTY: MuxMetadata = [];

function metadataSize(metadata: MuxMetadata): number {
  let n = 1;
  for (const [k, v] of metadata) n += 2 + Buffer.byteLength(k) + 4 + (typeof v === 'string' ? Buffer.byteLength(v) : v.length);
  return n;
}

function writeMetadata(buf: Buffer, at: number, metadata: MuxMetadata): number {
  buf.writeUInt8(Math.min(255, metadata.length), at++);
  let count = 0;
  for (const [k, v] of metadata) {
    if (count++ === 255) break;
    const kl = buf.write(k, at + 2);
    buf.writeUInt16BE(kl, at);
    at += 2 + kl;
    if (typeof v === 'string') {
      const vl = buf.write(v, at + 4);
      buf.writeUInt32BE(vl, at);
      at += 4 + vl;
    } else {
      buf.writeUInt32BE(v.length, at);
      v.copy(buf, at + 4);
      at += 4 + v.length;
    }
  }
  return at;
}

function readMetadata(buf: Buffer, at: number): [MuxMetadata, number] {
  const count = buf.readUInt8(at++);
  if (count === 0) return [EMPTY, at];
  const out: [string, string | Buffer][] = [];
  for (let i = 0; i < count; i++) {
    const kl = buf.readUInt16BE(at);
    const key = buf.toString('utf8', at + 2, at + 2 + kl);
    at += 2 + kl;
    const vl = buf.readUInt32BE(at);
    const end = at + 4 + vl;
    if (end > buf.length) throw new RangeError('mux frame: metadata value overruns the frame');
    out.push([key, key.endsWith('-bin') ? Buffer.from(buf.subarray(at + 4, end)) : buf.toString('utf8', at + 4, end)]);
    at = end;
  }
  return [out, at];
}

/** Encodes one frame, length prefix included. */
export function encodeFrame(frame: Frame): Buffer {
  let size = 5;
  switch (frame.type) {
    case FRAME_START:
      size += 4 + 2 + Buffer.byteLength(frame.path) + metadataSize(frame.metadata) + frame.payload.length;
      break;
    case FRAME_CANCEL:
      break;
    case FRAME_DATA:
      size += frame.payload.length;
      break;
    case FRAME_STATUS:
      size += 1 + 4 + Buffer.byteLength(frame.details) + metadataSize(frame.metadata);
      break;
  }
  const buf = Buffer.allocUnsafe(4 + size);
  buf.writeUInt32BE(size, 0);
  buf.writeUInt8(frame.type, 4);
  buf.writeUInt32BE(frame.id >>> 0, 5);
  let at = 9;
  switch (frame.type) {
    case FRAME_START: {
      buf.writeUInt32BE(frame.deadlineMs, at);
      const pl = buf.write(frame.path, at + 6);
      buf.writeUInt16BE(pl, at + 4);
      at = writeMetadata(buf, at + 6 + pl, frame.metadata);
      frame.payload.copy(buf, at);
      break;
    }
    case FRAME_CANCEL:
      break;
    case FRAME_DATA:
      frame.payload.copy(buf, at);
      break;
    case FRAME_STATUS: {
      buf.writeUInt8(frame.code, at);
      const dl = buf.write(frame.details, at + 5);
      buf.writeUInt32BE(dl, at + 1);
      writeMetadata(buf, at + 5 + dl, frame.metadata);
      break;
    }
  }
  return buf;
}

/**
 * Decodes every frame of one gRPC message, calling `onFrame` for each in order. Payloads are
 * views into `message` (decoded before the next message arrives). Throws a RangeError on a
 * malformed message.
 */
export function decodeFrames(message: Buffer, onFrame: (frame: Frame) => void): void {
  let at = 0;
  while (at < message.length) {
    if (at + 9 > message.length) throw new RangeError('mux frame: truncated header');
    const size = message.readUInt32BE(at);
    const end = at + 4 + size;
    if (size < 5 || end > message.length) throw new RangeError('mux frame: bad length');
    const type = message.readUInt8(at + 4);
    const id = message.readUInt32BE(at + 5);
    let p = at + 9;
    switch (type) {
      case FRAME_START: {
        const deadlineMs = message.readUInt32BE(p);
        const pl = message.readUInt16BE(p + 4);
        const path = message.toString('utf8', p + 6, p + 6 + pl);
        const [metadata, q] = readMetadata(message, p + 6 + pl);
        if (q > end) throw new RangeError('mux frame: START overruns');
        onFrame({ type, id, deadlineMs, path, metadata, payload: message.subarray(q, end) });
        break;
      }
      case FRAME_CANCEL:
        onFrame({ type, id });
        break;
      case FRAME_DATA:
        onFrame({ type, id, payload: message.subarray(p, end) });
        break;
      case FRAME_STATUS: {
        const code = message.readUInt8(p);
        const dl = message.readUInt32BE(p + 1);
        const details = message.toString('utf8', p + 5, p + 5 + dl);
        p += 5 + dl;
        const [metadata, q] = readMetadata(message, p);
        if (q > end) throw new RangeError('mux frame: STATUS overruns');
        onFrame({ type, id, code, details, metadata });
        break;
      }
      default:
        throw new RangeError(`mux frame: unknown type ${type}`);
    }
    at = end;
  }
}

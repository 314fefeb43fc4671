/**
 * Hand-written protobuf codec for the hottest message of the split, the relay's
 * `GenerateResponse` frames of deltas (`delta` / `deltas` without tool-call fragments or reasoning): the
 * same bytes protobuf-es writes, without its reflection (`create`, `toBinary`, `fromBinary`
 * cost more than the text they carry). Anything else — the end event, tool-call fragments,
 * reasoning, unknown fields — goes through protobuf-es as before, so the wire format is unchanged and
 * either side may use either codec.
 */
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import { relayV1 } from '@weir/proto';

const DELTA_TYPE = 'weir.relay.v1.Delta';
const RESPONSE_TYPE = 'weir.relay.v1.GenerateResponse';

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    buf[at++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[at++] = n;
  return at;
}

/** Size of a Delta's body (text = 1, tokens = 2; defaults omitted, as proto3 does). */
function deltaBodySize(d: relayV1.Delta, textBytes: number): number {
  return (d.text.length > 0 ? 1 + varintSize(textBytes) + textBytes : 0) + (d.tokens !== 0 ? 1 + varintSize(d.tokens) : 0);
}

function writeDelta(buf: Buffer, at: number, d: relayV1.Delta, textBytes: number): number {
  at = writeVarint(buf, at, deltaBodySize(d, textBytes));
  if (d.text.length > 0) {
    buf[at++] = 0x0a;
    at = writeVarint(buf, at, textBytes);
    at += buf.write(d.text, at);
  }
  if (d.tokens !== 0) {
    buf[at++] = 0x10;
    at = writeVarint(buf, at, d.tokens >>> 0);
  }
  return at;
}

const plain = (d: relayV1.Delta) => d.toolCalls.length === 0 && d.reasoning === undefined && (d.tokens >>> 0) === d.tokens;

/** `GenerateResponse` → bytes (identical to `toBinary`). */
export function encodeGenerateResponse(message: relayV1.GenerateResponse): Buffer {
  const event = message.event;
  if (event.case === 'delta' && plain(event.value)) {
    const tb = Buffer.byteLength(event.value.text);
    const body = deltaBodySize(event.value, tb);
    const buf = Buffer.allocUnsafe(1 + varintSize(body) + body);
    buf[0] = 0x0a;
    writeDelta(buf, 1, event.value, tb);
    return buf;
  }
  if (event.case === 'deltas' && event.value.deltas.every(plain)) {
    const deltas = event.value.deltas;
    const textBytes = deltas.map((d) => Buffer.byteLength(d.text));
    let inner = 0;
    for (let i = 0; i < deltas.length; i++) {
      const body = deltaBodySize(deltas[i], textBytes[i]);
      inner += 1 + varintSize(body) + body;
    }
    const buf = Buffer.allocUnsafe(1 + varintSize(inner) + inner);
    buf[0] = 0x1a;
    let at = writeVarint(buf, 1, inner);
    for (let i = 0; i < deltas.length; i++) {
      buf[at++] = 0x0a;
      at = writeDelta(buf, at, deltas[i], textBytes[i]);
    }
    return buf;
  }
  const bytes = toBinary(relayV1.GenerateResponseSchema, message);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Thrown inside the fast decoder when the bytes need protobuf-es. */
const SLOW = Symbol('slow');

function readVarint(buf: Uint8Array, pos: { at: number }, end: number): number {
  let n = 0;
  let mul = 1;
  for (let i = 0; i < 10; i++) {
    if (pos.at >= end) throw SLOW;
    const b = buf[pos.at++];
    n += (b & 0x7f) * mul;
    if (b < 0x80) return n;
    mul *= 128;
  }
  throw SLOW;
}

function readDelta(buf: Buffer, pos: { at: number }, end: number): relayV1.Delta {
  let text = '';
  let tokens = 0;
  while (pos.at < end) {
    const tag = readVarint(buf, pos, end);
    if (tag === 0x0a) {
      const len = readVarint(buf, pos, end);
      if (pos.at + len > end) throw SLOW;
      text = buf.toString('utf8', pos.at, pos.at + len);
      pos.at += len;
    } else if (tag === 0x10) {
      tokens = readVarint(buf, pos, end) % 0x100000000;
    } else throw SLOW; // tool calls, reasoning or unknown fields
  }
  return { $typeName: DELTA_TYPE, text, tokens, toolCalls: [] } as relayV1.Delta;
}

function decodeFast(buf: Buffer): relayV1.GenerateResponse {
  const pos = { at: 0 };
  const tag = readVarint(buf, pos, buf.length);
  const len = readVarint(buf, pos, buf.length);
  const end = pos.at + len;
  if (end !== buf.length) throw SLOW; // more than one top-level field
  if (tag === 0x0a) {
    return { $typeName: RESPONSE_TYPE, event: { case: 'delta', value: readDelta(buf, pos, end) } } as relayV1.GenerateResponse;
  }
  if (tag === 0x1a) {
    const deltas: relayV1.Delta[] = [];
    while (pos.at < end) {
      if (readVarint(buf, pos, end) !== 0x0a) throw SLOW;
      const dl = readVarint(buf, pos, end);
      const dend = pos.at + dl;
      if (dend > end) throw SLOW;
      deltas.push(readDelta(buf, pos, dend));
    }
    return { $typeName: RESPONSE_TYPE, event: { case: 'deltas', value: { $typeName: 'weir.relay.v1.Deltas', deltas } } } as relayV1.GenerateResponse;
  }
  throw SLOW;
}

/** Bytes → `GenerateResponse` (equal to `fromBinary`'s). Throws on malformed bytes, as `fromBinary` does. */
export function decodeGenerateResponse(bytes: Buffer): relayV1.GenerateResponse {
  if (bytes.length > 0) {
    try {
      return decodeFast(bytes);
    } catch (error) {
      if (error !== SLOW) throw error;
    }
  }
  return fromBinary(relayV1.GenerateResponseSchema, bytes);
}

/** A delta as the relay sends it: a plain message object (no `create` per token). */
export function plainDelta(text: string, tokens: number): relayV1.Delta {
  return { $typeName: DELTA_TYPE, text, tokens, toolCalls: [] } as relayV1.Delta;
}

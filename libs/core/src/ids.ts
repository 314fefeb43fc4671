import { randomFillSync } from 'node:crypto';

/** Random bytes drawn from the CSPRNG in one call and handed out 16 at a time. */
const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
let offset = POOL_BYTES;

/**
 * Generates a URL-safe random id with a type prefix, e.g. `gen_3kq9…` (prefix + 22 base64url
 * chars from 128 random bits). Used for generation ids and request ids.
 *
 * The bits come from the CSPRNG (`crypto.randomFillSync`) 4 KiB at a time rather than one
 * 16-byte call per id (a call and a Buffer each, several per request on the gateway's path);
 * every id still takes 16 bytes no other id took.
 */
export function newId(prefix: string): string {
  if (offset + 16 > POOL_BYTES) {
    randomFillSync(pool);
    offset = 0;
  }
  const id = pool.toString('base64url', offset, offset + 16);
  offset += 16;
  return `${prefix}_${id}`;
}

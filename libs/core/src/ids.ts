import { randomBytes } from 'node:crypto';

/**
 * Generates a URL-safe random id with a type prefix, e.g. `gen_3kq9…` (prefix + 22 base62-ish
 * chars from 128 random bits). Used for generation ids and request ids.
 */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(16).toString('base64url')}`;
}

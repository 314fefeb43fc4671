import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * API keys as ARCHITECTURE.md §8 fixes them: `wk_<prefix>_<secret>`, a short public prefix
 * (8 lowercase alphanumerics, for lookup and display) and a random secret of 32 bytes
 * (256 bits, base64url, 43 chars). Stored only as the SHA-256 of the whole key: keys are
 * random, so a slow password hash would add latency without adding security.
 */

const PREFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** Length of the public prefix. */
export const API_KEY_PREFIX_LENGTH = 8;
/** Secret entropy in bytes (≥ 16 required by §8; we use 32). */
export const API_KEY_SECRET_BYTES = 32;
const KEY_PATTERN = /^wk_([a-z0-9]{8})_([A-Za-z0-9_-]{22,})$/;

/** A freshly minted key: `plaintext` is shown once and never stored. */
export interface MintedApiKey {
  plaintext: string;
  prefix: string;
  /** SHA-256 of `plaintext`, lowercase hex (64 chars). */
  sha256: string;
}

/** Mints a new random API key. */
export function mintApiKey(): MintedApiKey {
  const bytes = randomBytes(API_KEY_PREFIX_LENGTH);
  let prefix = '';
  for (const b of bytes) prefix += PREFIX_ALPHABET[b % PREFIX_ALPHABET.length];
  const plaintext = `wk_${prefix}_${randomBytes(API_KEY_SECRET_BYTES).toString('base64url')}`;
  return { plaintext, prefix, sha256: hashApiKey(plaintext) };
}

/** SHA-256 of a key, lowercase hex. */
export function hashApiKey(plaintext: string): string {
  return createHash('sha256').update(plaintext, 'utf8').digest('hex');
}

/**
 * Parses a key's shape. Returns the public prefix, or undefined when the string is not a
 * well-formed Weir key (so a malformed key is rejected without a lookup).
 */
export function parseApiKey(plaintext: string): { prefix: string } | undefined {
  const m = KEY_PATTERN.exec(plaintext);
  return m ? { prefix: m[1] } : undefined;
}

/**
 * Validates an operator-supplied key (e.g. `WEIR_DEMO_API_KEY`). A well-formed Weir key is
 * preferred; any other token of 8 to 256 visible ASCII characters is accepted too (an
 * operator may reuse a key from an existing setup), and is likewise stored only as its
 * SHA-256. Returns an error message that says what to fix, or undefined when acceptable.
 */
export function checkSuppliedApiKey(plaintext: string): string | undefined {
  if (parseApiKey(plaintext)) return undefined;
  if (/^[\x21-\x7e]{8,256}$/.test(plaintext)) return undefined;
  return 'an API key must look like wk_<8 lowercase letters or digits>_<at least 22 base64url characters> (or be 8 to 256 visible ASCII characters); leave it unset to have one generated';
}

/**
 * The public prefix to store and display for a key: a Weir key's own prefix, else the first
 * 8 hex characters of its SHA-256 (a foreign-format key has no prefix of its own).
 */
export function displayPrefixOf(plaintext: string): string {
  return parseApiKey(plaintext)?.prefix ?? hashApiKey(plaintext).slice(0, API_KEY_PREFIX_LENGTH);
}

/** Compares two hex digests in constant time. */
export function digestsEqual(aHex: string, bHex: string): boolean {
  const a = Buffer.from(aHex, 'hex');
  const b = Buffer.from(bHex, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

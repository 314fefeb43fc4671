import { createHash, randomBytes } from 'node:crypto';

/**
 * Admin API tokens: `wa_<prefix>_<secret>`, an 8-character public prefix (lowercase letters
 * and digits, for lookup and display) and a 32-byte random secret (base64url). Stored only as
 * the SHA-256 of the whole token (lowercase hex) and compared in constant time, like API keys
 * (ARCHITECTURE.md §8): tokens are random, so a slow password hash would buy nothing.
 */

const PREFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const TOKEN_PATTERN = /^wa_([a-z0-9]{8})_([A-Za-z0-9_-]{22,})$/;

/** The roles: `viewer` may read (GET); `admin` may do everything. */
export type AdminRole = 'admin' | 'viewer';

/** A freshly minted admin token: `plaintext` is shown once and never stored. */
export interface MintedAdminToken {
  plaintext: string;
  prefix: string;
  /** SHA-256 of `plaintext`, lowercase hex. */
  sha256: string;
}

/** Mints a new random admin token. */
export function mintAdminToken(): MintedAdminToken {
  let prefix = '';
  for (const b of randomBytes(8)) prefix += PREFIX_ALPHABET[b % PREFIX_ALPHABET.length];
  const plaintext = `wa_${prefix}_${randomBytes(32).toString('base64url')}`;
  return { plaintext, prefix, sha256: hashAdminToken(plaintext) };
}

/** SHA-256 of a token, lowercase hex. */
export function hashAdminToken(plaintext: string): string {
  return createHash('sha256').update(plaintext, 'utf8').digest('hex');
}

/**
 * The prefix a presented token is looked up by: a `wa_` token's own prefix, else the first 8
 * hex characters of its SHA-256 (an operator-chosen `WEIR_ADMIN_TOKEN` in another format).
 */
export function adminTokenPrefix(plaintext: string): string {
  return TOKEN_PATTERN.exec(plaintext)?.[1] ?? hashAdminToken(plaintext).slice(0, 8);
}

/**
 * Checks an operator-supplied token (`WEIR_ADMIN_TOKEN`): a `wa_` token, or any 24 to 256
 * visible ASCII characters. Returns what to fix, or undefined when acceptable.
 */
export function checkSuppliedAdminToken(plaintext: string): string | undefined {
  if (TOKEN_PATTERN.test(plaintext) || /^[\x21-\x7e]{24,256}$/.test(plaintext)) return undefined;
  return 'an admin token must look like wa_<8 lowercase letters or digits>_<at least 22 base64url characters>, or be 24 to 256 visible ASCII characters';
}

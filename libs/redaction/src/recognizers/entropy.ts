import type { Recognizer } from '../types';
import { DASH, codeAt, isAlnum, isAlpha, isDigit, isHex } from './chars';

/** Characters of a token: base64/base64url alphabets. */
const isTokenChar = (c: number): boolean => isAlnum(c) || c === 43 || c === 47 || c === 61 || c === 95 || c === DASH;

/** Shannon entropy of `s` (bits per character): −Σ p·log2 p over its characters' frequencies. */
export function shannonEntropy(s: string): number {
  if (s.length === 0) return 0;
  const counts = new Map<number, number>();
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    counts.set(c, (counts.get(c) ?? 0) + 1);
  }
  let h = 0;
  for (const k of counts.values()) {
    const p = k / s.length;
    h -= p * Math.log2(p);
  }
  return h;
}

/** True for `8-4-4-4-12` hex (a UUID). */
export function isUuid(s: string): boolean {
  if (s.length !== 36) return false;
  for (let i = 0; i < 36; i++) {
    const c = s.charCodeAt(i);
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== DASH) return false;
    } else if (!isHex(c)) return false;
  }
  return true;
}

/** True when `token` holds letters and digits and its entropy is above {@link threshold}. */
function randomLooking(token: string): boolean {
  let letters = 0;
  let digits = 0;
  let hexOnly = true;
  for (let k = 0; k < token.length; k++) {
    const c = token.charCodeAt(k);
    if (isDigit(c)) digits++;
    else if (isAlpha(c)) letters++;
    if (!isHex(c)) hexOnly = false;
  }
  if (letters === 0 || digits === 0) return false;
  if (hexOnly && token.length < 32) return false;
  return shannonEntropy(token) >= threshold(token.length, hexOnly);
}

/** Options of {@link createEntropyRecognizer}. */
export interface EntropyOptions {
  /** Shortest token considered (characters); default 24, never below 12. */
  minLength?: number;
  /** Whether UUIDs are flagged; default false. */
  redactUuids?: boolean;
}

/**
 * The entropy a random token of `n` characters over `alphabet` symbols reaches, lowered by a
 * margin: `min(cap, 0.82·log2 n)` — a random 24-character base62 token has ≈ 4.2 bits per
 * character, an English identifier of the same length ≈ 3.3–3.8.
 */
function threshold(n: number, hexOnly: boolean): number {
  return hexOnly ? Math.min(3.3, 0.8 * Math.log2(n)) : Math.min(4.2, 0.82 * Math.log2(n));
}

/**
 * High-entropy tokens: maximal runs of base64/base64url characters (`A-Za-z0-9+/=_-`) of at
 * least `minLength` characters, holding both letters and digits, whose Shannon entropy is above
 * a length-aware threshold (hex-only tokens need 32 characters and a lower bar). Words,
 * identifiers without digits, version strings, dates and — unless `redactUuids` — UUIDs are
 * not flagged. Linear: each run is read twice.
 */
export function createEntropyRecognizer(options: EntropyOptions = {}): Recognizer {
  const minLength = Math.max(12, options.minLength ?? 24);
  const uuids = options.redactUuids ?? false;
  return {
    type: 'entropy',
    tag: 'SECRET',
    find(text, emit) {
      const n = text.length;
      for (let i = 0; i < n; i++) {
        if (!isTokenChar(text.charCodeAt(i))) continue;
        let end = i;
        while (end < n && isTokenChar(text.charCodeAt(end))) end++;
        const start = i;
        i = end;
        // Trim padding-like edges that prose adds (`--flag`, `==`).
        let s = start;
        let e = end;
        while (s < e && (codeAt(text, s) === DASH || codeAt(text, s) === 47)) s++;
        while (e > s && codeAt(text, e - 1) === DASH) e--;
        const len = e - s;
        if (len < minLength) continue;
        const token = text.slice(s, e);
        if (isUuid(token)) {
          if (uuids) emit(s, e);
          continue;
        }
        // An identifier of words joined by `-`/`_` (`order-number-0000123`) is judged by its
        // parts: one random-looking part of 16+ characters makes it a secret.
        const parts = token.includes('-') || token.includes('_') ? token.split(/[-_]/) : [token];
        if (!parts.some((p) => p.length >= (parts.length > 1 ? 16 : minLength) && randomLooking(p))) continue;
        emit(s, e);
      }
    },
  };
}

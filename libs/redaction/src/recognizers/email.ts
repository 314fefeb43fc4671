import type { Recognizer } from '../types';
import { DASH, DOT, codeAt, isAlnum, isAlpha } from './chars';

/** Longest local part (RFC 5321) and domain considered (characters). */
const MAX_LOCAL = 64;
const MAX_DOMAIN = 253;

const QUOTE = 34;
const LETTER_OR_MARK = /[\p{L}\p{M}\p{Nd}]/u;
/** A letter, mark or decimal digit outside ASCII (internationalised addresses, RFC 6531 / IDNA). */
const isUnicodeWord = (c: number): boolean => c >= 0x80 && c < 0xd800 && LETTER_OR_MARK.test(String.fromCharCode(c));

/** `A-Za-z0-9`, `. _ % + - '` and Unicode letters: the local-part characters of addresses people write. */
const isLocal = (c: number): boolean => isAlnum(c) || c === 46 || c === 95 || c === 37 || c === 43 || c === 45 || c === 39 || isUnicodeWord(c);
const isDomain = (c: number): boolean => isAlnum(c) || c === DASH || c === DOT || isUnicodeWord(c);

/**
 * True for `example.co.uk` or `exämple.de`: two or more labels of 1–63 letters/digits/hyphens
 * (not at a label's edge), a TLD of 2+ letters (Unicode letters too) or an `xn--` A-label.
 */
function validDomain(domain: string): boolean {
  const labels = domain.split('.');
  if (labels.length < 2) return false;
  for (const label of labels) {
    if (label.length === 0 || label.length > 63) return false;
    if (codeAt(label, 0) === DASH || codeAt(label, label.length - 1) === DASH) return false;
  }
  const tld = labels[labels.length - 1];
  if (tld.length < 2) return false;
  if (tld.length > 4 && tld.slice(0, 4).toLowerCase() === 'xn--') return true;
  for (let i = 0; i < tld.length; i++) {
    const c = tld.charCodeAt(i);
    if (!isAlpha(c) && !isUnicodeWord(c)) return false;
  }
  return true;
}

/**
 * Start of a quoted local part (`"john doe"@example.com`) ending at `at - 1`: the index of its
 * opening quote, found over at most 64 characters back (not before `min`, no line break or
 * other quote inside, not empty), or -1.
 */
function quotedLocalStart(text: string, at: number, min: number): number {
  if (text.charCodeAt(at - 1) !== QUOTE) return -1;
  for (let k = at - 2; k >= min && k >= at - 1 - MAX_LOCAL; k--) {
    const c = text.charCodeAt(k);
    if (c === QUOTE) return k < at - 2 ? k : -1;
    if (c === 10 || c === 13) return -1;
  }
  return -1;
}

/**
 * E-mail addresses (`local@domain.tld`): found from each `@` (left over at most 64 local-part
 * characters, right over at most 253 domain characters), so the work per `@` is bounded and the
 * scan linear. Internationalised addresses (`jöhn@exämple.de`: Unicode letters in the local part
 * and the domain) and quoted local parts (`"john doe"@example.com`) are found. The domain needs
 * a dot and an alphabetic TLD: `user@localhost` and `a@1.2` are not flagged.
 */
export const emailRecognizer: Recognizer = {
  type: 'email',
  tag: 'EMAIL',
  find(text, emit) {
    let from = 0;
    let lastEnd = 0;
    for (;;) {
      const at = text.indexOf('@', from);
      if (at < 0) return;
      from = at + 1;
      let start = at;
      const min = Math.max(lastEnd, at - MAX_LOCAL);
      const quoted = quotedLocalStart(text, at, Math.max(lastEnd, 0));
      if (quoted >= 0) start = quoted;
      else {
        while (start > min && isLocal(text.charCodeAt(start - 1))) start--;
        while (start < at && (text.charCodeAt(start) === DOT || text.charCodeAt(start) === 39)) start++;
        if (start === at || text.charCodeAt(at - 1) === DOT) continue;
      }
      let end = at + 1;
      const max = Math.min(text.length, at + 1 + MAX_DOMAIN);
      while (end < max && isDomain(text.charCodeAt(end))) end++;
      while (end > at + 1 && (text.charCodeAt(end - 1) === DOT || text.charCodeAt(end - 1) === DASH)) end--;
      if (end === at + 1 || !validDomain(text.slice(at + 1, end))) continue;
      emit(start, end);
      lastEnd = end;
      from = end;
    }
  },
};

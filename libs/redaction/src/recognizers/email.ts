import type { Recognizer } from '../types';
import { DASH, DOT, codeAt, isAlnum, isAlpha } from './chars';

/** Longest local part (RFC 5321) and domain considered (characters). */
const MAX_LOCAL = 64;
const MAX_DOMAIN = 253;

/** `A-Za-z0-9` and `. _ % + - '` : the local-part characters of addresses people write. */
const isLocal = (c: number): boolean => isAlnum(c) || c === 46 || c === 95 || c === 37 || c === 43 || c === 45 || c === 39;
const isDomain = (c: number): boolean => isAlnum(c) || c === DASH || c === DOT;

/** True for `example.co.uk`: two or more labels of 1–63 letters/digits/hyphens (not at a label's edge), an alphabetic TLD of 2+. */
function validDomain(domain: string): boolean {
  const labels = domain.split('.');
  if (labels.length < 2) return false;
  for (const label of labels) {
    if (label.length === 0 || label.length > 63) return false;
    if (codeAt(label, 0) === DASH || codeAt(label, label.length - 1) === DASH) return false;
  }
  const tld = labels[labels.length - 1];
  if (tld.length < 2) return false;
  for (let i = 0; i < tld.length; i++) if (!isAlpha(tld.charCodeAt(i))) return false;
  return true;
}

/**
 * E-mail addresses (`local@domain.tld`): found from each `@` (left over at most 64 local-part
 * characters, right over at most 253 domain characters), so the work per `@` is bounded and the
 * scan linear. The domain needs a dot and an alphabetic TLD: `user@localhost` and `a@1.2` are
 * not flagged.
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
      while (start > min && isLocal(text.charCodeAt(start - 1))) start--;
      while (start < at && (text.charCodeAt(start) === DOT || text.charCodeAt(start) === 39)) start++;
      if (start === at || text.charCodeAt(at - 1) === DOT) continue;
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

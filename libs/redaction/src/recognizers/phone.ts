import type { Recognizer } from '../types';
import { DASH, DOT, LPAREN, PLUS, RPAREN, SPACE, codeAt, isDigit, numberMayEndAt, numberMayStartAt } from './chars';

/** Most digits of a phone number (E.164). */
const MAX_DIGITS = 15;

/**
 * A candidate read by {@link read}: its digit groups (start in the text and length; at most 15
 * groups since each has a digit), whether it began with `+`, its separators and end. Reused
 * between candidates: the scan allocates nothing per position.
 */
interface Candidate {
  intl: boolean;
  count: number;
  starts: Int32Array;
  lengths: Int32Array;
  seps: number;
  end: number;
}

/**
 * Reads a phone-number candidate at `start` (a `+`, `(` or digit) into `c`: digit groups, each
 * optionally in parentheses, joined by one separator (space, `-`, `.`). Returns false when it has
 * no group, or as soon as it has more than 15 digits (so each candidate costs O(1)).
 */
function read(text: string, start: number, c: Candidate): boolean {
  let pos = start;
  c.intl = codeAt(text, pos) === PLUS;
  if (c.intl) pos++;
  c.count = 0;
  c.seps = 0;
  c.end = pos;
  let digits = 0;
  for (;;) {
    const paren = codeAt(text, pos) === LPAREN;
    if (paren) pos++;
    const g = pos;
    while (isDigit(codeAt(text, pos))) {
      pos++;
      if (++digits > MAX_DIGITS) return false;
    }
    if (pos === g) break;
    const len = pos - g;
    if (paren) {
      if (codeAt(text, pos) !== RPAREN) break;
      pos++;
    }
    c.starts[c.count] = g;
    c.lengths[c.count] = len;
    c.count++;
    c.end = pos;
    const s = codeAt(text, pos);
    const next = codeAt(text, pos + 1);
    if ((s === SPACE || s === DASH || s === DOT) && (isDigit(next) || next === LPAREN)) {
      pos++;
      c.seps++;
    } else if (paren && isDigit(s)) {
      // `(202)555-0143`: a closing parenthesis separates on its own.
      c.seps++;
    } else break;
  }
  return c.count > 0;
}

/** A North American area code or exchange starts with 2–9. */
const nxx = (text: string, at: number): boolean => text.charCodeAt(at) >= 50 && text.charCodeAt(at) <= 57;

/** True for a national number in a common written format (see {@link phoneRecognizer}). */
function nationalShape(text: string, c: Candidate): boolean {
  if (c.count < 2) return false;
  const { starts, lengths } = c;
  // North American: (NXX) NXX-XXXX, NXX-NXX-XXXX, 1 NXX NXX XXXX.
  if (c.count === 3 && lengths[0] === 3 && lengths[1] === 3 && lengths[2] === 4) return nxx(text, starts[0]) && nxx(text, starts[1]);
  if (c.count === 4 && lengths[0] === 1 && lengths[1] === 3 && lengths[2] === 3 && lengths[3] === 4) {
    return text.charCodeAt(starts[0]) === 49 && nxx(text, starts[1]) && nxx(text, starts[2]);
  }
  // A trunk prefix 0 (most of Europe, the UK, Asia): 10–11 digits in groups of 2–5.
  if (text.charCodeAt(starts[0]) !== 48 || text.charCodeAt(starts[0] + 1) === 48) return false;
  let digits = 0;
  for (let k = 0; k < c.count; k++) {
    if (lengths[k] < 2 || lengths[k] > 5) return false;
    digits += lengths[k];
  }
  return digits >= 10 && digits <= 11;
}

/** True for an international number: 8–15 digits, in one run or in groups of at most 5. */
function internationalShape(c: Candidate): boolean {
  let digits = 0;
  for (let k = 0; k < c.count; k++) {
    if (c.count > 1 && c.lengths[k] > 5) return false;
    digits += c.lengths[k];
  }
  return digits >= 8;
}

/**
 * Phone numbers: international (`+` then 8–15 digits, in groups of at most 5 or in one run) and
 * national numbers in common written formats — North American `(202) 555-0143`,
 * `202-555-0143`, `202.555.0143`, `1 202 555 0143`, and trunk-prefixed `020 7946 0958`,
 * `01 23 45 67 89` (10–11 digits, groups of 2–5). Plain digit runs (order numbers), dates
 * (`2024-01-15`, `15.01.2024`), times, SSNs (`123-45-6789`), card numbers and IP addresses do
 * not fit these shapes. Linear: each candidate stops after 15 digits, and nothing is allocated
 * per candidate.
 */
export const phoneRecognizer: Recognizer = {
  type: 'phone',
  tag: 'PHONE',
  find(text, emit) {
    const n = text.length;
    const c: Candidate = { intl: false, count: 0, starts: new Int32Array(MAX_DIGITS + 1), lengths: new Int32Array(MAX_DIGITS + 1), seps: 0, end: 0 };
    for (let i = 0; i < n; i++) {
      const ch = text.charCodeAt(i);
      if (!(isDigit(ch) || ((ch === PLUS || ch === LPAREN) && isDigit(codeAt(text, i + 1))))) continue;
      if (!numberMayStartAt(text, i)) continue;
      if (!read(text, i, c) || !numberMayEndAt(text, c.end)) continue;
      if (!(c.intl ? internationalShape(c) : nationalShape(text, c))) continue;
      emit(i, c.end);
      i = c.end - 1;
    }
  },
};

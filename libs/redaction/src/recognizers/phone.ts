import type { Recognizer } from '../types';
import { DASH, DOT, LPAREN, PLUS, RPAREN, SPACE, codeAt, isDigit, numberMayEndAt, numberMayStartAt } from './chars';

/** Most digits of a phone number (E.164). */
const MAX_DIGITS = 15;

/**
 * Reads a phone-number candidate at `start` (a `+`, `(` or digit): digit groups, each optionally
 * in parentheses, joined by one separator (space, `-`, `.`). Returns its groups and end, or
 * undefined as soon as it has more than 15 digits (so each candidate costs O(1)).
 */
function read(text: string, start: number): { intl: boolean; groups: string[]; seps: number; end: number } | undefined {
  let pos = start;
  const intl = codeAt(text, pos) === PLUS;
  if (intl) pos++;
  const groups: string[] = [];
  let digits = 0;
  let seps = 0;
  let end = pos;
  for (;;) {
    const paren = codeAt(text, pos) === LPAREN;
    if (paren) pos++;
    const g = pos;
    while (isDigit(codeAt(text, pos))) {
      pos++;
      if (++digits > MAX_DIGITS) return undefined;
    }
    if (pos === g) break;
    if (paren) {
      if (codeAt(text, pos) !== RPAREN) break;
      pos++;
    }
    groups.push(text.slice(g, paren ? pos - 1 : pos));
    end = pos;
    const s = codeAt(text, pos);
    const next = codeAt(text, pos + 1);
    if ((s === SPACE || s === DASH || s === DOT) && (isDigit(next) || next === LPAREN)) {
      pos++;
      seps++;
    } else if (paren && isDigit(s)) {
      // `(202)555-0143`: a closing parenthesis separates on its own.
      seps++;
    } else break;
  }
  return groups.length === 0 ? undefined : { intl, groups, seps, end };
}

const sizes = (groups: string[]) => groups.map((g) => g.length).join(',');
/** A North American area code or exchange starts with 2–9. */
const nxx = (g: string): boolean => g.charCodeAt(0) >= 50 && g.charCodeAt(0) <= 57;

/** True for a national number in a common written format (see {@link phoneRecognizer}). */
function nationalShape(groups: string[], seps: number): boolean {
  if (seps === 0 && groups.length === 1) return false;
  const shape = sizes(groups);
  // North American: (NXX) NXX-XXXX, NXX-NXX-XXXX, 1 NXX NXX XXXX.
  if (shape === '3,3,4') return nxx(groups[0]) && nxx(groups[1]);
  if (shape === '1,3,3,4') return groups[0] === '1' && nxx(groups[1]) && nxx(groups[2]);
  // A trunk prefix 0 (most of Europe, the UK, Asia): 10–11 digits in groups of 2–5.
  const digits = groups.reduce((n, g) => n + g.length, 0);
  return groups[0].startsWith('0') && !groups[0].startsWith('00') && digits >= 10 && digits <= 11 && groups.length >= 2 && groups.every((g) => g.length >= 2 && g.length <= 5);
}

/**
 * Phone numbers: international (`+` then 8–15 digits, in groups of at most 5 or in one run) and
 * national numbers in common written formats — North American `(202) 555-0143`,
 * `202-555-0143`, `202.555.0143`, `1 202 555 0143`, and trunk-prefixed `020 7946 0958`,
 * `01 23 45 67 89` (10–11 digits, groups of 2–5). Plain digit runs (order numbers), dates
 * (`2024-01-15`, `15.01.2024`), times, SSNs (`123-45-6789`), card numbers and IP addresses do
 * not fit these shapes. Linear: each candidate stops after 15 digits.
 */
export const phoneRecognizer: Recognizer = {
  type: 'phone',
  tag: 'PHONE',
  find(text, emit) {
    const n = text.length;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (!(isDigit(c) || ((c === PLUS || c === LPAREN) && isDigit(codeAt(text, i + 1))))) continue;
      if (!numberMayStartAt(text, i)) continue;
      const r = read(text, i);
      if (!r || !numberMayEndAt(text, r.end)) continue;
      const digits = r.groups.reduce((sum, g) => sum + g.length, 0);
      const ok = r.intl ? digits >= 8 && (r.groups.length === 1 || r.groups.every((g) => g.length <= 5)) : nationalShape(r.groups, r.seps);
      if (!ok) continue;
      emit(i, r.end);
      i = r.end - 1;
    }
  },
};

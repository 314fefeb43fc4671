import type { Recognizer } from '../types';
import { DASH, DOT, SPACE, codeAt, digitRunMayEndAt, digitRunMayStartAt, isBlank, isDigit } from './chars';

/** Most blank characters (spaces, tabs, line breaks) between two groups. */
const MAX_BLANKS = 3;

/** Luhn (ISO/IEC 7812-1 check digit) over a string of digits. */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return digits.length > 0 && sum % 10 === 0;
}

/**
 * True when the number starts with an issuer prefix in use: Visa 4; Mastercard 51–55 and
 * 2221–2720; Mir 2200–2204; Amex 34, 37; Diners 30, 36, 38, 39; JCB 35; Discover and UnionPay
 * 60–65; Maestro 50, 56–69. (An order number starting with 1, 7, 8 or 9 is never a card.)
 */
export function knownIssuer(digits: string): boolean {
  const first = digits.charCodeAt(0) - 48;
  const two = Number(digits.slice(0, 2));
  const four = Number(digits.slice(0, 4));
  switch (first) {
    case 2:
      return (four >= 2221 && four <= 2720) || (four >= 2200 && four <= 2204);
    case 3:
      return two === 30 || two === 34 || two === 35 || two === 36 || two === 37 || two === 38 || two === 39;
    case 4:
    case 5:
    case 6:
      return true;
    default:
      return false;
  }
}

/** Separator layouts cards are written in: groups of 4 (the last 1–4), or Amex/Diners 4-6-5 / 4-6-4 / 6-6-4. */
function layoutOk(groups: number[]): boolean {
  if (groups.length === 1) return true;
  const shape = groups.join(',');
  if (shape === '4,6,5' || shape === '4,6,4' || shape === '6,6,4') return true;
  for (let i = 0; i < groups.length - 1; i++) if (groups[i] !== 4) return false;
  const last = groups[groups.length - 1];
  return last >= 1 && last <= 4;
}

/**
 * Whether a group separator of `kind` may follow the number's earlier ones (`sep`, -1 before the
 * first): blanks and hyphens mix (`4111 1111-1111 1111`, as people type them), dots only go with
 * dots (dates and versions are dotted: `2024.01.15`, `4.1.1111.1111`).
 */
function separatorFits(sep: number, kind: number): boolean {
  if (sep === -1 || sep === kind) return true;
  return sep !== DOT && kind !== DOT;
}

/**
 * Payment card numbers: 13–19 digits, unseparated or in groups in a card layout joined by
 * blanks (1–3 spaces, tabs or line breaks; the redactor scans Unicode spaces as spaces) and `-`,
 * mixed or not (`4111 1111-1111 1111`), or by `.` alone — from a known issuer prefix, with a
 * valid Luhn check digit. Found on digit boundaries, so a number glued to letters
 * (`x4111111111111111x`) is found too. A Luhn-invalid number, an order number, a phone number, a
 * date, or dots mixed with other separators are not flagged. Linear: each candidate stops after
 * 19 digits (and at most 3 blanks or one `-` or `.` between two groups).
 */
export const cardRecognizer: Recognizer = {
  type: 'card',
  tag: 'CARD',
  find(text, emit) {
    const n = text.length;
    for (let i = 0; i < n; i++) {
      if (!isDigit(text.charCodeAt(i)) || !digitRunMayStartAt(text, i)) continue;
      let pos = i;
      let digits = '';
      const groups: number[] = [];
      let sep = -1;
      let tooLong = false;
      for (;;) {
        const g = pos;
        while (isDigit(codeAt(text, pos))) {
          pos++;
          if (digits.length + (pos - g) > 19) {
            tooLong = true;
            break;
          }
        }
        if (tooLong) break;
        digits += text.slice(g, pos);
        groups.push(pos - g);
        const s = codeAt(text, pos);
        let kind = -1;
        let len = 0;
        if (isBlank(s)) {
          kind = SPACE;
          len = 1;
          while (len < MAX_BLANKS && isBlank(codeAt(text, pos + len))) len++;
        } else if (s === DASH || s === DOT) {
          kind = s;
          len = 1;
        }
        if (kind !== -1 && separatorFits(sep, kind) && isDigit(codeAt(text, pos + len))) {
          sep = kind;
          pos += len;
        } else break;
      }
      if (tooLong) {
        // Skip the rest of this digit run: a number inside a longer one is not a card.
        while (isDigit(codeAt(text, pos))) pos++;
        i = pos - 1;
        continue;
      }
      if (digits.length < 13 || !digitRunMayEndAt(text, pos) || !layoutOk(groups) || !knownIssuer(digits) || !luhnValid(digits)) continue;
      emit(i, pos);
      i = pos - 1;
    }
  },
};

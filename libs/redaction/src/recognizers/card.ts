import type { Recognizer } from '../types';
import { DASH, SPACE, codeAt, isDigit, numberMayEndAt, numberMayStartAt } from './chars';

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

/** Separator layouts cards are written in: groups of 4 (the last 1–4), or Amex/Diners 4-6-5 / 4-6-4. */
function layoutOk(groups: number[]): boolean {
  if (groups.length === 1) return true;
  const shape = groups.join(',');
  if (shape === '4,6,5' || shape === '4,6,4') return true;
  for (let i = 0; i < groups.length - 1; i++) if (groups[i] !== 4) return false;
  const last = groups[groups.length - 1];
  return last >= 1 && last <= 4;
}

/**
 * Payment card numbers: 13–19 digits, unseparated or in groups joined by one kind of separator
 * (space or `-`) in a card layout, from a known issuer prefix, with a valid Luhn check digit.
 * A Luhn-invalid number, an order number, a phone number or a date is not flagged. Linear:
 * each candidate stops after 19 digits.
 */
export const cardRecognizer: Recognizer = {
  type: 'card',
  tag: 'CARD',
  find(text, emit) {
    const n = text.length;
    for (let i = 0; i < n; i++) {
      if (!isDigit(text.charCodeAt(i)) || !numberMayStartAt(text, i)) continue;
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
        if ((s === SPACE || s === DASH) && (sep === -1 || sep === s) && isDigit(codeAt(text, pos + 1))) {
          sep = s;
          pos++;
        } else break;
      }
      if (tooLong) {
        // Skip the rest of this digit run: a number inside a longer one is not a card.
        while (isDigit(codeAt(text, pos))) pos++;
        i = pos - 1;
        continue;
      }
      if (digits.length < 13 || !numberMayEndAt(text, pos) || !layoutOk(groups) || !knownIssuer(digits) || !luhnValid(digits)) continue;
      emit(i, pos);
      i = pos - 1;
    }
  },
};

import type { Recognizer } from '../types';
import { DASH, SPACE, codeAt, isAlnum, isAlpha, isDigit, isLower } from './chars';

/** IBAN length by country (SWIFT IBAN registry). A country not listed is not matched. */
export const IBAN_LENGTHS: Readonly<Record<string, number>> = {
  AD: 24, AE: 23, AL: 28, AT: 20, AZ: 28, BA: 20, BE: 16, BG: 22, BH: 22, BR: 29, BY: 28, CH: 21, CR: 22, CY: 28, CZ: 24,
  DE: 22, DK: 18, DO: 28, EE: 20, EG: 29, ES: 24, FI: 18, FO: 18, FR: 27, GB: 22, GE: 22, GI: 23, GL: 18, GR: 27, GT: 28,
  HR: 21, HU: 28, IE: 22, IL: 23, IQ: 23, IS: 26, IT: 27, JO: 30, KW: 30, KZ: 20, LB: 28, LC: 32, LI: 21, LT: 20, LU: 20,
  LV: 21, MC: 27, MD: 24, ME: 22, MK: 19, MR: 27, MT: 31, MU: 30, NL: 18, NO: 15, PK: 24, PL: 28, PS: 29, PT: 25, QA: 29,
  RO: 24, RS: 22, SA: 24, SC: 31, SE: 24, SI: 19, SK: 24, SM: 27, ST: 25, SV: 28, TL: 23, TN: 24, TR: 26, UA: 29, VA: 22,
  VG: 24, XK: 20,
};

/** ISO 13616 check: move the first four characters to the end, letters → 10–35, the number mod 97 is 1. */
export function ibanChecksumValid(compact: string): boolean {
  const s = compact.slice(4) + compact.slice(0, 4);
  let rem = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (isDigit(c)) rem = (rem * 10 + (c - 48)) % 97;
    else {
      const v = (isLower(c) ? c - 32 : c) - 55;
      rem = (rem * 100 + v) % 97;
    }
  }
  return rem === 1;
}

/**
 * IBANs: a country code, two check digits and the country's number of alphanumerics
 * ({@link IBAN_LENGTHS}), unseparated or in groups separated by single spaces or single `-`
 * (one kind per IBAN), passing the mod-97 check. Letters may be lower case. An IBAN glued to
 * letters before it (`acctDE89…`) is found (the country code, check digits, length and mod-97
 * make a chance match negligible); one glued to a digit before it, or to a letter or digit after
 * it, is not. Linear: each candidate reads at most 34 characters plus its separators.
 */
export const ibanRecognizer: Recognizer = {
  type: 'iban',
  tag: 'IBAN',
  find(text, emit) {
    const n = text.length;
    for (let i = 0; i + 15 <= n; i++) {
      const c0 = text.charCodeAt(i);
      if (!isAlpha(c0) || isDigit(codeAt(text, i - 1))) continue;
      if (!isAlpha(text.charCodeAt(i + 1)) || !isDigit(text.charCodeAt(i + 2)) || !isDigit(text.charCodeAt(i + 3))) continue;
      const length = IBAN_LENGTHS[text.slice(i, i + 2).toUpperCase()];
      if (length === undefined) continue;
      let pos = i;
      let compact = '';
      let sep = -1;
      while (compact.length < length) {
        const c = codeAt(text, pos);
        if (isAlnum(c)) {
          compact += text[pos];
          pos++;
        } else if ((c === SPACE || c === DASH) && (sep === -1 || sep === c) && compact.length >= 4 && isAlnum(codeAt(text, pos + 1))) {
          sep = c;
          pos++;
        } else break;
      }
      if (compact.length !== length || isAlnum(codeAt(text, pos)) || !ibanChecksumValid(compact)) continue;
      emit(i, pos);
      i = pos - 1;
    }
  },
};

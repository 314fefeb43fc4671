/** Character classes on UTF-16 code units (ASCII only: other characters are never part of a span's syntax). */

/** `0`–`9`. */
export const isDigit = (c: number): boolean => c >= 48 && c <= 57;
/** `A`–`Z`. */
export const isUpper = (c: number): boolean => c >= 65 && c <= 90;
/** `a`–`z`. */
export const isLower = (c: number): boolean => c >= 97 && c <= 122;
/** ASCII letter. */
export const isAlpha = (c: number): boolean => isUpper(c) || isLower(c);
/** ASCII letter or digit. */
export const isAlnum = (c: number): boolean => isDigit(c) || isAlpha(c);
/** `0`–`9`, `a`–`f`, `A`–`F`. */
export const isHex = (c: number): boolean => isDigit(c) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70);

/** Code of the character at `i`, or -1 outside the text (so every class test fails there). */
export const codeAt = (text: string, i: number): number => (i >= 0 && i < text.length ? text.charCodeAt(i) : -1);

export const DOT = 46;
export const DASH = 45;
export const SPACE = 32;
export const TAB = 9;
export const LF = 10;
export const CR = 13;
export const UNDERSCORE = 95;
export const PLUS = 43;
export const SLASH = 47;
export const COLON = 58;
export const COMMA = 44;
export const LPAREN = 40;
export const RPAREN = 41;

/**
 * True when a number may start at `i`: the character before is not a letter, a digit, `_`, or a
 * `.`/`-`/`/`/`:` that continues another number (so `v1.2`, `x-123`, `10/12` and `12:30` are not
 * read from their middle).
 */
export function numberMayStartAt(text: string, i: number): boolean {
  const p = codeAt(text, i - 1);
  if (p < 0) return true;
  if (isAlnum(p) || p === UNDERSCORE) return false;
  if (p === DOT || p === DASH || p === SLASH || p === COLON || p === COMMA) return !isDigit(codeAt(text, i - 2)) && p !== DOT;
  return true;
}

/**
 * True when a number may end at `end` (exclusive): the next character is not a letter, a digit
 * or `_`, nor a `.`/`-`/`/`/`:`/`,` followed by a digit (the number goes on).
 */
export function numberMayEndAt(text: string, end: number): boolean {
  const n = codeAt(text, end);
  if (n < 0) return true;
  if (isAlnum(n) || n === UNDERSCORE) return false;
  if (n === DOT || n === DASH || n === SLASH || n === COLON || n === COMMA) return !isDigit(codeAt(text, end + 1));
  return true;
}

/** Space, tab, carriage return or line feed (the scanned text has Unicode spaces as `' '`). */
export const isBlank = (c: number): boolean => c === SPACE || c === TAB || c === LF || c === CR;

/**
 * True when a digit run may start at `i` on digit boundaries (letters and `_` before it are
 * allowed: `acct4111…`): the character before is not a digit, nor a `.`, nor a `-`/`/`/`:`/`,`
 * after a digit (the middle of another number).
 */
export function digitRunMayStartAt(text: string, i: number): boolean {
  const p = codeAt(text, i - 1);
  if (p < 0) return true;
  if (isDigit(p) || p === DOT) return false;
  if (p === DASH || p === SLASH || p === COLON || p === COMMA) return !isDigit(codeAt(text, i - 2));
  return true;
}

/**
 * True when a digit run may end at `end` (exclusive) on digit boundaries (letters after it are
 * allowed): the next character is not a digit, nor a `.`/`-`/`/`/`:`/`,` followed by a digit.
 */
export function digitRunMayEndAt(text: string, end: number): boolean {
  const n = codeAt(text, end);
  if (n < 0) return true;
  if (isDigit(n)) return false;
  if (n === DOT || n === DASH || n === SLASH || n === COLON || n === COMMA) return !isDigit(codeAt(text, end + 1));
  return true;
}

import type { Recognizer } from '../types';
import { DASH, DOT, SPACE, codeAt, isDigit, numberMayEndAt, numberMayStartAt } from './chars';

function digitsAt(text: string, at: number, count: number): boolean {
  for (let k = 0; k < count; k++) if (!isDigit(codeAt(text, at + k))) return false;
  return true;
}

/**
 * True for an SSN the SSA can issue: area not 000, 666 or 900–999; group not 00; serial not 0000
 * (SSA, "Social Security Number Randomization", 2011).
 */
export function ssnValid(area: number, group: number, serial: number): boolean {
  return area !== 0 && area !== 666 && area < 900 && group !== 0 && serial !== 0;
}

/**
 * US social security numbers written `AAA-GG-SSSS` (or with spaces or dots, the same separator twice),
 * within the ranges the SSA can issue ({@link ssnValid}). A bare 9-digit run is not flagged
 * (too many order and account numbers look like one).
 */
export const ssnRecognizer: Recognizer = {
  type: 'ssn',
  tag: 'SSN',
  find(text, emit) {
    const n = text.length - 10;
    for (let i = 0; i <= n; i++) {
      if (!isDigit(text.charCodeAt(i))) continue;
      const s = text.charCodeAt(i + 3);
      if ((s !== DASH && s !== SPACE && s !== DOT) || text.charCodeAt(i + 6) !== s) continue;
      if (!digitsAt(text, i, 3) || !digitsAt(text, i + 4, 2) || !digitsAt(text, i + 7, 4)) continue;
      if (!numberMayStartAt(text, i) || !numberMayEndAt(text, i + 11)) continue;
      if (!ssnValid(Number(text.slice(i, i + 3)), Number(text.slice(i + 4, i + 6)), Number(text.slice(i + 7, i + 11)))) continue;
      emit(i, i + 11);
      i += 10;
    }
  },
};

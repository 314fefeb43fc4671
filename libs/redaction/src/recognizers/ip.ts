import type { Recognizer } from '../types';
import { COLON, DOT, codeAt, isAlnum, isDigit, isHex } from './chars';

/**
 * IPv4 addresses: four decimal octets 0–255 without leading zeros, not inside a longer dotted
 * number (`1.2.3.4.5`) and not after a letter (`v1.2.3.4`). A three-part version string is
 * never one.
 */
export const ipv4Recognizer: Recognizer = {
  type: 'ipv4',
  tag: 'IP',
  find(text, emit) {
    const n = text.length;
    for (let i = 0; i < n; i++) {
      if (!isDigit(text.charCodeAt(i))) continue;
      const p = codeAt(text, i - 1);
      if (isAlnum(p) || p === DOT || p === 95) continue;
      let pos = i;
      let ok = true;
      for (let octet = 0; octet < 4 && ok; octet++) {
        if (octet > 0) {
          if (codeAt(text, pos) !== DOT) ok = false;
          else pos++;
        }
        const s = pos;
        while (pos - s < 3 && isDigit(codeAt(text, pos))) pos++;
        const len = pos - s;
        if (len === 0 || isDigit(codeAt(text, pos)) || (len > 1 && text.charCodeAt(s) === 48) || Number(text.slice(s, pos)) > 255) ok = false;
      }
      if (!ok) {
        // Skip the rest of the digits and dots read: no address starts inside them.
        while (isDigit(codeAt(text, pos)) || codeAt(text, pos) === DOT) pos++;
        i = Math.max(i, pos - 1);
        continue;
      }
      // A port (`:5432`) or a prefix length (`/24`) may follow; another octet or a letter may not.
      const next = codeAt(text, pos);
      if (isAlnum(next) || next === 95 || (next === DOT && isDigit(codeAt(text, pos + 1)))) continue;
      emit(i, pos);
      i = pos - 1;
    }
  },
};

/** True for a textual IPv6 address (RFC 4291 §2.2: 8 groups, one `::`, an optional IPv4 tail). */
export function ipv6Valid(s: string): boolean {
  const halves = s.split('::');
  if (halves.length > 2) return false;
  const parts = (h: string) => (h === '' ? [] : h.split(':'));
  const groups = halves.flatMap(parts);
  let count = 0;
  for (let k = 0; k < groups.length; k++) {
    const g = groups[k];
    if (g.includes('.')) {
      if (k !== groups.length - 1) return false;
      const octets = g.split('.');
      if (octets.length !== 4 || octets.some((o) => o.length === 0 || o.length > 3 || !/^\d+$/.test(o) || Number(o) > 255)) return false;
      count += 2;
    } else {
      if (g.length === 0 || g.length > 4) return false;
      for (let j = 0; j < g.length; j++) if (!isHex(g.charCodeAt(j))) return false;
      count += 1;
    }
  }
  return halves.length === 2 ? count < 8 : count === 8;
}

const MAX_IPV6 = 45;
const isV6 = (c: number) => isHex(c) || c === COLON || c === DOT;

/**
 * IPv6 addresses (full, `::`-compressed, with an IPv4 tail): a run of hex digits, `:` and `.`
 * bounded by other characters (so `Foo::Bar` and `std::vector` are not read), at most 45
 * characters, with at least two colons and at least two hex digits, valid by {@link ipv6Valid}.
 * Times (`12:30:45`) and MAC addresses (six groups) are not valid IPv6. Linear: a run is read once.
 */
export const ipv6Recognizer: Recognizer = {
  type: 'ipv6',
  tag: 'IP',
  find(text, emit) {
    const n = text.length;
    // Every address has a colon: go from colon to colon, reading the run around each once.
    let from = 0;
    let lastEnd = 0;
    for (;;) {
      const colon = text.indexOf(':', from);
      if (colon < 0) return;
      let runStart = colon;
      while (runStart > lastEnd && isV6(text.charCodeAt(runStart - 1))) runStart--;
      let end = colon + 1;
      while (end < n && isV6(text.charCodeAt(end))) end++;
      from = lastEnd = end;
      if (isAlnum(codeAt(text, runStart - 1)) || codeAt(text, runStart - 1) === 95 || isAlnum(codeAt(text, end)) || codeAt(text, end) === 95) continue;
      const s = runStart;
      let e = end;
      // Sentence punctuation around an address: `(fe80::1).`, `at ::1:`.
      while (e > s && codeAt(text, e - 1) === DOT) e--;
      if (e - s >= 2 && codeAt(text, e - 1) === COLON && codeAt(text, e - 2) !== COLON) e--;
      if (e - s > MAX_IPV6 || e - s < 3) continue;
      const candidate = text.slice(s, e);
      let colons = 0;
      let hex = 0;
      for (let k = 0; k < candidate.length; k++) {
        const cc = candidate.charCodeAt(k);
        if (cc === COLON) colons++;
        else if (isHex(cc)) hex++;
      }
      if (colons < 2 || hex < 2 || !ipv6Valid(candidate)) continue;
      emit(s, e);
    }
  },
};

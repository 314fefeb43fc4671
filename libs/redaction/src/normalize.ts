/**
 * The text the recognizers scan: a normalised copy of the input with a map back to it, so that
 * PII written with look-alike characters is found and the right span of the original replaced.
 */

/**
 * Characters removed for matching (they still sit in the original text, inside the replaced
 * span when between two matched characters): soft hyphen, Mongolian vowel separator, zero-width
 * space / non-joiner / joiner, word joiner, zero-width no-break space (BOM).
 */
const isZeroWidth = (c: number): boolean => c === 0x00ad || c === 0x180e || (c >= 0x200b && c <= 0x200d) || c === 0x2060 || c === 0xfeff;

/**
 * Unicode spaces scanned as an ASCII space: no-break space, Ogham space mark, the en/em/thin/hair
 * spaces U+2000–U+200A, line and paragraph separators, narrow no-break space, medium
 * mathematical space, ideographic space.
 */
const isUnicodeSpace = (c: number): boolean => c === 0x00a0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;

/** NFKC of single code points, memoised (bounded: cleared when full). */
const nfkcCache = new Map<number, string>();
const NFKC_CACHE_MAX = 4096;
function nfkc(cp: number): string {
  let s = nfkcCache.get(cp);
  if (s === undefined) {
    s = String.fromCodePoint(cp).normalize('NFKC');
    if (nfkcCache.size >= NFKC_CACHE_MAX) nfkcCache.clear();
    nfkcCache.set(cp, s);
  }
  return s;
}

/**
 * A scanned text: `text` is what recognizers read; `starts[k]`/`ends[k]` are the original
 * `[start, end)` (UTF-16 code units) of scanned character `k`. Both maps are absent when the
 * text was not changed (pure ASCII input, the common case: no copy, no allocation).
 */
export interface ScanText {
  text: string;
  starts?: Int32Array;
  ends?: Int32Array;
}

const NON_ASCII = /[^\x00-\x7f]/;

/**
 * Normalises `text` for scanning, in one linear pass: every code point outside ASCII is mapped
 * to its NFKC form (full-width `４１１１` → `4111`, `ﬁ` → `fi`, mathematical digits → digits),
 * Unicode spaces to `' '`, and zero-width characters are dropped. Composition across code points
 * (a letter + combining mark) is not done: recognizers that read Unicode letters accept marks.
 * ASCII text is returned as is.
 */
export function normalizeForScan(text: string): ScanText {
  if (!NON_ASCII.test(text)) return { text };
  const parts: string[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  let run = 0; // start of the pending ASCII run
  const flush = (to: number) => {
    if (to > run) {
      parts.push(text.slice(run, to));
      for (let k = run; k < to; k++) {
        starts.push(k);
        ends.push(k + 1);
      }
    }
  };
  const n = text.length;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c < 0x80) {
      i++;
      continue;
    }
    flush(i);
    const cp = text.codePointAt(i) as number;
    const width = cp > 0xffff ? 2 : 1;
    let out: string;
    if (isZeroWidth(cp)) out = '';
    else if (isUnicodeSpace(cp)) out = ' ';
    else if (cp >= 0xd800 && cp <= 0xdfff) out = text.slice(i, i + width); // a lone surrogate: kept
    else out = nfkc(cp);
    parts.push(out);
    for (let k = 0; k < out.length; k++) {
      starts.push(i);
      ends.push(i + width);
    }
    i += width;
    run = i;
  }
  flush(n);
  return { text: parts.join(''), starts: Int32Array.from(starts), ends: Int32Array.from(ends) };
}

/**
 * Maps a span `[start, end)` of `scan.text` back to the original text: from the start of the
 * original character behind `start` to the end of the one behind `end - 1`.
 */
export function originalSpan(scan: ScanText, start: number, end: number): [number, number] {
  if (!scan.starts || !scan.ends) return [start, end];
  return [scan.starts[start], scan.ends[end - 1]];
}

/**
 * The tokenizers Weir runs itself for hosted upstreams (issue 13): tiktoken encodings through
 * js-tiktoken (pure JavaScript, offline: the ranks ship inside the package).
 *
 * An encoding is loaded on first use and then shared by every adapter in the process, never per
 * request. Loading costs time and memory once (measured with js-tiktoken 1.0.21 on Node 20:
 * `cl100k_base` ≈ 0.3 s and ≈ 35 MB of heap, `o200k_base` ≈ 1.2 s and ≈ 70 MB), which is why an
 * idle process that never counts with one never loads it. Counting costs about 0.1–0.2 ms of
 * CPU per KiB of prose.
 *
 * Bounded (issue 14 part 2): js-tiktoken's byte-pair merge grows about cubically with a
 * pre-tokenizer piece's length (a run of 4,096 letters took 3.9 s, 8,192 took 9.6 s), so a run
 * of more than {@link MAX_EXACT_RUN} letters, symbols or spaces is counted as its UTF-8 bytes
 * (an upper bound, as {@link countInputWith} needs). Text longer than {@link COUNT_SLICE_CHARS}
 * is counted slice by slice, yielding to the event loop between slices, and counting stops once
 * the count passes the caller's limit (the context window: such an input is refused anyway).
 */
import type { TokenizerName } from '@weir/core';
import { COUNT_SLICE_CHARS, countInSlices } from './slices';

export { COUNT_SLICE_CHARS } from './slices';

/** A tiktoken encoding name (a {@link TokenizerName} other than `none`). */
export type TiktokenEncoding = Exclude<TokenizerName, 'none'>;

/** Longest run of letters, symbols or whitespace counted exactly (longer runs: their UTF-8 bytes). */
export const MAX_EXACT_RUN = 32;

/** Runs the byte-pair merge would take super-linear time on (see the module comment). */
const LONG_RUN = new RegExp(`[\\p{L}\\p{M}]{${MAX_EXACT_RUN + 1},}|[^\\s\\p{L}\\p{N}]{${MAX_EXACT_RUN + 1},}|\\s{${MAX_EXACT_RUN + 1},}`, 'gu');

/** A text tokenizer: tokens of a text (synchronous once loaded, for text up to one slice). */
export interface TextTokenizer {
  /** The encoding's name, e.g. `o200k_base`. */
  readonly name: string;
  /**
   * Tokens of `text` (special-token text such as `<|endoftext|>` counts as ordinary text, as
   * an upstream that receives it as content encodes it); runs longer than {@link MAX_EXACT_RUN}
   * count as their UTF-8 bytes. A number once the encoding is loaded and the text is at most
   * {@link COUNT_SLICE_CHARS} long; otherwise a promise (the first call starts the load; longer
   * text is counted slice by slice). Counting may stop once the count exceeds `limit` (tokens):
   * the result is then some number above `limit`.
   */
  count(text: string, limit?: number): number | Promise<number>;
  /** True once the encoding is loaded (counting is then synchronous). */
  ready(): boolean;
  /** Starts loading the encoding if it is not loaded or loading; resolves when it is loaded. */
  load(): Promise<void>;
}

interface Encoder {
  encode(text: string, allowedSpecial?: string[] | 'all', disallowedSpecial?: string[] | 'all'): number[];
}

const loading = new Map<TiktokenEncoding, Promise<Encoder>>();
const loaded = new Map<TiktokenEncoding, Encoder>();
const tokenizers = new Map<TiktokenEncoding, TextTokenizer>();

async function loadEncoder(name: TiktokenEncoding): Promise<Encoder> {
  const { Tiktoken } = await import('js-tiktoken/lite');
  // One static specifier per encoding (bundlers and the module graph see exactly what may load).
  const ranks = name === 'o200k_base' ? (await import('js-tiktoken/ranks/o200k_base')).default : (await import('js-tiktoken/ranks/cl100k_base')).default;
  return new Tiktoken(ranks);
}

/**
 * The process-wide tokenizer of a tiktoken encoding (the same object for every call with the
 * same name). Nothing is loaded until it is first asked to count or to load.
 */
export function tiktokenTokenizer(name: TiktokenEncoding): TextTokenizer {
  const existing = tokenizers.get(name);
  if (existing) return existing;
  const load = (): Promise<Encoder> => {
    let p = loading.get(name);
    if (!p) {
      p = loadEncoder(name).then((encoder) => {
        loaded.set(name, encoder);
        return encoder;
      });
      // A failed load (a broken install) may be retried by the next call.
      p.catch(() => loading.delete(name));
      loading.set(name, p);
    }
    return p;
  };
  const tokenizer: TextTokenizer = {
    name,
    count(text, limit = Number.POSITIVE_INFINITY) {
      if (text.length === 0) return 0;
      const encoder = loaded.get(name);
      if (encoder && text.length <= COUNT_SLICE_CHARS) return countSlice(encoder, text);
      return (encoder ? Promise.resolve(encoder) : load()).then((e) => countInSlices(text, (slice) => countSlice(e, slice), limit));
    },
    ready: () => loaded.has(name),
    load: () => load().then(() => undefined),
  };
  tokenizers.set(name, tokenizer);
  return tokenizer;
}

/** Whether a UTF-16 code unit is white space as `\\s` has it. */
function isSpace(c: number): boolean {
  return c <= 32 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
}

/**
 * False when `text` surely has no run over {@link MAX_EXACT_RUN}: every stretch between spaces
 * is at most that long, and no more than that many white-space characters follow each other
 * across them. A fast screen (`indexOf` jumps: ≈ 0.7 µs per 100 characters of prose, against
 * ≈ 4 µs for {@link LONG_RUN}); true sends the text through {@link LONG_RUN}.
 */
function mayHaveLongRun(text: string): boolean {
  /** White space running up to the space at `next` (inclusive). */
  let blanks = 0;
  for (let from = 0; from < text.length; ) {
    let next = text.indexOf(' ', from);
    if (next < 0) next = text.length;
    if (next - from > MAX_EXACT_RUN) return true;
    // The stretch's leading white space continues the run before it, its trailing white space
    // starts the next (all of it when the stretch is blank).
    let lead = from;
    while (lead < next && isSpace(text.charCodeAt(lead))) lead++;
    if (blanks + (lead - from) > MAX_EXACT_RUN) return true;
    let trail = next - 1;
    while (trail >= lead && isSpace(text.charCodeAt(trail))) trail--;
    blanks = (lead === next ? blanks + (next - from) : next - 1 - trail) + 1;
    if (blanks > MAX_EXACT_RUN) return true;
    from = next + 1;
  }
  return false;
}

/** Tokens of a text of at most a slice: exact, but runs over {@link MAX_EXACT_RUN} count as their bytes. */
function countSlice(encoder: Encoder, text: string): number {
  if (!mayHaveLongRun(text)) return encoder.encode(text, [], []).length;
  LONG_RUN.lastIndex = 0;
  let total = 0;
  let from = 0;
  for (let m = LONG_RUN.exec(text); m; m = LONG_RUN.exec(text)) {
    if (m.index > from) total += encoder.encode(text.slice(from, m.index), [], []).length;
    total += Buffer.byteLength(m[0]);
    from = m.index + m[0].length;
  }
  if (from === 0) return encoder.encode(text, [], []).length;
  if (from < text.length) total += encoder.encode(text.slice(from), [], []).length;
  return total;
}

/**
 * The tokenizer a hosted upstream's engine spec declares (`tokenizer`), or undefined for
 * `none` / none declared.
 */
export function declaredTokenizer(spec: { tokenizer?: TokenizerName }): TextTokenizer | undefined {
  return spec.tokenizer === undefined || spec.tokenizer === 'none' ? undefined : tiktokenTokenizer(spec.tokenizer);
}

/**
 * A caller-supplied counting function as a {@link TextTokenizer} that is always ready (tests,
 * and compositions that count another way).
 */
export function functionTokenizer(count: (text: string) => number | Promise<number>, name = 'custom'): TextTokenizer {
  return { name, count: (text) => (text.length === 0 ? 0 : count(text)), ready: () => true, load: () => Promise.resolve() };
}

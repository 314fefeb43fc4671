/**
 * The tokenizers Weir runs itself for hosted upstreams (issue 13): tiktoken encodings through
 * js-tiktoken (pure JavaScript, offline: the ranks ship inside the package).
 *
 * An encoding is loaded on first use and then shared by every adapter in the process, never per
 * request. Loading costs time and memory once (measured with js-tiktoken 1.0.21 on Node 20:
 * `cl100k_base` ≈ 0.3 s and ≈ 35 MB of heap, `o200k_base` ≈ 1.2 s and ≈ 70 MB), which is why an
 * idle process that never counts with one never loads it. Counting costs about 0.2 ms of CPU
 * per KiB of text.
 */
import type { TokenizerName } from '@weir/core';

/** A tiktoken encoding name (a {@link TokenizerName} other than `none`). */
export type TiktokenEncoding = Exclude<TokenizerName, 'none'>;

/** A text tokenizer: tokens of a text (synchronous once loaded). */
export interface TextTokenizer {
  /** The encoding's name, e.g. `o200k_base`. */
  readonly name: string;
  /**
   * Tokens of `text` (special-token text such as `<|endoftext|>` counts as ordinary text, as
   * an upstream that receives it as content encodes it). A number once the encoding is loaded;
   * before that a promise that resolves when it is (the first call starts the load).
   */
  count(text: string): number | Promise<number>;
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
    count(text) {
      if (text.length === 0) return 0;
      const encoder = loaded.get(name);
      if (encoder) return encoder.encode(text, [], []).length;
      return load().then((e) => e.encode(text, [], []).length);
    },
    ready: () => loaded.has(name),
    load: () => load().then(() => undefined),
  };
  tokenizers.set(name, tokenizer);
  return tokenizer;
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

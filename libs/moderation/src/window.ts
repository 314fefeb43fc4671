/**
 * The rolling window of output moderation (issue 15 item 7). Deltas are held until the text
 * they carry has been checked; a check covers the last `overlapChars` of already-checked text
 * plus everything held, and is due once `windowChars − overlapChars` new characters are held.
 * So a phrase of up to `overlapChars + 1` characters split across deltas or across windows is
 * always seen whole by some check before its last character is released, and at most one
 * window's new text (plus the deltas of one engine read) is ever held back.
 */

/** Options of {@link createOutputWindow}. */
export interface OutputWindowOptions {
  /** Characters per window (checked text: overlap + new). */
  windowChars: number;
  /** Characters of checked text repeated at the start of the next window; less than `windowChars`. */
  overlapChars: number;
}

/** Held items and the text still to check. */
export interface OutputWindow<T> {
  /** Holds an item carrying `text`. */
  push(item: T, text: string): void;
  /** Whether enough new text is held for a check. */
  due(): boolean;
  /** Whether anything is held. */
  holding(): boolean;
  /** Characters held (not yet released). */
  heldChars(): number;
  /** The text a check covers now: the overlap tail, then the held text. */
  text(): string;
  /** Marks the held text as checked and clean: returns the held items, oldest first, and keeps the new tail. */
  release(): T[];
}

/** Creates an empty window. Throws `RangeError` when `overlapChars` is not below `windowChars`. */
export function createOutputWindow<T>(options: OutputWindowOptions): OutputWindow<T> {
  const { windowChars, overlapChars } = options;
  if (!(windowChars > 0) || !(overlapChars >= 0) || overlapChars >= windowChars) throw new RangeError('overlapChars must be at least 0 and below windowChars');
  const fresh = windowChars - overlapChars;
  let tail = '';
  let held: T[] = [];
  let heldText = '';
  return {
    push(item, text) {
      held.push(item);
      heldText += text;
    },
    due: () => heldText.length >= fresh,
    holding: () => held.length > 0,
    heldChars: () => heldText.length,
    text: () => tail + heldText,
    release() {
      const out = held;
      const all = tail + heldText;
      tail = overlapChars > 0 ? all.slice(Math.max(0, all.length - overlapChars)) : '';
      held = [];
      heldText = '';
      return out;
    },
  };
}

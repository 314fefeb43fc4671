/**
 * The rolling window of output moderation (issue 15 item 7). Deltas are held until the text
 * they carry has been checked; a check covers the last `overlapChars` of already-checked text
 * plus everything held, and is due once `windowChars − overlapChars` new characters are held.
 * So a phrase of up to `overlapChars + 1` characters split across deltas or across windows is
 * always seen whole by some check before its last character is released, and at most one
 * window's new text is ever held back when the relay feeds a read's deltas in one at a time,
 * split at {@link OutputWindow.room} (see `relay.ts`).
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
  /** Characters still to push before a check is due (`windowChars − overlapChars − heldChars`, at least 0). */
  room(): number;
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
    room: () => Math.max(0, fresh - heldText.length),
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

/**
 * A whole text cut into the windows the relay checks it in when it streams: `windowChars` each,
 * every one after the first starting `overlapChars` before the previous one ended (so a phrase
 * of up to `overlapChars + 1` characters lies whole in some window). `[]` for an empty text.
 * Throws `RangeError` when `overlapChars` is not below `windowChars`.
 */
export function windowsOf(text: string, windowChars: number, overlapChars: number): string[] {
  if (!(windowChars > 0) || !(overlapChars >= 0) || overlapChars >= windowChars) throw new RangeError('overlapChars must be at least 0 and below windowChars');
  const out: string[] = [];
  const step = windowChars - overlapChars;
  for (let start = 0; start < text.length; start += step) {
    out.push(text.slice(start, start + windowChars));
    if (start + windowChars >= text.length) break;
  }
  return out;
}

/**
 * Where to cut `text` so that its first part has at most `max` characters (at least 1) without
 * splitting a UTF-16 surrogate pair: `max`, or `max − 1` when that would split one (or `max + 1`
 * when `max` is 1 and the text starts with a pair).
 */
export function cutAt(text: string, max: number): number {
  if (max >= text.length) return text.length;
  const at = Math.max(1, max);
  const c = text.charCodeAt(at - 1);
  if (c >= 0xd800 && c <= 0xdbff) return at === 1 ? Math.min(text.length, 2) : at - 1;
  return at;
}

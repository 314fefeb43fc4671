/**
 * Counting a long text in slices (issue 14 part 2): each slice is counted in one turn of the
 * event loop, the loop turns between slices (other requests, `/healthz`, streams go on), and
 * counting stops once the count passes a limit (the context window: past it the input is
 * refused whatever the rest holds).
 */

/** Characters counted in one turn of the event loop by default (≈ 0.5–2 ms of prose). */
export const COUNT_SLICE_CHARS = 4_096;

/**
 * Where the slice of `text` starting at `from` ends: before a space that follows a non-space
 * (a word boundary, where tokenizers' pre-tokenizers split too) in the second half of the
 * slice, else at `sliceChars` (never inside a surrogate pair).
 */
export function sliceEnd(text: string, from: number, sliceChars = COUNT_SLICE_CHARS): number {
  const end = from + sliceChars;
  if (end >= text.length) return text.length;
  for (let i = end; i > from + sliceChars / 2; i--) {
    if (text.charCodeAt(i) === 32 && text.charCodeAt(i - 1) > 32) return i;
  }
  const code = text.charCodeAt(end - 1);
  return code >= 0xd800 && code <= 0xdbff ? end + 1 : end;
}

/**
 * Σ `count(slice)` over the slices of `text` (see {@link sliceEnd}), yielding to the event loop
 * (`setImmediate`) between slices, stopping once the sum passes `limit` (then some number above
 * `limit`). Summing slices matches counting the whole text to within a token per slice boundary.
 */
export async function countInSlices(text: string, count: (slice: string) => number, limit = Number.POSITIVE_INFINITY, sliceChars = COUNT_SLICE_CHARS): Promise<number> {
  let total = 0;
  for (let from = 0; from < text.length; ) {
    const end = sliceEnd(text, from, sliceChars);
    total += count(text.slice(from, end));
    from = end;
    if (total > limit || from >= text.length) break;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return total;
}

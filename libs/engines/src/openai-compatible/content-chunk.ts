/**
 * Reads the text of streamed content chunks without parsing each one: "SSE metered by
 * scanning" (issue 13). An upstream's content chunks differ only in their text —
 * `{"id":"chatcmpl-1",…,"choices":[{"index":0,"delta":{"content":"…"},"logprobs":null,
 * "finish_reason":null}]}` — so once a chunk has been parsed in full and found to be a plain
 * content delta, its JSON text before and after the content's string literal is a template:
 * a later chunk that starts and ends with exactly those texts, with one valid JSON string in
 * between, is the same object with another text. A 50-token answer was 50 `JSON.parse`s,
 * about a third of the gateway's allocations.
 *
 * Exact by construction: a chunk is read this way only when it is byte-identical to a fully
 * parsed plain content chunk outside the string literal, so a full parse could only have found
 * the same keys and values, and that text. Anything else (a finish, usage, error or tool-call
 * chunk, a per-chunk field that changes such as OpenAI's `obfuscation`) falls back to the full
 * parse, which teaches the template again.
 */

/** A reader of one stream's content chunks (see the module comment). */
export interface ContentChunkReader {
  /** The text of `json` when it matches the learned template; else undefined (parse it in full). */
  read(json: string): string | undefined;
  /**
   * After a full parse found `json` to be a plain content chunk of text `text`, remembers its
   * template: where the text's JSON literal occurs exactly once, and `plainText` — the
   * adapter's own reading: the text of a plain content chunk (one choice, index 0, no finish
   * reason, no usage, no error, no tool calls), else undefined — confirms that a chunk with
   * another string in that place is the same chunk with that text.
   */
  learn(json: string, text: string, plainText: (json: string) => string | undefined): void;
}

/** A text no upstream sends, put in a learned slot to check that it is the content. */
const PROBE = '\u0000weir:probe\u0001';
const QUOTE = 34;
const BACKSLASH = 92;

/** Creates a reader with no template yet. */
export function createContentChunkReader(): ContentChunkReader {
  let prefix: string | undefined;
  let suffix = '';
  return {
    read(json) {
      if (prefix === undefined) return undefined;
      const start = prefix.length;
      const end = json.length - suffix.length;
      if (end - start < 2 || !json.startsWith(prefix) || !json.endsWith(suffix)) return undefined;
      if (json.charCodeAt(start) !== QUOTE || json.charCodeAt(end - 1) !== QUOTE) return undefined;
      // Plain text (no quote, backslash or control character inside): the literal is the text.
      let plain = true;
      for (let i = start + 1; i < end - 1; i++) {
        const c = json.charCodeAt(i);
        if (c === QUOTE || c === BACKSLASH || c < 0x20) {
          plain = false;
          break;
        }
      }
      // Short text is copied by slice; longer text goes through JSON.parse of the literal alone,
      // so a transcript never holds a slice that keeps the whole chunk alive.
      if (plain && end - start < 15) return json.slice(start + 1, end - 1);
      try {
        // One JSON value that must be a string: anything else (`"a","b"`) throws or is refused.
        const text: unknown = JSON.parse(json.slice(start, end));
        return typeof text === 'string' ? text : undefined;
      } catch {
        return undefined;
      }
    },
    learn(json, text, plainText) {
      const literal = JSON.stringify(text);
      const at = json.indexOf(literal);
      if (at < 0 || json.indexOf(literal, at + 1) >= 0) return;
      const before = json.slice(0, at);
      const after = json.slice(at + literal.length);
      // The literal found may not be the content (an upstream that escapes the content
      // differently, with the same string elsewhere): the slot must read back as the text.
      if (plainText(`${before}${JSON.stringify(PROBE)}${after}`) !== PROBE) return;
      prefix = before;
      suffix = after;
    },
  };
}

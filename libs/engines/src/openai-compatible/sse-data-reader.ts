/**
 * The `data` of server-sent events, read from a byte stream (WHATWG HTML §9.2.6, as far as an
 * OpenAI-compatible upstream needs it): UTF-8 decoded across reads (a character split between
 * two reads is kept until complete), one leading BOM dropped, lines ended by LF, CRLF or a lone
 * CR (a CRLF split across reads counts once), `data:` lines joined with LF into one event at a
 * blank line, comments (`:`), `event:`, `id:`, `retry:` and unknown fields ignored, an event
 * with no data dispatching nothing. Unlike a browser, {@link SseDataReader.end} also dispatches
 * an unterminated last event (an upstream that closes right after its last `data:` line).
 *
 * Built for the hot path: a read's text is split with `indexOf` (no per-character loop, no
 * per-line regex), and the common event — one `data:` line — costs one `slice`.
 */
import { StringDecoder } from 'node:string_decoder';

/** Splits bytes into SSE event data strings. */
export interface SseDataReader {
  /** Feeds one read; returns the data of every event it completed (often none or several). */
  push(chunk: Buffer): string[];
  /** The end of the stream: returns the data of a last, unterminated event, if any. */
  end(): string[];
}

const LF = 10;
const COLON = 58;
const SPACE = 32;

/** Creates a reader for one stream. */
export function createSseDataReader(): SseDataReader {
  const decoder = new StringDecoder('utf8');
  let carry = '';
  let started = false;
  // The previous read ended in CR: a LF starting the next one belongs to it.
  let skipLf = false;
  let data: string | undefined;

  const line = (text: string, out: string[]) => {
    if (text.length === 0) {
      if (data !== undefined) out.push(data);
      data = undefined;
      return;
    }
    const first = text.charCodeAt(0);
    if (first === COLON) return;
    // Fast path: `data:` (the only field read).
    if (first === 100 /* d */ && text.startsWith('data')) {
      let value: string;
      if (text.length === 4) value = '';
      else if (text.charCodeAt(4) !== COLON) return; // e.g. `datax: …`: an unknown field
      else value = text.charCodeAt(5) === SPACE ? text.slice(6) : text.slice(5);
      data = data === undefined ? value : `${data}\n${value}`;
    }
  };

  const scan = (text: string, out: string[]) => {
    let start = 0;
    const n = text.length;
    if (skipLf && n > 0 && text.charCodeAt(0) === LF) start = 1;
    skipLf = false;
    let lf = text.indexOf('\n', start);
    let cr = text.indexOf('\r', start);
    for (;;) {
      let end: number;
      if (lf < 0 && cr < 0) break;
      if (cr < 0 || (lf >= 0 && lf < cr)) {
        end = lf;
        line(text.slice(start, end), out);
        start = end + 1;
      } else {
        end = cr;
        line(text.slice(start, end), out);
        if (end + 1 < n) start = text.charCodeAt(end + 1) === LF ? end + 2 : end + 1;
        else {
          start = end + 1;
          skipLf = true;
        }
      }
      if (lf >= 0 && lf < start) lf = text.indexOf('\n', start);
      if (cr >= 0 && cr < start) cr = text.indexOf('\r', start);
    }
    carry = start < n ? text.slice(start) : '';
  };

  return {
    push(chunk) {
      let text = decoder.write(chunk);
      if (!started && text.length > 0) {
        started = true;
        if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      }
      const out: string[] = [];
      scan(carry.length > 0 ? carry + text : text, out);
      return out;
    },
    end() {
      const out: string[] = [];
      const rest = carry + decoder.end();
      carry = '';
      if (rest.length > 0) line(rest, out);
      if (data !== undefined) out.push(data);
      data = undefined;
      return out;
    },
  };
}

/**
 * A test-side SSE reader over fetch, using the same well-kept parser clients use
 * (eventsource-parser 3.1.1), recording each event's id, name and arrival time.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser';

/** One received event. */
export interface ReceivedEvent extends EventSourceMessage {
  at: number;
}

/** Reads an SSE response to the end (or until `stopAfter` returns true, then aborts). */
export async function readSse(
  response: Response,
  options: { stopAfter?: (e: ReceivedEvent, all: ReceivedEvent[]) => boolean; abort?: AbortController } = {},
): Promise<{ events: ReceivedEvent[]; comments: string[] }> {
  const events: ReceivedEvent[] = [];
  const comments: string[] = [];
  let stop = false;
  const parser = createParser({
    onEvent(e) {
      const r = { ...e, at: performance.now() };
      events.push(r);
      if (options.stopAfter?.(r, events)) stop = true;
    },
    onComment: (c) => comments.push(c),
  });
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
      if (stop) {
        options.abort?.abort();
        await reader.cancel().catch(() => undefined);
        break;
      }
    }
  } catch (err) {
    if (!stop) throw err;
  }
  return { events, comments };
}

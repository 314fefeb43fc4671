/**
 * Server-sent event framing (WHATWG HTML §9.2): one event is optional `id:` and `event:`
 * lines, one `data:` line per line of the payload, and a blank line. Pure string builders;
 * the HTTP writer lives in the gateway.
 */

/** One SSE event to frame. */
export interface SseEvent {
  /** Event id (Weir's stream uses 1, 2, 3, …); omitted on OpenAI routes. Must not contain CR/LF/NUL. */
  id?: string | number;
  /** Event name; omitted means the default `message` type. */
  event?: string;
  /** Payload; newlines split into several `data:` lines (a parser joins them with LF). */
  data: string;
}

/** Frames an event as `id: …\nevent: …\ndata: …\n\n`. */
export function formatSseEvent(e: SseEvent): string {
  let out = '';
  if (e.id !== undefined) out += `id: ${assertSingleLine(String(e.id))}\n`;
  if (e.event !== undefined) out += `event: ${assertSingleLine(e.event)}\n`;
  for (const line of e.data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
  return `${out}\n`;
}

/**
 * Frames one event whose data is a JSON text (`JSON.stringify` output, which never holds a raw
 * CR or LF) as `data: …\n\n`: what {@link formatSseEvent} makes of it, without the split.
 */
export function formatSseJson(json: string): string {
  return `data: ${json}\n\n`;
}

/** Frames a comment line (a heartbeat such as `: ping`); parsers ignore it. */
export function formatSseComment(text: string): string {
  return `: ${assertSingleLine(text)}\n\n`;
}

/** The OpenAI stream terminator. */
export const SSE_DONE = 'data: [DONE]\n\n';

function assertSingleLine(value: string): string {
  if (/[\r\n\0]/.test(value)) throw new TypeError('SSE field values must not contain CR, LF or NUL');
  return value;
}

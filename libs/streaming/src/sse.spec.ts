import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { SSE_DONE, formatSseComment, formatSseEvent, formatSseJson } from './sse';

function parse(text: string): EventSourceMessage[] {
  const out: EventSourceMessage[] = [];
  const p = createParser({ onEvent: (e) => out.push(e) });
  p.feed(text);
  return out;
}

describe('SSE framing', () => {
  it('round-trips through a standard parser, multi-line data included', () => {
    const text = formatSseEvent({ id: 1, event: 'delta', data: '{"text":"a"}' }) + formatSseComment('ping') + formatSseEvent({ data: 'line1\nline2' }) + SSE_DONE;
    expect(parse(text)).toEqual([
      { id: '1', event: 'delta', data: '{"text":"a"}' },
      { id: undefined, event: undefined, data: 'line1\nline2' },
      { id: undefined, event: undefined, data: '[DONE]' },
    ]);
  });

  it('refuses field values that would break framing', () => {
    expect(() => formatSseEvent({ id: '1\n2', data: 'x' })).toThrow(TypeError);
    expect(() => formatSseEvent({ event: 'a\rb', data: 'x' })).toThrow(TypeError);
    expect(() => formatSseComment('a\nb')).toThrow(TypeError);
  });

  it('frames JSON data as formatSseEvent does, and a parser reads it back', () => {
    const json = JSON.stringify({ text: 'a\nb\r\nc', n: 1 });
    expect(formatSseJson(json)).toBe(formatSseEvent({ data: json }));
    expect(parse(formatSseJson(json)).map((e) => JSON.parse(e.data))).toEqual([{ text: 'a\nb\r\nc', n: 1 }]);
  });
});

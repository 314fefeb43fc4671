import { isWeirError } from '@weir/core';
import { anthropicSseEvent } from '@weir/testing';
import { createAnthropicStreamDecoder, mapAnthropicStopReason, type SseMessage } from './anthropic-stream';

/** Parses `anthropicSseEvent` output back into what eventsource-parser would hand over. */
const message = (type: string, fields: Record<string, unknown> = {}): SseMessage => {
  const [eventLine, dataLine] = anthropicSseEvent(type, fields).split('\n');
  return { event: eventLine.slice('event: '.length), data: dataLine.slice('data: '.length) };
};

describe('mapAnthropicStopReason', () => {
  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['tool_use', 'tool_calls'],
    ['something_new', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['refusal', 'content_filter'],
  ])('%s → %s', (stopReason, reason) => {
    expect(mapAnthropicStopReason(stopReason)).toBe(reason);
  });
});

describe('createAnthropicStreamDecoder', () => {
  it('returns text deltas only and keeps the stop reason', () => {
    const d = createAnthropicStreamDecoder();
    const texts = [
      message('message_start', { message: { usage: { input_tokens: 3, output_tokens: 1 } } }),
      message('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '' } }),
      message('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'secret reasoning' } }),
      message('content_block_start', { index: 1, content_block: { type: 'text', text: '' } }),
      { event: 'ping', data: '' },
      message('content_block_delta', { index: 1, delta: { type: 'text_delta', text: 'Hi' } }),
      message('content_block_delta', { index: 1, delta: { type: 'citations_delta', citation: {} } }),
      { event: 'brand_new_event', data: 'not json' },
      message('content_block_stop', { index: 1 }),
      message('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 9 } }),
    ].map((e) => d.apply(e));
    expect(texts.join('|')).toBe('|||||Hi||||');
    expect(d.textStarted).toBe(true);
    expect(d.stopReason).toBe('end_turn');
    expect(d.finished).toBe(false);
    d.apply(message('message_stop'));
    expect(d.finished).toBe(true);
    expect(d.reportedUsage()).toEqual({ inputTokens: 3, outputTokens: 9 });
  });

  it('sums cache reads and writes into the input, reports cache reads as cached and cache writes apart, and lets message_delta totals overwrite', () => {
    const d = createAnthropicStreamDecoder();
    d.apply(
      message('message_start', {
        message: { usage: { input_tokens: 10, cache_creation_input_tokens: 5, cache_read_input_tokens: 100, output_tokens: 1 } },
      }),
    );
    expect(d.reportedInput()).toEqual({ inputTokens: 115, cachedInputTokens: 100, cacheWriteInputTokens: 5 });
    // `message_start`'s output count is provisional: no reported usage until message_delta.
    expect(d.reportedUsage()).toBeUndefined();
    d.apply(message('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { input_tokens: 12, cache_read_input_tokens: 100, output_tokens: 4 } }));
    d.apply(message('message_delta', { delta: {}, usage: { output_tokens: 6 } }));
    // The cache write of message_start stands (message_delta did not re-send it): 12 + 5 + 100.
    expect(d.reportedUsage()).toEqual({ inputTokens: 117, outputTokens: 6, cachedInputTokens: 100, cacheWriteInputTokens: 5 });
  });

  it('dispatches on data.type when the event has no name', () => {
    const d = createAnthropicStreamDecoder();
    expect(d.apply({ data: JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'x' } }) })).toBe('x');
  });

  it.each([
    ['before any text → upstream_unavailable, retryable', false, 'upstream_unavailable', true],
    ['after text → upstream_error', true, 'upstream_error', false],
  ])('maps an overloaded error event %s', (_name, afterText, code, retryable) => {
    const d = createAnthropicStreamDecoder();
    if (afterText) d.apply(message('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'x' } }));
    let thrown: unknown;
    try {
      d.apply(message('error', { error: { type: 'overloaded_error', message: 'Overloaded: prompt text here' } }));
    } catch (error) {
      thrown = error;
    }
    expect(isWeirError(thrown) && { code: thrown.code, retryable: thrown.retryable }).toEqual({ code, retryable });
    expect(isWeirError(thrown) && thrown.message).toContain('overloaded_error');
    expect(isWeirError(thrown) && thrown.message).not.toContain('prompt text');
  });

  it('maps an invalid_request_error event before any text to upstream_error', () => {
    const d = createAnthropicStreamDecoder();
    expect(() => d.apply(message('error', { error: { type: 'invalid_request_error', message: 'bad' } }))).toThrow(
      expect.objectContaining({ code: 'upstream_error' }),
    );
  });

  it('throws upstream_error for a known event whose data is not JSON', () => {
    const d = createAnthropicStreamDecoder();
    expect(() => d.apply({ event: 'content_block_delta', data: '{"type":' })).toThrow(expect.objectContaining({ code: 'upstream_error' }));
  });

  it('decodes a whole non-stream message', () => {
    const d = createAnthropicStreamDecoder();
    const text = d.applyMessage({
      type: 'message',
      content: [
        { type: 'thinking', thinking: 'hmm' },
        { type: 'text', text: 'Hello' },
        { type: 'text', text: ' there' },
      ],
      stop_reason: 'max_tokens',
      usage: { input_tokens: 4, output_tokens: 2 },
    });
    expect(text).toBe('Hello there');
    expect(d.stopReason).toBe('max_tokens');
    expect(d.finished).toBe(true);
    expect(d.reportedUsage()).toEqual({ inputTokens: 4, outputTokens: 2 });
  });

  it("maps a non-stream message's cache creation and cache read counts (beside input_tokens, so added to it)", () => {
    const d = createAnthropicStreamDecoder();
    d.applyMessage({
      type: 'message',
      content: [{ type: 'text', text: 'ok' }],
      stop_reason: 'end_turn',
      usage: { input_tokens: 12, cache_creation_input_tokens: 1_500, cache_read_input_tokens: 3_000, output_tokens: 40 },
    });
    expect(d.reportedUsage()).toEqual({ inputTokens: 4_512, outputTokens: 40, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500 });
  });
});

describe('createAnthropicStreamDecoder: tool calls', () => {
  const ev = (data: Record<string, unknown>) => ({ event: data.type as string, data: JSON.stringify(data) });

  it('numbers calls by appearance, whatever their block index, and routes input_json_delta by block', () => {
    const d = createAnthropicStreamDecoder();
    expect(d.decode(ev({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }))).toEqual({ text: '' });
    expect(d.textStarted).toBe(false);
    expect(d.decode(ev({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'a', name: 'f', input: {} } }))).toEqual({ text: '', toolCalls: [{ index: 0, id: 'a', name: 'f' }] });
    expect(d.textStarted).toBe(true);
    expect(d.decode(ev({ type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 'b', name: 'g', input: {} } }))).toEqual({ text: '', toolCalls: [{ index: 1, id: 'b', name: 'g' }] });
    expect(d.decode(ev({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"x":1}' } }))).toEqual({ text: '', toolCalls: [{ index: 1, argumentsDelta: '{"x":1}' }] });
    expect(d.decode(ev({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{}' } }))).toEqual({ text: '', toolCalls: [{ index: 0, argumentsDelta: '{}' }] });
    // An input_json_delta of a block that is not a tool_use, and an empty one, carry nothing.
    expect(d.decode(ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{}' } }))).toEqual({ text: '' });
    expect(d.decode(ev({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '' } }))).toEqual({ text: '' });
    // apply() keeps its text-only contract.
    expect(d.apply(ev({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{}' } }))).toBe('');
  });

  it('reads the tool_use blocks of a whole message as complete calls', () => {
    const d = createAnthropicStreamDecoder();
    const piece = d.decodeMessage({
      type: 'message',
      content: [
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } },
      ],
      stop_reason: 'tool_use',
      usage: { input_tokens: 10, output_tokens: 20 },
    });
    expect(piece).toEqual({ text: 'Let me check.', toolCalls: [{ index: 0, id: 'toolu_1', name: 'get_weather', argumentsDelta: '{"city":"Oslo"}' }] });
    expect(mapAnthropicStopReason(d.stopReason ?? '')).toBe('tool_calls');
  });
});

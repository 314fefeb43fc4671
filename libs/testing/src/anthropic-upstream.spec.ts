import { anthropicErrorReply, anthropicModelScript, anthropicStreamEvents, anthropicWire } from './anthropic-upstream';
import { startScriptedUpstream } from './scripted-upstream';

/** Splits an SSE text into `[event name, parsed data]` pairs. */
const parse = (sse: string): Array<[string, Record<string, unknown>]> =>
  sse
    .split('\n\n')
    .filter(Boolean)
    .map((block) => {
      const [eventLine, dataLine] = block.split('\n');
      return [eventLine.replace(/^event: /, ''), JSON.parse(dataLine.replace(/^data: /, '')) as Record<string, unknown>];
    });

describe('anthropic upstream builders', () => {
  it('frames the documented event order, each event named as its data.type', () => {
    const events = parse(anthropicStreamEvents(['Hel', 'lo'], { usage: { input_tokens: 9, output_tokens: 2, cache_read_input_tokens: 4 } }).join(''));
    expect(events.map(([name]) => name)).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    for (const [name, data] of events) expect(data.type).toBe(name);
    expect(events[0][1]).toMatchObject({ message: { usage: { input_tokens: 9, cache_read_input_tokens: 4, output_tokens: 1 } } });
    expect(events[6][1]).toEqual({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } });
  });

  it('the contract wire sends Weir counts as Anthropic splits them (cache reads apart from input_tokens)', () => {
    const events = parse(anthropicWire.streamEvents(['x'], { reason: 'length', usage: { inputTokens: 100, outputTokens: 3, cachedInputTokens: 60 } }).join(''));
    expect(events[0][1]).toMatchObject({ message: { usage: { input_tokens: 40, cache_read_input_tokens: 60 } } });
    expect(events.find(([name]) => name === 'message_delta')?.[1]).toMatchObject({ delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 3 } });
    expect(parse(anthropicWire.streamEvents(['x']).join('')).map(([name]) => name)).not.toContain('message_delta');
  });

  it('error replies carry the type for the status', () => {
    expect(anthropicErrorReply(529)).toMatchObject({ kind: 'error', status: 529, body: { type: 'error', error: { type: 'overloaded_error' } } });
    expect(anthropicErrorReply(401)).toMatchObject({ body: { error: { type: 'authentication_error' } } });
  });

  it('the model script honours max_tokens and rejects long prompts like the API', async () => {
    const upstream = await startScriptedUpstream({ script: anthropicModelScript({ contextBytes: 20 }) });
    try {
      const call = (body: object) => fetch(`${upstream.url}/messages`, { method: 'POST', body: JSON.stringify(body) });
      const res = await call({ system: 'be brief', messages: [{ role: 'user', content: 'a b' }], max_tokens: 2, stream: true });
      const events = parse(await res.text());
      expect(events.filter(([name]) => name === 'content_block_delta')).toHaveLength(2);
      expect(events.find(([name]) => name === 'message_delta')?.[1]).toMatchObject({ delta: { stop_reason: 'max_tokens' } });
      expect(events[0][1]).toMatchObject({ message: { usage: { input_tokens: 4 } } });
      const long = await call({ messages: [{ role: 'user', content: 'x'.repeat(50) }], max_tokens: 2, stream: true });
      expect(long.status).toBe(400);
      expect(await long.json()).toMatchObject({ error: { type: 'invalid_request_error', message: expect.stringMatching(/^prompt is too long/) } });
    } finally {
      await upstream.close();
    }
  });
});

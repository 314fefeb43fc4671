import type { GenerationInput, ToolChoice } from '@weir/core';
import { engineRequest } from '@weir/testing';
import { ANTHROPIC_VERSION, buildAnthropicBody, buildAnthropicHeaders, toAnthropicPrompt, toAnthropicToolChoice, toAnthropicTools, type AnthropicPrompt } from './anthropic-request';

describe('toAnthropicPrompt', () => {
  it.each<[string, GenerationInput, AnthropicPrompt]>([
    ['text input → one user turn', { kind: 'text', text: 'Once upon a time' }, { messages: [{ role: 'user', content: 'Once upon a time' }] }],
    [
      'system and developer → top-level system, joined',
      {
        kind: 'chat',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'developer', content: 'Answer in French.' },
          { role: 'user', content: 'Hi' },
        ],
      },
      { system: 'Be brief.\n\nAnswer in French.', messages: [{ role: 'user', content: 'Hi' }] },
    ],
    [
      'a system message mid-conversation is hoisted; turns keep their order',
      {
        kind: 'chat',
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: 'Hello!' },
          { role: 'system', content: 'Stay polite.' },
          { role: 'user', content: 'Bye' },
        ],
      },
      {
        system: 'Stay polite.',
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: 'Hello!' },
          { role: 'user', content: 'Bye' },
        ],
      },
    ],
    [
      'consecutive turns of one role merge (tool counts as user); names and empty turns drop',
      {
        kind: 'chat',
        messages: [
          { role: 'user', content: 'first', name: 'ann' },
          { role: 'tool', content: 'tool said 42' },
          { role: 'assistant', content: '' },
          { role: 'user', content: 'second' },
          { role: 'assistant', content: 'The answer is' },
        ],
      },
      {
        messages: [
          { role: 'user', content: 'first\n\ntool said 42\n\nsecond' },
          { role: 'assistant', content: 'The answer is' },
        ],
      },
    ],
    [
      'system messages only → their text as the user turn',
      { kind: 'chat', messages: [{ role: 'system', content: 'Write a haiku.' }] },
      { messages: [{ role: 'user', content: 'Write a haiku.' }] },
    ],
  ])('%s', (_name, input, expected) => {
    expect(toAnthropicPrompt(input)).toEqual(expected);
  });
});

describe('buildAnthropicBody', () => {
  it('maps max tokens and sampling; caps temperature at 1; drops seed', () => {
    const request = engineRequest(
      { kind: 'chat', messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'U' }] },
      { maxOutputTokens: 64, sampling: { temperature: 1.7, topP: 0.9, seed: 7, stop: ['\n\n', 'END'] } },
    );
    expect(buildAnthropicBody('claude-x', request)).toEqual({
      model: 'claude-x',
      system: 'S',
      messages: [{ role: 'user', content: 'U' }],
      max_tokens: 64,
      temperature: 1,
      top_p: 0.9,
      stop_sequences: ['\n\n', 'END'],
      stream: true,
    });
  });

  it('sends only what is set', () => {
    const body = buildAnthropicBody('claude-x', engineRequest({ kind: 'text', text: 'x' }, { maxOutputTokens: 5, sampling: { stop: [] } }));
    expect(body).toEqual({ model: 'claude-x', messages: [{ role: 'user', content: 'x' }], max_tokens: 5, stream: true });
  });
});

describe('buildAnthropicHeaders', () => {
  it('sends the version, and x-api-key only with a key', () => {
    expect(buildAnthropicHeaders('sk-ant-test')).toEqual({
      'content-type': 'application/json',
      accept: 'text/event-stream',
      'anthropic-version': ANTHROPIC_VERSION,
      'x-api-key': 'sk-ant-test',
    });
    expect(buildAnthropicHeaders(undefined)).not.toHaveProperty('x-api-key');
    expect(ANTHROPIC_VERSION).toBe('2023-06-01');
  });

  it('passes the client’s beta flags as one anthropic-beta header, and none without', () => {
    expect(buildAnthropicHeaders('k', ['context-1m-2025-08-07', 'interleaved-thinking-2025-05-14'])['anthropic-beta']).toBe('context-1m-2025-08-07,interleaved-thinking-2025-05-14');
    expect(buildAnthropicHeaders('k', [])).not.toHaveProperty('anthropic-beta');
  });
});

describe('tools on the Messages API', () => {
  const weather = { type: 'function' as const, function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };

  it('maps a tool round trip: assistant tool_calls → tool_use blocks, tool messages → tool_result blocks in one user turn', () => {
    const prompt = toAnthropicPrompt({
      kind: 'chat',
      messages: [
        { role: 'user', content: 'Weather in Paris and Oslo?' },
        {
          role: 'assistant',
          content: 'Checking.',
          toolCalls: [
            { id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
            { id: 'toolu_2', name: 'get_weather', arguments: '' },
          ],
        },
        { role: 'tool', content: '18 °C', toolCallId: 'toolu_1' },
        { role: 'tool', content: '', toolCallId: 'toolu_2' },
        { role: 'user', content: 'Thanks, and tomorrow?' },
      ],
    });
    expect(prompt).toEqual({
      messages: [
        { role: 'user', content: 'Weather in Paris and Oslo?' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Checking.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: '18 °C' },
            { type: 'tool_result', tool_use_id: 'toolu_2', content: '' },
            { type: 'text', text: 'Thanks, and tomorrow?' },
          ],
        },
      ],
    });
  });

  it('an assistant turn with tool calls and no text has only tool_use blocks', () => {
    const prompt = toAnthropicPrompt({ kind: 'chat', messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '', toolCalls: [{ id: 't', name: 'f', arguments: '{}' }] }] });
    expect(prompt.messages[1]).toEqual({ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] });
  });

  it.each(['not json', '[1,2]', '"text"'])('refuses tool-call arguments that are not a JSON object: %s', (args) => {
    expect(() => toAnthropicPrompt({ kind: 'chat', messages: [{ role: 'assistant', content: '', toolCalls: [{ id: 't', name: 'f', arguments: args }] }] })).toThrow(
      expect.objectContaining({ code: 'invalid_request', param: 'messages' }),
    );
  });

  it('maps OpenAI function tools to tools with input_schema', () => {
    expect(toAnthropicTools([weather, { type: 'function', function: { name: 'now' } }])).toEqual([
      { name: 'get_weather', description: 'Weather of a city', input_schema: weather.function.parameters },
      { name: 'now', input_schema: { type: 'object', properties: {} } },
    ]);
  });

  it.each<[string, ToolChoice | undefined, boolean | undefined, unknown]>([
    ['nothing set: the API default', undefined, undefined, undefined],
    ['auto', 'auto', undefined, { type: 'auto' }],
    ['required → any', 'required', undefined, { type: 'any' }],
    ['none', 'none', false, { type: 'none' }],
    ['a named function → tool', { type: 'function', function: { name: 'get_weather' } }, undefined, { type: 'tool', name: 'get_weather' }],
    ['parallel_tool_calls false alone → auto without parallel use', undefined, false, { type: 'auto', disable_parallel_tool_use: true }],
    ['required and serial', 'required', false, { type: 'any', disable_parallel_tool_use: true }],
    ['parallel_tool_calls true changes nothing', 'auto', true, { type: 'auto' }],
  ])('tool_choice: %s', (_what, choice, parallel, expected) => {
    expect(toAnthropicToolChoice(choice, parallel)).toEqual(expected);
  });

  it('puts tools and tool_choice in the body only when the request has tools', () => {
    const withTools = buildAnthropicBody('claude-x', engineRequest({ kind: 'text', text: 'x' }, { maxOutputTokens: 5, tools: [weather], toolChoice: 'required' }));
    expect(withTools).toMatchObject({ tools: [{ name: 'get_weather', input_schema: weather.function.parameters }], tool_choice: { type: 'any' } });
    const noTools = buildAnthropicBody('claude-x', engineRequest({ kind: 'text', text: 'x' }, { maxOutputTokens: 5, toolChoice: 'required' }));
    expect(noTools).not.toHaveProperty('tools');
    expect(noTools).not.toHaveProperty('tool_choice');
  });
});

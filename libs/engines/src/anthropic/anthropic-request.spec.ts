import type { GenerationInput } from '@weir/core';
import { engineRequest } from '@weir/testing';
import { ANTHROPIC_VERSION, buildAnthropicBody, buildAnthropicHeaders, toAnthropicPrompt, type AnthropicPrompt } from './anthropic-request';

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
});

import { WeirError } from '@weir/core';
import { chatCompletionsBody, completionsBody, generationsBody, parseBody } from './schemas';

function errorOf(schema: Parameters<typeof parseBody>[0], body: unknown): WeirError {
  try {
    parseBody(schema, body);
  } catch (err) {
    if (err instanceof WeirError) return err;
    throw err;
  }
  throw new Error('expected a WeirError');
}

const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

describe('parseBody', () => {
  it.each([
    // `model` may be absent (a use case's chain routes the request: use-cases.ts); `messages` may not.
    ['a missing field', { model: 'm' }, 'messages', '`messages`: is required'],
    ['a fractional integer', { ...chat, max_tokens: 1.5 }, 'max_tokens', '`max_tokens`: expected an integer, got the number 1.5'],
    ['a string for a number', { ...chat, temperature: '0.5' }, 'temperature', '`temperature`: expected a number, got a string'],
    ['a string for a boolean', { ...chat, stream: 'yes' }, 'stream', '`stream`: expected a boolean, got a string'],
    ['a nested wrong type', { ...chat, messages: [{ role: 'user', content: 42 }] }, 'messages[0].content', '`messages[0].content`'],
    ['n > 1', { ...chat, n: 2 }, 'n', 'only n=1 is supported'],
  ])('names the field and what is wrong: %s', (_name, body, param, message) => {
    const e = errorOf(chatCompletionsBody, body);
    expect(e.code).toBe('invalid_request');
    expect(e.param).toBe(param);
    expect(e.message).toContain(message);
  });

  it('says a non-object body must be a JSON object', () => {
    for (const body of [null, 'hi', [1, 2], 3]) expect(errorOf(chatCompletionsBody, body).message).toContain('must be a JSON object');
  });

  it('refuses unknown fields on /v1/generations, naming them', () => {
    const e = errorOf(generationsBody, { model_alias: 'm', input: 'x', tenant_id: 'other' });
    expect(e.message).toContain('unknown field(s) `tenant_id`');
  });

  it('parses a valid body', () => {
    expect(parseBody(chatCompletionsBody, { ...chat, max_tokens: 5 })).toMatchObject({ model: 'm', max_tokens: 5 });
  });
});

describe('the legacy completions prompt', () => {
  it.each([
    ['two prompts', ['a', 'b'], 'batches of prompts are not supported'],
    ['token ids', [1, 2, 3], 'send one prompt: a string, or an array of one string'],
    ['a number', 42, 'send one prompt: a string, or an array of one string'],
  ])('says what is accepted for %s', (_name, prompt, expected) => {
    const err = errorOf(completionsBody, { model: 'm', prompt });
    expect(err.param).toBe('prompt');
    expect(err.message).toContain(expected);
  });
});

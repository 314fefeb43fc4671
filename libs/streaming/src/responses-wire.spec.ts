import { responseMessage, responseObject, responsesEvents, type ResponsesMeta, toResponsesUsage } from './responses-wire';

const meta: ResponsesMeta = { id: 'resp_1', messageId: 'msg_1', createdAt: 1700000000, model: 'tiny', instructions: null, maxOutputTokens: 16, temperature: null, topP: null, textFormat: { type: 'text' } };

describe('responses wire', () => {
  it('maps usage: cached tokens are part of input, total is input + output, no reasoning tokens', () => {
    expect(toResponsesUsage({ inputTokens: 10, outputTokens: 4, cachedInputTokens: 3 })).toEqual({
      input_tokens: 10,
      input_tokens_details: { cached_tokens: 3 },
      output_tokens: 4,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 14,
    });
  });

  it('maps token classes: reasoning inside output, cache writes inside input only when there are some', () => {
    expect(toResponsesUsage({ inputTokens: 30, outputTokens: 20, cachedInputTokens: 10, cacheWriteInputTokens: 5, reasoningTokens: 12 })).toEqual({
      input_tokens: 30,
      input_tokens_details: { cached_tokens: 10, cache_write_tokens: 5 },
      output_tokens: 20,
      output_tokens_details: { reasoning_tokens: 12 },
      total_tokens: 50,
    });
  });

  it('builds a response: no output item before any text, one assistant message after', () => {
    expect(responseObject(meta, { status: 'in_progress' })).toMatchObject({ id: 'resp_1', object: 'response', created_at: 1700000000, status: 'in_progress', output: [], usage: null, error: null, incomplete_details: null, model: 'tiny', max_output_tokens: 16, text: { format: { type: 'text' } } });
    const done = responseObject(meta, { status: 'incomplete', text: 'Hi', incompleteReason: 'max_output_tokens', weir: { finish_reason: 'deadline', model_revision: 'r@1' } });
    expect(done).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      output: [{ id: 'msg_1', type: 'message', status: 'incomplete', role: 'assistant', content: [{ type: 'output_text', text: 'Hi', annotations: [] }] }],
      weir: { finish_reason: 'deadline' },
    });
    expect(done).not.toHaveProperty('output_text');
    expect(responseMessage(meta, '', 'in_progress')).toEqual({ id: 'msg_1', type: 'message', status: 'in_progress', role: 'assistant', content: [] });
  });

  it('numbers events from 0 with their type in the data', () => {
    const w = responsesEvents();
    expect(w.event('response.created', { response: {} })).toEqual({ type: 'response.created', data: { type: 'response.created', response: {}, sequence_number: 0 } });
    expect(w.event('response.output_text.delta', { delta: 'a' }).data.sequence_number).toBe(1);
  });
});

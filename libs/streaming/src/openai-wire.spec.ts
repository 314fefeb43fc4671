import { chatCompletionChunk, contentChunkJson, textCompletionChunk, toOpenAiFinishReason, toOpenAiUsage } from './openai-wire';

describe('OpenAI wire shapes', () => {
  it.each([
    ['stop', 'stop'],
    ['length', 'length'],
    ['deadline', 'length'],
    ['cancelled', 'stop'],
    ['content_filter', 'content_filter'],
    ['tool_calls', 'tool_calls'],
  ] as const)('maps %s to %s (no invented values)', (weir, openai) => {
    expect(toOpenAiFinishReason(weir)).toBe(openai);
  });

  it('builds usage with cached tokens inside prompt tokens', () => {
    expect(toOpenAiUsage({ inputTokens: 10, outputTokens: 5, cachedInputTokens: 4 })).toEqual({
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: 15,
      prompt_tokens_details: { cached_tokens: 4 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
  });

  it('reports reasoning tokens inside completion tokens, and cache writes (inside prompt tokens) only when there are some', () => {
    expect(toOpenAiUsage({ inputTokens: 3_100, outputTokens: 500, cachedInputTokens: 2_000, cacheWriteInputTokens: 1_000, reasoningTokens: 400 })).toEqual({
      prompt_tokens: 3_100,
      completion_tokens: 500,
      total_tokens: 3_600,
      prompt_tokens_details: { cached_tokens: 2_000, cache_write_tokens: 1_000 },
      completion_tokens_details: { reasoning_tokens: 400 },
    });
  });

  it('always sends choices as an array and usage null except on the usage chunk', () => {
    const meta = { id: 'chatcmpl-1', created: 1, model: 'm' };
    expect(chatCompletionChunk(meta, { delta: { content: 'x' }, finishReason: null })).toMatchObject({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'x' }, finish_reason: null }], usage: null });
    const usage = toOpenAiUsage({ inputTokens: 1, outputTokens: 2 });
    expect(chatCompletionChunk(meta, null, { usage })).toMatchObject({ choices: [], usage });
    expect(textCompletionChunk(meta, { text: 'y', finishReason: 'length' }, { weir: { finish_reason: 'deadline', model_revision: 'r' } })).toMatchObject({
      object: 'text_completion',
      choices: [{ text: 'y', finish_reason: 'length' }],
      weir: { finish_reason: 'deadline' },
    });
  });

  it.each(['tok ', '', 'quote " backslash \\ newline \n tab \t', 'é 🌍 \u2028 \u0000', '\u0000weir:text\u0000'])('frames a content chunk byte for byte as the chunk builders do (%j)', (text) => {
    const meta = { id: 'chatcmpl-Ab_9', created: 1_700_000_000, model: 'alias "x"' };
    expect(contentChunkJson(meta, 'chat')(text)).toBe(JSON.stringify(chatCompletionChunk(meta, { delta: { content: text }, finishReason: null })));
    expect(contentChunkJson(meta, 'text')(text)).toBe(JSON.stringify(textCompletionChunk(meta, { text, finishReason: null })));
  });
});

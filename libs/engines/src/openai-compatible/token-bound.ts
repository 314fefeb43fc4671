import type { GenerationInput } from '@weir/core';

/**
 * Tokens added per chat message by common chat templates, as an upper bound: ChatML
 * (`<|im_start|>{role}\n{content}<|im_end|>\n`: 2 special tokens, the role (≤ 3 tokens) and
 * 2 newlines ≈ 7), Llama 3 (`<|start_header_id|>{role}<|end_header_id|>\n\n…<|eot_id|>`: 4–5)
 * and OpenAI's documented 3–4 per message (openai-cookbook "How to count tokens with tiktoken").
 * Rounded up to 8.
 */
export const CHAT_MESSAGE_OVERHEAD_TOKENS = 8;

/** Tokens a chat template adds once to prime the reply (OpenAI's cookbook: 3), rounded up to 4. */
export const CHAT_REPLY_PRIMING_TOKENS = 4;

/**
 * Upper bound on the tokens of `text` for any SentencePiece or byte-level BPE tokenizer with
 * byte fallback: each token covers at least one UTF-8 byte, so tokens ≤ bytes. (A tokenizer
 * with a dummy-prefix space may add one token for the leading `▁`; the +1 covers it.) Empty
 * text is 0. Never characters ÷ 4, which undercounts CJK, emoji and code.
 */
export function utf8TokenUpperBound(text: string): number {
  if (text.length === 0) return 0;
  return Buffer.byteLength(text, 'utf8') + 1;
}

/**
 * Counts (or bounds) the prompt tokens of an input.
 *
 * - `text`: `count(text)`.
 * - `embedding`: Σ over items of `count(item)` for a text, its length for a token array.
 * - `chat`: Σ over messages of (`count(content)` + `count(name)` when set +
 *   {@link CHAT_MESSAGE_OVERHEAD_TOKENS} + per tool call of an assistant message `count(id)` +
 *   `count(name)` + `count(arguments)` + {@link CHAT_MESSAGE_OVERHEAD_TOKENS} + `count(toolCallId)`
 *   of a tool message) + {@link CHAT_REPLY_PRIMING_TOKENS}.
 *
 * With `count` = {@link utf8TokenUpperBound} this is an upper bound for the common templates;
 * with the model's own tokenizer (a declared tiktoken encoding for OpenAI models) it is an upper
 * bound too: OpenAI documents 3 tokens per message, 1 per name and 3 to prime the reply
 * (openai-cookbook "How to count tokens with tiktoken"), below the 8 and 4 added here. Tool
 * definitions (`tools`) are not counted: the request's input count does not include them.
 *
 * With `limit` (tokens), counting may stop once the total passes it (each `count` call gets
 * what is left of it): the result is then some number above `limit`, enough to refuse the
 * input as too long without counting the rest. Default: no limit.
 */
export async function countInputWith(
  input: GenerationInput,
  count: (text: string, limit?: number) => number | Promise<number>,
  limit = Number.POSITIVE_INFINITY,
): Promise<number> {
  if (input.kind === 'text') return count(input.text, limit);
  if (input.kind === 'embedding') {
    // Embeddings: the items' tokens, no template overhead (a token array is its own count).
    let sum = 0;
    for (const item of input.items) {
      if (sum > limit) break;
      sum += typeof item === 'string' ? await count(item, limit - sum) : item.length;
    }
    return sum;
  }
  let total = CHAT_REPLY_PRIMING_TOKENS;
  // Each text is counted against what is left of `limit`; past it, the rest is not counted.
  const add = async (text: string) => {
    total += await count(text, limit - total);
  };
  for (const message of input.messages) {
    if (total > limit) break;
    await add(message.content);
    total += CHAT_MESSAGE_OVERHEAD_TOKENS;
    if (message.name) await add(message.name);
    // A history's tool calls and tool results are prompt too: their id, name and arguments,
    // each call with a message's overhead for its framing.
    for (const call of message.toolCalls ?? []) {
      await add(call.id);
      await add(call.name);
      await add(call.arguments);
      total += CHAT_MESSAGE_OVERHEAD_TOKENS;
    }
    if (message.toolCallId) await add(message.toolCallId);
  }
  return total;
}

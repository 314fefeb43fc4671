import type { EngineRequest, GenerationInput } from '@weir/core';

/** The `anthropic-version` header sent on every call (the Messages API's current version). */
export const ANTHROPIC_VERSION = '2023-06-01';

/** Highest `temperature` the Messages API accepts (docs.anthropic.com: 0.0–1.0; Weir takes 0–2). */
export const ANTHROPIC_MAX_TEMPERATURE = 1;

/** One Messages API turn (text only: Weir's chat content is plain text). */
export interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: string;
}

/** Weir's input in the Messages API's shape: an optional top-level `system` and the turns. */
export interface AnthropicPrompt {
  system?: string;
  messages: AnthropicMessage[];
}

/**
 * Maps Weir's input to the Messages API's shape:
 * - text input → one `user` turn;
 * - chat: `system` and `developer` messages, wherever they stand, → the top-level `system`
 *   (joined with a blank line; the API has no system role in `messages`); `user` and `tool`
 *   (plain text here, with no tool-use id to answer) → `user`; `assistant` → `assistant`
 *   (a final assistant turn is a prefill the model continues); `name` is dropped (no field);
 *   empty contents are dropped (the API rejects empty turns); consecutive turns of one role
 *   are merged with a blank line, so roles alternate;
 * - a chat of system messages only sends their text as the one `user` turn (the API needs at
 *   least one message).
 */
export function toAnthropicPrompt(input: GenerationInput): AnthropicPrompt {
  if (input.kind === 'text') return { messages: [{ role: 'user', content: input.text }] };
  const system: string[] = [];
  const messages: AnthropicMessage[] = [];
  for (const message of input.messages) {
    if (message.content.length === 0) continue;
    if (message.role === 'system' || message.role === 'developer') {
      system.push(message.content);
      continue;
    }
    const role = message.role === 'assistant' ? 'assistant' : 'user';
    const last = messages[messages.length - 1];
    if (last?.role === role) last.content = `${last.content}\n\n${message.content}`;
    else messages.push({ role, content: message.content });
  }
  const systemText = system.join('\n\n');
  if (messages.length === 0) return { messages: [{ role: 'user', content: systemText }] };
  return systemText.length > 0 ? { system: systemText, messages } : { messages };
}

/**
 * The JSON body of `POST /v1/messages`: `model`, optional `system`, `messages`, `max_tokens`
 * (= `request.maxOutputTokens`), `temperature` (capped at {@link ANTHROPIC_MAX_TEMPERATURE}),
 * `top_p`, `stop_sequences` (from `sampling.stop`) when set, and `stream: true`. `seed` is
 * dropped: the API has none.
 */
export function buildAnthropicBody(model: string, request: EngineRequest): Record<string, unknown> {
  const { sampling } = request;
  const prompt = toAnthropicPrompt(request.input);
  const body: Record<string, unknown> = { model };
  if (prompt.system !== undefined) body.system = prompt.system;
  body.messages = prompt.messages;
  body.max_tokens = request.maxOutputTokens;
  if (sampling.temperature !== undefined) body.temperature = Math.min(sampling.temperature, ANTHROPIC_MAX_TEMPERATURE);
  if (sampling.topP !== undefined) body.top_p = sampling.topP;
  if (sampling.stop && sampling.stop.length > 0) body.stop_sequences = sampling.stop;
  body.stream = true;
  return body;
}

/**
 * Request headers: JSON in, SSE out, `anthropic-version`, and `x-api-key` when a key is given
 * (Weir's own credential, resolved by name; a caller's credentials are never forwarded).
 */
export function buildAnthropicHeaders(apiKey: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    'anthropic-version': ANTHROPIC_VERSION,
  };
  if (apiKey) headers['x-api-key'] = apiKey;
  return headers;
}

import { WeirError, type EngineRequest, type GenerationInput, type ToolCall, type ToolChoice, type ToolDefinition } from '@weir/core';

/** The `anthropic-version` header sent on every call (the Messages API's current version). */
export const ANTHROPIC_VERSION = '2023-06-01';

/** Highest `temperature` the Messages API accepts (docs.anthropic.com: 0.0–1.0; Weir takes 0–2). */
export const ANTHROPIC_MAX_TEMPERATURE = 1;

/** A content block of a Messages API turn that Weir sends. */
export type AnthropicContentBlock =
  | { type: 'text'; text: string }
  /** An assistant's tool call: `input` is the parsed arguments object. */
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  /** A tool's answer, in a `user` turn: `tool_use_id` names the call it answers. */
  | { type: 'tool_result'; tool_use_id: string; content: string };

/** One Messages API turn: plain text, or content blocks when it carries tool calls or results. */
export interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: string | AnthropicContentBlock[];
}

/** Weir's input in the Messages API's shape: an optional top-level `system` and the turns. */
export interface AnthropicPrompt {
  system?: string;
  messages: AnthropicMessage[];
}

/** A Messages API tool (`tools[i]`): a function tool with its JSON Schema as `input_schema`. */
export interface AnthropicTool {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
}

/** The Messages API's `tool_choice`. */
export type AnthropicToolChoice =
  | { type: 'auto' | 'any'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean }
  | { type: 'none' };

const blocksOf = (content: string | AnthropicContentBlock[]): AnthropicContentBlock[] =>
  typeof content === 'string' ? (content.length > 0 ? [{ type: 'text', text: content }] : []) : content;

/**
 * A tool call's arguments (JSON text, as the model wrote them) as the object `tool_use.input`
 * needs; empty text is `{}`.
 * @throws WeirError `invalid_request` (`param: messages`) when they are not a JSON object.
 */
function toolInput(call: ToolCall): Record<string, unknown> {
  if (call.arguments.trim().length === 0) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(call.arguments);
  } catch (error) {
    throw new WeirError('invalid_request', `the arguments of tool call '${call.id}' are not JSON; Anthropic needs them as an object`, { param: 'messages', cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new WeirError('invalid_request', `the arguments of tool call '${call.id}' are not a JSON object; Anthropic needs them as an object`, { param: 'messages' });
  }
  return parsed as Record<string, unknown>;
}

/**
 * Maps Weir's input to the Messages API's shape:
 * - text input → one `user` turn;
 * - chat: `system` and `developer` messages, wherever they stand, → the top-level `system`
 *   (joined with a blank line; the API has no system role in `messages`); `user` → `user`;
 *   `assistant` → `assistant` (a final assistant turn is a prefill the model continues), its
 *   `toolCalls` as `tool_use` blocks after its text (arguments parsed to `input`); `tool` →
 *   a `tool_result` block (`tool_use_id` = `toolCallId`, its text as `content`) in a `user`
 *   turn; a `tool` message without `toolCallId` is plain user text. `name` is dropped (no
 *   field); empty texts are dropped (the API rejects empty turns), but not tool calls or
 *   results; consecutive turns of one role are merged (text with a blank line, blocks
 *   appended), so roles alternate and the results of parallel calls share one user turn;
 * - a chat of system messages only sends their text as the one `user` turn (the API needs at
 *   least one message).
 * @throws WeirError `invalid_request` when a tool call's arguments are not a JSON object.
 */
export function toAnthropicPrompt(input: GenerationInput): AnthropicPrompt {
  if (input.kind === 'text') return { messages: [{ role: 'user', content: input.text }] };
  if (input.kind === 'embedding') throw new WeirError('invalid_request', "Anthropic's Messages API serves no embeddings", { param: 'model' });
  const system: string[] = [];
  const messages: AnthropicMessage[] = [];
  const push = (role: AnthropicMessage['role'], content: string | AnthropicContentBlock[]) => {
    const last = messages[messages.length - 1];
    if (last?.role !== role) {
      messages.push({ role, content });
      return;
    }
    if (typeof last.content === 'string' && typeof content === 'string') last.content = `${last.content}\n\n${content}`;
    else last.content = [...blocksOf(last.content), ...blocksOf(content)];
  };
  for (const message of input.messages) {
    if (message.role === 'system' || message.role === 'developer') {
      if (message.content.length > 0) system.push(message.content);
      continue;
    }
    if (message.role === 'tool' && message.toolCallId !== undefined) {
      push('user', [{ type: 'tool_result', tool_use_id: message.toolCallId, content: message.content }]);
      continue;
    }
    if (message.role === 'assistant' && message.toolCalls && message.toolCalls.length > 0) {
      push('assistant', [
        ...blocksOf(message.content),
        ...message.toolCalls.map((call): AnthropicContentBlock => ({ type: 'tool_use', id: call.id, name: call.name, input: toolInput(call) })),
      ]);
      continue;
    }
    if (message.content.length === 0) continue;
    push(message.role === 'assistant' ? 'assistant' : 'user', message.content);
  }
  const systemText = system.join('\n\n');
  if (messages.length === 0) return { messages: [{ role: 'user', content: systemText }] };
  return systemText.length > 0 ? { system: systemText, messages } : { messages };
}

/** OpenAI function tools → Messages API tools (`parameters` → `input_schema`; none: an empty object schema). */
export function toAnthropicTools(tools: readonly ToolDefinition[]): AnthropicTool[] {
  return tools.map((t) => ({
    name: t.function.name,
    ...(t.function.description !== undefined ? { description: t.function.description } : {}),
    input_schema: t.function.parameters ?? { type: 'object', properties: {} },
  }));
}

/**
 * OpenAI's `tool_choice` and `parallel_tool_calls` → the Messages API's `tool_choice`:
 * `auto` → `{type: "auto"}`, `required` → `{type: "any"}`, a named function →
 * `{type: "tool", name}`, `none` → `{type: "none"}`; `parallelToolCalls: false` adds
 * `disable_parallel_tool_use: true` (on `auto` when no choice was given). Undefined when
 * neither is set (the API's default, `auto`).
 */
export function toAnthropicToolChoice(choice: ToolChoice | undefined, parallelToolCalls: boolean | undefined): AnthropicToolChoice | undefined {
  if (choice === undefined && parallelToolCalls !== false) return undefined;
  if (choice === 'none') return { type: 'none' };
  const serial = parallelToolCalls === false ? { disable_parallel_tool_use: true } : {};
  if (choice === 'required') return { type: 'any', ...serial };
  if (typeof choice === 'object') return { type: 'tool', name: choice.function.name, ...serial };
  return { type: 'auto', ...serial };
}

/**
 * The JSON body of `POST /v1/messages`: `model`, optional `system`, `messages`, `max_tokens`
 * (= `request.maxOutputTokens`), `temperature` (capped at {@link ANTHROPIC_MAX_TEMPERATURE}),
 * `top_p`, `stop_sequences` (from `sampling.stop`) when set, `tools` and `tool_choice` when
 * the request has tools ({@link toAnthropicTools}, {@link toAnthropicToolChoice}), and
 * `stream: true`. `seed` is dropped: the API has none.
 * @throws WeirError `invalid_request` when a tool call's arguments are not a JSON object.
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
  if (request.tools && request.tools.length > 0) {
    body.tools = toAnthropicTools(request.tools);
    const choice = toAnthropicToolChoice(request.toolChoice, request.parallelToolCalls);
    if (choice) body.tool_choice = choice;
  }
  body.stream = true;
  return body;
}

/**
 * Request headers: JSON in, SSE out, `anthropic-version`, `x-api-key` when a key is given
 * (Weir's own credential, resolved by name; a caller's credentials are never forwarded), and
 * `anthropic-beta` (the flags joined with commas) when the client asked for betas
 * (`EngineRequest.anthropicBeta`).
 */
export function buildAnthropicHeaders(apiKey: string | undefined, betas: readonly string[] = []): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    'anthropic-version': ANTHROPIC_VERSION,
  };
  if (apiKey) headers['x-api-key'] = apiKey;
  if (betas.length > 0) headers['anthropic-beta'] = betas.join(',');
  return headers;
}

/**
 * Anthropic's Messages API on the wire (`POST /v1/messages`, `/v1/messages/count_tokens`):
 * the request body (zod), its translation to Weir's internal request (chat input, sampling,
 * tools), the `message` object, the streaming events, and errors in Anthropic's shape. Pure:
 * no I/O (the route, `messages-route.ts`, does that).
 *
 * Shapes follow anthropics/anthropic-sdk-typescript (`src/resources/messages/messages.ts`,
 * `src/lib/MessageStream.ts`, `src/core/error.ts`) and docs.anthropic.com/en/api/messages,
 * /messages-streaming, /errors (CONVENTIONS.md §3).
 */
import { z } from 'zod';
import { type ChatMessage, type GenerationInput, type GenerationOutcome, type SamplingParams, type TokenUsage, type ToolCall, WeirError, type WeirErrorCode } from '@weir/core';
import { HTTP_ERRORS } from '@weir/streaming';
import { cacheFields } from './schemas';
import type { ChatTools } from './tools';

const positiveInt = z.number().int().positive();

/** Anthropic's tool names: 1–128 letters, digits, `_` and `-` (`Tool.name`). */
const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,128}$/, 'use 1-128 letters, digits, _ and -');

/** `cache_control` (prompt caching hints): accepted on every block and ignored (Weir's cache is its own: docs/caching.md). */
const cacheControl = z.object({ type: z.literal('ephemeral'), ttl: z.string().optional() }).strict().nullish();

const textBlock = z.object({ type: z.literal('text'), text: z.string(), cache_control: cacheControl, citations: z.array(z.unknown()).nullish() }).strict();

const toolUseBlock = z
  .object({
    type: z.literal('tool_use'),
    id: z.string().min(1),
    name: z.string().min(1),
    input: z.record(z.string(), z.unknown(), { message: 'expected the tool call’s arguments as a JSON object' }),
    cache_control: cacheControl,
    // Who called the tool and from which tool set: bookkeeping of Anthropic's server tools, ignored.
    caller: z.unknown().optional(),
    toolset_name: z.string().nullish(),
  })
  .strict();

const toolResultBlock = z
  .object({
    type: z.literal('tool_result'),
    tool_use_id: z.string().min(1),
    content: z.union([z.string(), z.array(textBlock, { message: 'send the result as a string or text blocks (images in tool results are not supported)' })]).optional(),
    is_error: z.boolean().optional(),
    cache_control: cacheControl,
    toolset_name: z.string().nullish(),
  })
  .strict();

/** Hints for content block types Weir does not take. */
const UNSUPPORTED_BLOCKS: Readonly<Record<string, string>> = {
  image: 'image blocks are not supported: Weir’s revisions take text only; send text',
  document: 'document blocks are not supported: send the document’s text as a text block',
  search_result: 'search_result blocks are not supported: send the text as a text block',
  server_tool_use: 'server tools are not supported: send client tools (with `input_schema`) only',
  web_search_tool_result: 'server tools are not supported: send client tools (with `input_schema`) only',
  container_upload: 'containers are not supported',
};

/**
 * A thinking block of an earlier assistant turn (a conversation begun on Anthropic's API):
 * accepted and left out of what the model is sent — Weir's revisions do no extended thinking,
 * and Anthropic itself drops earlier turns' thinking from the context.
 */
const thinkingBlock = z.object({ type: z.enum(['thinking', 'redacted_thinking']), thinking: z.string().optional(), signature: z.string().optional(), data: z.string().optional() }).strict();

/** One content block of a turn: text, tool_use (assistant), tool_result (user), or an earlier turn's thinking (dropped). */
const contentBlock = z.unknown().transform((v, ctx) => {
  const type = typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as { type?: unknown }).type : undefined;
  const schema =
    type === 'text' ? textBlock : type === 'tool_use' ? toolUseBlock : type === 'tool_result' ? toolResultBlock : type === 'thinking' || type === 'redacted_thinking' ? thinkingBlock : undefined;
  if (!schema) {
    const hint = typeof type === 'string' ? UNSUPPORTED_BLOCKS[type] : undefined;
    ctx.addIssue({ code: 'custom', message: hint ?? (typeof type === 'string' ? `content block type '${type}' is not supported; send text, tool_use or tool_result blocks` : 'expected a content block with a `type` (text, tool_use or tool_result)') });
    return z.NEVER;
  }
  const r = schema.safeParse(v);
  if (!r.success) {
    const issue = r.error.issues[0];
    const param = issue.code === 'unrecognized_keys' ? [...issue.path, issue.keys[0]] : issue.path;
    ctx.addIssue({ code: 'custom', message: describeIssue(issue), path: param });
    return z.NEVER;
  }
  return r.data as z.infer<typeof textBlock> | z.infer<typeof toolUseBlock> | z.infer<typeof toolResultBlock> | z.infer<typeof thinkingBlock>;
});

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') return `unknown field(s) ${issue.keys.map((k) => `\`${k}\``).join(', ')}; remove ${issue.keys.length === 1 ? 'it' : 'them'}`;
  if (issue.code === 'invalid_type') return `expected ${issue.expected === 'int' ? 'an integer' : `a ${issue.expected}`}`;
  return issue.message;
}

const message = z
  .object({
    role: z.enum(['user', 'assistant'], { message: 'use "user" or "assistant" (the system prompt goes in the top-level `system` field)' }),
    // A string is one text block.
    content: z.preprocess((v) => (typeof v === 'string' ? [{ type: 'text', text: v }] : v), z.array(contentBlock, { error: 'send a string or an array of content blocks' })),
  })
  .strict();

/**
 * A client tool: `{name, description?, input_schema, strict?}`; server tools (a `type` such as
 * `web_search_20250305`) are refused. `strict` is passed on (OpenAI's `function.strict`); the
 * hints of Anthropic's own tool runtime (`allowed_callers`, `defer_loading`,
 * `eager_input_streaming`, `input_examples`) are accepted and ignored.
 */
const tool = z
  .object({
    type: z.literal('custom', { message: 'server tools (web search, bash, text editor, computer use, …) are not supported: send client tools with `name` and `input_schema`' }).nullish(),
    name: toolName,
    description: z.string().optional(),
    input_schema: z.record(z.string(), z.unknown(), { message: 'expected a JSON Schema object' }),
    strict: z.boolean().optional(),
    cache_control: cacheControl,
    allowed_callers: z.array(z.string()).optional(),
    defer_loading: z.boolean().optional(),
    eager_input_streaming: z.boolean().nullish(),
    input_examples: z.array(z.unknown()).optional(),
  })
  .strict();

const toolChoice = z.discriminatedUnion(
  'type',
  [
    z.object({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }).strict(),
    z.object({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }).strict(),
    z.object({ type: z.literal('tool'), name: toolName, disable_parallel_tool_use: z.boolean().optional() }).strict(),
    z.object({ type: z.literal('none') }).strict(),
  ],
  { error: 'use {type: "auto"}, {type: "any"}, {type: "tool", name} or {type: "none"}' },
);

/**
 * `POST /v1/messages` (Anthropic's `MessageCreateParams`, the fields Weir serves). `max_tokens`
 * is required, as Anthropic requires it. Accepted and ignored, because they change nothing a
 * Weir revision does: `thinking` (no extended thinking), `output_config.effort`, `speed`,
 * `service_tier` (Weir's own priority is `x-weir-priority`), a top-level `cache_control`
 * (Weir's cache is its own) and `context_management` (the whole conversation is sent; one too
 * long for the context window is a 400 `context_length_exceeded`). Fields this schema does not list are refused by the route, by name
 * ({@link MESSAGES_HINTS}).
 */
export const messagesBody = z
  .object({
    model: z.string().min(1),
    max_tokens: positiveInt,
    messages: z.array(message).min(1),
    system: z.union([z.string(), z.array(textBlock)], { error: 'send a string or an array of text blocks' }).optional(),
    stop_sequences: z.array(z.string().min(1)).max(4, { message: 'at most 4 stop sequences' }).optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().gt(0).max(1).optional(),
    metadata: z.object({ user_id: z.string().nullish() }).strict().optional(),
    tools: z.array(tool).max(128, { message: 'at most 128 tools' }).optional(),
    tool_choice: toolChoice.optional(),
    stream: z.boolean().optional(),
    thinking: z
      .object({ type: z.enum(['enabled', 'disabled', 'adaptive', 'between_tools']), budget_tokens: z.number().int().optional(), display: z.enum(['summarized', 'omitted']).nullish() })
      .strict()
      .optional(),
    output_config: z
      .object({
        effort: z.enum(['low', 'medium', 'high', 'xhigh', 'max']).nullish(),
        format: z.null({ message: 'structured output on /v1/messages is not supported: use POST /v1/chat/completions with `response_format`, or remove `output_config.format`' }).optional(),
      })
      .strict()
      .optional(),
    speed: z.enum(['standard', 'fast']).nullish(),
    service_tier: z.enum(['auto', 'standard_only']).optional(),
    cache_control: cacheControl,
    context_management: z.record(z.string(), z.unknown(), { message: 'expected an object' }).nullish(),
    ...cacheFields,
  })
  .strict();

/** A parsed `/v1/messages` body. */
export type MessagesBody = z.infer<typeof messagesBody>;

/** `POST /v1/messages/count_tokens`: the same fields as a message, without `max_tokens` and the output controls. */
export const countTokensBody = z
  .object({
    model: z.string().min(1),
    messages: z.array(message).min(1),
    system: messagesBody.shape.system,
    tools: messagesBody.shape.tools,
    tool_choice: messagesBody.shape.tool_choice,
    thinking: messagesBody.shape.thinking,
    output_config: messagesBody.shape.output_config,
    cache_control: cacheControl,
  })
  .strict();

/** The top-level fields of {@link messagesBody}. */
export const MESSAGES_FIELDS: ReadonlySet<string> = new Set(Object.keys(messagesBody.shape));
/** The top-level fields of {@link countTokensBody}. */
export const COUNT_TOKENS_FIELDS: ReadonlySet<string> = new Set(Object.keys(countTokensBody.shape));

/** Hints for Messages API fields Weir does not serve (any other unknown field gets a generic refusal). */
export const MESSAGES_HINTS: Readonly<Record<string, string>> = {
  top_k: 'Weir’s revisions sample with `temperature` and `top_p` only',
  container: 'containers (code execution) are not supported',
  mcp_servers: 'MCP servers are not supported: send client tools with `input_schema`',
  output_format: 'structured output on /v1/messages is not supported: use POST /v1/chat/completions with `response_format`',
  citations: 'citations are not supported',
  inference_geo: 'Weir does not choose an inference region per request: its revisions run where the platform team deployed them',
  diagnostics: 'prompt-cache diagnostics are not supported',
  user_profile_id: 'user profiles are not supported: name the end user in `metadata.user_id`',
  workspace_id: 'Weir has no workspaces: the API key names the tenant and app',
};

/**
 * Checks what zod cannot: the first turn is `user`; every `tool_result` answers a `tool_use`
 * of the assistant turn just before it; tool names are unique and `tool_choice: {type: "tool"}`
 * names one of them (or asks for a tool without `tools`).
 * @throws WeirError `invalid_request` with `param` naming the field.
 */
export function checkConversation(body: Pick<MessagesBody, 'messages' | 'tools' | 'tool_choice'>): void {
  if (body.messages[0].role !== 'user') {
    throw new WeirError('invalid_request', 'Invalid request: `messages[0].role`: the first message must use the "user" role (a system prompt goes in the top-level `system` field).', { param: 'messages[0].role' });
  }
  let open = new Set<string>();
  for (const [i, m] of body.messages.entries()) {
    const blocks = m.content;
    const calls = new Set<string>();
    for (const [j, b] of blocks.entries()) {
      if ((b.type === 'thinking' || b.type === 'redacted_thinking') && m.role !== 'assistant') {
        throw new WeirError('invalid_request', `Invalid request: \`messages[${i}].content[${j}]\`: ${b.type} blocks belong in "assistant" turns.`, { param: `messages[${i}].content[${j}]` });
      }
      if (b.type === 'tool_use' && m.role !== 'assistant') throw new WeirError('invalid_request', `Invalid request: \`messages[${i}].content[${j}]\`: tool_use blocks belong in "assistant" turns.`, { param: `messages[${i}].content[${j}]` });
      if (b.type === 'tool_result') {
        if (m.role !== 'user') throw new WeirError('invalid_request', `Invalid request: \`messages[${i}].content[${j}]\`: tool_result blocks belong in "user" turns.`, { param: `messages[${i}].content[${j}]` });
        if (!open.has(b.tool_use_id)) {
          throw new WeirError('invalid_request', `Invalid request: \`messages[${i}].content[${j}].tool_use_id\`: '${b.tool_use_id}' answers no tool_use block of the assistant turn just before it.`, { param: `messages[${i}].content[${j}].tool_use_id` });
        }
      }
      if (b.type === 'tool_use') calls.add(b.id);
    }
    open = calls;
  }
  const names = new Set<string>();
  for (const [i, t] of (body.tools ?? []).entries()) {
    if (names.has(t.name)) throw new WeirError('invalid_request', `Invalid request: \`tools[${i}].name\`: the tool name '${t.name}' is used twice; tool names must be unique.`, { param: `tools[${i}].name` });
    names.add(t.name);
  }
  const choice = body.tool_choice;
  if ((choice?.type === 'any' || choice?.type === 'tool') && names.size === 0) {
    throw new WeirError('invalid_request', 'Invalid request: `tool_choice` asks for a tool call but the request has no `tools`; send `tools`, or remove `tool_choice`.', { param: 'tool_choice' });
  }
  if (choice?.type === 'tool' && !names.has(choice.name)) {
    throw new WeirError('invalid_request', `Invalid request: \`tool_choice.name\`: '${choice.name}' is not one of \`tools\`.`, { param: 'tool_choice.name' });
  }
}

/** The text of a `system` field (text blocks joined with a blank line). */
function systemText(system: MessagesBody['system']): string | undefined {
  if (system === undefined) return undefined;
  const text = typeof system === 'string' ? system : system.map((b) => b.text).join('\n\n');
  return text.length > 0 ? text : undefined;
}

/** A tool result's text; `is_error` results are prefixed `Error: ` (Weir's chat input has no error flag). */
function resultText(b: z.infer<typeof toolResultBlock>): string {
  const text = b.content === undefined ? '' : typeof b.content === 'string' ? b.content : b.content.map((p) => p.text).join('');
  return b.is_error ? `Error: ${text}` : text;
}

/**
 * A Messages conversation as Weir's chat input: `system` → a first `system` message; a user
 * turn's `tool_result` blocks → `tool` messages (`toolCallId` = `tool_use_id`), first, then its
 * text (blocks joined) as a `user` message; an assistant turn's text → its content and its
 * `tool_use` blocks → `toolCalls` (`input` as JSON text). Every engine maps this back to its
 * wire (the Anthropic engine to the same blocks: `toAnthropicPrompt`).
 */
export function toMessagesInput(body: Pick<MessagesBody, 'messages' | 'system'>): GenerationInput {
  const out: ChatMessage[] = [];
  const system = systemText(body.system);
  if (system !== undefined) out.push({ role: 'system', content: system });
  for (const m of body.messages) {
    let text = '';
    const calls: ToolCall[] = [];
    for (const b of m.content) {
      if (b.type === 'text') text += b.text;
      else if (b.type === 'tool_use') calls.push({ id: b.id, name: b.name, arguments: JSON.stringify(b.input) });
      // An earlier turn's thinking (`thinking`, `redacted_thinking`) is left out.
      else if (b.type === 'tool_result') out.push({ role: 'tool', content: resultText(b), toolCallId: b.tool_use_id });
    }
    if (m.role === 'assistant') out.push({ role: 'assistant', content: text, ...(calls.length > 0 ? { toolCalls: calls } : {}) });
    else if (text.length > 0 || !m.content.some((b) => b.type === 'tool_result')) out.push({ role: 'user', content: text });
  }
  return { kind: 'chat', messages: out };
}

/**
 * The request's tools in Weir's shape (OpenAI function tools): `input_schema` → `parameters`;
 * `tool_choice` `auto` → `auto`, `any` → `required`, `tool` → the named function, `none` →
 * `none`; `disable_parallel_tool_use: true` → `parallelToolCalls: false`. Undefined without
 * tools (a `tool_choice` of `auto`/`none` then means nothing).
 */
export function toMessagesTools(body: Pick<MessagesBody, 'tools' | 'tool_choice'>): ChatTools | undefined {
  const tools = body.tools ?? [];
  if (tools.length === 0) return undefined;
  const c = body.tool_choice;
  const toolChoice = c === undefined ? undefined : c.type === 'auto' ? 'auto' : c.type === 'any' ? 'required' : c.type === 'none' ? 'none' : { type: 'function' as const, function: { name: c.name } };
  return {
    tools: tools.map((t) => ({
      type: 'function' as const,
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema, ...(t.strict !== undefined ? { strict: t.strict } : {}) },
    })),
    ...(toolChoice !== undefined ? { toolChoice } : {}),
    ...(c !== undefined && c.type !== 'none' && c.disable_parallel_tool_use === true ? { parallelToolCalls: false } : {}),
  };
}

/** `temperature`, `top_p` and `stop_sequences` as Weir's sampling parameters. */
export function toMessagesSampling(body: Pick<MessagesBody, 'temperature' | 'top_p' | 'stop_sequences'>): SamplingParams {
  return {
    ...(body.temperature !== undefined ? { temperature: body.temperature } : {}),
    ...(body.top_p !== undefined ? { topP: body.top_p } : {}),
    ...(body.stop_sequences !== undefined && body.stop_sequences.length > 0 ? { stop: body.stop_sequences } : {}),
  };
}

/** One beta flag of `anthropic-beta` (Anthropic's are like `context-1m-2025-08-07`). */
const BETA_FLAG = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * The flags of an `anthropic-beta` header (comma-separated, spaces around them ignored, empty
 * items skipped, at most 32), for Anthropic upstreams only; undefined when absent or empty.
 * @throws WeirError `invalid_request` (`param: anthropic-beta`) for a malformed flag or too many.
 */
export function anthropicBetaOf(header: string | undefined): string[] | undefined {
  if (header === undefined) return undefined;
  const flags = header
    .split(',')
    .map((f) => f.trim())
    .filter((f) => f.length > 0);
  if (flags.length > 32) throw new WeirError('invalid_request', '`anthropic-beta` names more than 32 beta flags; send the ones you use.', { param: 'anthropic-beta' });
  const bad = flags.find((f) => !BETA_FLAG.test(f));
  if (bad !== undefined) throw new WeirError('invalid_request', `\`anthropic-beta\`: '${bad.slice(0, 64)}' is not a beta flag (1-128 letters, digits, . _ and -, separated by commas).`, { param: 'anthropic-beta' });
  return flags.length > 0 ? flags : undefined;
}

// ---- answers ---------------------------------------------------------------------------

/** Anthropic's `stop_reason`. */
export type AnthropicStopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal';

/**
 * An outcome's `stop_reason`: `stop` → `stop_sequence` when the engine said which stop sequence
 * matched (`outcome.stopSequence`), else `end_turn`; `length` and `deadline` → `max_tokens`,
 * `tool_calls` → `tool_use`, `content_filter` → `refusal`. `error` and `cancelled` have none
 * (they are answered as errors).
 */
export function toAnthropicStopReason(o: Pick<GenerationOutcome, 'finishReason' | 'stopSequence'>): AnthropicStopReason {
  if (o.finishReason === 'stop' && o.stopSequence !== undefined) return 'stop_sequence';
  switch (o.finishReason) {
    case 'length':
    case 'deadline':
      return 'max_tokens';
    case 'tool_calls':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

/** Anthropic's `usage`: `input_tokens` excludes cache reads and writes, which are `cache_read_input_tokens` and `cache_creation_input_tokens`. */
export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/**
 * Weir's usage as Anthropic's: input tokens read from and written to a prompt cache are reported
 * apart, as Anthropic does (Weir's `inputTokens` includes both), so `input_tokens +
 * cache_creation_input_tokens + cache_read_input_tokens` is the whole prompt. Reasoning tokens stay
 * inside `output_tokens` (Anthropic reports no split).
 */
export function toAnthropicUsage(u: TokenUsage): AnthropicUsage {
  const cached = u.cachedInputTokens ?? 0;
  const written = u.cacheWriteInputTokens ?? 0;
  return { input_tokens: Math.max(0, u.inputTokens - cached - written), output_tokens: u.outputTokens, cache_creation_input_tokens: written, cache_read_input_tokens: cached };
}

/** A content block of an answer. */
export type AnthropicAnswerBlock = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

/**
 * A tool call's arguments (JSON text) as `tool_use.input`: `{}` for empty text; arguments that
 * are not a JSON object (a model that wrote broken JSON) are kept whole as `{"_raw": text}`
 * rather than dropped.
 */
export function toolInputOf(args: string): Record<string, unknown> {
  if (args.trim() === '') return {};
  try {
    const v: unknown = JSON.parse(args);
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // kept raw below
  }
  return { _raw: args };
}

/** What identifies a message on the wire. */
export interface MessageMeta {
  /** `msg_…`. */
  id: string;
  /** The model the client asked for (the alias). */
  model: string;
}

/** The matched stop sequence, or null. */
function stopSequenceOf(o: GenerationOutcome): string | null {
  return o.finishReason === 'stop' && o.stopSequence !== undefined ? o.stopSequence : null;
}

/** Weir's extension on answers (ignored by the SDK): its own finish reason and the revision that answered. */
function weirOf(o: GenerationOutcome) {
  return { finish_reason: o.finishReason, model_revision: o.modelRevision, ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}) };
}

/** The non-streamed answer: Anthropic's `message` object. */
export function anthropicMessage(meta: MessageMeta, content: AnthropicAnswerBlock[], o: GenerationOutcome) {
  return {
    id: meta.id,
    type: 'message',
    role: 'assistant',
    model: meta.model,
    content,
    stop_reason: toAnthropicStopReason(o),
    stop_sequence: stopSequenceOf(o),
    usage: toAnthropicUsage(o.usage),
    weir: weirOf(o),
  };
}

/** `message_start`'s message: empty content, no stop reason yet, the input count known at admission. */
export function messageStart(meta: MessageMeta, inputTokens: number) {
  return {
    type: 'message_start',
    message: {
      id: meta.id,
      type: 'message',
      role: 'assistant',
      model: meta.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: inputTokens, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    },
  };
}

/**
 * `message_delta`: the stop reason and the final, cumulative usage (it overrides `message_start`'s);
 * its `weir` object carries the request's `cost_usd` and `overhead_ms` when `cost` is given
 * (cost-report.ts; absent on a replay, which bills nothing new).
 */
export function messageDelta(o: GenerationOutcome, cost?: { cost_usd: number; overhead_ms: number }) {
  return { type: 'message_delta', delta: { stop_reason: toAnthropicStopReason(o), stop_sequence: stopSequenceOf(o) }, usage: toAnthropicUsage(o.usage), weir: { ...weirOf(o), ...(cost ?? {}) } };
}

/** One event of a Messages stream, `event:` name = `data.type`. */
export interface AnthropicStreamEvent {
  type: string;
  [field: string]: unknown;
}

/**
 * Turns Weir's deltas (text and tool-call fragments, interleaved) into Anthropic's content
 * block events: a text block opens on the first text after a tool call (or at the start); a
 * tool call's first fragment closes the open block and opens a `tool_use` block (`input: {}`),
 * its argument fragments become `input_json_delta`s of that block. Blocks are numbered in order.
 */
export interface ContentBlockEvents {
  /** The events for one delta. */
  delta(text: string, toolCalls?: readonly { index: number; id?: string; name?: string; argumentsDelta?: string }[]): AnthropicStreamEvent[];
  /** Closes the open block, if any. */
  close(): AnthropicStreamEvent[];
}

/** Creates the block sequencer of one stream (see {@link ContentBlockEvents}). */
export function contentBlockEvents(newToolId: () => string): ContentBlockEvents {
  let index = -1;
  let open: { kind: 'text' } | { kind: 'tool'; call: number } | undefined;
  const blockOfCall = new Map<number, number>();
  const close = (): AnthropicStreamEvent[] => {
    if (!open) return [];
    open = undefined;
    return [{ type: 'content_block_stop', index }];
  };
  return {
    close,
    delta(text, toolCalls) {
      const out: AnthropicStreamEvent[] = [];
      if (text !== '') {
        if (open?.kind !== 'text') {
          out.push(...close());
          index++;
          open = { kind: 'text' };
          out.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
        }
        out.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
      }
      for (const c of toolCalls ?? []) {
        if (!blockOfCall.has(c.index)) {
          out.push(...close());
          index++;
          blockOfCall.set(c.index, index);
          open = { kind: 'tool', call: c.index };
          out.push({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: c.id ?? newToolId(), name: c.name ?? '', input: {} } });
        }
        // A fragment of a call whose block was closed (calls interleaved) still goes to its own
        // block's index: Anthropic's blocks cannot reopen, and its SDK accumulates by index.
        if (c.argumentsDelta) out.push({ type: 'content_block_delta', index: blockOfCall.get(c.index), delta: { type: 'input_json_delta', partial_json: c.argumentsDelta } });
      }
      return out;
    },
  };
}

// ---- errors ----------------------------------------------------------------------------

/** Anthropic's error types (docs.anthropic.com/en/api/errors). */
export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'timeout_error'
  | 'overloaded_error';

/**
 * A Weir error code as Anthropic's status and type. The status is Weir's (HTTP_ERRORS), except
 * that the overload family — `queue_full`, `deadline_unmeetable`, `engine_unavailable`,
 * `upstream_unavailable` — is 529 `overloaded_error`, as Anthropic answers an overloaded API
 * (the SDK retries it like a 5xx). Types by status: 400/405/409/415 `invalid_request_error`,
 * 401 `authentication_error`, 403 `permission_error`, 404 `not_found_error`, 413
 * `request_too_large`, 429 `rate_limit_error` (budgets too), 504 `timeout_error`, other 5xx `api_error`.
 */
export function anthropicErrorOf(code: WeirErrorCode): { status: number; type: AnthropicErrorType } {
  if (code === 'queue_full' || code === 'deadline_unmeetable' || code === 'engine_unavailable' || code === 'upstream_unavailable') return { status: 529, type: 'overloaded_error' };
  const status = HTTP_ERRORS[code].status;
  const type: AnthropicErrorType =
    status === 401
      ? 'authentication_error'
      : status === 403
        ? 'permission_error'
        : status === 404
          ? 'not_found_error'
          : status === 413
            ? 'request_too_large'
            : status === 429
              ? 'rate_limit_error'
              : status === 504
                ? 'timeout_error'
                : status >= 500
                  ? 'api_error'
                  : 'invalid_request_error';
  return { status, type };
}

/** Anthropic's error body: `{type: "error", error: {type, message}, request_id}`. */
export function anthropicErrorBody(type: AnthropicErrorType, message: string, requestId?: string) {
  return { type: 'error', error: { type, message }, ...(requestId !== undefined ? { request_id: requestId } : {}) };
}

/**
 * `POST /v1/responses` in OpenAI's Responses API shape (a body with `input`; openai-node
 * v6.49.0 `ResponseCreateParamsBase`), validated with zod, and its translation to Weir's chat
 * input and engine tools:
 *
 * - input items: `message` (role and text content: a string, `input_text` parts, and the
 *   `output_text` parts of an earlier answer), `function_call` (a call the model made) and
 *   `function_call_output` (its result), so a tool loop can send its whole conversation back;
 *   `reasoning` items are accepted and not sent upstream (chat upstreams take no reasoning
 *   input); item references and built-in tool items are refused (Weir stores nothing to refer to);
 * - function tools (`{type: "function", name, description?, parameters?, strict?}`, at most
 *   128), `tool_choice` (`none`, `auto`, `required`, `{type: "function", name}`) and
 *   `parallel_tool_calls`, passed to the engine as chat completions passes them;
 * - `store` (only false: Weir stores no responses) and `previous_response_id` (only null), each
 *   refused by name with what to do instead.
 *
 * Fields this shape does not list are refused by the route, by name, before this schema runs.
 */
import { z } from 'zod';
import { type ChatMessage, type GenerationInput, USE_CASE_PATTERN, WeirError } from '@weir/core';
import { cacheFields, ignoredOpenAiFields, positiveInt, TOOL_NAME_PATTERN, temperature, topP } from './schemas';
import { type ChatTools, chatToolsOf } from './tools';

const toolName = z.string().regex(TOOL_NAME_PATTERN, 'use 1-64 letters, digits, _ and -');

/** One text part of an input message: `input_text`, or `output_text` of an earlier answer sent back. */
const responsesPart = z
  .object({
    type: z.enum(['input_text', 'output_text'], { message: 'only `input_text` parts (and `output_text` in assistant messages) are supported; images, files and audio are not' }),
    text: z.string(),
    // What an earlier answer's `output_text` part carries (the SDK's stream helper adds `parsed`): ignored.
    annotations: z.array(z.unknown()).optional(),
    logprobs: z.array(z.unknown()).nullish(),
    parsed: z.unknown().optional(),
  })
  .strict();

/** A message item (`type: "message"`, or no type with a `role`). */
const messageItem = z
  .object({
    type: z.literal('message'),
    role: z.enum(['user', 'assistant', 'system', 'developer']),
    // A string is one input_text part.
    content: z.preprocess((v) => (typeof v === 'string' ? [{ type: 'input_text', text: v }] : v), z.array(responsesPart)),
    id: z.string().nullish(),
    status: z.string().nullish(),
  })
  .strict();

/** A call the model made (`ResponseFunctionToolCall`), sent back with the conversation. */
const functionCallItem = z
  .object({
    type: z.literal('function_call'),
    call_id: z.string().min(1),
    name: z.string().min(1),
    arguments: z.string(),
    id: z.string().nullish(),
    status: z.string().nullish(),
    // The SDK's stream helper and `parse` add the parsed arguments: ignored.
    parsed_arguments: z.unknown().optional(),
  })
  .strict();

/** The result of a call (`ResponseInputItem.FunctionCallOutput`): text, or `input_text` parts. */
const functionCallOutputItem = z
  .object({
    type: z.literal('function_call_output'),
    call_id: z.string().min(1),
    output: z.union([z.string(), z.array(z.object({ type: z.literal('input_text', { message: 'only `input_text` parts are supported in a tool output; images and files are not' }), text: z.string() }).strict())], {
      error: 'send the tool output as a string, or as an array of `input_text` parts',
    }),
    id: z.string().nullish(),
    status: z.string().nullish(),
  })
  .strict();

/** A reasoning item of an earlier answer (`ResponseReasoningItem`): accepted, not sent upstream. */
const reasoningItem = z
  .object({
    type: z.literal('reasoning'),
    id: z.string().nullish(),
    summary: z.array(z.unknown()),
    content: z.array(z.unknown()).nullish(),
    encrypted_content: z.string().nullish(),
    status: z.string().nullish(),
  })
  .strict();

/** A field accepted only when absent or null; anything else is refused with `message`. */
const onlyNull = (message: string) => z.unknown().refine((v) => v === null || v === undefined, { message }).optional();

const ITEM_TYPES = 'use `message`, `function_call`, `function_call_output` or `reasoning` items (Weir stores no responses, so `item_reference` items cannot be resolved: send the item itself; built-in tool items are not supported)';

/** One Responses API input item; a message may omit `type`. */
const responsesInputItem = z.preprocess(
  (v) => (v !== null && typeof v === 'object' && !Array.isArray(v) && !('type' in v) && 'role' in v ? { type: 'message', ...v } : v),
  z.discriminatedUnion('type', [messageItem, functionCallItem, functionCallOutputItem, reasoningItem], { error: ITEM_TYPES }),
);

/** One function tool in Responses' flat shape (`FunctionTool`). */
const responsesFunctionTool = z
  .object({
    type: z.literal('function', { message: "only function tools are supported ({type: 'function', name, parameters}); built-in tools (web_search, file_search, computer use, MCP, …) and custom tools are not" }),
    name: toolName,
    description: z.string().nullish(),
    parameters: z.custom<Record<string, unknown>>((v) => v !== null && typeof v === 'object' && !Array.isArray(v), { message: 'expected a JSON Schema object (`{type: "object", properties: …}`)' }).nullish(),
    strict: z.boolean().nullish(),
  })
  .strict();

/** Responses' `tool_choice`: a mode, or one named function. */
const responsesToolChoice = z.union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), name: toolName }).strict()], {
  error: 'use "none", "auto", "required" or {type: "function", name} (built-in tools and allowed_tools are not supported)',
});

/**
 * `POST /v1/responses` in OpenAI's Responses API shape. A string `input` is one user message.
 * `text.format` may ask for `json_schema` output (Weir's `output_schema`).
 */
export const responsesOpenAiBody = z
  .object({
    /** Optional only with a `use_case` (or `x-weir-use-case`) the tenant's policy defines: its model chain is used (`use-cases.ts`). */
    model: z.string().min(1).optional(),
    /** Weir's extension, as on chat completions: the use case (its limits, budget, redaction profile and, without `model`, its model chain). */
    use_case: z.string().regex(USE_CASE_PATTERN, 'use 1-64 letters, digits and . _ : - only').optional(),
    input: z.preprocess((v) => (typeof v === 'string' ? [{ role: 'user', content: v }] : v), z.array(responsesInputItem).min(1)),
    instructions: z.string().nullish(),
    max_output_tokens: positiveInt.nullish(),
    stream: z.boolean().nullish(),
    temperature,
    top_p: topP,
    tools: z.array(responsesFunctionTool).max(128, { message: 'at most 128 tools' }).nullish(),
    tool_choice: responsesToolChoice.nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    store: z.literal(false, { message: 'Weir does not store responses: send `store: false`, or omit it (a tool loop sends the whole conversation, its `function_call` and `function_call_output` items included, in `input`)' }).nullish(),
    previous_response_id: onlyNull('Weir does not store responses, so it cannot continue one: send the whole conversation (earlier output items included) in `input`, and remove `previous_response_id`'),
    // Only what Weir can honour by sending nothing extra: it returns no reasoning items, so there is no encrypted reasoning to include.
    include: z.array(z.literal('reasoning.encrypted_content', { message: 'no extra output data can be included (only "reasoning.encrypted_content" is accepted, and ignored: Weir returns no reasoning items)' })).nullish(),
    reasoning: onlyNull('`reasoning` is not supported: reasoning options are not supported by these models; remove `reasoning`'),
    service_tier: z.enum(['auto', 'default', 'flex']).nullish(),
    user: z.string().nullish(),
    stream_options: z.object({ include_obfuscation: z.boolean().nullish() }).strict().nullish(),
    metadata: ignoredOpenAiFields.metadata,
    prompt_cache_key: ignoredOpenAiFields.prompt_cache_key,
    prompt_cache_retention: ignoredOpenAiFields.prompt_cache_retention,
    safety_identifier: ignoredOpenAiFields.safety_identifier,
    ...cacheFields,
    text: z
      .object({
        format: z
          .object({
            type: z.enum(['text', 'json_schema'], { message: "use `{type: 'text'}` or `{type: 'json_schema', name, schema}` (json_object is not supported: give a schema)" }),
            name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'use 1-64 letters, digits, _ and -').optional(),
            schema: z.unknown().optional(),
            strict: z.boolean().nullish(),
            description: z.string().optional(),
          })
          .strict()
          .optional(),
      })
      .strict()
      .nullish(),
  })
  .strict();

/** A parsed {@link responsesOpenAiBody}. */
export type ResponsesOpenAiBody = z.infer<typeof responsesOpenAiBody>;

/** The top-level fields {@link responsesOpenAiBody} accepts. */
export const RESPONSES_OPENAI_FIELDS: ReadonlySet<string> = new Set(Object.keys(responsesOpenAiBody.shape));

/**
 * The conversation as Weir's chat input: `instructions` first (a system message), then the
 * items in order — a message's text parts joined; `function_call` items as the `toolCalls` of
 * an assistant message (one that directly precedes them, text or calls, else a new one with
 * no text); each `function_call_output` as a `tool` message answering its `call_id`;
 * `reasoning` items left out.
 * @throws WeirError `invalid_request` with `param` `input[i].call_id` for an output whose
 *   `call_id` no earlier `function_call` item has (OpenAI refuses it too).
 */
export function toResponsesChatInput(items: ResponsesOpenAiBody['input'], instructions?: string | null): GenerationInput {
  const messages: ChatMessage[] = instructions ? [{ role: 'system', content: instructions }] : [];
  const calls = new Set<string>();
  // The assistant message function_call items join: the one the previous item made or extended.
  let assistant: ChatMessage | undefined;
  for (const [i, item] of items.entries()) {
    if (item.type === 'reasoning') continue;
    if (item.type === 'message') {
      const m: ChatMessage = { role: item.role, content: item.content.map((p) => p.text).join('') };
      messages.push(m);
      assistant = item.role === 'assistant' ? m : undefined;
    } else if (item.type === 'function_call') {
      if (!assistant) {
        assistant = { role: 'assistant', content: '' };
        messages.push(assistant);
      }
      (assistant.toolCalls ??= []).push({ id: item.call_id, name: item.name, arguments: item.arguments });
      calls.add(item.call_id);
    } else {
      if (!calls.has(item.call_id)) {
        throw new WeirError('invalid_request', `Invalid request: \`input[${i}].call_id\`: no earlier \`function_call\` item has the call_id '${item.call_id}'; send the call (as the model made it) before its output.`, { param: `input[${i}].call_id` });
      }
      const output = typeof item.output === 'string' ? item.output : item.output.map((p) => p.text).join('');
      messages.push({ role: 'tool', content: output, toolCallId: item.call_id });
      assistant = undefined;
    }
  }
  return { kind: 'chat', messages };
}

/**
 * The request's tools as the engine takes them (chat completions' shape), or undefined without
 * any (then `tool_choice: "none" | "auto"` and `parallel_tool_calls` are dropped, as on chat).
 * @throws WeirError `invalid_request`: `tools[i].name` for a name used twice; `tool_choice` for
 *   a function that is not one of the tools, or a call asked for without tools.
 */
export function responsesToolsOf(body: Pick<ResponsesOpenAiBody, 'tools' | 'tool_choice' | 'parallel_tool_calls'>): ChatTools | undefined {
  const choice = body.tool_choice;
  return chatToolsOf(
    {
      tools: body.tools?.map((t) => ({
        type: 'function' as const,
        function: {
          name: t.name,
          ...(t.description != null ? { description: t.description } : {}),
          ...(t.parameters != null ? { parameters: t.parameters } : {}),
          ...(t.strict != null ? { strict: t.strict } : {}),
        },
      })),
      tool_choice: typeof choice === 'object' && choice !== null ? { type: 'function', function: { name: choice.name } } : choice,
      parallel_tool_calls: body.parallel_tool_calls,
    },
    (i) => `tools[${i}].name`,
  );
}

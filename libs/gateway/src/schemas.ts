/**
 * Request bodies of the public routes, validated with zod. Field names are the client's
 * (snake_case); a failure names the field and says what to fix.
 */
import { z } from 'zod';
import { type ChatMessage, type GenerationInput, USE_CASE_PATTERN, WeirError } from '@weir/core';

const stop = z.union([z.string().min(1), z.array(z.string().min(1)).max(4)]).nullish();
/** OpenAI's `temperature` (0–2). */
export const temperature = z.number().min(0).max(2).nullish();
/** OpenAI's `top_p` (0, 1]. */
export const topP = z.number().gt(0).max(1).nullish();
const seed = z.number().int().nullish();
/** A token count or limit (an integer ≥ 1). */
export const positiveInt = z.number().int().positive();

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const messageContent = z.union([
  z.string(),
  z.array(
    z.union([
      textPart,
      z.object({ type: z.string() }).loose().transform((part, ctx) => {
        ctx.addIssue({ code: 'custom', message: `content part type '${part.type}' is not supported; send text parts only` });
        return z.NEVER;
      }),
    ]),
  ),
  z.null(),
]);

const chatMessage = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: messageContent,
  name: z.string().optional(),
}).loose();

/** A tool name as OpenAI allows it. */
export const TOOL_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;
const toolName = z.string().regex(TOOL_NAME_PATTERN, 'use 1-64 letters, digits, _ and -');

/** A complete tool call in an assistant message's `tool_calls`. */
const messageToolCall = z.object({
  id: z.string().min(1),
  type: z.literal('function', { message: "only function tool calls are supported (type: 'function')" }),
  function: z.object({ name: z.string().min(1), arguments: z.string() }).loose(),
}).loose();

/**
 * A chat message of `/v1/chat/completions`: assistant `tool_calls`, and `tool` messages
 * answering one by `tool_call_id`. Other fields are refused by name, except those an assistant
 * message carries when a client sends a response's message back (`refusal`, `annotations`, and
 * a null `audio` or `function_call`), which are ignored.
 */
const chatCompletionsMessage = chatMessage
  .extend({
    tool_calls: z.array(messageToolCall).nullish(),
    tool_call_id: z.string().min(1).nullish(),
    refusal: z.string().nullish(),
    annotations: z.array(z.unknown()).nullish(),
    audio: z.null({ message: 'audio is not supported (text only); remove `audio` from the message' }).optional(),
    function_call: z.null({ message: '`function_call` is deprecated and not supported: send `tool_calls`' }).optional(),
  })
  .strict()
  .superRefine((m, ctx) => {
    if (m.role === 'tool' && !m.tool_call_id) ctx.addIssue({ code: 'custom', path: ['tool_call_id'], message: 'is required on `tool` messages: the id of the tool call this message answers' });
    if (m.role !== 'assistant' && m.tool_calls) ctx.addIssue({ code: 'custom', path: ['tool_calls'], message: 'only assistant messages carry `tool_calls`' });
  });

/** One function tool (OpenAI's `ChatCompletionFunctionTool`). */
const functionTool = z.object({
  type: z.literal('function', { message: "only function tools are supported (type: 'function')" }),
  function: z.object({
    name: toolName,
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown(), { message: 'expected a JSON Schema object' }).optional(),
    strict: z.boolean().nullish(),
  }).strict(),
}).strict();

/** OpenAI's `tool_choice`. Whether a named function is one of the tools is checked by `chatToolsOf`. */
const toolChoice = z.union(
  [
    z.enum(['none', 'auto', 'required']),
    z.object({ type: z.literal('function'), function: z.object({ name: toolName }).strict() }).strict(),
  ],
  { error: 'use "none", "auto", "required" or {type: "function", function: {name}}' },
);

/**
 * OpenAI's chat `response_format`: `text`, `json_object` (any JSON object), or `json_schema`
 * (`{name, schema, strict?, description?}`); the schema is compiled and checked by the route.
 */
const responseFormat = z.discriminatedUnion(
  'type',
  [
    z.object({ type: z.literal('text') }).strict(),
    z.object({ type: z.literal('json_object') }).strict(),
    z
      .object({
        type: z.literal('json_schema'),
        json_schema: z
          .object({
            name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, { message: 'expected 1-64 letters, digits, _ or -' }),
            description: z.string().optional(),
            schema: z.record(z.string(), z.unknown(), { message: 'expected a JSON Schema object' }),
            strict: z.boolean().nullish(),
          })
          .strict(),
      })
      .strict(),
  ],
  { error: 'use {type: "text"}, {type: "json_object"} or {type: "json_schema", json_schema: {name, schema}}' },
);

/** `stream_options`: `include_usage` is honoured, `include_obfuscation` ignored (Weir pads nothing). */
const streamOptions = z.object({ include_usage: z.boolean().nullish(), include_obfuscation: z.boolean().nullish() }).strict().nullish();

/** A penalty Weir does not implement: accepted only at its neutral value 0 (older LangChain clients send 0 by default). */
const neutralPenalty = (name: string) => z.number({ message: `expected a number` }).refine((v) => v === 0, { message: `${name} is not supported; send 0 or omit it` }).nullish();

/** `logit_bias`: not implemented, so only an empty map is accepted. */
const emptyLogitBias = z
  .record(z.string(), z.number())
  .refine((m) => Object.keys(m).length === 0, { message: 'logit_bias is not supported; send {} or omit it' })
  .nullish();

/**
 * Fields OpenAI clients send that change nothing Weir does, accepted and ignored on the OpenAI
 * routes (docs/api.md, "Fields Weir ignores"): OpenAI's storage and dashboard (`store`,
 * `metadata`), its prompt cache and abuse tracking (`prompt_cache_key`,
 * `prompt_cache_retention`, `safety_identifier`), and predicted outputs (`prediction`, a latency
 * hint). Types are checked as OpenAI checks them.
 */
export const ignoredOpenAiFields = {
  store: z.boolean().nullish(),
  metadata: z.record(z.string(), z.string(), { message: 'expected an object of string values' }).nullish(),
  prompt_cache_key: z.string().nullish(),
  prompt_cache_retention: z.string().nullish(),
  safety_identifier: z.string().nullish(),
};

/**
 * Weir's cache fields, on every generation route (docs/caching.md, docs/api.md): `weir_cache`
 * (`"no-cache"`, `"no-store"`, `"opt_in"`) and `weir_prompt_template` (`name@version`). Their
 * values are checked by `@weir/cache` (`cacheDirectivesOf`, `templateOf`) with 400s naming them.
 */
export const cacheFields = {
  weir_cache: z.string().nullish(),
  weir_prompt_template: z.string().nullish(),
};

/** `POST /v1/chat/completions` (CONVENTIONS.md §1). Unknown fields are refused by the route, by name, before this schema runs ({@link refuseUnknownFields}). */
export const chatCompletionsBody = z.object({
  /** Optional only with a `use_case` (or `x-weir-use-case`) the tenant's policy defines: its model chain is used (`use-cases.ts`). */
  model: z.string().min(1).optional(),
  /** Weir's extension: the request's use case (its limits, budget, redaction profile; its model chain when `model` is absent). */
  use_case: z.string().regex(USE_CASE_PATTERN, 'use 1-64 letters, digits and . _ : - only').optional(),
  messages: z.array(chatCompletionsMessage).min(1),
  stream: z.boolean().nullish(),
  stream_options: streamOptions,
  max_tokens: positiveInt.nullish(),
  max_completion_tokens: positiveInt.nullish(),
  temperature,
  top_p: topP,
  seed,
  stop,
  n: z.literal(1, { message: 'only n=1 is supported' }).nullish(),
  user: z.string().nullish(),
  tools: z.array(functionTool).max(128, { message: 'at most 128 tools' }).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  response_format: responseFormat.nullish(),
  logprobs: z.literal(false, { message: 'logprobs are not supported; remove `logprobs`' }).nullish(),
  top_logprobs: z.literal(0, { message: 'logprobs are not supported; remove `top_logprobs`' }).nullish(),
  service_tier: z.string().nullish(), // checked by `priorityOf` ("flex" runs as batch work)
  frequency_penalty: neutralPenalty('frequency_penalty'),
  presence_penalty: neutralPenalty('presence_penalty'),
  logit_bias: emptyLogitBias,
  modalities: z.array(z.literal('text', { message: 'only text output is supported; send ["text"] or omit `modalities`' })).nullish(),
  prediction: z.object({ type: z.string(), content: z.unknown() }).loose().nullish(),
  ...ignoredOpenAiFields,
  ...cacheFields,
}).strict();

/** Hints for OpenAI chat completions fields Weir does not support (a field not listed here or in the schema gets a generic one). */
export const CHAT_UNSUPPORTED_HINTS: Readonly<Record<string, string>> = {
  functions: '`functions` is deprecated: send `tools`',
  function_call: '`function_call` is deprecated: send `tool_choice`',
  audio: 'audio output is not supported (text only)',
  web_search_options: 'web search is not supported',
  reasoning_effort: 'reasoning options are not supported by these models',
  verbosity: 'verbosity is not supported by these models',
};

/** The top-level fields {@link chatCompletionsBody} accepts. */
export const CHAT_COMPLETIONS_FIELDS: ReadonlySet<string> = new Set(Object.keys(chatCompletionsBody.shape));

/** `POST /v1/completions` (legacy). Unknown fields are refused by the route, by name, before this schema runs. */
export const completionsBody = z.object({
  model: z.string().min(1),
  prompt: z.union([z.string(), z.array(z.string()).length(1, { message: 'send one prompt (a string or an array of one string)' })], {
    error: 'send one prompt: a string, or an array of one string (token arrays and batches of prompts are not supported)',
  }),
  stream: z.boolean().nullish(),
  stream_options: streamOptions,
  max_tokens: positiveInt.nullish(),
  temperature,
  top_p: topP,
  seed,
  stop,
  n: z.literal(1, { message: 'only n=1 is supported' }).nullish(),
  frequency_penalty: neutralPenalty('frequency_penalty'),
  presence_penalty: neutralPenalty('presence_penalty'),
  logit_bias: emptyLogitBias,
  echo: z.literal(false, { message: 'echo is not supported' }).nullish(),
  best_of: z.literal(1, { message: 'best_of is not supported' }).nullish(),
  logprobs: z.literal(0, { message: 'logprobs are not supported; remove `logprobs`' }).nullish(),
  suffix: z.null({ message: 'suffix is not supported' }).optional(),
  user: z.string().nullish(),
  ...cacheFields,
}).strict();

/** The top-level fields {@link completionsBody} accepts. */
export const COMPLETIONS_FIELDS: ReadonlySet<string> = new Set(Object.keys(completionsBody.shape));

/**
 * Refuses a body's top-level fields that `known` does not hold, one at a time and by name:
 * with `hints[name]` when given (a known OpenAI field Weir does not implement), else as unknown
 * to `route`. O(fields); no allocation when
 * every field is known.
 * @throws WeirError `invalid_request` with `param` = the field.
 */
export function refuseUnknownFields(body: unknown, known: ReadonlySet<string>, hints: Readonly<Record<string, string>>, route: string, docs = 'docs/api.md'): void {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return; // parseBody says what is wrong
  for (const name in body) {
    if (known.has(name)) continue;
    const hint = Object.prototype.hasOwnProperty.call(hints, name) ? hints[name] : undefined;
    if (hint !== undefined) {
      throw new WeirError('invalid_request', `Invalid request: \`${name}\` is not supported: ${hint}; remove \`${name}\`.`, { param: name });
    }
    throw new WeirError('invalid_request', `Invalid request: unknown field \`${name}\`: ${route} does not take it (${docs} lists the fields Weir accepts and those it ignores); remove \`${name}\`.`, { param: name });
  }
}

/** `POST /v1/generations` (Weir's own route, ARCHITECTURE.md §3). */
export const generationsBody = z.object({
  request_id: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:-]+$/, 'use letters, digits and . _ : - only').optional(),
  model_alias: z.string().min(1),
  input: z.union([z.string(), z.array(chatMessage).min(1)]),
  max_output_tokens: positiveInt.optional(),
  deadline_ms: positiveInt.max(3_600_000).optional(),
  use_case: z.string().regex(USE_CASE_PATTERN, 'use 1-64 letters, digits and . _ : - only').optional(),
  priority: z.enum(['interactive', 'batch']).optional(),
  stream: z.boolean().optional(),
  temperature: temperature,
  top_p: topP,
  seed,
  stop,
  ...cacheFields,
}).strict();

/**
 * `POST /v1/responses` in Weir's shape (the gateway seed): `use_case`, `messages`,
 * `max_tokens`, `stream`, `output_schema`, plus `/v1/generations`' optional controls. `model`
 * is optional: without it the use case's model chain routes the request (a use case the
 * tenant's policy defines; `use-cases.ts`). `output_schema` is checked by `compileOutputSchema`, not here.
 */
export const responsesWeirBody = z.object({
  model: z.string().min(1).optional(),
  use_case: z.string().regex(USE_CASE_PATTERN, 'use 1-64 letters, digits and . _ : - only'),
  messages: z.array(chatMessage).min(1),
  max_tokens: positiveInt,
  stream: z.boolean().optional(),
  output_schema: z.unknown().optional(),
  request_id: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:-]+$/, 'use letters, digits and . _ : - only').optional(),
  deadline_ms: positiveInt.max(3_600_000).optional(),
  priority: z.enum(['interactive', 'batch']).optional(),
  temperature,
  top_p: topP,
  seed,
  stop,
  ...cacheFields,
}).strict();

// OpenAI's Responses API body (`input`, tools, items): responses-body.ts.

/**
 * The request's use case: `fromBody` (the validated `use_case` of `/v1/generations`) when
 * given, else the `x-weir-use-case` header, else undefined. The header is checked even when
 * the body names one.
 * @throws WeirError `invalid_request` (`param: x-weir-use-case`) for a header that is not 1–64
 *   characters of `[A-Za-z0-9._:-]`.
 */
export function useCaseOf(header: string | undefined, fromBody?: string): string | undefined {
  if (header !== undefined && !USE_CASE_PATTERN.test(header)) {
    throw new WeirError('invalid_request', '`x-weir-use-case` must be 1-64 letters, digits and . _ : - (for example `support.summaries`).', { param: 'x-weir-use-case' });
  }
  return fromBody ?? header;
}

/**
 * The request's scheduling class: `fromBody` (the validated `priority` of `/v1/generations`)
 * when given, else the `x-weir-priority` header (`interactive` or `batch`), else `batch` for
 * OpenAI's `service_tier: "flex"` (cheaper, slower), else undefined (interactive).
 * @throws WeirError `invalid_request` (`param: x-weir-priority`) for another header value, and
 *   (`param: service_tier`) for a `service_tier` that is not one of OpenAI's values.
 */
export function priorityOf(header: string | undefined, fromBody?: 'interactive' | 'batch', serviceTier?: unknown): 'interactive' | 'batch' | undefined {
  const h = header?.trim().toLowerCase();
  if (h !== undefined && h !== 'interactive' && h !== 'batch') {
    throw new WeirError('invalid_request', '`x-weir-priority` must be `interactive` or `batch`.', { param: 'x-weir-priority' });
  }
  if (serviceTier !== undefined && serviceTier !== null && !(typeof serviceTier === 'string' && OPENAI_SERVICE_TIERS.has(serviceTier))) {
    throw new WeirError('invalid_request', `\`service_tier\` must be one of ${[...OPENAI_SERVICE_TIERS].map((t) => `"${t}"`).join(', ')} ("flex" runs as batch work), or be omitted.`, { param: 'service_tier' });
  }
  return fromBody ?? (h as 'interactive' | 'batch' | undefined) ?? (serviceTier === 'flex' ? 'batch' : undefined);
}

/** OpenAI's `service_tier` values; only `flex` changes anything here (batch class). */
const OPENAI_SERVICE_TIERS = new Set(['auto', 'default', 'flex', 'scale', 'priority']);

/** Parses a body or throws `invalid_request` naming the first bad field. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new WeirError('invalid_request', 'The request body must be a JSON object (Content-Type: application/json).');
  }
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const where = pathText(issue.path);
  // An unknown field is the param itself; the message names the object it is in.
  const param = issue.code === 'unrecognized_keys' ? pathText([...issue.path, issue.keys[0]]) : where;
  const what = where ? `\`${where}\`: ` : '';
  throw new WeirError('invalid_request', `Invalid request: ${what}${describeIssue(issue, valueAt(body, issue.path))}`, { param: param || undefined });
}

/** A zod path as the client writes it: `messages[0].content`. */
function pathText(path: readonly PropertyKey[]): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');
}

/** The value at a zod issue's path in the raw body (undefined when absent). */
function valueAt(body: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = body;
  for (const key of path) {
    if (v === null || typeof v !== 'object' || !Object.prototype.hasOwnProperty.call(v, key)) return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number') return Number.isInteger(v) ? `the integer ${v}` : `the number ${v}`;
  if (typeof v === 'string') return `a string`;
  return `a ${typeof v}`;
}

function describeIssue(issue: z.core.$ZodIssue, value: unknown): string {
  if (issue.code === 'invalid_type') {
    const expected = issue.expected === 'int' ? 'an integer' : `a ${issue.expected}`;
    return value === undefined ? `is required (expected ${expected})` : `expected ${expected}, got ${describeValue(value)}`;
  }
  if (issue.code === 'unrecognized_keys') return `unknown field(s) ${issue.keys.map((k) => `\`${k}\``).join(', ')}; remove ${issue.keys.length === 1 ? 'it' : 'them'} (docs/api.md lists the fields Weir accepts)`;
  return issue.message;
}

type ParsedMessage = z.infer<typeof chatMessage> & Partial<Pick<z.infer<typeof chatCompletionsMessage>, 'tool_calls' | 'tool_call_id'>>;

/**
 * Flattens chat messages to Weir's text-only shape (text parts joined); assistant
 * `tool_calls` and a tool message's `tool_call_id` are kept.
 */
export function toChatInput(messages: ParsedMessage[]): GenerationInput {
  const out: ChatMessage[] = messages.map((m) => ({
    role: m.role,
    content: typeof m.content === 'string' ? m.content : m.content === null ? '' : m.content.map((p) => p.text).join(''),
    ...(m.name ? { name: m.name } : {}),
    ...(m.tool_calls && m.tool_calls.length > 0 ? { toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) } : {}),
    ...(m.tool_call_id ? { toolCallId: m.tool_call_id } : {}),
  }));
  return { kind: 'chat', messages: out };
}

/** Normalises `stop` to an array. */
export function toStopList(value: string | string[] | null | undefined): string[] | undefined {
  if (value === null || value === undefined) return undefined;
  return Array.isArray(value) ? value : [value];
}

/**
 * The wire shapes of `POST /v1/responses`: OpenAI's Responses API objects and streaming events
 * (text and function-call output), as openai-node v6.49.0 types them
 * (`resources/responses/responses.ts`: `Response`, `ResponseStreamEvent`,
 * `ResponseFunctionToolCall`), and the tail of Weir's own stream on that route. Pure builders:
 * no I/O. The order of events for answers with function calls is `responses-output.ts`'s (gateway).
 *
 * OpenAI's stream for one text answer, each event framed as `event: <type>` + `data: <json>`
 * with `sequence_number` 0, 1, 2, … and no `[DONE]`: `response.created`,
 * `response.in_progress`, `response.output_item.added`, `response.content_part.added`,
 * `response.output_text.delta`*, `response.output_text.done`, `response.content_part.done`,
 * `response.output_item.done`, then `response.completed` (or `response.incomplete` when the
 * output was cut short); a failure after the headers is `error` then `response.failed`.
 */
import type { TokenUsage } from '@weir/core';
import type { WeirExtension } from './openai-wire';
import type { WeirEndData } from './weir-events';

/**
 * OpenAI's `ResponseUsage`. `cached_tokens` is part of `input_tokens` and `reasoning_tokens` part
 * of `output_tokens`, not extra; `cache_write_tokens` (part of `input_tokens`, Weir's addition as
 * on the chat wire) only when the upstream reported some.
 */
export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens?: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** Converts measured usage to OpenAI's Responses usage object. */
export function toResponsesUsage(usage: TokenUsage): ResponsesUsage {
  return {
    input_tokens: usage.inputTokens,
    input_tokens_details: {
      cached_tokens: usage.cachedInputTokens ?? 0,
      ...(usage.cacheWriteInputTokens ? { cache_write_tokens: usage.cacheWriteInputTokens } : {}),
    },
    output_tokens: usage.outputTokens,
    output_tokens_details: { reasoning_tokens: usage.reasoningTokens ?? 0 },
    total_tokens: usage.inputTokens + usage.outputTokens,
  };
}

/** What every `Response` of one answer shares. */
export interface ResponsesMeta {
  /** `resp_…`. */
  id: string;
  /** `msg_…`: the id of the one output message. */
  messageId: string;
  /** Unix seconds. */
  createdAt: number;
  /** The model name echoed to the client (the alias it sent). */
  model: string;
  /** The request's `instructions`, echoed; null when none. */
  instructions: string | null;
  maxOutputTokens: number | null;
  temperature: number | null;
  topP: number | null;
  /** `text.format` echoed: `{type: "text"}` or the request's `json_schema` format. */
  textFormat: Record<string, unknown>;
  /** The request's function tools, echoed in Responses' shape. Default `[]`. */
  tools?: readonly unknown[];
  /** The request's `tool_choice`, echoed. Default `"none"` without tools, `"auto"` with. */
  toolChoice?: unknown;
  /** The request's `parallel_tool_calls`, echoed. Default true with tools, false without. */
  parallelToolCalls?: boolean;
}

/** A `Response`'s state. */
export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed';

/** The output so far and how the answer ended. */
export interface ResponseState {
  status: ResponseStatus;
  /** The output text; undefined while nothing is known (no output item yet). Ignored when `output` is given. */
  text?: string;
  /** The output items (messages, function calls) in order; takes the place of `text`. */
  output?: readonly Record<string, unknown>[];
  usage?: ResponsesUsage;
  /** `incomplete`: why (`max_output_tokens` also stands for Weir's deadline). */
  incompleteReason?: 'max_output_tokens' | 'content_filter';
  /** `failed`: Weir's error code and public message. */
  error?: { code: string; message: string };
  /** Weir's extension (finish reason, answering revision, fallback). */
  weir?: WeirExtension;
}

/** The assistant message item of a response. */
export function responseMessage(meta: ResponsesMeta, text: string, status: 'in_progress' | 'completed' | 'incomplete'): Record<string, unknown> {
  return { id: meta.messageId, type: 'message', status, role: 'assistant', content: status === 'in_progress' && text === '' ? [] : [outputText(text)] };
}

/** One `output_text` content part. */
export function outputText(text: string): Record<string, unknown> {
  return { type: 'output_text', text, annotations: [], logprobs: [] };
}

/** A function call output item's state. */
export type FunctionCallStatus = 'in_progress' | 'completed' | 'incomplete';

/**
 * A `function_call` output item (`ResponseFunctionToolCall`): `id` is the item's (`fc_…`),
 * `call_id` the one a `function_call_output` input item answers; `arguments` is JSON text as
 * the model wrote it (not parsed, possibly incomplete while `in_progress`).
 */
export function functionCallItem(call: { id: string; callId: string; name: string; arguments: string }, status: FunctionCallStatus): Record<string, unknown> {
  return { id: call.id, type: 'function_call', status, arguments: call.arguments, call_id: call.callId, name: call.name };
}

/**
 * A `Response` object (`object: "response"`). `output_text` is not sent: the SDKs compute it
 * from `output` (openai-node's `addOutputText`), as they do for OpenAI's own answers.
 */
export function responseObject(meta: ResponsesMeta, state: ResponseState): Record<string, unknown> {
  const messageStatus = state.status === 'completed' ? 'completed' : state.status === 'in_progress' ? 'in_progress' : 'incomplete';
  const body: Record<string, unknown> = {
    id: meta.id,
    object: 'response',
    created_at: meta.createdAt,
    status: state.status,
    background: false,
    error: state.error ?? null,
    incomplete_details: state.incompleteReason ? { reason: state.incompleteReason } : null,
    instructions: meta.instructions,
    max_output_tokens: meta.maxOutputTokens,
    metadata: {},
    model: meta.model,
    output: state.output ? [...state.output] : state.text === undefined ? [] : [responseMessage(meta, state.text, messageStatus)],
    parallel_tool_calls: meta.parallelToolCalls ?? (meta.tools !== undefined && meta.tools.length > 0),
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    temperature: meta.temperature,
    text: { format: meta.textFormat },
    tool_choice: meta.toolChoice ?? (meta.tools !== undefined && meta.tools.length > 0 ? 'auto' : 'none'),
    tools: meta.tools ? [...meta.tools] : [],
    top_p: meta.topP,
    truncation: 'disabled',
    usage: state.usage ?? null,
  };
  if (state.weir) body.weir = state.weir;
  return body;
}

/** Numbers the events of one OpenAI Responses stream (`sequence_number` from 0). */
export interface ResponsesEventWriter {
  /** The next event: `{type, sequence_number, ...fields}`. */
  event(type: string, fields: Record<string, unknown>): { type: string; data: Record<string, unknown> };
}

/** Creates a {@link ResponsesEventWriter}. */
export function responsesEvents(): ResponsesEventWriter {
  let sequence = 0;
  return {
    event(type, fields) {
      return { type, data: { type, ...fields, sequence_number: sequence++ } };
    },
  };
}

/**
 * The `end` event of Weir's stream on `/v1/responses` (and the tail of its JSON answer):
 * `/v1/generations`' end plus the seed's flags — `cached` (always false until a response
 * cache exists), `fallback` (another revision answered) — cached input tokens, and, with an
 * `output_schema`, the parsed `output`.
 */
export interface WeirResponsesEndData extends WeirEndData {
  usage: WeirEndData['usage'] & { cached_input_tokens: number };
  cached: boolean;
  fallback: boolean;
  /** The output parsed as JSON (requests with `output_schema`, when it matched). */
  output?: unknown;
}

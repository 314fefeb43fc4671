/**
 * Anthropic's Messages API inbound (issue 16 §1): `POST /v1/messages` and
 * `POST /v1/messages/count_tokens`, so the official `@anthropic-ai/sdk` (`messages.create`,
 * `messages.stream`, `messages.countTokens`) and Claude Code work unchanged against Weir.
 *
 * A message request is translated (`messages-wire.ts`) to Weir's internal chat request and goes
 * through the same `begin` as `/v1/chat/completions` (admission, budgets, scheduling, failover,
 * ledger, cancellation on disconnect, cache, moderation, redaction), so it reaches any revision:
 * llama.cpp, OpenAI-compatible or Anthropic (whose engine maps the request back to the same
 * Messages blocks, tools and stop reasons). The answer is Anthropic's `message` object, or its
 * event stream (`message_start`, `ping`, `content_block_start`/`_delta`/`_stop`,
 * `message_delta`, `message_stop`, and `error` in-band). Errors are Anthropic's
 * `{type: "error", error: {type, message}}` with the `retry-after` headers of the other routes.
 *
 * Authentication is the edge's: `x-api-key` or `Authorization: Bearer` (app.ts).
 * `anthropic-version` is accepted whatever its value, and may be absent: Weir answers in the
 * `2023-06-01` shape, the only version the API has. docs/api-anthropic.md.
 */
import type { ServerResponse } from 'node:http';
import { type GenerationInput, type GenerationOutcome, type RouterService, type SamplingParams, type ToolCallDelta, WeirError, newId } from '@weir/core';
import { accumulateToolCalls, formatSseEvent } from '@weir/streaming';
import type { CostMeter } from './cost-report';
import { type AuthedRequest, type EdgeRequest, sendJson } from './edge';
import {
  type AnthropicStreamEvent,
  anthropicBetaOf,
  anthropicErrorBody,
  anthropicErrorOf,
  anthropicMessage,
  checkConversation,
  contentBlockEvents,
  COUNT_TOKENS_FIELDS,
  countTokensBody,
  type MessageMeta,
  messageDelta,
  MESSAGES_FIELDS,
  MESSAGES_HINTS,
  messagesBody,
  messageStart,
  toMessagesInput,
  toMessagesSampling,
  toMessagesTools,
  toolInputOf,
} from './messages-wire';
import { AdmissionRejectedError, type GenerationPipeline, type ParamNames } from './pipeline';
import { rateLimitHeaders } from './rate-limit-headers';
import { parseBody, refuseUnknownFields, useCaseOf } from './schemas';
import { openSse, type SseWriterOptions } from './sse-writer';
import { type ChatTools, refuseIncapableRoutes, toolsCheck } from './tools';
import { blockedBeforeOutput, type Transcript, type TranscriptEvent } from './transcript';

/** A generation being answered, as app.ts's `begin` returns it. */
export interface MessagesAnswer {
  generationId: string;
  transcript: Transcript;
  endedInQueue: boolean;
  /** Input tokens counted at admission (absent on an idempotent replay). */
  inputTokens?: number;
  /** Reports cost and overhead (cost-report.ts); absent on a replay. */
  cost?: CostMeter;
}

/** The limits `begin` takes (the subset this route uses). */
export interface MessagesBeginLimits {
  maxOutputTokens?: number;
  requestId?: string;
  keyParam?: string;
  paramNames: ParamNames;
  tools?: ChatTools;
  endUser?: string;
  anthropicBeta?: string[];
  beforeAdmit?: (stickyKey: string, useCase: string | undefined) => Promise<void>;
}

/** What app.ts hands the route. */
export interface MessagesRouteContext {
  /** Registers a POST route (authenticated, refused while draining, JSON body read); `errors` answers its errors. */
  post(path: string, handler: (req: AuthedRequest, res: ServerResponse) => Promise<void>, errors: (res: ServerResponse, error: WeirError, req: EdgeRequest) => void): unknown;
  begin(req: AuthedRequest, res: ServerResponse, route: 'chat.completions', alias: string, input: GenerationInput, sampling: SamplingParams, limits: MessagesBeginLimits): Promise<MessagesAnswer>;
  pipeline: Pick<GenerationPipeline, 'countInputTokens' | 'holdUnmetered'>;
  router: RouterService;
  sseOptions: SseWriterOptions;
  firstEventOrThrow(events: AsyncIterable<TranscriptEvent>): Promise<AsyncIterable<TranscriptEvent>>;
  /** Names the answering revision, and with `g` sets the cost headers (cost-report.ts). */
  answeredBy(res: ServerResponse, o: GenerationOutcome, g?: { cost?: CostMeter }): void;
  outcomeError(o: GenerationOutcome): WeirError;
  deadlineOrCancel(o: GenerationOutcome): WeirError;
  idempotencyKeyHeader(req: EdgeRequest): string | undefined;
}

const PARAMS: ParamNames = { model: 'model', input: 'messages', maxOutputTokens: 'max_tokens' };

/** How long a count may hold its unmetered reservation before admission expires it (ms). */
const COUNT_HOLD_MS = 30_000;

/**
 * Answers `error` in Anthropic's shape with the headers the other routes send: `retry-after`
 * and `retry-after-ms` on a retryable error, `x-should-retry: false` where retrying cannot help,
 * the rate-limit headers of an admission refusal, and `request-id` (the SDK's `requestID`).
 */
export function sendAnthropicError(res: ServerResponse, error: WeirError, req: EdgeRequest): void {
  const { status, type } = anthropicErrorOf(error.code);
  if (error.retryAfterMs !== undefined) {
    res.setHeader('retry-after', String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))));
    res.setHeader('retry-after-ms', String(Math.ceil(error.retryAfterMs)));
  }
  // The SDK retries 409, 429 and 5xx unless told not to (CONVENTIONS.md §2): a spent budget or a kill switch will not pass on retry.
  if (error.code === 'kill_switch' || (!error.retryable && (status === 409 || status === 429))) res.setHeader('x-should-retry', 'false');
  if (error instanceof AdmissionRejectedError) {
    for (const [name, value] of Object.entries(rateLimitHeaders(error.rateLimits))) res.setHeader(name, value);
  }
  res.setHeader('request-id', req.requestId);
  // Node has no reason phrase for 529 (Anthropic's "overloaded"): name it rather than "unknown".
  if (status === 529) res.statusMessage = 'Overloaded';
  sendJson(res, status, anthropicErrorBody(type, error.message, req.requestId));
}

/** Registers `POST /v1/messages` and `POST /v1/messages/count_tokens` (call from `createGatewayApp`). */
export function registerMessagesRoute(ctx: MessagesRouteContext): void {
  ctx.post('/v1/messages', (req, res) => createMessage(ctx, req, res), sendAnthropicError);
  ctx.post('/v1/messages/count_tokens', (req, res) => countTokens(ctx, req, res), sendAnthropicError);
}

async function createMessage(ctx: MessagesRouteContext, req: AuthedRequest, res: ServerResponse): Promise<void> {
  res.setHeader('request-id', req.requestId);
  refuseUnknownFields(req.body, MESSAGES_FIELDS, MESSAGES_HINTS, 'POST /v1/messages', 'docs/api-anthropic.md');
  const body = parseBody(messagesBody, req.body);
  checkConversation(body);
  const tools = toMessagesTools(body);
  const endUser = body.metadata?.user_id ?? undefined;
  // Passed to Anthropic upstreams only (the other engines ignore them).
  const anthropicBeta = anthropicBetaOf(req.header('anthropic-beta'));
  const g = await ctx.begin(req, res, 'chat.completions', body.model, toMessagesInput(body), toMessagesSampling(body), {
    maxOutputTokens: body.max_tokens,
    requestId: ctx.idempotencyKeyHeader(req),
    keyParam: 'Idempotency-Key',
    paramNames: PARAMS,
    ...(tools ? { tools, beforeAdmit: refuseIncapableRoutes(ctx.router, req.caller, body.model, [toolsCheck]) } : {}),
    ...(endUser ? { endUser } : {}),
    ...(anthropicBeta ? { anthropicBeta } : {}),
  });
  if (g.endedInQueue && g.transcript.outcome) throw ctx.deadlineOrCancel(g.transcript.outcome);
  const meta: MessageMeta = { id: `msg_${g.generationId.slice(4)}`, model: body.model };
  if (body.stream) await streamMessage(ctx, res, g, meta);
  else await wholeMessage(ctx, res, g, meta);
}

/** The error a generation that ended without a usable answer is told with (before any header). */
function refusalOf(ctx: MessagesRouteContext, o: GenerationOutcome, outputSent: boolean): WeirError | undefined {
  if (o.finishReason === 'error' || blockedBeforeOutput(o)) return ctx.outcomeError(o);
  if (o.finishReason === 'deadline' && !outputSent) return new WeirError('deadline_exceeded', 'The deadline passed before the model produced any output; raise the deadline (x-weir-deadline-ms) or retry.', { retryable: true });
  if (o.finishReason === 'cancelled') return cancelled();
  return undefined;
}

function cancelled(): WeirError {
  return new WeirError('invalid_request', 'The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.');
}

async function wholeMessage(ctx: MessagesRouteContext, res: ServerResponse, g: MessagesAnswer, meta: MessageMeta): Promise<void> {
  const outcome = await g.transcript.ended();
  const refusal = refusalOf(ctx, outcome, g.transcript.deltas.length > 0);
  if (refusal) throw refusal;
  ctx.answeredBy(res, outcome, g);
  const text = g.transcript.text();
  const calls = accumulateToolCalls(g.transcript.deltaToolCalls.filter((c): c is ToolCallDelta[] => c !== null));
  const content = [
    ...(text !== '' ? [{ type: 'text' as const, text }] : []),
    ...calls.map((c) => ({ type: 'tool_use' as const, id: c.id || newId('toolu'), name: c.name, input: toolInputOf(c.arguments) })),
  ];
  sendJson(res, 200, anthropicMessage(meta, content, outcome));
}

async function streamMessage(ctx: MessagesRouteContext, res: ServerResponse, g: MessagesAnswer, meta: MessageMeta): Promise<void> {
  // Headers go out only once the first event is in: failures before any output stay HTTP errors the SDK can retry.
  const events = await ctx.firstEventOrThrow(g.transcript.follow(0));
  const first = g.transcript.deltas.length === 0 ? g.transcript.outcome : undefined;
  if (first?.finishReason === 'deadline') throw refusalOf(ctx, first, false);
  const sse = openSse(res, ctx.sseOptions);
  // Every event is named (the SDK skips unnamed ones): `event:` = `data.type`.
  const send = (ev: AnthropicStreamEvent) => sse.write(formatSseEvent({ event: ev.type, data: JSON.stringify(ev) }));
  await send(messageStart(meta, g.inputTokens ?? 0));
  await send({ type: 'ping' });
  const blocks = contentBlockEvents(() => newId('toolu'));
  for await (const ev of events) {
    if (ev.type === 'delta') {
      for (const e of blocks.delta(ev.text, ev.toolCalls)) await send(e);
      continue;
    }
    const o = ev.outcome;
    if (o.finishReason === 'error' || o.finishReason === 'cancelled') {
      // After the headers, a failure can only be told in-band: Anthropic's `error` event (the SDK throws an APIError of its type).
      const error = o.finishReason === 'cancelled' ? cancelled() : ctx.outcomeError(o);
      const { type } = anthropicErrorOf(error.code);
      await send(anthropicErrorBody(type, error.message) as AnthropicStreamEvent);
      break;
    }
    for (const e of blocks.close()) await send(e);
    await send(messageDelta(o, g.cost?.report(o)));
    await send({ type: 'message_stop' });
  }
  sse.end();
}

async function countTokens(ctx: MessagesRouteContext, req: AuthedRequest, res: ServerResponse): Promise<void> {
  res.setHeader('request-id', req.requestId);
  refuseUnknownFields(req.body, COUNT_TOKENS_FIELDS, MESSAGES_HINTS, 'POST /v1/messages/count_tokens', 'docs/api-anthropic.md');
  const body = parseBody(countTokensBody, req.body);
  checkConversation(body);
  const routed = await ctx.router.resolve(req.caller, body.model, req.requestId, useCaseOf(req.header('x-weir-use-case')));
  if (!routed.ok) throw new WeirError('model_not_found', routed.message, { param: 'model' });
  const input = toMessagesInput(body);
  // The tool definitions take context too (Anthropic counts them): their JSON as one more system message.
  const tools = toMessagesTools(body);
  if (tools && input.kind === 'chat') input.messages.unshift({ role: 'system', content: JSON.stringify(tools.tools.map((t) => t.function)) });
  // Held to the caller's requests per minute and concurrency like /v1/moderations (no tokens, no cost, no usage row).
  const held = await ctx.pipeline.holdUnmetered(req.caller, newId('cnt'), COUNT_HOLD_MS);
  try {
    for (const [name, value] of Object.entries(rateLimitHeaders(held.rateLimits))) res.setHeader(name, value);
    const inputTokens = await ctx.pipeline.countInputTokens(routed.route.revision, input);
    sendJson(res, 200, { input_tokens: inputTokens });
  } finally {
    await held.release();
  }
}

/**
 * `POST /v1/responses` (issue 6, deliverable 9), in two body shapes told apart by their fields:
 *
 * - **Weir's** (the gateway seed): `{model, use_case, messages, max_tokens, stream?,
 *   output_schema?}` plus `/v1/generations`' optional controls. Answers `{id, output_text |
 *   output, model_used, usage, cost_usd, cached, fallback, fallback_reason?}`; streams Weir's
 *   `start`/`delta`/`end` events, the `end` carrying the same fields.
 * - **OpenAI's Responses API** (text only; a body with `input`): `{model, input, instructions?,
 *   max_output_tokens?, stream?, temperature?, top_p?, text?: {format}}`, so the official
 *   SDKs' `client.responses.create` works; answers a `response` object or OpenAI's Responses
 *   streaming events (`responses-wire.ts`). Any other field is refused by name.
 *
 * With `output_schema` (or `text.format: {type: "json_schema"}`) the schema is checked when
 * the request arrives (`output-schema.ts`), revisions that cannot constrain output are refused
 * before anything is held, the engine constrains generation, and the final output is validated:
 * one that does not match ends as `output_invalid` (502; billed for its tokens — the usage
 * record is the relay's — and `x-should-retry: false` so SDKs do not pay for blind retries).
 *
 * Admission, idempotency, deadlines, priority and use case go through the same `begin` as the
 * other routes (app.ts), which hands it in with its helpers.
 */
import type { ServerResponse } from 'node:http';
import {
  capabilitiesOf,
  type GenerationInput,
  type GenerationOutcome,
  type RevisionSpec,
  type Caller,
  type RouterService,
  type SamplingParams,
  tenantKeyOf,
  type UseCasePolicy,
  WeirError,
} from '@weir/core';
import {
  formatSseEvent,
  HTTP_ERRORS,
  outputText,
  responseMessage,
  responseObject,
  responsesEvents,
  type ResponsesMeta,
  type ResponseState,
  toResponsesUsage,
  type WeirResponsesEndData,
  judgeOutput,
  type LoadedOutputSchema,
  loadOutputSchema,
  screenOutputSchema,
} from '@weir/streaming';
import { toGrammarSchema, UnsupportedSchemaError } from '@weir/engines';
import { type AuthedRequest, type EdgeRequest, sendJson } from './edge';
import type { ParamNames } from './pipeline';
import { refuseIncapableRoutes, type RouteCheck } from './tools';
import { parseBody, refuseUnknownFields, RESPONSES_OPENAI_FIELDS, responsesOpenAiBody, responsesWeirBody, toChatInput, toResponsesChatInput } from './schemas';
import { openSse } from './sse-writer';
import { blockedBeforeOutput, type Transcript, type TranscriptEvent } from './transcript';
import { modelOrUseCase } from './use-cases';

/** A generation being answered, as app.ts's `begin` returns it. */
export interface ResponsesAnswer {
  generationId: string;
  requestId: string;
  modelRevision: string;
  /** Unix s. */
  createdS: number;
  transcript: Transcript;
  endedInQueue: boolean;
}

/** The limits `begin` takes (the subset this route uses). */
export interface ResponsesBeginLimits {
  maxOutputTokens?: number;
  deadlineMs?: number;
  requestId?: string;
  keyParam?: string;
  paramNames: ParamNames;
  useCase?: string;
  priority?: 'interactive' | 'batch';
  outputSchema?: object;
  beforeAdmit?: (requestId: string, useCase: string | undefined) => Promise<void>;
}

type Authed = AuthedRequest;

/** What app.ts hands the route: its `post`, `begin` and the helpers the other routes use. */
export interface ResponsesRouteContext {
  /** Registers a POST route on the edge (authenticated, refused while draining, JSON body read). */
  post(path: string, handler: (req: Authed, res: ServerResponse) => Promise<void>): unknown;
  begin(req: Authed, res: ServerResponse, route: 'generations', alias: string, input: GenerationInput, sampling: SamplingParams, limits: ResponsesBeginLimits): Promise<ResponsesAnswer>;
  router: RouterService;
  sseHeartbeatMs: number;
  /** How long a stream's client may stop reading before the stream is ended (ms; `openSse`'s `stallMs`). */
  sseStallMs?: number;
  firstEventOrThrow(events: AsyncIterable<TranscriptEvent>): Promise<AsyncIterable<TranscriptEvent>>;
  answeredBy(res: ServerResponse, o: GenerationOutcome): void;
  outcomeError(o: GenerationOutcome): WeirError;
  deadlineOrCancel(o: GenerationOutcome): WeirError;
  generationsKey(req: EdgeRequest, bodyKey: string | undefined): { requestId?: string; keyParam: string };
  idempotencyKeyHeader(req: EdgeRequest): string | undefined;
  sampling(body: { temperature?: number | null; top_p?: number | null; seed?: number | null; stop?: string | string[] | null }): SamplingParams;
  /** Throws admission's remembered refusal of `caller` (see `GenerationPipeline.precheck`): called before compiling a schema. */
  precheck(caller: Caller): void;
  /** The use cases the caller's tenant defines (`GenerationPipeline.useCases`): a body without `model` is routed by its use case's chain. */
  useCases(caller: Caller): readonly UseCasePolicy[];
}

/** Hints for OpenAI Responses fields Weir does not support (the rest get a generic one). */
const UNSUPPORTED_HINTS: Record<string, string> = {
  tools: 'tools (function calling, built-in tools) are not supported on Weir’s /v1/responses (text only)',
  tool_choice: 'tools are not supported on Weir’s /v1/responses (text only)',
  parallel_tool_calls: 'tools are not supported on Weir’s /v1/responses (text only)',
  previous_response_id: 'Weir does not store responses: send the whole conversation in `input`',
  conversation: 'Weir does not store conversations: send the whole conversation in `input`',
  reasoning: 'reasoning options are not supported by these models',
  background: 'background responses are not supported; use stream: true, or POST /v1/batches',
  include: 'no extra output data can be included',
  prompt: 'stored prompt templates are not supported; send `instructions` and `input`',
  messages: '`messages` is Weir’s shape; with `input` (OpenAI’s shape) send the conversation in `input` only',
  output_schema: '`output_schema` is Weir’s shape; with `input` (OpenAI’s shape) use `text: {format: {type: "json_schema", name, schema}}`',
};

const WEIR_PARAMS: ParamNames = { model: 'model', input: 'messages', maxOutputTokens: 'max_tokens' };
const OPENAI_PARAMS: ParamNames = { model: 'model', input: 'input', maxOutputTokens: 'max_output_tokens' };

/** Registers `POST /v1/responses` on the gateway (call from `createGatewayApp`). */
export function registerResponsesRoute(ctx: ResponsesRouteContext): void {
  ctx.post('/v1/responses', async (req, res) => {
    const body = req.body as Record<string, unknown> | undefined;
    if (body !== null && typeof body === 'object' && !Array.isArray(body) && 'input' in body) await answerOpenAiShape(ctx, req, res, body);
    else await answerWeirShape(ctx, req, res);
  });
}

/**
 * Refuses a schema-constrained request whose revision, or a revision of its fallback chain,
 * cannot constrain output (no `capabilities.json_output`), or whose llama.cpp grammar cannot
 * express the schema (the same pure check the engine makes, here before any reservation). Also
 * used by chat completions' `response_format`.
 * @throws WeirError `invalid_request` with `param`, naming the revision.
 */
export function schemaCheck(param: string, schema: object): RouteCheck {
  return ({ revision, fallbacks }, alias) => {
    for (const r of [revision, ...fallbacks]) {
      const which = r === revision ? `revision ${r.id}` : `its fallback revision ${r.id}`;
      const why = unconstrainedBecause(r);
      if (why !== undefined) {
        throw new WeirError('invalid_request', `Model '${alias}' cannot constrain its output to a JSON Schema: ${which} ${why}. Remove \`${param}\`, or use a model whose revisions declare \`capabilities.json_output\`.`, { param });
      }
      if (r.engine.kind === 'llamacpp') {
        try {
          toGrammarSchema(schema);
        } catch (err) {
          if (err instanceof UnsupportedSchemaError) throw new WeirError('invalid_request', `\`${param}\` cannot be used with ${which} (llama.cpp): ${err.message}.`, { param });
          throw err;
        }
      }
    }
  };
}

/** What {@link checkThenCompile} returns: the `beforeAdmit` hook, and the compiled schema once it ran. */
export interface CheckThenCompile {
  beforeAdmit(stickyKey: string, useCase: string | undefined): Promise<void>;
  /** The schema `beforeAdmit` compiled (compiled now if it did not run); undefined without a schema. */
  loaded(): Promise<LoadedOutputSchema | undefined>;
}

/**
 * Cheap refusals before expensive work (issue 14 §1–2): a `beforeAdmit` hook that resolves the
 * route once, runs `checks` on it (what its revisions can constrain: `schemaCheck`, tools), and
 * only then compiles `schema` (already screened with `screenOutputSchema`) on the schema worker,
 * in the caller's own queue (`tenantKeyOf(caller)`). A schema the route's engine cannot express
 * is refused without any compilation.
 * @throws (from `beforeAdmit`) WeirError `invalid_request` from a check or the compilation;
 *   `rate_limited` when the tenant has too many schemas being compiled.
 */
export function checkThenCompile(router: RouterService, caller: Caller, alias: string, checks: readonly RouteCheck[], schema: object | undefined, param: string): CheckThenCompile {
  const routeChecks = refuseIncapableRoutes(router, caller, alias, checks);
  let loaded: LoadedOutputSchema | undefined;
  const load = async () => {
    if (schema) loaded ??= await loadOutputSchema(schema, param, { tenant: tenantKeyOf(caller) });
    return loaded;
  };
  return {
    async beforeAdmit(stickyKey, useCase) {
      await routeChecks(stickyKey, useCase);
      await load();
    },
    loaded: load,
  };
}

/** Why a revision cannot serve schema-constrained output; undefined when it can. */
function unconstrainedBecause(r: RevisionSpec): string | undefined {
  return capabilitiesOf(r).jsonOutput ? undefined : `(engine ${r.engine.kind}) does not offer JSON-schema output`;
}

/** Reads a whole generation: its text and outcome. */
async function collect(g: ResponsesAnswer): Promise<{ text: string; outcome: GenerationOutcome }> {
  const outcome = await g.transcript.ended();
  return { text: g.transcript.text(), outcome };
}

/** The error an ended generation is answered with; `output_invalid` tells SDKs not to retry (a retry is billed again). */
function failure(ctx: ResponsesRouteContext, res: ServerResponse, o: GenerationOutcome): WeirError {
  if (o.error?.code === 'output_invalid') {
    if (!res.headersSent) res.setHeader('x-should-retry', 'false');
    return new WeirError('output_invalid', o.error.message);
  }
  return ctx.outcomeError(o);
}

function asCode(code: string): keyof typeof HTTP_ERRORS {
  return code in HTTP_ERRORS ? (code as keyof typeof HTTP_ERRORS) : 'internal';
}

// ---- Weir's shape ---------------------------------------------------------------------

/** `end` of Weir's stream, and the tail of its JSON answer. */
function weirResponsesEnd(o: GenerationOutcome, value: unknown): WeirResponsesEndData {
  return {
    finish_reason: o.finishReason,
    usage: { input_tokens: o.usage.inputTokens, output_tokens: o.usage.outputTokens, cached_input_tokens: o.usage.cachedInputTokens ?? 0, cost_usd: o.costNanoUsd / 1e9 },
    model_used: o.modelRevision,
    cached: false,
    fallback: o.fallback !== undefined,
    ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}),
    ...(value !== undefined ? { output: value } : {}),
    ...(o.error ? { error: { type: HTTP_ERRORS[asCode(o.error.code)].type, code: o.error.code, message: o.error.message } } : {}),
  };
}

async function answerWeirShape(ctx: ResponsesRouteContext, req: Authed, res: ServerResponse): Promise<void> {
  const body = parseBody(responsesWeirBody, req.body);
  // Without `model`, the use case's model chain (a use case the tenant's policy defines).
  const model = modelOrUseCase(body.model, body.use_case, ctx.useCases(req.caller), { model: 'model', useCase: 'use_case' });
  // A caller admission refused moments ago is refused before its schema is compiled.
  if (body.output_schema !== undefined) ctx.precheck(req.caller);
  // The cheap checks now; the compilation after the route's capability checks (beforeAdmit).
  const raw = body.output_schema === undefined ? undefined : screenOutputSchema(body.output_schema, 'output_schema');
  const compiling = raw ? checkThenCompile(ctx.router, req.caller, model, [schemaCheck('output_schema', raw)], raw, 'output_schema') : undefined;
  const g = await ctx.begin(req, res, 'generations', model, toChatInput(body.messages), ctx.sampling(body), {
    maxOutputTokens: body.max_tokens,
    deadlineMs: body.deadline_ms,
    ...ctx.generationsKey(req, body.request_id),
    useCase: body.use_case,
    priority: body.priority,
    paramNames: WEIR_PARAMS,
    ...(raw && compiling ? { outputSchema: raw, beforeAdmit: compiling.beforeAdmit } : {}),
  });
  if (g.endedInQueue && g.transcript.outcome) throw ctx.deadlineOrCancel(g.transcript.outcome);
  const schema = await compiling?.loaded();

  if (!body.stream) {
    const { text, outcome } = await collect(g);
    const judged = await judgeOutput(outcome, text, schema);
    if (judged.outcome.finishReason === 'error' || blockedBeforeOutput(judged.outcome)) throw failure(ctx, res, judged.outcome);
    ctx.answeredBy(res, outcome);
    const end = weirResponsesEnd(judged.outcome, undefined);
    sendJson(res, 200, {
      object: 'weir.response',
      id: g.generationId,
      request_id: g.requestId,
      ...(schema ? { output: judged.value } : { output_text: text }),
      finish_reason: end.finish_reason,
      model_used: end.model_used,
      usage: { input_tokens: end.usage.input_tokens, output_tokens: end.usage.output_tokens, cached_input_tokens: end.usage.cached_input_tokens },
      cost_usd: end.usage.cost_usd,
      cached: end.cached,
      fallback: end.fallback,
      ...(end.fallback_reason !== undefined ? { fallback_reason: end.fallback_reason } : {}),
    });
    return;
  }

  // A failure before any output is an HTTP error, not a 200 stream.
  const events = await ctx.firstEventOrThrow(g.transcript.follow(0));
  const sse = openSse(res, { heartbeatMs: ctx.sseHeartbeatMs, stallMs: ctx.sseStallMs });
  const send = (id: number, event: string, data: unknown) => sse.write(formatSseEvent({ id, event, data: JSON.stringify(data) }));
  await send(1, 'start', { generation_id: g.generationId, request_id: g.requestId, model_revision: g.modelRevision });
  let text = '';
  for await (const ev of events) {
    if (ev.type === 'delta') {
      text += ev.text;
      await send(ev.index + 2, 'delta', { text: ev.text });
    } else {
      const judged = await judgeOutput(ev.outcome, text, schema);
      await send(g.transcript.deltas.length + 2, 'end', weirResponsesEnd(judged.outcome, judged.value));
    }
  }
  sse.end();
}

// ---- OpenAI's Responses API shape -------------------------------------------------------

async function answerOpenAiShape(ctx: ResponsesRouteContext, req: Authed, res: ServerResponse, raw: Record<string, unknown>): Promise<void> {
  refuseUnknownFields(raw, RESPONSES_OPENAI_FIELDS, UNSUPPORTED_HINTS, 'Weir’s /v1/responses');
  const body = parseBody(responsesOpenAiBody, raw);
  const format = body.text?.format;
  let rawSchema: object | undefined;
  if (format?.type === 'json_schema') {
    if (format.name === undefined) throw new WeirError('invalid_request', 'Invalid request: `text.format.name` is required with `json_schema` (1-64 letters, digits, _ and -).', { param: 'text.format.name' });
    if (format.schema === undefined) throw new WeirError('invalid_request', 'Invalid request: `text.format.schema` is required with `json_schema`.', { param: 'text.format.schema' });
    ctx.precheck(req.caller);
    // The cheap checks now; the compilation after the route's capability checks (beforeAdmit).
    rawSchema = screenOutputSchema(format.schema, 'text.format.schema');
  }
  const compiling = rawSchema ? checkThenCompile(ctx.router, req.caller, body.model, [schemaCheck('text.format', rawSchema)], rawSchema, 'text.format.schema') : undefined;
  const g = await ctx.begin(req, res, 'generations', body.model, toResponsesChatInput(body.input, body.instructions), ctx.sampling(body), {
    maxOutputTokens: body.max_output_tokens ?? undefined,
    requestId: ctx.idempotencyKeyHeader(req),
    keyParam: 'Idempotency-Key',
    paramNames: OPENAI_PARAMS,
    ...(rawSchema && compiling ? { outputSchema: rawSchema, beforeAdmit: compiling.beforeAdmit } : {}),
  });
  if (g.endedInQueue && g.transcript.outcome) throw ctx.deadlineOrCancel(g.transcript.outcome);
  const schema = await compiling?.loaded();

  const meta: ResponsesMeta = {
    id: `resp_${g.generationId.slice(4)}`,
    messageId: `msg_${g.generationId.slice(4)}`,
    createdAt: g.createdS,
    model: body.model,
    instructions: body.instructions ?? null,
    maxOutputTokens: body.max_output_tokens ?? null,
    temperature: body.temperature ?? null,
    topP: body.top_p ?? null,
    textFormat: format ? { ...format } : { type: 'text' },
  };
  /** The final state of the response for an outcome that is not an error. */
  const finalState = (o: GenerationOutcome, text: string): ResponseState => {
    const weir = { finish_reason: o.finishReason, model_revision: o.modelRevision, ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}) };
    const usage = toResponsesUsage(o.usage);
    if (o.finishReason === 'length' || o.finishReason === 'deadline') return { status: 'incomplete', text, usage, incompleteReason: 'max_output_tokens', weir };
    if (o.finishReason === 'content_filter') return { status: 'incomplete', text, usage, incompleteReason: 'content_filter', weir };
    return { status: 'completed', text, usage, weir };
  };

  if (!body.stream) {
    const { text, outcome } = await collect(g);
    const judged = await judgeOutput(outcome, text, schema);
    if (judged.outcome.finishReason === 'error' || blockedBeforeOutput(judged.outcome)) throw failure(ctx, res, judged.outcome);
    if (outcome.finishReason === 'cancelled') throw new WeirError('invalid_request', 'The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.');
    ctx.answeredBy(res, outcome);
    sendJson(res, 200, responseObject(meta, finalState(outcome, text)));
    return;
  }

  // Headers go out only once the first event is in, so failures before any output stay HTTP errors the SDKs can retry.
  const events = await ctx.firstEventOrThrow(g.transcript.follow(0));
  const sse = openSse(res, { heartbeatMs: ctx.sseHeartbeatMs, stallMs: ctx.sseStallMs });
  const seq = responsesEvents();
  const send = (type: string, fields: Record<string, unknown>) => {
    const ev = seq.event(type, fields);
    return sse.write(formatSseEvent({ event: ev.type, data: JSON.stringify(ev.data) }));
  };
  const at = { item_id: meta.messageId, output_index: 0, content_index: 0 };
  await send('response.created', { response: responseObject(meta, { status: 'in_progress' }) });
  await send('response.in_progress', { response: responseObject(meta, { status: 'in_progress' }) });
  await send('response.output_item.added', { output_index: 0, item: responseMessage(meta, '', 'in_progress') });
  await send('response.content_part.added', { ...at, part: outputText('') });
  let text = '';
  for await (const ev of events) {
    if (ev.type === 'delta') {
      if (ev.text === '') continue;
      text += ev.text;
      await send('response.output_text.delta', { ...at, delta: ev.text, logprobs: [] });
      continue;
    }
    const judged = await judgeOutput(ev.outcome, text, schema);
    const o = judged.outcome;
    if (o.finishReason === 'error' || o.finishReason === 'cancelled') {
      // After the headers, a failure can only be reported in-band: `error`, then `response.failed`.
      const error =
        o.finishReason === 'cancelled'
          ? { code: 'cancelled', message: 'The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.' }
          : { code: o.error?.code ?? 'internal', message: o.error?.message ?? 'the generation failed' };
      await send('error', { code: error.code, message: error.message, param: null });
      const weir = { finish_reason: o.finishReason, model_revision: o.modelRevision, ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}) };
      await send('response.failed', { response: responseObject(meta, { status: 'failed', text, usage: toResponsesUsage(o.usage), error, weir }) });
      break;
    }
    const state = finalState(o, text);
    const status = state.status === 'completed' ? 'completed' : 'incomplete';
    await send('response.output_text.done', { ...at, text, logprobs: [] });
    await send('response.content_part.done', { ...at, part: outputText(text) });
    await send('response.output_item.done', { output_index: 0, item: responseMessage(meta, text, status) });
    await send(state.status === 'completed' ? 'response.completed' : 'response.incomplete', { response: responseObject(meta, state) });
  }
  sse.end();
}

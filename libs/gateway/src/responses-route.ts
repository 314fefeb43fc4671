/**
 * `POST /v1/responses` (issue 6, deliverable 9), in two body shapes told apart by their fields:
 *
 * - **Weir's** (the gateway seed): `{model, use_case, messages, max_tokens, stream?,
 *   output_schema?}` plus `/v1/generations`' optional controls. Answers `{id, output_text |
 *   output, model_used, usage, cost_usd, cached, fallback, fallback_reason?}`; streams Weir's
 *   `start`/`delta`/`end` events, the `end` carrying the same fields.
 * - **OpenAI's Responses API** (a body with `input`; `responses-body.ts`): `{model, input,
 *   instructions?, max_output_tokens?, stream?, temperature?, top_p?, text?: {format}, tools?,
 *   tool_choice?, parallel_tool_calls?}`, so the official SDKs' `client.responses.create` and
 *   `stream` work, function calling included; answers a `response` object whose output items
 *   are messages and `function_call`s, or OpenAI's Responses streaming events
 *   (`responses-output.ts`, `responses-wire.ts`). Any other field is refused by name.
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
import { type ChatTools, refuseIncapableRoutes, type RouteCheck, toolsCheck } from './tools';
import { parseBody, refuseUnknownFields, responsesWeirBody, toChatInput, useCaseOf } from './schemas';
import { RESPONSES_OPENAI_FIELDS, responsesOpenAiBody, responsesToolsOf, toResponsesChatInput } from './responses-body';
import { createResponsesOutput, type ResponsesOutputEvent } from './responses-output';
import type { CostMeter } from './cost-report';
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
  /** Reports cost and overhead (cost-report.ts); absent on a replay. */
  cost?: CostMeter;
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
  /** Function tools, tool choice and parallel calls for the engine (OpenAI's shape of this route). */
  tools?: ChatTools;
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
  /** Names the answering revision, and with `g` sets the cost headers (cost-report.ts). */
  answeredBy(res: ServerResponse, o: GenerationOutcome, g?: { cost?: CostMeter }): void;
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
  conversation: 'Weir does not store conversations: send the whole conversation in `input`',
  background: 'background responses are not supported; use stream: true, or POST /v1/batches',
  prompt: 'stored prompt templates are not supported; send `instructions` and `input`',
  truncation: 'Weir does not truncate input: send what fits the model’s context window',
  max_tool_calls: 'a cap on tool calls is not supported; stop your tool loop after the calls you allow',
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
    ctx.answeredBy(res, outcome, g);
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
  // Without `model`, the use case's model chain (body `use_case`, else `x-weir-use-case`).
  const useCase = useCaseOf(req.header('x-weir-use-case'), body.use_case);
  const model = modelOrUseCase(body.model, useCase, ctx.useCases(req.caller), { model: 'model', useCase: 'use_case' });
  const tools = responsesToolsOf(body);
  const input = toResponsesChatInput(body.input, body.instructions);
  const format = body.text?.format;
  let rawSchema: object | undefined;
  if (format?.type === 'json_schema') {
    if (format.name === undefined) throw new WeirError('invalid_request', 'Invalid request: `text.format.name` is required with `json_schema` (1-64 letters, digits, _ and -).', { param: 'text.format.name' });
    if (format.schema === undefined) throw new WeirError('invalid_request', 'Invalid request: `text.format.schema` is required with `json_schema`.', { param: 'text.format.schema' });
    ctx.precheck(req.caller);
    // The cheap checks now; the compilation after the route's capability checks (beforeAdmit).
    rawSchema = screenOutputSchema(format.schema, 'text.format.schema');
  }
  // One route resolution checks both (tools, schema), before any claim or reservation.
  const checks = [...(tools ? [toolsCheck] : []), ...(rawSchema ? [schemaCheck('text.format', rawSchema)] : [])];
  const compiling = checks.length > 0 ? checkThenCompile(ctx.router, req.caller, model, checks, rawSchema, 'text.format.schema') : undefined;
  const g = await ctx.begin(req, res, 'generations', model, input, ctx.sampling(body), {
    maxOutputTokens: body.max_output_tokens ?? undefined,
    ...(body.use_case !== undefined ? { useCase: body.use_case } : {}),
    requestId: ctx.idempotencyKeyHeader(req),
    keyParam: 'Idempotency-Key',
    paramNames: OPENAI_PARAMS,
    ...(tools ? { tools } : {}),
    ...(rawSchema ? { outputSchema: rawSchema } : {}),
    ...(compiling ? { beforeAdmit: compiling.beforeAdmit } : {}),
  });
  if (g.endedInQueue && g.transcript.outcome) throw ctx.deadlineOrCancel(g.transcript.outcome);
  const schema = await compiling?.loaded();

  const stem = g.generationId.slice(4);
  const meta: ResponsesMeta = {
    id: `resp_${stem}`,
    messageId: `msg_${stem}`,
    createdAt: g.createdS,
    model,
    instructions: body.instructions ?? null,
    maxOutputTokens: body.max_output_tokens ?? null,
    temperature: body.temperature ?? null,
    topP: body.top_p ?? null,
    textFormat: format ? { ...format } : { type: 'text' },
    // Echoed as sent (OpenAI echoes its defaults: strict true, and so on — Weir passes what it was given).
    ...(body.tools && body.tools.length > 0 ? { tools: body.tools.map((t) => ({ ...t, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null })) } : {}),
    ...(body.tool_choice != null ? { toolChoice: body.tool_choice } : {}),
    ...(body.parallel_tool_calls != null ? { parallelToolCalls: body.parallel_tool_calls } : {}),
  };
  const output = createResponsesOutput({ messageId: meta.messageId, stem });
  // With the request's cost and Weir's overhead (cost-report.ts) on a live answer.
  const weirOf = (o: GenerationOutcome) => ({ finish_reason: o.finishReason, model_revision: o.modelRevision, ...(o.fallback ? { fallback_reason: o.fallback.reason } : {}), ...g.cost?.report(o) });
  /** How an outcome that is not an error ends the response. */
  const ending = (o: GenerationOutcome): { status: 'completed' | 'incomplete'; incompleteReason?: 'max_output_tokens' | 'content_filter' } =>
    o.finishReason === 'length' || o.finishReason === 'deadline'
      ? { status: 'incomplete', incompleteReason: 'max_output_tokens' }
      : o.finishReason === 'content_filter'
        ? { status: 'incomplete', incompleteReason: 'content_filter' }
        : { status: 'completed' };
  /** The final state of the response (after `output.finish`). */
  const finalState = (o: GenerationOutcome): ResponseState => {
    const end = ending(o);
    return { status: end.status, output: output.items(), usage: toResponsesUsage(o.usage), ...(end.incompleteReason ? { incompleteReason: end.incompleteReason } : {}), weir: weirOf(o) };
  };

  if (!body.stream) {
    const outcome = await g.transcript.ended();
    const { deltas, deltaToolCalls, deltaReasoning } = g.transcript;
    for (let i = 0; i < deltas.length; i++) output.delta(deltas[i], deltaToolCalls[i] ?? undefined, deltaReasoning[i] ?? undefined);
    const judged = await judgeOutput(outcome, output.text(), schema);
    if (judged.outcome.finishReason === 'error' || blockedBeforeOutput(judged.outcome)) throw failure(ctx, res, judged.outcome);
    if (outcome.finishReason === 'cancelled') throw new WeirError('invalid_request', 'The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.');
    ctx.answeredBy(res, outcome, g);
    output.finish(ending(outcome).status);
    sendJson(res, 200, responseObject(meta, finalState(outcome)));
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
  const sendAll = async (list: readonly ResponsesOutputEvent[]) => {
    for (const ev of list) await send(ev.type, ev.fields);
  };
  await send('response.created', { response: responseObject(meta, { status: 'in_progress' }) });
  await send('response.in_progress', { response: responseObject(meta, { status: 'in_progress' }) });
  for await (const ev of events) {
    if (ev.type === 'delta') {
      await sendAll(output.delta(ev.text, ev.toolCalls, ev.reasoning));
      continue;
    }
    const judged = await judgeOutput(ev.outcome, output.text(), schema);
    const o = judged.outcome;
    if (o.finishReason === 'error' || o.finishReason === 'cancelled') {
      // After the headers, a failure can only be reported in-band: `error`, then `response.failed`.
      const error =
        o.finishReason === 'cancelled'
          ? { code: 'cancelled', message: 'The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.' }
          : { code: o.error?.code ?? 'internal', message: o.error?.message ?? 'the generation failed' };
      await send('error', { code: error.code, message: error.message, param: null });
      await send('response.failed', { response: responseObject(meta, { status: 'failed', output: output.items(), usage: toResponsesUsage(o.usage), error, weir: weirOf(o) }) });
      break;
    }
    await sendAll(output.finish(ending(o).status));
    const state = finalState(o);
    await send(state.status === 'completed' ? 'response.completed' : 'response.incomplete', { response: responseObject(meta, state) });
  }
  sse.end();
}

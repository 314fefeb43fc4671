import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput } from '@weir/core';
import { decodeEmbeddingDeltas, newId, toWeirError, WeirError } from '@weir/core';
import type { EngineLogger } from '@weir/engines';
import {
  chatCompletion,
  chatCompletionChunk,
  formatSseEvent,
  HTTP_ERRORS,
  type OpenAiFinishReason,
  type OpenAiResponseMeta,
  openAiError,
  SSE_DONE,
  textCompletion,
  textCompletionChunk,
  toOpenAiUsage,
} from '@weir/streaming';
import { authorizePeer, type PeerPolicy, peerPolicy } from '@weir/service-tls';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { createGenerationUsageLog, type GenerationUsageLog } from './generation-usage-log';
import { createSlotGate } from './slot-gate';

/** Options of {@link createEngineServer}. */
export interface EngineServerOptions {
  /** The engine replica (the llama.cpp or simulated adapter; `stats` feeds `GET /stats`). */
  engine: EngineAdapter & { stats?: () => object };
  /** The model id served and echoed in responses (the `model` a client sends is not checked). */
  modelName: string;
  logger: EngineLogger;
  /** Requests that may wait for a busy engine (FIFO); more get 503. Default 64. */
  maxQueue?: number;
  /** Largest JSON body (bytes). Default 1 MiB. */
  maxBodyBytes?: number;
  /** When it returns true, `/readyz` answers 503 and new generations get 503 `shutting_down`. */
  isDraining?: () => boolean;
  /** Serves `GET /metrics` (Prometheus text) when given. */
  metricsHandler?: (req: Request, res: Response) => void;
  /**
   * Per-generation counts served at `GET /v1/generations/{id}/usage`. Default: a log keeping
   * finished generations for 1 h, at most 100,000 of them.
   */
  usageLog?: GenerationUsageLog;
  /** `owned_by` of the model on `/v1/models`. Default `weir` (`weir-simulator` for the simulated engine). */
  ownedBy?: string;
  /** Headers set on every response, errors included (e.g. `x-weir-simulated: true`). Default none. */
  responseHeaders?: Record<string, string>;
  /**
   * Who may call what, by the service names in the caller's TLS client certificate (the app
   * must be served over HTTPS with `requestCert`: `listenEngineServer` with `tls`). Checked on
   * every request before its body is read: no verified certificate → 401
   * `authentication_failed`; a service the route is not open to → 403 `permission_denied`.
   * `/healthz` and `/readyz` stay open (probes). Default: no check (plaintext).
   */
  peers?: EnginePeerPolicies;
}

/** Who may call each group of an engine replica's routes (see {@link EngineServerOptions.peers}). */
export interface EnginePeerPolicies {
  /** `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/stop/{id}`. */
  generate: PeerPolicy;
  /** `POST /tokenize`. */
  tokenize: PeerPolicy;
  /** `GET /v1/generations/{id}/usage`. */
  usage: PeerPolicy;
  /** Everything else: `/v1/models`, `/stats`, `/metrics`. */
  read: PeerPolicy;
}

/**
 * The split topology's engine policies: generations and stops from the relay only (an
 * all-in-one's certificate names `relay` too), prompt counting from the gateway and the relay,
 * per-generation usage from reconciliation and the relay, the rest from any service of the CA.
 * `generate` replaces the generation callers (`WEIR_TLS_ALLOWED_PEERS` on an engine).
 */
export function defaultEnginePeerPolicies(generate: PeerPolicy = peerPolicy(['relay'])): EnginePeerPolicies {
  return { generate, tokenize: peerPolicy(['gateway', 'relay']), usage: peerPolicy(['reconcile', 'relay']), read: 'any' };
}

/** Which {@link EnginePeerPolicies} group a request falls in. */
function routeGroup(method: string, path: string): keyof EnginePeerPolicies {
  if (method === 'POST') {
    if (path === '/v1/chat/completions' || path === '/v1/completions' || path === '/v1/embeddings' || path.startsWith('/v1/stop/')) return 'generate';
    if (path === '/tokenize') return 'tokenize';
  }
  if (path.startsWith('/v1/generations/')) return 'usage';
  return 'read';
}

const num = (schema: z.ZodNumber) => schema.nullish().transform((v) => v ?? undefined);
const samplingFields = {
  model: z.string().min(1),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish(), continuous_usage_stats: z.boolean().nullish() }).nullish(),
  temperature: num(z.number().min(0).max(2)),
  top_p: num(z.number().gt(0).max(1)),
  seed: num(z.number().int()),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  max_tokens: num(z.number().int().min(1)),
  n: z.literal(1).nullish(),
};
const contentSchema = z.union([
  z.string(),
  z.array(z.object({ type: z.literal('text'), text: z.string() })),
  z.null(),
]);
const chatBodySchema = z.object({
  ...samplingFields,
  messages: z
    .array(
      z.object({
        role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
        content: contentSchema.optional(),
        name: z.string().optional(),
      }),
    )
    .min(1),
  max_completion_tokens: num(z.number().int().min(1)),
  // OpenAI's structured output: a JSON schema the output must match (json_object needs none, so
  // there is nothing to constrain with: refused).
  response_format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      z.object({ type: z.literal('json_schema'), json_schema: z.object({ name: z.string().optional(), schema: z.record(z.string(), z.unknown()), strict: z.boolean().nullish() }) }),
    ])
    .nullish(),
});
const completionBodySchema = z.object({
  ...samplingFields,
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
});

const tokenizeBodySchema = z.object({
  input: z.union([
    z.string(),
    z.array(z.object({ role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']), content: z.string() })).min(1),
  ]),
});

type Route = 'chat' | 'completions';

/** OpenAI's default `max_tokens` on `/v1/completions` (CONVENTIONS.md §1). */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

/**
 * An engine replica (the llama.cpp engine, or the simulated one) as an OpenAI-compatible HTTP
 * server, as an express app so tests start it in-process.
 *
 * Routes:
 * - `POST /v1/chat/completions`, `POST /v1/completions`: stream and non-stream, OpenAI chunk
 *   format, `stream_options.include_usage` (a usage chunk with `choices: []`), `data: [DONE]`,
 *   no `id:` fields; errors as `{error: {message, type, param, code}}`, in-band
 *   (`data: {"error": …}` then `[DONE]`) once the 200 headers are out. Output limit:
 *   `max_completion_tokens` ?? `max_tokens` ?? (chat: the rest of the context; completions: 16).
 *   Bodies are validated with zod: 400 `invalid_request` whose message and `param` name the field.
 *   A request that finds every sequence busy waits in a FIFO of `maxQueue`; when that is full,
 *   503 `queue_full` with `retry-after`. A client disconnect (the response's `close` before it
 *   finished) aborts the generation, or takes the request out of the queue.
 * - `GET /v1/models`: the one model. `GET /healthz`: 200 while the process runs. `GET /readyz`:
 *   200, or 503 while draining. `GET /stats`: the engine's token counters plus `inUse`/`queued`.
 *   `POST /v1/stop/{id}`: stops the running generation whose `x-request-id` was `id`; its
 *   stream then ends normally (finish chunk, usage, `[DONE]`), so the caller bills exactly.
 *   `GET /v1/generations/{id}/usage`: this replica's own count of generation `id` (the
 *   caller's `x-request-id`), `{generation_id, prompt_tokens, completion_tokens, finished,
 *   finish_reason}` (`prompt_tokens` null until it ends), kept for a bounded time after it
 *   ended (`usageLog`); 404 `not_found` when unknown here. Reconciliation settles a usage
 *   record whose relay died mid-stream from it.
 *   `GET /metrics`: Prometheus (when `metricsHandler` is given). `POST /tokenize`
 *   `{input: text | chat messages}` → `{input_tokens}` counted by this replica's tokenizer.
 *
 * Logs metadata only (generation id, token counts, status), never prompt or output text.
 */
export function createEngineServer(options: EngineServerOptions): Express {
  const { engine, modelName, logger } = options;
  const gate = createSlotGate({ slots: engine.capacity.slots, maxQueue: options.maxQueue ?? 64 });
  const draining = options.isDraining ?? (() => false);
  /** Running generations by id (the caller's `x-request-id`), for `POST /v1/stop/{id}`. */
  const running = new Map<string, AbortController>();
  const usageLog = options.usageLog ?? createGenerationUsageLog();
  const app = express();
  app.disable('x-powered-by');
  const responseHeaders = options.responseHeaders ?? {};
  if (Object.keys(responseHeaders).length > 0) {
    app.use((_req, res, next) => {
      res.set(responseHeaders);
      next();
    });
  }
  const ownedBy = options.ownedBy ?? 'weir';

  // Probes stay open (no data in them); everything below needs a caller the policy names.
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', (_req, res) => {
    if (draining()) res.status(503).json({ status: 'draining' });
    else res.json({ status: 'ready' });
  });
  const peers = options.peers;
  if (peers) {
    // Before the body parser: a refused caller's body is never read.
    app.use((req, res, next) => {
      const group = routeGroup(req.method, req.path);
      const decision = authorizePeer(req.socket, peers[group], group === 'read' ? 'this route' : `${group === 'generate' ? 'generation' : group}`);
      if (decision.ok) return next();
      res.set('connection', 'close');
      sendError(res, new WeirError(decision.reason === 'unauthenticated' ? 'authentication_failed' : 'permission_denied', decision.message));
    });
  }
  app.use(express.json({ limit: options.maxBodyBytes ?? 1024 * 1024 }));
  app.get('/stats', (_req, res) => {
    res.json({ ...(engine.stats?.() ?? {}), inUse: gate.inUse(), queued: gate.queued(), slots: engine.capacity.slots });
  });
  if (options.metricsHandler) {
    const handler = options.metricsHandler;
    app.get('/metrics', (req, res) => handler(req, res));
  }
  // Prompt tokens as this replica's tokenizer counts them (BOS included, chat rendered as the
  // engine renders it), so a gateway can check context limits and reserve exactly.
  app.post('/tokenize', (req, res) => {
    const parsed = tokenizeBodySchema.safeParse(req.body);
    if (!parsed.success) {
      sendError(res, new WeirError('invalid_request', 'send {"input": "<text>"} or {"input": [chat messages]}', { param: 'input' }));
      return;
    }
    const input: GenerationInput =
      typeof parsed.data.input === 'string'
        ? { kind: 'text', text: parsed.data.input }
        : { kind: 'chat', messages: parsed.data.input.map((m) => ({ role: m.role, content: m.content })) };
    engine.countInputTokens(input).then(
      (n) => res.json({ input_tokens: n }),
      (err: unknown) => sendError(res, toWeirError(err)),
    );
  });
  app.get('/v1/models', (_req, res) => {
    res.json({ object: 'list', data: [modelObject(modelName, ownedBy)] });
  });
  app.get('/v1/models/:id', (req, res) => {
    if (req.params.id === modelName) res.json(modelObject(modelName, ownedBy));
    else sendError(res, new WeirError('model_not_found', `model ${JSON.stringify(req.params.id)} is not served here`, { param: 'model' }));
  });
  // Weir's extension: stop a running generation and let its stream end normally, with the
  // finish chunk and final usage, so the caller bills exactly what was produced.
  app.post('/v1/stop/:id', (req, res) => {
    const controller = running.get(String(req.params.id));
    if (!controller) {
      sendError(res, new WeirError('not_found', 'no running generation with that id on this replica'));
      return;
    }
    controller.abort(new Error('stop requested'));
    res.json({ generation_id: req.params.id, status: 'stopping' });
  });
  // Weir's extension: the engine's own count of one generation, for reconciliation.
  app.get('/v1/generations/:id/usage', (req, res) => {
    const usage = usageLog.get(String(req.params.id));
    if (!usage) {
      sendError(res, new WeirError('not_found', 'no generation with that id on this replica (unknown, or past its retention)'));
      return;
    }
    res.json({
      generation_id: usage.generationId,
      prompt_tokens: usage.promptTokens,
      completion_tokens: usage.completionTokens,
      finished: usage.finished,
      finish_reason: usage.finishReason,
    });
  });
  app.post('/v1/chat/completions', (req, res) => handleGeneration('chat', req, res));
  app.post('/v1/completions', (req, res) => handleGeneration('completions', req, res));
  app.post('/v1/embeddings', (req, res) => {
    handleEmbeddings(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendError(res, toWeirError(error));
    });
  });
  app.use((_req: Request, res: Response) => {
    sendError(res, new WeirError('not_found', 'no such route'));
  });
  app.use((error: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = error as { type?: string; status?: number };
    if (e.type === 'entity.parse.failed') sendError(res, new WeirError('invalid_json', 'the request body is not valid JSON'));
    else if (e.type === 'entity.too.large') sendError(res, new WeirError('payload_too_large', 'the request body is too large'));
    else {
      logger.error({ err: error }, 'unhandled error');
      sendError(res, toWeirError(error));
    }
  });

  /**
   * `POST /v1/embeddings` (what the relay's OpenAI-compatible adapter calls for an embedding
   * revision's replica): `{input: string | string[] | number[] | number[][], dimensions?}`,
   * answered `{object: 'list', data: [{object, index, embedding}], model, usage}` with float
   * vectors. Faults as the generation routes map them.
   */
  async function handleEmbeddings(req: Request, res: Response): Promise<void> {
    if (draining()) {
      sendError(res, new WeirError('shutting_down', 'the engine is shutting down', { retryable: true }));
      return;
    }
    const body = req.body as { input?: unknown; dimensions?: unknown } | undefined;
    const raw = body?.input;
    const isTokens = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t) && (t as number) >= 0);
    const items: Array<string | number[]> | undefined =
      typeof raw === 'string'
        ? [raw]
        : isTokens(raw)
          ? [raw]
          : Array.isArray(raw) && raw.length > 0 && raw.every((i) => (typeof i === 'string' && i.length > 0) || isTokens(i))
            ? (raw as Array<string | number[]>)
            : undefined;
    if (!items || (typeof raw === 'string' && raw.length === 0)) {
      sendError(res, new WeirError('invalid_request', '`input` must be a non-empty string, an array of non-empty strings, a token array or an array of token arrays', { param: 'input' }));
      return;
    }
    const dimensions = typeof body?.dimensions === 'number' ? body.dimensions : undefined;
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const header = req.headers['x-request-id'];
    const generationId = typeof header === 'string' && header.length > 0 ? header.slice(0, 128) : `emb-${Date.now()}`;
    let text = '';
    let inputTokens = 0;
    for await (const ev of engine.generate({ input: { kind: 'embedding', items, ...(dimensions !== undefined ? { dimensions } : {}) }, maxOutputTokens: 0, sampling: {}, signal: abort.signal, generationId })) {
      if (ev.type === 'delta') text += ev.text;
      else inputTokens = ev.usage.inputTokens;
    }
    if (abort.signal.aborted) return;
    const vectors = decodeEmbeddingDeltas(text);
    res.json({
      object: 'list',
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: Array.from(v) })),
      model: modelName,
      usage: { prompt_tokens: inputTokens, total_tokens: inputTokens },
    });
  }

  async function handleGeneration(route: Route, req: Request, res: Response): Promise<void> {
    let parsed: ParsedRequest;
    try {
      parsed = parseBody(route, req.body);
    } catch (error) {
      sendError(res, toWeirError(error));
      return;
    }
    if (draining()) {
      sendError(res, new WeirError('shutting_down', 'the engine is shutting down', { retryable: true }));
      return;
    }
    if (parsed.outputSchema && engine.kind !== 'llamacpp') {
      sendError(res, new WeirError('invalid_request', `this replica (${engine.kind}) cannot constrain output to a JSON schema; send no response_format of type json_schema`, { param: 'response_format' }));
      return;
    }
    const header = req.headers['x-request-id'];
    const generationId = typeof header === 'string' && /^[\w.:-]{1,128}$/.test(header) ? header : newId('gen');
    const controller = new AbortController();
    // The response's `close` (not the request's) tells that the client went away.
    res.on('close', () => {
      if (!res.writableFinished) controller.abort(new Error('client disconnected'));
    });
    running.set(generationId, controller);
    res.on('close', () => {
      if (running.get(generationId) === controller) running.delete(generationId);
    });

    let release: () => void;
    try {
      release = await gate.acquire(controller.signal);
    } catch (error) {
      if (!controller.signal.aborted) sendError(res, toWeirError(error));
      return;
    }
    const started = performance.now();
    const request: EngineRequest = {
      input: parsed.input,
      maxOutputTokens: parsed.maxOutputTokens ?? (route === 'chat' ? engine.capacity.contextTokens : COMPLETIONS_DEFAULT_MAX_TOKENS),
      sampling: parsed.sampling,
      signal: controller.signal,
      generationId,
      ...(parsed.outputSchema ? { outputSchema: parsed.outputSchema } : {}),
    };
    const meta: OpenAiResponseMeta = {
      id: `${route === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`,
      created: Math.floor(Date.now() / 1000),
      model: modelName,
    };
    let end: Extract<EngineEvent, { type: 'end' }> | undefined;
    usageLog.start(generationId);
    try {
      const iterator = countedEvents(engine.generate(request), generationId, usageLog)[Symbol.asyncIterator]();
      if (parsed.stream) {
        const running = parsed.continuousUsage ? { inputTokens: await engine.countInputTokens(parsed.input) } : undefined;
        end = await streamResponse(route, res, iterator, meta, parsed.includeUsage, running);
      }
      else end = await jsonResponse(route, res, iterator, meta);
    } catch (error) {
      const weirError = toWeirError(error);
      if (weirError.code === 'internal') logger.error({ generationId, err: error }, 'generation failed');
      if (!res.headersSent) sendError(res, weirError);
      else if (!res.writableEnded) {
        const { type } = HTTP_ERRORS[weirError.code];
        res.write(formatSseEvent({ data: JSON.stringify(openAiError(weirError.message, type, weirError.code, weirError.param ?? null)) }));
        res.end(SSE_DONE);
      }
    } finally {
      release();
      usageLog.finish(generationId, end?.reason ?? 'error', end?.usage);
      logger.info(
        {
          generationId,
          route,
          stream: parsed.stream,
          reason: end?.reason ?? 'error',
          inputTokens: end?.usage.inputTokens,
          outputTokens: end?.usage.outputTokens,
          ms: Math.round(performance.now() - started),
        },
        'generation finished',
      );
    }
  }

  return app;
}

interface ParsedRequest {
  input: GenerationInput;
  maxOutputTokens?: number;
  sampling: EngineRequest['sampling'];
  stream: boolean;
  includeUsage: boolean;
  /** vLLM's `stream_options.continuous_usage_stats`: cumulative usage on every chunk. */
  continuousUsage: boolean;
  /** `response_format.json_schema.schema`, when given. */
  outputSchema?: object;
}

function parseBody(route: Route, body: unknown): ParsedRequest {
  const schema = route === 'chat' ? chatBodySchema : completionBodySchema;
  const result = schema.safeParse(body ?? {});
  if (!result.success) {
    const issue = result.error.issues[0];
    const param = issue.path.map(String).join('.') || undefined;
    throw new WeirError('invalid_request', param ? `${param}: ${issue.message}` : issue.message, { param });
  }
  const data = result.data;
  const stop = data.stop == null ? undefined : typeof data.stop === 'string' ? [data.stop] : data.stop;
  const common = {
    sampling: { temperature: data.temperature, topP: data.top_p, seed: data.seed, stop },
    stream: data.stream === true,
    includeUsage: data.stream === true && data.stream_options?.include_usage === true,
    continuousUsage: data.stream === true && data.stream_options?.continuous_usage_stats === true,
  };
  if ('messages' in data) {
    const format = data.response_format;
    return {
      ...common,
      ...(format?.type === 'json_schema' ? { outputSchema: format.json_schema.schema } : {}),
      input: {
        kind: 'chat',
        messages: data.messages.map((m) => ({
          role: m.role,
          content: typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text).join(''),
          ...(m.name ? { name: m.name } : {}),
        })),
      },
      maxOutputTokens: data.max_completion_tokens ?? data.max_tokens,
    };
  }
  const prompt = (data as z.infer<typeof completionBodySchema>).prompt;
  return {
    ...common,
    input: { kind: 'text', text: typeof prompt === 'string' ? prompt : prompt[0] },
    maxOutputTokens: data.max_tokens,
  };
}

/** Passes the engine's events through, counting output tokens into the usage log as they pass. */
async function* countedEvents(events: AsyncIterable<EngineEvent>, generationId: string, log: GenerationUsageLog): AsyncGenerator<EngineEvent, void, undefined> {
  for await (const event of events) {
    if (event.type === 'delta') log.addOutput(generationId, event.tokens);
    yield event;
  }
}

function toFinishReason(reason: Extract<EngineEvent, { type: 'end' }>['reason']): OpenAiFinishReason {
  // `aborted` only happens when the client left; nobody reads it.
  if (reason === 'length' || reason === 'content_filter' || reason === 'tool_calls') return reason;
  return 'stop';
}

async function write(res: Response, text: string): Promise<void> {
  if (res.writableEnded || res.destroyed) return;
  if (!res.write(text)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
}

async function streamResponse(
  route: Route,
  res: Response,
  iterator: AsyncIterator<EngineEvent>,
  meta: OpenAiResponseMeta,
  includeUsage: boolean,
  continuous?: { inputTokens: number },
): Promise<Extract<EngineEvent, { type: 'end' }> | undefined> {
  // With continuous usage (vLLM's `continuous_usage_stats`), every chunk carries the
  // cumulative counts, so a client that stops reading mid-stream still knows what was produced.
  let produced = 0;
  const runningUsage = () => (continuous ? { usage: toOpenAiUsage({ inputTokens: continuous.inputTokens, outputTokens: produced }) } : {});
  // Pull the first event before the 200 headers, so early errors (context too long) get a status.
  let next = await iterator.next();
  res.status(200).set({ 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  res.flushHeaders();
  const data = (chunk: Record<string, unknown>): string => formatSseEvent({ data: JSON.stringify(chunk) });
  if (route === 'chat') await write(res, data(chatCompletionChunk(meta, { delta: { role: 'assistant', content: '' }, finishReason: null })));
  for (; !next.done; next = await iterator.next()) {
    const event = next.value;
    if (event.type === 'delta') {
      produced += event.tokens;
      if (event.text.length === 0) continue;
      await write(
        res,
        data(
          route === 'chat'
            ? chatCompletionChunk(meta, { delta: { content: event.text }, finishReason: null }, runningUsage())
            : textCompletionChunk(meta, { text: event.text, finishReason: null }, runningUsage()),
        ),
      );
      continue;
    }
    const finishReason = toFinishReason(event.reason);
    const finish = route === 'chat' ? chatCompletionChunk(meta, { delta: {}, finishReason }) : textCompletionChunk(meta, { text: '', finishReason });
    // The stop sequence that matched, as vLLM names it (`stop_reason` on the choice): Weir's OpenAI-compatible adapter reads it back.
    if (event.stopSequence !== undefined) (finish.choices as Record<string, unknown>[])[0].stop_reason = event.stopSequence;
    await write(res, data(finish));
    if (includeUsage) {
      const usage = toOpenAiUsage(event.usage);
      await write(res, data(route === 'chat' ? chatCompletionChunk(meta, null, { usage }) : textCompletionChunk(meta, null, { usage })));
    }
    if (!res.writableEnded) res.end(SSE_DONE);
    return event;
  }
  throw new WeirError('internal', 'engine stream ended without an end event');
}

async function jsonResponse(
  route: Route,
  res: Response,
  iterator: AsyncIterator<EngineEvent>,
  meta: OpenAiResponseMeta,
): Promise<Extract<EngineEvent, { type: 'end' }> | undefined> {
  let text = '';
  for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
    const event = next.value;
    if (event.type === 'delta') {
      text += event.text;
      continue;
    }
    if (event.reason !== 'aborted') {
      const usage = toOpenAiUsage(event.usage);
      const finishReason = toFinishReason(event.reason);
      res.json(route === 'chat' ? chatCompletion(meta, text, finishReason, usage) : textCompletion(meta, text, finishReason, usage));
    }
    return event;
  }
  throw new WeirError('internal', 'engine stream ended without an end event');
}

function modelObject(id: string, ownedBy: string): Record<string, unknown> {
  return { id, object: 'model', created: 0, owned_by: ownedBy };
}

function sendError(res: Response, error: WeirError): void {
  if (res.headersSent) return;
  const { status, type } = HTTP_ERRORS[error.code];
  if (error.retryAfterMs !== undefined) {
    res.set('retry-after', String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))));
    res.set('retry-after-ms', String(error.retryAfterMs));
  }
  res.status(status).json(openAiError(error.message, type, error.code, error.param ?? null));
}

/**
 * The gateway's HTTP edge (express): authentication, validation, the public contracts of
 * ARCHITECTURE.md §3/§8, SSE writing and client-disconnect detection. Everything behind
 * the edge goes through the {@link GenerationPipeline}.
 */
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import type { ServerResponse } from 'node:http';
import {
  type ApiKeyStore,
  type ApiRoute,
  type CancelMessage,
  type Caller,
  type Clock,
  type GenerationInput,
  type GenerationOutcome,
  type PlatformDefaults,
  type RelayEvent,
  type RouterService,
  type SamplingParams,
  type Topic,
  type UsageRecord,
  WeirError,
  hashApiKey,
  newId,
  parseApiKey,
  toWeirError,
} from '@weir/core';
import {
  SSE_DONE,
  chatCompletion,
  chatCompletionChunk,
  formatSseEvent,
  openAiError,
  type OpenAiResponseMeta,
  HTTP_ERRORS,
  type RelayHandle,
  type WeirEndData,
  textCompletion,
  textCompletionChunk,
  toOpenAiFinishReason,
  toOpenAiUsage,
} from '@weir/streaming';

import { createGenerationRegistry, type GenerationRegistry, statusOf } from './generation-registry';
import type { AdmittedGeneration, GenerationPipeline, ParamNames } from './pipeline';
import { chatCompletionsBody, completionsBody, generationsBody, parseBody, toChatInput, toStopList } from './schemas';
import { openSse } from './sse-writer';

/** A minimal structured logger (pino satisfies it). Never pass prompt or output text. */
export interface GatewayLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** Dependencies of {@link createGatewayApp}. */
export interface GatewayDeps {
  pipeline: GenerationPipeline;
  router: RouterService;
  /** Key lookup by SHA-256 (put a cache in front: this runs on every request). */
  apiKeys: ApiKeyStore;
  defaults: PlatformDefaults;
  clock: Clock;
  logger: GatewayLogger;
  /** Serves `GET /metrics` (Prometheus text) when given. */
  metricsHandler?: (req: Request, res: Response) => void;
  /** Readiness beyond draining (e.g. the usage queue is saturated). */
  readiness?: () => { ready: boolean; reason?: string };
  /**
   * Split topology: a cancel for a generation this gateway does not hold is fanned out here,
   * so the relay holding the stream stops it (ARCHITECTURE.md §7, cancellation fan-out).
   */
  cancelTopic?: Topic<CancelMessage>;
  /** Split topology: a finished generation's record (from the ledger), for GET and cancel on any gateway. */
  findFinished?: (tenantId: string, generationId: string) => Promise<UsageRecord | undefined>;
}

/** The gateway: the express app plus lifecycle controls. */
export interface Gateway {
  app: express.Express;
  registry: GenerationRegistry;
  /** Stops admitting (503 `shutting_down`, not ready) and waits up to `graceMs` for in-flight generations; then stops the rest (billed as cancelled). */
  drain(graceMs: number): Promise<void>;
}

type Authed = Request & { caller: Caller; requestId: string };

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Creates the gateway app. */
export function createGatewayApp(deps: GatewayDeps): Gateway {
  const { pipeline, clock, logger, defaults } = deps;
  const registry = createGenerationRegistry();
  let draining = false;
  /** `created` of `/v1/models` entries: when this gateway loaded its configuration (Unix s). */
  const modelsCreated = Math.floor(Date.now() / 1000);
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);

  // Every response carries x-request-id (the client's if well-formed, else ours).
  app.use((req, res, next) => {
    const given = req.header('x-request-id');
    const id = given && REQUEST_ID.test(given) ? given : newId('req');
    (req as Authed).requestId = id;
    res.setHeader('x-request-id', id);
    next();
  });

  // One access line per request: metadata only (never bodies, keys or text).
  app.use((req, res, next) => {
    const started = performance.now();
    res.on('close', () => {
      const caller = (req as Partial<Authed>).caller;
      logger.info(
        {
          requestId: (req as Authed).requestId,
          method: req.method,
          path: req.route?.path ?? req.path,
          status: res.statusCode,
          ms: Math.round(performance.now() - started),
          ...(caller ? { tenant: caller.tenantId, app: caller.appId } : {}),
          ...(res.writableFinished ? {} : { clientGone: true }),
        },
        'request',
      );
    });
    next();
  });

  app.get('/healthz', (_req, res) => void res.json({ status: 'ok' }));
  app.get('/readyz', (_req, res) => {
    const extra = deps.readiness?.() ?? { ready: true };
    const ready = !draining && extra.ready;
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not_ready', reason: draining ? 'draining' : extra.reason });
  });
  if (deps.metricsHandler) {
    const handler = deps.metricsHandler;
    app.get('/metrics', (req, res) => handler(req, res));
  }

  const authenticate: RequestHandler = (req, _res, next) => {
    const header = req.header('authorization');
    const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!match) {
      const message = header
        ? 'Use Bearer authentication: `Authorization: Bearer wk_…` (the header has another scheme or no key).'
        : 'Missing API key. Send it as `Authorization: Bearer wk_…`.';
      next(new WeirError('authentication_failed', message));
      return;
    }
    const key = match[1];
    deps.apiKeys.findByHash(hashApiKey(key)).then(
      (identity) => {
        if (!identity) {
          const prefix = parseApiKey(key)?.prefix;
          next(new WeirError('authentication_failed', prefix ? `Incorrect API key provided: wk_${prefix}_… is unknown or revoked.` : 'Incorrect API key provided.'));
          return;
        }
        (req as Authed).caller = { tenantId: identity.tenantId, appId: identity.appId, apiKeyId: identity.keyId };
        next();
      },
      (err: unknown) => next(err),
    );
  };

  const refuseWhileDraining: RequestHandler = (_req, _res, next) => {
    if (draining) next(new WeirError('shutting_down', 'This gateway is shutting down; retry on another replica.', { retryable: true, retryAfterMs: 1_000 }));
    else {
      const r = deps.readiness?.();
      if (r && !r.ready) next(new WeirError('engine_unavailable', `Weir is not ready: ${r.reason ?? 'unknown'}; retry shortly.`, { retryable: true, retryAfterMs: 1_000 }));
      else next();
    }
  };

  // strict: false parses any JSON value, so `null` or `"hi"` get "must be a JSON object", not "invalid JSON".
  const json = express.json({ limit: defaults.maxBodyBytes, type: ['application/json', 'application/*+json'], strict: false });
  const requireJson: RequestHandler = (req, _res, next) => {
    if (req.body === undefined && req.header('content-length') !== '0') {
      next(new WeirError('unsupported_media_type', 'Send the body as JSON with `Content-Type: application/json`.'));
    } else next();
  };
  const post = (path: string, handler: (req: Authed, res: Response) => Promise<void>) =>
    app.post(path, authenticate, refuseWhileDraining, json, requireJson, (req, res, next) => {
      handler(req as Authed, res).catch(next);
    });

  /** Watches the response: fires `onGone` if the client disconnects before we finish. */
  const watchClient = (res: ServerResponse, onGone: () => void) => {
    res.on('close', () => {
      if (!res.writableFinished) onGone();
    });
  };

  /** Admits and starts a generation; tracks it for GET/cancel; wires disconnects. */
  const begin = async (
    req: Authed,
    res: Response,
    route: ApiRoute,
    alias: string,
    input: GenerationInput,
    sampling: SamplingParams,
    limits: { maxOutputTokens?: number; routeDefaultOutputTokens?: number; deadlineMs?: number; requestId?: string; paramNames: ParamNames },
  ) => {
    const arrivedAt = clock.now();
    const generationId = newId('gen');
    const requestId = limits.requestId ?? generationId;
    const admitted: AdmittedGeneration = await pipeline.admit({
      caller: req.caller,
      route,
      alias,
      generationId,
      requestId,
      input,
      maxOutputTokens: limits.maxOutputTokens,
      routeDefaultOutputTokens: limits.routeDefaultOutputTokens,
      sampling,
      deadlineMs: limits.deadlineMs ?? deadlineHeader(req),
      arrivedAt,
      paramNames: limits.paramNames,
    });
    const gone = new AbortController();
    // Set once the relay starts; until then a stop aborts the wait in the queue.
    const live: { handle?: RelayHandle } = {};
    const tracked = {
      generationId,
      requestId,
      tenantId: req.caller.tenantId,
      modelRevision: admitted.revision.id,
      state: 'queued' as const,
      stop(cause: 'client_disconnected' | 'cancel_requested') {
        if (live.handle) live.handle.stop(cause);
        else gone.abort();
      },
    };
    registry.add(tracked);
    watchClient(res, () => tracked.stop('client_disconnected'));
    res.setHeader('x-weir-generation-id', generationId);
    res.setHeader('x-weir-model-revision', admitted.revision.id);
    const started = await admitted.start(gone.signal).catch((err: unknown) => {
      registry.finish(generationId, failedOutcome(admitted.revision.id, err));
      throw err;
    });
    if (started.kind === 'ended') {
      registry.finish(generationId, started.outcome);
      return { generationId, requestId, admitted, handle: undefined, ended: started.outcome };
    }
    const handle = (live.handle = started.handle);
    const entry = registry.get(req.caller.tenantId, generationId);
    if (entry) entry.state = 'running';
    void handle.done.then((outcome) => registry.finish(generationId, outcome));
    return { generationId, requestId, admitted, handle, ended: undefined };
  };

  // ---- Weir's own route -------------------------------------------------------------
  post('/v1/generations', async (req, res) => {
    const body = parseBody(generationsBody, req.body);
    const input: GenerationInput = typeof body.input === 'string' ? { kind: 'text', text: body.input } : toChatInput(body.input);
    const g = await begin(req, res, 'generations', body.model_alias, input, sampling(body), {
      maxOutputTokens: body.max_output_tokens,
      deadlineMs: body.deadline_ms,
      requestId: body.request_id,
      paramNames: { model: 'model_alias', input: 'input', maxOutputTokens: 'max_output_tokens' },
    });
    const endData = (o: GenerationOutcome): WeirEndData => ({
      finish_reason: o.finishReason,
      usage: { input_tokens: o.usage.inputTokens, output_tokens: o.usage.outputTokens, cost_usd: o.costNanoUsd / 1e9 },
      model_used: o.modelRevision,
      ...(o.error ? { error: { type: HTTP_ERRORS[asCode(o.error.code)].type, code: o.error.code, message: o.error.message } } : {}),
    });

    if (body.stream) {
      // A failure before any output (a relay or engine that is down) is an HTTP error, not a 200 stream.
      const events = g.handle ? await firstEventOrThrow(g.handle) : undefined;
      const sse = openSse(res, { heartbeatMs: defaults.sseHeartbeatMs });
      let id = 0;
      const send = (event: string, data: unknown) => sse.write(formatSseEvent({ id: ++id, event, data: JSON.stringify(data) }));
      await send('start', { generation_id: g.generationId, request_id: g.requestId, model_revision: g.admitted.revision.id });
      if (g.ended) await send('end', endData(g.ended));
      else if (events) {
        for await (const ev of events) {
          if (ev.type === 'delta') await send('delta', { text: ev.text });
          else await send('end', endData(ev.outcome));
        }
      }
      sse.end();
      return;
    }
    let text = '';
    let outcome = g.ended;
    if (g.handle) {
      for await (const ev of g.handle.events) {
        if (ev.type === 'delta') text += ev.text;
        else outcome = ev.outcome;
      }
    }
    if (!outcome) throw new WeirError('internal', 'the generation ended without an outcome');
    if (outcome.finishReason === 'error' && outcome.usage.outputTokens === 0) throw outcomeError(outcome);
    if (outcome.finishReason === 'deadline' && outcome.timings.ttftMs === null && !g.handle) throw deadlineInQueue();
    res.json({
      generation_id: g.generationId,
      request_id: g.requestId,
      model_revision: g.admitted.revision.id,
      text,
      ...endData(outcome),
    });
  });

  /** A generation another gateway served, as the ledger recorded it. */
  const finishedElsewhere = async (tenantId: string, id: string) => {
    const record = await deps.findFinished?.(tenantId, id);
    return record && record.tenantId === tenantId ? describeRecord(record) : undefined;
  };

  app.get('/v1/generations/:id', authenticate, async (req, res) => {
    const { tenantId } = (req as Authed).caller;
    const id = String(req.params.id);
    const entry = registry.get(tenantId, id);
    if (entry) {
      res.json(describe(entry));
      return;
    }
    const finished = await finishedElsewhere(tenantId, id);
    if (!finished) throw notFoundGeneration(id);
    res.json(finished);
  });

  app.post('/v1/generations/:id/cancel', authenticate, async (req, res) => {
    const { tenantId } = (req as Authed).caller;
    const id = String(req.params.id);
    const entry = registry.get(tenantId, id);
    if (entry) {
      entry.stop('cancel_requested');
      res.json(describe(entry));
      return;
    }
    const finished = await finishedElsewhere(tenantId, id);
    if (finished) {
      res.json(finished);
      return;
    }
    if (!deps.cancelTopic) throw notFoundGeneration(id);
    // Not here and not finished: it may be running behind another gateway. The relay holding
    // it checks the tenant before acting, so a guessed id cannot cancel another tenant's work.
    deps.cancelTopic.publish({ generationId: id, tenantId, cause: 'cancel_requested' });
    res.status(202).json({ generation_id: id, status: 'cancel_requested' });
  });

  // ---- OpenAI-compatible routes ----------------------------------------------------------
  post('/v1/chat/completions', async (req, res) => {
    const body = parseBody(chatCompletionsBody, req.body);
    const g = await begin(req, res, 'chat.completions', body.model, toChatInput(body.messages), sampling(body), {
      maxOutputTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
      paramNames: { model: 'model', input: 'messages', maxOutputTokens: body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens' },
    });
    await answerOpenAi(res, g, body.model, 'chat', body.stream === true, body.stream_options?.include_usage === true);
  });

  post('/v1/completions', async (req, res) => {
    const body = parseBody(completionsBody, req.body);
    const prompt = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
    const g = await begin(req, res, 'completions', body.model, { kind: 'text', text: prompt }, sampling(body), {
      maxOutputTokens: body.max_tokens ?? undefined,
      routeDefaultOutputTokens: 16, // OpenAI's default for /v1/completions (CONVENTIONS.md §1)
      paramNames: { model: 'model', input: 'prompt', maxOutputTokens: 'max_tokens' },
    });
    await answerOpenAi(res, g, body.model, 'text', body.stream === true, body.stream_options?.include_usage === true);
  });

  app.get('/v1/models', authenticate, async (req, res) => {
    res.json({
      object: 'list',
      data: (await deps.router.listAliases((req as Authed).caller)).map((a) => ({ id: a.name, object: 'model', created: modelsCreated, owned_by: 'weir' })),
    });
  });
  app.get('/v1/models/:id', authenticate, async (req, res) => {
    const alias = (await deps.router.listAliases((req as Authed).caller)).find((a) => a.name === req.params.id);
    if (!alias) throw new WeirError('model_not_found', `The model '${String(req.params.id)}' does not exist or you do not have access to it.`, { param: 'model' });
    res.json({ id: alias.name, object: 'model', created: modelsCreated, owned_by: 'weir' });
  });

  // A known path with the wrong method is a 405 with `Allow`, not a 404.
  const methods = new Map<string, string>([
    ['/v1/generations', 'POST'],
    ['/v1/chat/completions', 'POST'],
    ['/v1/completions', 'POST'],
    ['/v1/models', 'GET'],
  ]);
  app.use((req, res, next) => {
    const allowed = methods.get(req.path);
    if (allowed) {
      res.setHeader('allow', allowed);
      next(new WeirError('method_not_allowed', `${req.method} is not allowed on ${req.path}; use ${allowed}.`));
      return;
    }
    next(new WeirError('not_found', `Unknown route ${req.method} ${req.path}.`));
  });

  // One error handler: body-parser faults become 4xx, everything else goes through the table.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const error = fromExpressError(err);
    if (error.code === 'internal') logger.error({ err: error.cause ?? err, requestId: (req as Authed).requestId, path: req.path }, 'request failed');
    if (res.headersSent) {
      if (!res.writableEnded) res.end();
      return;
    }
    sendError(res, error);
  });

  async function answerOpenAi(
    res: Response,
    g: Awaited<ReturnType<typeof begin>>,
    model: string,
    kind: 'chat' | 'text',
    stream: boolean,
    includeUsage: boolean,
  ) {
    if (g.ended) throw deadlineOrCancel(g.ended);
    const handle = g.handle as RelayHandle;
    const meta: OpenAiResponseMeta = { id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${g.generationId.slice(4)}`, created: Math.floor(Date.now() / 1000), model };
    const weir = (o: GenerationOutcome) => ({ finish_reason: o.finishReason, model_revision: o.modelRevision });
    if (!stream) {
      let text = '';
      let outcome: GenerationOutcome | undefined;
      for await (const ev of handle.events) {
        if (ev.type === 'delta') text += ev.text;
        else outcome = ev.outcome;
      }
      if (!outcome) throw new WeirError('internal', 'the generation ended without an outcome');
      if (outcome.finishReason === 'error') throw outcomeError(outcome);
      const build = kind === 'chat' ? chatCompletion : textCompletion;
      res.json(build(meta, text, toOpenAiFinishReason(outcome.finishReason), toOpenAiUsage(outcome.usage), weir(outcome)));
      return;
    }
    // Headers go out only once a slot is held and the first event is in, so queue rejections
    // and failures before any output are still HTTP errors the SDKs can retry.
    const events = await firstEventOrThrow(handle);
    const sse = openSse(res, { heartbeatMs: defaults.sseHeartbeatMs });
    const send = (chunk: unknown) => sse.write(formatSseEvent({ data: JSON.stringify(chunk) }));
    if (kind === 'chat') await send(chatCompletionChunk(meta, { delta: { role: 'assistant', content: '' }, finishReason: null }));
    for await (const ev of events) {
      if (ev.type === 'delta') {
        await send(
          kind === 'chat'
            ? chatCompletionChunk(meta, { delta: { content: ev.text }, finishReason: null })
            : textCompletionChunk(meta, { text: ev.text, finishReason: null }),
        );
        continue;
      }
      const o = ev.outcome;
      if (o.finishReason === 'error') {
        // After the headers, an error can only be reported in-band (CONVENTIONS.md §1).
        const code = asCode(o.error?.code ?? 'internal');
        await send(openAiError(o.error?.message ?? 'the generation failed', HTTP_ERRORS[code].type, code));
        break;
      }
      if (o.finishReason === 'cancelled') {
        // Cancelled through the API while this client still reads: OpenAI has no finish reason
        // for it, and `stop` would pass a cut answer off as whole, so it ends in-band as an error.
        await send(openAiError('The generation was cancelled (POST /v1/generations/{id}/cancel); the answer is incomplete.', 'invalid_request_error', 'cancelled'));
        break;
      }
      const finish = toOpenAiFinishReason(o.finishReason);
      await send(
        kind === 'chat'
          ? chatCompletionChunk(meta, { delta: {}, finishReason: finish }, { weir: weir(o) })
          : textCompletionChunk(meta, { text: '', finishReason: finish }, { weir: weir(o) }),
      );
      if (includeUsage) {
        const usage = toOpenAiUsage(o.usage);
        await send(kind === 'chat' ? chatCompletionChunk(meta, null, { usage }) : textCompletionChunk(meta, null, { usage }));
      }
      await sse.write(SSE_DONE);
    }
    sse.end();
  }

  return {
    app,
    registry,
    async drain(graceMs) {
      draining = true;
      const until = Date.now() + graceMs;
      while (registry.active().length > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      for (const g of registry.active()) g.stop('cancel_requested');
      const hardStop = Date.now() + 5_000;
      while (registry.active().length > 0 && Date.now() < hardStop) await new Promise((r) => setTimeout(r, 20));
      registry.close();
    },
  };
}

function sampling(body: { temperature?: number | null; top_p?: number | null; seed?: number | null; stop?: string | string[] | null }): SamplingParams {
  return {
    ...(body.temperature != null ? { temperature: body.temperature } : {}),
    ...(body.top_p != null ? { topP: body.top_p } : {}),
    ...(body.seed != null ? { seed: body.seed } : {}),
    ...(body.stop != null ? { stop: toStopList(body.stop) } : {}),
  };
}

function deadlineHeader(req: Request): number | undefined {
  const v = req.header('x-weir-deadline-ms');
  if (v === undefined) return undefined;
  const n = /^\d{1,7}$/.test(v.trim()) ? Number(v.trim()) : NaN;
  if (!Number.isInteger(n) || n <= 0 || n > 3_600_000) {
    throw new WeirError('invalid_request', '`x-weir-deadline-ms` must be a whole number of milliseconds between 1 and 3600000.', { param: 'x-weir-deadline-ms' });
  }
  return n;
}

function describe(entry: { generationId: string; requestId: string; modelRevision: string; state: string; outcome?: GenerationOutcome }) {
  const o = entry.outcome;
  return {
    generation_id: entry.generationId,
    request_id: entry.requestId,
    model_revision: entry.modelRevision,
    status: o ? statusOf(o.finishReason) : entry.state,
    ...(o
      ? {
          finish_reason: o.finishReason,
          usage: { input_tokens: o.usage.inputTokens, output_tokens: o.usage.outputTokens, cost_usd: o.costNanoUsd / 1e9 },
        }
      : {}),
  };
}

function describeRecord(r: UsageRecord) {
  return {
    generation_id: r.generationId,
    request_id: r.requestId,
    model_revision: r.modelRevision,
    status: statusOf(r.finishReason),
    finish_reason: r.finishReason,
    usage: { input_tokens: r.inputTokens, output_tokens: r.outputTokens, cost_usd: r.costNanoUsd / 1e9 },
  };
}

/**
 * Waits for a generation's first event. A failure before any output throws its Weir error
 * (so the route answers with an HTTP status); otherwise returns every event, first included.
 */
async function firstEventOrThrow(handle: RelayHandle): Promise<AsyncIterable<RelayEvent>> {
  const it = handle.events[Symbol.asyncIterator]();
  const first = await it.next();
  if (!first.done && first.value.type === 'end' && first.value.outcome.finishReason === 'error' && first.value.outcome.usage.outputTokens === 0) {
    throw outcomeError(first.value.outcome);
  }
  return {
    async *[Symbol.asyncIterator]() {
      if (first.done) return;
      yield first.value;
      for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
    },
  };
}

function asCode(code: string): keyof typeof HTTP_ERRORS {
  return code in HTTP_ERRORS ? (code as keyof typeof HTTP_ERRORS) : 'internal';
}

function outcomeError(o: GenerationOutcome): WeirError {
  return new WeirError(asCode(o.error?.code ?? 'internal'), o.error?.message ?? 'the generation failed');
}

function deadlineInQueue(): WeirError {
  return new WeirError('deadline_exceeded', 'The deadline passed before the generation could start (waiting for capacity, or a deadline shorter than the request takes to reach an engine); raise the deadline or retry later.', { retryable: true });
}

function deadlineOrCancel(o: GenerationOutcome): WeirError {
  return o.finishReason === 'deadline' ? deadlineInQueue() : new WeirError('invalid_request', 'The request was cancelled before it started.');
}

function notFoundGeneration(id: string): WeirError {
  return new WeirError('not_found', `No generation '${id}' for your tenant on this gateway (finished generations are kept for 10 minutes).`);
}

function failedOutcome(revision: string, err: unknown): GenerationOutcome {
  const e = toWeirError(err);
  return {
    finishReason: 'error',
    usage: { inputTokens: 0, outputTokens: 0 },
    costNanoUsd: 0,
    modelRevision: revision,
    timings: { queueMs: 0, ttftMs: null, totalMs: 0 },
    error: { code: e.code, message: e.message },
  };
}

/** Maps body-parser's errors (they carry `type` and `status`) to Weir errors. */
function fromExpressError(err: unknown): WeirError {
  if (err instanceof WeirError) return err;
  const e = err as { type?: string; status?: number; limit?: number };
  switch (e?.type) {
    case 'entity.too.large':
      return new WeirError('payload_too_large', `The request body is larger than ${e.limit ?? 'the'} bytes allowed; send less input.`);
    case 'entity.parse.failed':
      return new WeirError('invalid_json', 'The request body is not valid JSON; check quoting and commas.');
    case 'encoding.unsupported':
      return new WeirError('unsupported_media_type', 'Unsupported Content-Encoding: send the body uncompressed, or as gzip, deflate or br.');
    case 'charset.unsupported':
      return new WeirError('unsupported_media_type', 'Send the body as UTF-8 JSON.');
    case 'request.aborted':
      return new WeirError('invalid_request', 'The request body was not received completely.');
  }
  // A body that fails to decompress (a wrong Content-Encoding) is the client's error.
  if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500) {
    return new WeirError('invalid_request', 'The request body could not be read as its Content-Encoding says; send it uncompressed or fix the header.');
  }
  return toWeirError(err);
}

/** Sends an OpenAI-shaped error with the headers clients use to decide on retries. */
export function sendError(res: Response, error: WeirError): void {
  const mapping = HTTP_ERRORS[error.code];
  if (error.retryAfterMs !== undefined) {
    res.setHeader('retry-after', String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))));
    res.setHeader('retry-after-ms', String(Math.ceil(error.retryAfterMs)));
  }
  if (error.code === 'budget_exhausted') res.setHeader('x-should-retry', 'false');
  res.status(mapping.status).json(openAiError(error.message, mapping.type, error.code, error.param ?? null));
}

/**
 * The chaos run's clients: each planned request is sent as a client would (the OpenAI chat
 * route or Weir's `/v1/generations`, streaming or not), cancelled or cut by a deadline as
 * planned, retried with the same idempotency key after failures, and recorded: every attempt's
 * HTTP status, the generation id it was told (`x-weir-generation-id`, or the stream's `start`),
 * whether its terminal event arrived (answered), and the usage it was told.
 */
import { createParser } from 'eventsource-parser';
import { createPrng } from './prng';
import type { PlannedRequest } from './plan';

/** One HTTP exchange of a request. */
export interface AttemptRecord {
  /** 1, 2, … (retries and the repeat after an answer are further attempts). */
  n: number;
  /** Why it was sent: the first try, a retry after a failure, or the repeat after an answer. */
  reason: 'first' | 'retry' | 'repeat';
  startedAtMs: number;
  endedAtMs: number;
  gateway: string;
  /** HTTP status; undefined when the exchange failed before the headers. */
  status?: number;
  /** A network failure (connection refused or reset, the stream cut). */
  networkError?: string;
  generationId?: string;
  /** `idempotent-replayed: true`. */
  replayed: boolean;
  /** Its terminal event arrived: a non-stream 200 body, a stream's `end` (generations) or its finish chunk or in-band error (chat). */
  answered: boolean;
  /** The usage it was told (a non-stream body, the `end` event, the chat usage chunk). */
  told?: { inputTokens: number; outputTokens: number };
  finishReason?: string;
  /** The error code of a refusal or of an in-band error. */
  errorCode?: string;
  /** The client left on purpose (planned cancel). */
  clientCancelled: boolean;
  /** Content deltas received. */
  deltas: number;
}

/** A planned request and what happened to it. */
export interface RequestRecord {
  plan: PlannedRequest;
  attempts: AttemptRecord[];
}

/** Where to send requests, and the key to send them with. */
export interface ClientTarget {
  /** Gateway base URLs (the all-in-one has one). */
  gateways(): string[];
  apiKey: string;
}

/** Statuses after which a keyed client retries with the same key. */
const RETRY_STATUSES = new Set([408, 409, 500, 502, 503, 504]);
/** Codes that retrying cannot fix. */
const FINAL_CODES = new Set(['budget_exhausted', 'kill_switch', 'tenant_disabled']);
/** No exchange may take longer (ms): a hung one is recorded as such. */
const ATTEMPT_TIMEOUT_MS = 60_000;

/** Runs one planned request to its end (with its retries) and records it. */
export async function runRequest(plan: PlannedRequest, target: ClientTarget, seed: number): Promise<RequestRecord> {
  const rng = createPrng(seed).fork(`client-${plan.index}`);
  const record: RequestRecord = { plan, attempts: [] };
  let gatewayIndex = plan.gateway;
  let retries = 0;
  for (let reason: AttemptRecord['reason'] | undefined = 'first'; reason; ) {
    const gateways = target.gateways();
    const gateway = gateways[gatewayIndex % gateways.length];
    const a = await attempt(plan, gateway, target.apiKey, record.attempts.length + 1, reason);
    record.attempts.push(a);
    const next: AttemptRecord['reason'] | undefined = nextStep(plan, a, retries);
    if (next === 'retry') {
      retries += 1;
      // Another gateway after a network failure (this one may be down), after a pause.
      if (a.networkError) gatewayIndex += 1;
      await sleep(rng.int(200, 1_500));
    }
    reason = next;
  }
  return record;
}

function nextStep(plan: PlannedRequest, a: AttemptRecord, retries: number): AttemptRecord['reason'] | undefined {
  if (!plan.key) return undefined;
  if (a.answered) return a.reason !== 'repeat' && plan.repeatAfterAnswer ? 'repeat' : undefined;
  if (retries >= plan.maxRetries) return undefined;
  if (a.clientCancelled) return plan.retryAfterCancel ? 'retry' : undefined;
  if (a.errorCode && FINAL_CODES.has(a.errorCode)) return undefined;
  if (a.networkError || a.status === undefined || RETRY_STATUSES.has(a.status) || a.status === 200) return 'retry';
  return undefined;
}

/** The request body and headers of a plan. */
function requestOf(plan: PlannedRequest, apiKey: string): { path: string; headers: Record<string, string>; body: string } {
  const headers: Record<string, string> = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };
  if (plan.route === 'chat') {
    if (plan.key) headers['idempotency-key'] = plan.key;
    if (plan.deadlineMs !== undefined) headers['x-weir-deadline-ms'] = String(plan.deadlineMs);
    return {
      path: '/v1/chat/completions',
      headers,
      body: JSON.stringify({
        model: plan.alias,
        messages: [{ role: 'user', content: plan.prompt }],
        max_tokens: plan.maxTokens,
        stream: plan.stream,
        ...(plan.stream && plan.includeUsage ? { stream_options: { include_usage: true } } : {}),
      }),
    };
  }
  return {
    path: '/v1/generations',
    headers,
    body: JSON.stringify({
      model_alias: plan.alias,
      input: plan.prompt,
      max_output_tokens: plan.maxTokens,
      stream: plan.stream,
      ...(plan.key ? { request_id: plan.key } : {}),
      ...(plan.deadlineMs !== undefined ? { deadline_ms: plan.deadlineMs } : {}),
    }),
  };
}

async function attempt(plan: PlannedRequest, gateway: string, apiKey: string, n: number, reason: AttemptRecord['reason']): Promise<AttemptRecord> {
  const a: AttemptRecord = { n, reason, startedAtMs: Date.now(), endedAtMs: 0, gateway, replayed: false, answered: false, clientCancelled: false, deltas: 0 };
  const { path, headers, body } = requestOf(plan, apiKey);
  const controller = new AbortController();
  const timeout = setTimeout(() => controller.abort(new Error('attempt timed out')), ATTEMPT_TIMEOUT_MS);
  // A planned cancel applies to the first try only (a retry is the client coming back).
  const cancel = reason === 'first' ? plan.cancel : undefined;
  const cancelTimer = cancel && 'afterMs' in cancel ? setTimeout(() => ((a.clientCancelled = true), controller.abort(new Error('client cancel'))), cancel.afterMs) : undefined;
  try {
    const res = await fetch(`${gateway}${path}`, { method: 'POST', headers, body, signal: controller.signal });
    a.status = res.status;
    a.replayed = res.headers.get('idempotent-replayed') === 'true';
    a.generationId = res.headers.get('x-weir-generation-id') ?? undefined;
    if (res.status !== 200) {
      const json = (await res.json().catch(() => ({}))) as { error?: { code?: string } };
      a.errorCode = json.error?.code ?? undefined;
      return a;
    }
    if (!plan.stream) {
      const json = (await res.json()) as Record<string, unknown>;
      readFinalBody(plan, json, a);
      return a;
    }
    await readStream(plan, res, a, controller, cancel && 'afterDeltas' in cancel ? cancel.afterDeltas : undefined);
    return a;
  } catch (err) {
    if (!a.clientCancelled) a.networkError = err instanceof Error ? `${err.name}: ${(err.cause as Error | undefined)?.message ?? err.message}` : String(err);
    return a;
  } finally {
    clearTimeout(timeout);
    if (cancelTimer) clearTimeout(cancelTimer);
    a.endedAtMs = Date.now();
  }
}

function readFinalBody(plan: PlannedRequest, json: Record<string, unknown>, a: AttemptRecord): void {
  a.answered = true;
  if (plan.route === 'generations') {
    const usage = json.usage as { input_tokens: number; output_tokens: number } | undefined;
    a.generationId = (json.generation_id as string | undefined) ?? a.generationId;
    a.finishReason = json.finish_reason as string | undefined;
    if (usage) a.told = { inputTokens: usage.input_tokens, outputTokens: usage.output_tokens };
    a.errorCode = (json.error as { code?: string } | undefined)?.code;
    return;
  }
  const usage = json.usage as { prompt_tokens: number; completion_tokens: number } | undefined;
  a.finishReason = (json.choices as Array<{ finish_reason?: string }> | undefined)?.[0]?.finish_reason;
  if (usage) a.told = { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens };
}

async function readStream(plan: PlannedRequest, res: Response, a: AttemptRecord, controller: AbortController, cancelAfterDeltas: number | undefined): Promise<void> {
  let stop = false;
  const parser = createParser({
    onEvent(e) {
      if (plan.route === 'generations') {
        const data = JSON.parse(e.data) as Record<string, unknown>;
        if (e.event === 'start') a.generationId = (data.generation_id as string | undefined) ?? a.generationId;
        else if (e.event === 'delta') a.deltas += 1;
        else if (e.event === 'end') {
          a.answered = true;
          a.finishReason = data.finish_reason as string | undefined;
          const usage = data.usage as { input_tokens: number; output_tokens: number } | undefined;
          if (usage) a.told = { inputTokens: usage.input_tokens, outputTokens: usage.output_tokens };
          a.errorCode = (data.error as { code?: string } | undefined)?.code;
        }
      } else {
        if (e.data === '[DONE]') return;
        const data = JSON.parse(e.data) as Record<string, unknown>;
        if (data.error) {
          a.answered = true;
          a.finishReason = 'error';
          a.errorCode = (data.error as { code?: string }).code;
          return;
        }
        const choice = (data.choices as Array<{ delta?: { content?: string }; finish_reason?: string | null }> | undefined)?.[0];
        if (choice?.delta?.content) a.deltas += 1;
        if (choice?.finish_reason) {
          a.answered = true;
          a.finishReason = choice.finish_reason;
        }
        const usage = data.usage as { prompt_tokens: number; completion_tokens: number } | null | undefined;
        if (usage) a.told = { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens };
      }
      if (cancelAfterDeltas !== undefined && !a.answered && a.deltas >= cancelAfterDeltas) stop = true;
    },
  });
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.feed(decoder.decode(value, { stream: true }));
    if (stop) {
      a.clientCancelled = true;
      controller.abort(new Error('client cancel'));
      await reader.cancel().catch(() => undefined);
      return;
    }
  }
  if (!a.answered) a.networkError = 'the stream ended without its terminal event';
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * `POST /v1/embeddings`, OpenAI-compatible (the official clients' `embeddings.create`, the AI
 * SDK's `embed`/`embedMany`): `input` as a string, an array of strings, a token array or an
 * array of token arrays; `encoding_format` `float` or `base64` (the OpenAI Node client's
 * default); `dimensions` where the revision allows it; `user`. The request goes through the
 * same pipeline as a generation — authentication, kill switch, rate limits, the budget
 * reservation (worst case: the input tokens at the input price), the scheduler, the relay, one
 * usage row (`route: embeddings`, output tokens 0) — on an embedding revision
 * (`kind: embedding`); a generation model is refused with 400 before anything is reserved.
 */
import type { ServerResponse } from 'node:http';
import { type EmbeddingInput, type EmbeddingItem, type GenerationInput, type GenerationOutcome, MAX_EMBEDDING_INPUTS, type SamplingParams, WeirError, decodeEmbeddingDeltas } from '@weir/core';
import { z } from 'zod';
import type { CostMeter } from './cost-report';
import { type AuthedRequest, type EdgeRequest, sendJson } from './edge';
import type { ParamNames } from './pipeline';
import { parseBody, refuseUnknownFields } from './schemas';
import type { Transcript } from './transcript';

type Authed = AuthedRequest;

/** The request body (unknown fields are refused by name first). */
export const embeddingsBody = z
  .object({
    model: z.string().min(1),
    input: z.union([z.string(), z.array(z.string()), z.array(z.number().int().min(0).max(0xffffffff)), z.array(z.array(z.number().int().min(0).max(0xffffffff)))], {
      error: 'expected a string, an array of strings, an array of token ids, or an array of token-id arrays',
    }),
    encoding_format: z.enum(['float', 'base64']).nullish(),
    dimensions: z.number().int().positive().nullish(),
    user: z.string().max(256).nullish(),
  })
  .strict();

/** The top-level fields {@link embeddingsBody} accepts. */
export const EMBEDDINGS_FIELDS: ReadonlySet<string> = new Set(Object.keys(embeddingsBody.shape));

const PARAMS: ParamNames = { model: 'model', input: 'input', maxOutputTokens: 'dimensions' };

/** What app.ts hands the route. */
export interface EmbeddingsRouteContext {
  post(path: string, handler: (req: Authed, res: ServerResponse) => Promise<void>): unknown;
  begin(
    req: Authed,
    res: ServerResponse,
    route: 'embeddings',
    alias: string,
    input: GenerationInput,
    sampling: SamplingParams,
    limits: { paramNames: ParamNames; requestId?: string; keyParam?: string },
  ): Promise<{ transcript: Transcript; endedInQueue: boolean; cost?: CostMeter }>;
  /** Names the answering revision, and with `g` sets the cost headers (cost-report.ts). */
  answeredBy(res: ServerResponse, o: GenerationOutcome, g?: { cost?: CostMeter }): void;
  outcomeError(o: GenerationOutcome): WeirError;
  deadlineOrCancel(o: GenerationOutcome): WeirError;
  idempotencyKeyHeader(req: EdgeRequest): string | undefined;
}

/**
 * The items of `input` (OpenAI's four shapes), checked: 1 to {@link MAX_EMBEDDING_INPUTS}
 * of them, none empty. Throws `invalid_request` naming the field (`input`, `input[i]`).
 */
export function embeddingItemsOf(input: z.infer<typeof embeddingsBody>['input']): EmbeddingItem[] {
  let items: EmbeddingItem[];
  if (typeof input === 'string') items = [input];
  else if (input.length === 0) throw new WeirError('invalid_request', 'Invalid request: `input` is empty; send a string or a non-empty array of strings or token arrays.', { param: 'input' });
  else if (typeof input[0] === 'number') items = [input as number[]];
  else items = input as EmbeddingItem[];
  if (items.length > MAX_EMBEDDING_INPUTS) {
    throw new WeirError('invalid_request', `Invalid request: \`input\` holds ${items.length} inputs; at most ${MAX_EMBEDDING_INPUTS} per request. Split them over several requests.`, { param: 'input' });
  }
  for (const [i, item] of items.entries()) {
    if (item.length === 0) {
      const where = typeof input === 'string' || typeof input[0] === 'number' ? 'input' : `input[${i}]`;
      throw new WeirError('invalid_request', `Invalid request: \`${where}\` is empty; every input needs at least one character or token.`, { param: where });
    }
  }
  return items;
}

/** A vector as OpenAI sends it: floats, or base64 of its float32 little-endian bytes. */
function encodeVector(v: Float32Array, format: 'float' | 'base64'): number[] | string {
  if (format === 'float') return Array.from(v);
  return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
}

/** Registers `POST /v1/embeddings` (call from `createGatewayApp`). */
export function registerEmbeddingsRoute(ctx: EmbeddingsRouteContext): void {
  ctx.post('/v1/embeddings', async (req, res) => {
    refuseUnknownFields(req.body, EMBEDDINGS_FIELDS, {}, 'POST /v1/embeddings');
    const body = parseBody(embeddingsBody, req.body);
    const items = embeddingItemsOf(body.input);
    const input: EmbeddingInput = { kind: 'embedding', items, ...(body.dimensions != null ? { dimensions: body.dimensions } : {}) };
    const g = await ctx.begin(req, res, 'embeddings', body.model, input, {}, { paramNames: PARAMS, requestId: ctx.idempotencyKeyHeader(req), keyParam: 'Idempotency-Key' });
    if (g.endedInQueue && g.transcript.outcome) throw ctx.deadlineOrCancel(g.transcript.outcome);
    const outcome = await g.transcript.ended();
    if (outcome.finishReason === 'error') throw ctx.outcomeError(outcome);
    if (outcome.finishReason !== 'stop') throw ctx.deadlineOrCancel(outcome);
    const vectors = decodeEmbeddingDeltas(g.transcript.text());
    if (vectors.length !== items.length) throw new WeirError('upstream_error', `the engine returned ${vectors.length} embeddings for ${items.length} inputs`);
    if (input.dimensions !== undefined && vectors.some((v) => v.length !== input.dimensions)) {
      throw new WeirError('upstream_error', `the engine returned embeddings of another size than the ${input.dimensions} dimensions asked for`);
    }
    ctx.answeredBy(res, outcome, g);
    const format = body.encoding_format ?? 'float';
    sendJson(res, 200, {
      object: 'list',
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: encodeVector(v, format) })),
      model: body.model,
      usage: { prompt_tokens: outcome.usage.inputTokens, total_tokens: outcome.usage.inputTokens },
    });
  });
}

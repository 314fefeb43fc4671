/**
 * `POST /v1/moderations` (issue 15 item 8), OpenAI-compatible so the official clients'
 * `moderations.create` works: `{ input: string | string[] | [{ type: 'text', text }], model? }`
 * → `{ id: 'modr-…', model, results: [{ flagged, categories, category_scores }] }`. It runs the
 * caller's tenant's configured engine (its input engine, else its output engine); `model` is
 * echoed back, never used to pick an engine. Not billed: no tokens are generated; every call is
 * counted in `weir_moderation_checks_total{stage="api"}`. Each call is held to the caller's
 * requests per minute and concurrency (`hold`: admission, with zero tokens and cost, released
 * after the call — no usage row): over a limit it is a 429 with the usual rate-limit headers,
 * and the engine is not called. A tenant without a moderation policy
 * gets 400 `invalid_request` (nothing is configured to judge with).
 */
import type { ServerResponse } from 'node:http';
import { WeirError, newId, tenantKeyOf } from '@weir/core';
import { failureOf, type ModerationEngine, type ModerationObserver, type ModerationPolicies } from '@weir/moderation';
import { type AuthedRequest, sendJson } from './edge';
import { rateLimitHeaders } from './rate-limit-headers';
import type { GenerationPipeline } from './pipeline';

/** At most this many inputs per call (OpenAI documents no limit; the engine gets them in one call). */
export const MAX_MODERATION_INPUTS = 64;

/** The texts of a `/v1/moderations` body. @throws WeirError `invalid_request` naming the field. */
export function moderationInputs(body: unknown): { texts: string[]; model: string } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new WeirError('invalid_request', 'The body must be a JSON object with `input`.');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (k !== 'input' && k !== 'model') throw new WeirError('invalid_request', `Unknown field \`${k}\`; /v1/moderations accepts \`input\` and \`model\`.`, { param: k });
  if (b.model !== undefined && typeof b.model !== 'string') throw new WeirError('invalid_request', '`model` must be a string.', { param: 'model' });
  const input = b.input;
  let texts: string[];
  if (typeof input === 'string') texts = [input];
  else if (Array.isArray(input) && input.length > 0) {
    texts = input.map((item, i) => {
      if (typeof item === 'string') return item;
      if (typeof item === 'object' && item !== null && (item as { type?: unknown }).type === 'text' && typeof (item as { text?: unknown }).text === 'string') return (item as { text: string }).text;
      throw new WeirError('invalid_request', `\`input[${i}]\` must be a string or { "type": "text", "text": "..." } (Weir's moderation engines judge text only).`, { param: `input[${i}]` });
    });
  } else throw new WeirError('invalid_request', '`input` is required: a string, or a non-empty array of strings or text parts.', { param: 'input' });
  if (texts.length > MAX_MODERATION_INPUTS) throw new WeirError('invalid_request', `\`input\` has ${texts.length} items; at most ${MAX_MODERATION_INPUTS}.`, { param: 'input' });
  return { texts, model: (b.model as string | undefined) ?? 'weir-moderation' };
}

/**
 * The handler; `policies` is read per call. `hold` (the pipeline's `holdUnmetered`) admits each
 * call against the caller's limits after its body is checked and before the engine is called;
 * it throws `AdmissionRejectedError` (429). Default none (unlimited: tests of the route alone).
 */
export function moderationsHandler(policies: () => ModerationPolicies, observer?: ModerationObserver, hold?: GenerationPipeline['holdUnmetered']): (req: AuthedRequest, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const { texts, model } = moderationInputs(req.body);
    const plan = policies().of(tenantKeyOf(req.caller));
    if (!plan) throw new WeirError('invalid_request', 'Moderation is not configured for your tenant: ask your platform team to set a moderation policy (docs/safety.md).');
    const stage = plan.input ?? plan.output;
    const timeoutMs = stage?.timeoutMs ?? 5_000;
    const held = hold ? await hold(req.caller, newId('modr'), timeoutMs) : undefined;
    try {
      for (const [name, value] of Object.entries(rateLimitHeaders(held?.rateLimits))) res.setHeader(name, value);
      await judge(req, res, plan.api, texts, model, timeoutMs, observer);
    } finally {
      await held?.release();
    }
  };
}

/** Calls the engine and answers (see {@link moderationsHandler}). */
async function judge(req: AuthedRequest, res: ServerResponse, engine: ModerationEngine, texts: string[], model: string, timeoutMs: number, observer: ModerationObserver | undefined): Promise<void> {
  const ac = new AbortController();
  req.raw.once('close', () => ac.abort());
  // The engine is called directly: a caller of this route wants the verdicts, so an engine failure is a 503, never a fail-open pass.
  const started = performance.now();
  const timedOut = AbortSignal.timeout(timeoutMs);
  let results;
  try {
    results = await engine.check(texts, AbortSignal.any([ac.signal, timedOut]));
  } catch (err) {
    if (!ac.signal.aborted) observer?.onFailure?.('api', engine.name, failureOf(timedOut.aborted ? 'timeout' : 'engine_error', err));
    observer?.onCheck?.('api', engine.name, performance.now() - started, { blocked: false, reason: 'engine_error', categories: [] });
    throw new WeirError('upstream_unavailable', `The moderation engine '${engine.name}' failed or timed out; retry shortly.`, { retryable: true, retryAfterMs: 1_000 });
  }
  const flagged = results.filter((r) => r.flagged).flatMap((r) => Object.keys(r.categories).filter((c) => r.categories[c]));
  observer?.onCheck?.('api', engine.name, performance.now() - started, { blocked: flagged.length > 0, reason: flagged.length > 0 ? 'flagged' : 'pass', categories: [...new Set(flagged)] });
  res.setHeader('cache-control', 'no-store');
  sendJson(res, 200, {
    id: newId('modr').replace(/^modr_/, 'modr-'),
    model,
    results: results.map((r) => ({ flagged: r.flagged, categories: r.categories, category_scores: r.category_scores })),
  });
}

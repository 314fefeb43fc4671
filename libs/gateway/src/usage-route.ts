/**
 * `GET /v1/usage?window=day|month`: the caller's tenant's usage in the current UTC calendar
 * day or month, from the ledger (issue 4, deliverable 7). The tenant comes only from the API
 * key: a `tenant` (or any other) query parameter is refused with a 400 rather than silently
 * ignored, so a client that believes it can ask about another tenant learns at once that it
 * cannot.
 */
import type { ServerResponse } from 'node:http';
import { type UsageAggregate, type UsageReader, type UsageSummary, type UsageWindow, WeirError, tenantKeyOf } from '@weir/core';
import { nanoUsdToDecimal, usagePeriod } from '@weir/ledger';
import { type AuthedRequest, sendJson } from './edge';

/** The sums every level of the answer carries (snake_case, as on the wire). */
export interface UsageSumsBody {
  tokens: {
    input: number;
    output: number;
    /** Of `input`, tokens read from a prompt cache (cache reads). */
    cached_input: number;
    /** Of `input`, tokens written to a prompt cache (cache writes). */
    cache_write_input: number;
    /** Of `input`, tokens neither read from nor written to a prompt cache: `input − cached_input − cache_write_input`. */
    uncached_input: number;
    /** Of `output`, reasoning tokens. */
    reasoning: number;
    /** `input + output`. */
    total: number;
  };
  /**
   * USD as a JSON number with at most 9 decimals, the exact value of `cost_nano_usd` (the
   * shortest decimal that round-trips; exact up to 999,999.999999999 USD, 15 significant
   * digits; JavaScript prints amounts under 0.000001 USD in exponent form, e.g. `1e-9`).
   */
  cost_usd: number;
  /** Exact cost in nano-USD (1e-9 USD), an integer as a decimal string. */
  cost_nano_usd: string;
  /** Usage records (one per generation that was admitted). */
  requests: number;
  /** Of `requests`, those answered from the response cache (docs/caching.md). */
  cache_hits: number;
}

/** The body of `GET /v1/usage`. */
export interface UsageBody extends UsageSumsBody {
  object: 'usage';
  tenant_id: string;
  window: UsageWindow;
  /** First instant of the period (ISO 8601, UTC), inclusive. */
  period_start: string;
  /** First instant after the period (ISO 8601, UTC), exclusive. */
  period_end: string;
  by_model: (UsageSumsBody & { model_alias: string; model_revision: string })[];
  by_app: (UsageSumsBody & { app_id: string })[];
  /** `use_case: null` sums the requests that named no use case. */
  by_use_case: (UsageSumsBody & { use_case: string | null })[];
}

const WINDOWS: readonly UsageWindow[] = ['day', 'month'];

/**
 * Parses the query of `GET /v1/usage`: `window` is `day` or `month` (default `month`); no
 * other parameter is accepted.
 * @throws WeirError `invalid_request` naming the parameter: an unknown window, a repeated
 *   `window`, `tenant`/`tenant_id` (the tenant comes from the API key), or any other parameter.
 */
export function parseUsageQuery(query: Record<string, unknown>): UsageWindow {
  for (const name of Object.keys(query)) {
    if (name === 'window') continue;
    if (name === 'tenant' || name === 'tenant_id') {
      throw new WeirError('invalid_request', `\`${name}\` is not accepted: usage is always your own tenant's, taken from your API key; remove \`${name}\`.`, { param: name });
    }
    throw new WeirError('invalid_request', `Unknown query parameter \`${name}\`; GET /v1/usage takes only \`window\` (day or month).`, { param: name });
  }
  const window = query.window ?? 'month';
  if (typeof window !== 'string' || !(WINDOWS as readonly string[]).includes(window)) {
    throw new WeirError('invalid_request', '`window` must be `day` or `month` (the current UTC calendar day or month); it defaults to `month`.', { param: 'window' });
  }
  return window as UsageWindow;
}

/** Renders a summary as the wire body. */
export function usageBody(tenantId: string, window: UsageWindow, period: { start: Date; end: Date }, summary: UsageSummary): UsageBody {
  return {
    object: 'usage',
    tenant_id: tenantId,
    window,
    period_start: period.start.toISOString(),
    period_end: period.end.toISOString(),
    ...sums(summary),
    by_model: summary.byModel.map((m) => ({ model_alias: m.modelAlias, model_revision: m.modelRevision, ...sums(m) })),
    by_app: summary.byApp.map((a) => ({ app_id: a.appId, ...sums(a) })),
    by_use_case: summary.byUseCase.map((u) => ({ use_case: u.useCase, ...sums(u) })),
  };
}

function sums(a: UsageAggregate): UsageSumsBody {
  return {
    tokens: {
      input: a.inputTokens,
      output: a.outputTokens,
      cached_input: a.cachedInputTokens,
      cache_write_input: a.cacheWriteInputTokens,
      uncached_input: a.inputTokens - a.cachedInputTokens - a.cacheWriteInputTokens,
      reasoning: a.reasoningTokens,
      total: a.inputTokens + a.outputTokens,
    },
    // Number() of the exact 9-decimal string: JSON then prints the shortest decimal that
    // round-trips, which is that string without trailing zeros (exact below 1e6 USD).
    cost_usd: Number(nanoUsdToDecimal(a.costNanoUsd)),
    cost_nano_usd: a.costNanoUsd.toString(),
    requests: a.requests,
    cache_hits: a.cacheHits,
  };
}

/**
 * The edge handler of `GET /v1/usage`, for an authenticated request (it reads the caller's
 * tenant from it). `now` is the wall clock (epoch ms), default `Date.now`. Errors (a bad
 * query, a ledger fault) are thrown for the edge's error handler.
 */
export function usageHandler(reader: UsageReader, now: () => number = Date.now): (req: AuthedRequest, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const window = parseUsageQuery(req.query());
    const { tenantId } = req.caller;
    const period = usagePeriod(window, now());
    // By internal id (issue 14 §4): a deleted same-slug tenant's rows are not this tenant's.
    const summary = await reader.summarize({ tenantId: tenantKeyOf(req.caller), since: period.start, until: period.end });
    res.setHeader('cache-control', 'no-store');
    sendJson(res, 200, usageBody(tenantId, window, period, summary));
  };
}

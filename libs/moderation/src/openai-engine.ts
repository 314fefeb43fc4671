/**
 * An OpenAI-compatible moderation upstream: `POST {baseUrl}/moderations` with
 * `{ model, input: string[] }`, answered with `{ results: [{ flagged, categories, category_scores }] }`.
 */
import type { ModerationEngine, ModerationResult } from './types';

/** Options of {@link createOpenAiModerationEngine}. */
export interface OpenAiModerationOptions {
  name: string;
  /** Base URL before `/moderations` (e.g. `https://api.openai.com/v1`); a trailing `/` is dropped. */
  baseUrl: string;
  /** Bearer key, read from the engine's `api_key_env` by the composition root. Default none. */
  apiKey?: string;
  /** Default `omni-moderation-latest`. */
  model?: string;
  /** Per-call timeout (ms). Default 5,000. */
  timeoutMs?: number;
  /**
   * The undici dispatcher every call goes through: the egress-checked one from `@weir/engines`
   * (`egressDispatcher()`), so a moderation upstream obeys the same egress policy as model upstreams.
   */
  dispatcher?: unknown;
  /** Default the global `fetch`. */
  fetch?: typeof fetch;
}

/** Error messages name the engine and the HTTP status, never the texts or the key. */
export function createOpenAiModerationEngine(options: OpenAiModerationOptions): ModerationEngine {
  const url = `${options.baseUrl.replace(/\/+$/, '')}/moderations`;
  const model = options.model ?? 'omni-moderation-latest';
  const timeoutMs = options.timeoutMs ?? 5_000;
  const doFetch = options.fetch ?? fetch;
  return {
    name: options.name,
    kind: 'openai',
    async check(texts, signal) {
      const timeout = AbortSignal.timeout(timeoutMs);
      const combined = AbortSignal.any([signal, timeout]);
      let res: Response;
      try {
        res = await doFetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}) },
          body: JSON.stringify({ model, input: texts }),
          signal: combined,
          ...(options.dispatcher !== undefined ? { dispatcher: options.dispatcher } : {}),
        } as RequestInit);
      } catch (err) {
        if (timeout.aborted && !signal.aborted) throw new Error(`moderation engine '${options.name}': no answer within ${timeoutMs} ms`);
        throw new Error(`moderation engine '${options.name}': the upstream could not be reached (${err instanceof Error ? err.message : String(err)})`);
      }
      if (!res.ok) {
        await res.body?.cancel().catch(() => undefined);
        throw Object.assign(new Error(`moderation engine '${options.name}': the upstream answered HTTP ${res.status}`), { status: res.status });
      }
      let body: unknown;
      try {
        body = await res.json();
      } catch {
        throw new Error(`moderation engine '${options.name}': the upstream's answer is not JSON`);
      }
      const results = (body as { results?: unknown }).results;
      if (!Array.isArray(results) || results.length !== texts.length) {
        throw new Error(`moderation engine '${options.name}': the upstream answered ${Array.isArray(results) ? results.length : 'no'} results for ${texts.length} inputs`);
      }
      return results.map((r, i) => toResult(r, options.name, i));
    },
  };
}

function toResult(r: unknown, name: string, i: number): ModerationResult {
  const o = r as { flagged?: unknown; categories?: unknown; category_scores?: unknown };
  if (typeof o?.flagged !== 'boolean' || typeof o.categories !== 'object' || o.categories === null) {
    throw new Error(`moderation engine '${name}': result ${i} has no boolean 'flagged' and 'categories'`);
  }
  const categories: Record<string, boolean> = {};
  for (const [k, v] of Object.entries(o.categories as Record<string, unknown>)) categories[k] = v === true;
  const category_scores: Record<string, number> = {};
  if (typeof o.category_scores === 'object' && o.category_scores !== null) {
    for (const [k, v] of Object.entries(o.category_scores as Record<string, unknown>)) if (typeof v === 'number' && Number.isFinite(v)) category_scores[k] = v;
  }
  const first = Object.keys(categories).find((k) => categories[k]);
  return { flagged: o.flagged, categories, category_scores, ...(o.flagged ? { reason: `upstream:${first ?? 'flagged'}` } : {}) };
}

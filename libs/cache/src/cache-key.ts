/**
 * Cache keys (issue 15 item 1; docs/caching.md "Key composition"). A key is the partition
 * (tenant, revision, template, `paramsKey`) plus the canonical prompt, hashed with SHA-256.
 * `paramsKey` covers EVERY field of the request body except the prompt and a closed list of
 * fields that cannot change the output ({@link NON_OUTPUT_FIELDS}): a field added to a route
 * later changes the key by default, so the cache can only lose hits, never serve a wrong answer.
 */
import { createHash } from 'node:crypto';
import type { GenerationInput } from '@weir/core';
import type { CachePartition, CacheQuery } from './cache-tier';

/** The public routes whose answers are cached (the wire shape differs, so the route is part of the key). */
export type CacheRoute = '/v1/chat/completions' | '/v1/completions' | '/v1/generations' | '/v1/responses' | '/v1/messages';

/** The body fields that hold the prompt, per route: they make the exact key, not `paramsKey`. */
export const PROMPT_FIELDS: Readonly<Record<CacheRoute, readonly string[]>> = {
  '/v1/chat/completions': ['messages'],
  '/v1/completions': ['prompt'],
  '/v1/generations': ['input'],
  // OpenAI's shape (`input`, `instructions`) and Weir's (`messages`).
  '/v1/responses': ['input', 'instructions', 'messages'],
  // Anthropic's Messages API: the turns and the system prompt.
  '/v1/messages': ['messages', 'system'],
};

/**
 * Body fields that never change the output, left out of `paramsKey`: transport (`stream`,
 * `stream_options`), routing that the partition's revision already captures (`model`,
 * `model_alias`, `use_case`), scheduling (`priority`, `service_tier`, `deadline_ms`),
 * idempotency (`request_id`), OpenAI bookkeeping Weir ignores (`store`, `metadata`,
 * `prompt_cache_retention`, `prediction`; `safety_identifier` names an end user, so such a
 * request is never cached), `n` (only 1 is accepted), the cache's own controls (`weir_cache`, and `weir_prompt_template`, which is in
 * the partition) and `user` (personalised traffic is never cached at all, so it never reaches a
 * key). Everything else — including fields accepted only at a neutral value (penalties,
 * `logit_bias`, `logprobs`) — is in the key. `prompt_cache_key` is in it too: OpenAI's
 * replacement of `user` for cache bucketing may carry a per-user value, so two values never
 * share an entry.
 */
export const NON_OUTPUT_FIELDS: ReadonlySet<string> = new Set([
  'model',
  'model_alias',
  'use_case',
  'stream',
  'stream_options',
  'priority',
  'service_tier',
  'deadline_ms',
  'request_id',
  'store',
  'metadata',
  'prompt_cache_retention',
  'safety_identifier',
  'prediction',
  'n',
  'user',
  'weir_cache',
  'weir_prompt_template',
]);

/**
 * Canonical JSON: object keys sorted (so key order never matters), `null` and `undefined`
 * properties dropped (OpenAI treats `null` as "not given"), arrays in order, numbers as
 * `JSON.stringify` writes them (`1` and `1.0` are the same number). Throws nothing for JSON
 * values; a non-JSON value (a function) is written as `null`.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== null && obj[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
  }
  return 'null';
}

/**
 * The canonical encoding keys are hashed from: like {@link canonicalJson} (keys sorted at every
 * depth, `null` and absent alike, arrays in order) but strings are written raw behind their
 * length (`s<length>:<text>`) instead of JSON-escaped, which is unambiguous and several times
 * cheaper on a long prompt. Numbers as `JSON.stringify` writes them.
 */
export function canonicalEncoding(value: unknown): string {
  if (value === null || value === undefined) return 'n';
  switch (typeof value) {
    case 'string':
      return `s${value.length}:${value}`;
    case 'number':
      return `d${JSON.stringify(value)};`;
    case 'boolean':
      return value ? 't' : 'f';
    case 'object': {
      if (Array.isArray(value)) {
        let out = '[';
        for (const item of value) out += canonicalEncoding(item);
        return `${out}]`;
      }
      const obj = value as Record<string, unknown>;
      const keys = Object.keys(obj);
      if (keys.length > 1) keys.sort();
      let out = '{';
      for (const k of keys) {
        const v = obj[k];
        if (v !== null && v !== undefined) out += `s${k.length}:${k}${canonicalEncoding(v)}`;
      }
      return `${out}}`;
    }
    default:
      return 'n';
  }
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The request body split into what makes `paramsKey` and what makes the prompt. */
function split(route: CacheRoute, body: Record<string, unknown>): { params: Record<string, unknown>; prompt: Record<string, unknown> } {
  const promptFields = PROMPT_FIELDS[route];
  const params: Record<string, unknown> = {};
  const prompt: Record<string, unknown> = {};
  for (const name of Object.keys(body)) {
    if (promptFields.includes(name)) prompt[name] = body[name];
    else if (!NON_OUTPUT_FIELDS.has(name)) params[name] = body[name];
  }
  // `/v1/completions` takes one prompt as a string or an array of one string: the same prompt.
  if (route === '/v1/completions' && Array.isArray(prompt.prompt) && prompt.prompt.length === 1) prompt.prompt = prompt.prompt[0];
  return { params, prompt };
}

/**
 * `paramsKey`: SHA-256 (hex) of the route and the canonical encoding of every output-changing body
 * field (all but the prompt and {@link NON_OUTPUT_FIELDS}).
 * @param body the parsed JSON body as the client sent it (an object; anything else keys as `{}`).
 */
export function paramsKeyOf(route: CacheRoute, body: unknown): string {
  const obj = isObject(body) ? body : {};
  return sha256Hex(`${route}\n${canonicalEncoding(split(route, obj).params)}`);
}

/** The canonical prompt of a body (its prompt fields, {@link canonicalEncoding}). */
export function canonicalPromptOf(route: CacheRoute, body: unknown): string {
  return canonicalEncoding(split(route, isObject(body) ? body : {}).prompt);
}

/**
 * The exact key: SHA-256 (hex) of the partition's four fields and the canonical prompt, each
 * length-prefixed so no two different tuples hash the same text.
 */
export function exactKeyOf(partition: CachePartition, canonicalPrompt: string): string {
  const { tenantKey: t, revisionId: r, template: m, paramsKey: p } = partition;
  // One update of `<length>:<part>|` for each part (a string concatenation V8 keeps as a rope).
  return sha256Hex(`${t.length}:${t}|${r.length}:${r}|${m.length}:${m}|${p.length}:${p}|${canonicalPrompt.length}:${canonicalPrompt}|`);
}

/**
 * The prompt as one normalised text for semantic tiers: a text input as is; chat messages as
 * `role: content` lines (whitespace runs collapsed, trimmed). Never logged.
 */
export function promptTextOf(input: GenerationInput): string {
  const norm = (s: string) => s.replace(/\s+/g, ' ').trim();
  if (input.kind === 'text') return norm(input.text);
  // Embedding inputs are never cached (no cache route); their text items, for completeness.
  if (input.kind === 'embedding') return input.items.map((i) => (typeof i === 'string' ? norm(i) : `[${i.join(',')}]`)).join('\n');
  return input.messages.map((m) => `${m.role}: ${norm(m.content)}`).join('\n');
}

/** What the gateway knows of a request before routing, to key it once its revision is chosen. */
export interface CacheKeyMaterial {
  route: CacheRoute;
  /** `paramsKeyOf(route, body)`. */
  paramsKey: string;
  /** `canonicalPromptOf(route, body)` ({@link canonicalEncoding}). */
  canonicalPrompt: string;
  /** `name@version`, or '' for none. */
  template: string;
}

/** The material of a request body (computed only when the tenant's cache policy is on). */
export function keyMaterialOf(route: CacheRoute, body: unknown, template: string): CacheKeyMaterial {
  const obj = isObject(body) ? body : {};
  const { params, prompt } = split(route, obj);
  return { route, template, paramsKey: sha256Hex(`${route}\n${canonicalEncoding(params)}`), canonicalPrompt: canonicalEncoding(prompt) };
}

/** The query of a request routed to `revisionId`, for tenant `tenantKey`. */
export function cacheQueryOf(material: CacheKeyMaterial, tenantKey: string, revisionId: string, input: GenerationInput): CacheQuery {
  const partition: CachePartition = { tenantKey, revisionId, template: material.template, paramsKey: material.paramsKey };
  const query = { partition, exactKey: exactKeyOf(partition, material.canonicalPrompt) } as CacheQuery;
  // `promptText` is computed on first read: only semantic tiers read it, so a tenant with the
  // exact tier alone never pays for it (it is most of a key's CPU on a long prompt). An own
  // enumerable accessor, so a spread or a copy of the query still carries the text.
  let text: string | undefined;
  Object.defineProperty(query, 'promptText', { enumerable: true, get: () => (text ??= promptTextOf(input)) });
  return query;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

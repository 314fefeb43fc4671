/**
 * Whether a request may use the cache (issue 15 items 1 and 10; docs/caching.md "What is never
 * cached"): the tenant's policy, the request's own refusal (`Cache-Control`, `weir_cache`),
 * personalisation and determinism. Pure functions; the gateway calls them only for tenants whose
 * policy is on.
 */
import { type TenantCachePolicy, WeirError } from '@weir/core';

/** The body field a request refuses or opts in to the cache with (docs/api.md). */
export const CACHE_BODY_FIELD = 'weir_cache';
/** The body field naming the prompt template (`name@version`). */
export const TEMPLATE_BODY_FIELD = 'weir_prompt_template';
/** The header naming the prompt template (`name@version`). */
export const TEMPLATE_HEADER = 'x-weir-prompt-template';

/** A request's own cache directives. */
export interface CacheDirectives {
  /** Do not serve from the cache (it may still store the answer): `Cache-Control: no-cache`, `weir_cache: "no-cache"`. */
  noCache: boolean;
  /** Neither serve from nor store in the cache: `Cache-Control: no-store`, `weir_cache: "no-store"`. */
  noStore: boolean;
  /** A non-deterministic request asks to be cached anyway (`weir_cache: "opt_in"`), if the policy allows it. */
  optIn: boolean;
}

const NONE: CacheDirectives = Object.freeze({ noCache: false, noStore: false, optIn: false });

/** RFC 9110 §5.6.2 `token`: one or more tchars. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * The request directives of a `Cache-Control` value (RFC 9111 §5.2): comma-separated
 * `name[=token|"quoted string"]`, names case-insensitive, empty list elements allowed, unknown
 * directives ignored. Several `Cache-Control` header lines arrive joined with ", " (Node joins
 * them), which is the same list. `no-store` → neither read nor store; `no-cache` (with or without
 * an argument) or `max-age=0` → do not read (the answer may be stored); another `max-age` (a
 * whole number of seconds) is accepted and has no effect (no entry outlives its policy TTL).
 * A value that does not parse — a stray `;`, an unclosed quote, a `max-age` that is not a
 * whole number, an empty name — is taken as `no-store` (the safe reading: the request runs live
 * and nothing is stored), never as "no directive".
 */
export function cacheControlDirectivesOf(value: string): { noCache: boolean; noStore: boolean } {
  let noCache = false;
  let noStore = false;
  const n = value.length;
  let i = 0;
  const ows = () => {
    while (i < n && (value[i] === ' ' || value[i] === '\t')) i++;
  };
  while (i < n) {
    ows();
    if (i >= n) break;
    if (value[i] === ',') {
      i++;
      continue;
    }
    let j = i;
    while (j < n && value[j] !== '=' && value[j] !== ',' && value[j] !== ' ' && value[j] !== '\t') j++;
    const name = value.slice(i, j).toLowerCase();
    if (!TOKEN.test(name)) return MALFORMED;
    i = j;
    ows();
    let arg: string | undefined;
    if (i < n && value[i] === '=') {
      i++;
      ows();
      if (i < n && value[i] === '"') {
        // quoted-string: qdtext or a quoted-pair (backslash and one character).
        let k = i + 1;
        let text = '';
        while (k < n && value[k] !== '"') {
          if (value[k] === '\\') {
            if (k + 1 >= n) return MALFORMED;
            text += value[k + 1];
            k += 2;
          } else text += value[k++];
        }
        if (k >= n) return MALFORMED;
        arg = text;
        i = k + 1;
      } else {
        let k = i;
        while (k < n && value[k] !== ',' && value[k] !== ' ' && value[k] !== '\t') k++;
        arg = value.slice(i, k);
        if (!TOKEN.test(arg)) return MALFORMED;
        i = k;
      }
      ows();
    }
    if (i < n && value[i] !== ',') return MALFORMED;
    if (name === 'no-store') noStore = true;
    else if (name === 'no-cache') noCache = true;
    else if (name === 'max-age') {
      if (arg === undefined || !/^\d{1,10}$/.test(arg)) return MALFORMED;
      if (Number(arg) === 0) noCache = true;
    }
  }
  return { noCache: noCache || noStore, noStore };
}

/** What an unparseable `Cache-Control` means: neither read nor store. */
const MALFORMED = Object.freeze({ noCache: true, noStore: true });

/**
 * Reads `Cache-Control` (see {@link cacheControlDirectivesOf}) and the body's `weir_cache`
 * (`"no-cache"`, `"no-store"` or `"opt_in"`).
 * @throws WeirError `invalid_request` (param `weir_cache`) for another `weir_cache` value.
 */
export function cacheDirectivesOf(cacheControl: string | undefined, bodyValue: unknown): CacheDirectives {
  if (cacheControl === undefined && bodyValue === undefined) return NONE;
  let noCache = false;
  let noStore = false;
  let optIn = false;
  if (cacheControl !== undefined) ({ noCache, noStore } = cacheControlDirectivesOf(cacheControl));
  if (bodyValue !== undefined && bodyValue !== null) {
    if (bodyValue === 'no-cache') noCache = true;
    else if (bodyValue === 'no-store') noStore = true;
    else if (bodyValue === 'opt_in') optIn = true;
    else throw new WeirError('invalid_request', '`weir_cache` must be "no-cache" (do not answer from the cache), "no-store" (do not use the cache at all) or "opt_in" (cache a non-deterministic request, when your tenant allows it).', { param: CACHE_BODY_FIELD });
  }
  return { noCache: noCache || noStore, noStore, optIn };
}

/** `name@version`: a name of 1–128 letters, digits and `. _ : / -`, a version of 1–64 letters, digits and `. _ -`. */
const TEMPLATE = /^[A-Za-z0-9._:/-]{1,128}@[A-Za-z0-9._-]{1,64}$/;

/**
 * The prompt template a request names: the `x-weir-prompt-template` header and/or the body's
 * `weir_prompt_template` (the same value both ways is fine). '' when it names none.
 * @throws WeirError `invalid_request` for a malformed value or two different ones.
 */
export function templateOf(header: string | undefined, bodyValue: unknown): string {
  if (bodyValue !== undefined && bodyValue !== null && (typeof bodyValue !== 'string' || !TEMPLATE.test(bodyValue))) {
    throw new WeirError('invalid_request', '`weir_prompt_template` must be `name@version` (a name of letters, digits and . _ : / -, then @ and a version of letters, digits and . _ -).', { param: TEMPLATE_BODY_FIELD });
  }
  const h = header?.trim();
  if (h !== undefined && !TEMPLATE.test(h)) {
    throw new WeirError('invalid_request', '`x-weir-prompt-template` must be `name@version` (a name of letters, digits and . _ : / -, then @ and a version of letters, digits and . _ -).', { param: TEMPLATE_HEADER });
  }
  const body = typeof bodyValue === 'string' ? bodyValue : undefined;
  if (h !== undefined && body !== undefined && h !== body) {
    throw new WeirError('invalid_request', '`x-weir-prompt-template` and `weir_prompt_template` name different templates; send one, or the same in both.', { param: TEMPLATE_BODY_FIELD });
  }
  return h ?? body ?? '';
}

/**
 * Refuses a template the tenant did not declare (when it declares a list): an entry `name`
 * allows every version, `name@version` that version only.
 * @throws WeirError `invalid_request` (param `weir_prompt_template`).
 */
export function checkTemplate(policy: TenantCachePolicy, template: string): void {
  const declared = policy.templates;
  if (!declared || template === '') return;
  const name = template.slice(0, template.lastIndexOf('@'));
  if (declared.includes(template) || declared.includes(name)) return;
  throw new WeirError('invalid_request', `The prompt template '${template}' is not one your tenant declares (its cache policy lists ${declared.length} template${declared.length === 1 ? '' : 's'}); send a declared template, or ask your platform team to add it.`, {
    param: TEMPLATE_BODY_FIELD,
  });
}

/** What a request may do with the cache. */
export interface CacheDecision {
  /** Look the request up in the cache. */
  read: boolean;
  /** Store its answer (if complete). */
  store: boolean;
  /** Why the cache is not used at all (`x-weir-cache: bypass`); absent when it is read or stored. */
  bypass?: CacheBypassReason;
}

/** Why a request bypasses the cache (a metric label; never a tenant-supplied string). */
export type CacheBypassReason = 'personalised' | 'not_deterministic' | 'no_store' | 'no_cache';

/** What {@link decideCache} needs of a request. */
export interface CacheRequestFacts {
  temperature?: number | null;
  seed?: number | null;
  /** The request names an end user: a non-empty `user` (any length) or `safety_identifier`. */
  endUser: boolean;
  useCase?: string;
  directives: CacheDirectives;
}

/**
 * The decision for one request under `policy`: personalised traffic (an end user, or a use case
 * the policy marks personalised) bypasses; `no-store` bypasses; a non-deterministic request
 * (neither `temperature: 0` nor a `seed`) bypasses when the policy is deterministic-only, unless
 * it opted in and the policy allows opt-in; `no-cache` only skips the read.
 */
export function decideCache(policy: TenantCachePolicy, facts: CacheRequestFacts): CacheDecision {
  if (facts.endUser) return { read: false, store: false, bypass: 'personalised' };
  if (facts.useCase !== undefined && isPersonalisedUseCase(policy, facts.useCase)) return { read: false, store: false, bypass: 'personalised' };
  if (facts.directives.noStore) return { read: false, store: false, bypass: 'no_store' };
  if (policy.deterministicOnly && !isDeterministic(facts) && !(facts.directives.optIn && policy.allowOptIn)) return { read: false, store: false, bypass: 'not_deterministic' };
  return { read: !facts.directives.noCache, store: true };
}

/**
 * Whether `useCase` is one the policy marks personalised, compared case-insensitively (ASCII):
 * use cases are case-sensitive labels elsewhere (routes, `/v1/usage`), but here a false match
 * only costs a cache miss while a missed one could serve one end user's answer to another, so
 * `Coach` is as personalised as `coach`.
 */
export function isPersonalisedUseCase(policy: TenantCachePolicy, useCase: string): boolean {
  const list = policy.personalisedUseCases;
  if (!list || list.length === 0) return false;
  const u = useCase.toLowerCase();
  return list.some((p) => p.toLowerCase() === u);
}

/** `temperature: 0`, or a `seed`. */
export function isDeterministic(facts: Pick<CacheRequestFacts, 'temperature' | 'seed'>): boolean {
  return facts.temperature === 0 || (facts.seed !== undefined && facts.seed !== null);
}

/** Whether any tier of the policy is on (the gateway precomputes nothing else per request). */
export function cacheEnabled(policy: TenantCachePolicy | undefined): policy is TenantCachePolicy {
  return policy !== undefined && (policy.exact.enabled || policy.semantic?.enabled === true);
}

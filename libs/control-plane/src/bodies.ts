import { WeirError } from '@weir/core';
import { z } from 'zod';
import { ID_PATTERN } from './config-shapes';

/**
 * The admin API's request bodies (zod, strict: an unknown field is a 400 naming it). Shapes
 * follow the configuration file (snake_case); nested configuration sections (a revision's
 * engine, the defaults) are checked in full by `parseConfig` on the composed configuration.
 */

const id = () => z.string().regex(ID_PATTERN, 'expected 1 to 128 letters, digits or . _ : @ / - (starting with a letter or digit)');
const name = () => z.string().min(1, 'expected a non-empty string').max(200, 'expected at most 200 characters');
const posInt = () => z.number().int('expected an integer').min(1, 'expected an integer >= 1');
const money = () => z.number().min(0, 'expected a number >= 0 (USD)');
const isoDate = () => z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'expected a date YYYY-MM-DD (UTC)').refine((s) => !Number.isNaN(Date.parse(`${s}T00:00:00Z`)), 'expected a real calendar date');

/** Limits and budgets (the file's `limits`); absent means no limit at that scope. */
export const limitsBody = z.strictObject({
  max_concurrent: posInt().optional(),
  requests_per_minute: posInt().optional(),
  tokens_per_minute: posInt().optional(),
  input_tokens_per_minute: posInt().optional(),
  output_tokens_per_minute: posInt().optional(),
  monthly_budget_usd: money().optional(),
  daily_budget_usd: money().optional(),
  /** Apps only (the configuration check refuses them elsewhere): session caps (`x-weir-session-id`). */
  session_max_tokens: posInt().optional(),
  session_budget_usd: money().optional(),
  session_idle_ttl_ms: posInt().optional(),
});

/** A tenant route: a pin and/or a fallback chain for one alias (optionally one use case). */
const routeBody = z.strictObject({
  alias: id(),
  use_case: z.string().regex(/^[A-Za-z0-9._:-]{1,64}$/, 'expected a use case of 1 to 64 letters, digits or . _ : -').optional(),
  pin: id().optional(),
  fallbacks: z.array(id()).optional(),
});

/**
 * A use case's policy without its name (`PUT /tenants/{id}/use-cases/{name}`): its model chain
 * (`model` alias, `pin` for a pinned version, `fallbacks`), limits and budget, redaction
 * profile. Aliases, revisions and profiles are cross-checked by `parseConfig`.
 */
function useCaseShape() {
  return {
    model: id(),
    pin: id().optional(),
    fallbacks: z.array(id()).optional(),
    limits: limitsBody.optional(),
    redaction_profile: id().optional(),
  };
}

/** A use case's policy (`PUT /tenants/{id}/use-cases/{name}`; the name is in the path). */
export const useCaseBody = z.strictObject(useCaseShape());

const policyShape = {
  allowed_aliases: z.array(z.string()).optional(),
  default_deadline_ms: posInt().optional(),
  limits: limitsBody.optional(),
  scheduling_weight: z.number().gt(0, 'expected a number > 0').optional(),
  dedicated_pool: id().optional(),
  routes: z.array(routeBody).optional(),
  redaction_profile: id().optional(),
  content_logging: z.boolean().optional(),
  /** Input/output moderation (`input`, `output`, `rules`): checked in full by `parseConfig` (engine names, RE2 patterns, overlap below window). */
  moderation: z.looseObject({}).optional(),
  redact_upstream: z.boolean().optional(),
  /** The response-cache policy (the file's `tenants[].cache`, docs/caching.md); its fields are checked by `parseConfig`. */
  cache: z.record(z.string(), z.unknown(), { message: 'expected an object (the cache policy: exact, semantic, deterministic_only, allow_opt_in, templates, hit_price_fraction, personalised_use_cases)' }).optional(),
  kill_switch: z.boolean().optional(),
  disabled: z.boolean().optional(),
  /** The tenant's use cases (the file's `tenants[].use_cases`): each checked here, cross-checked by `parseConfig`. */
  use_cases: z.array(z.strictObject({ name: z.string().regex(/^[A-Za-z0-9._:-]{1,64}$/, 'expected a use case of 1 to 64 letters, digits or . _ : -') }).extend(useCaseShape())).optional(),
};

/** A tenant's whole policy (PUT). */
export const policyBody = z.strictObject(policyShape);

/** A partial policy (PATCH): given fields replace, `null` removes a field. */
export const policyPatchBody = z.strictObject(
  Object.fromEntries(Object.entries(policyShape).map(([k, v]) => [k, (v.unwrap() as z.ZodType).nullable().optional()])) as Record<string, z.ZodType>,
);

export const tenantCreateBody = z.strictObject({ id: id(), name: name(), policy: policyBody.optional() });
export const tenantPatchBody = z.strictObject({ name: name().optional() });
export const appCreateBody = z.strictObject({ id: id(), name: name(), limits: limitsBody.optional() });
export const appPatchBody = z.strictObject({ name: name().optional(), limits: limitsBody.nullable().optional() });
export const apiKeyCreateBody = z.strictObject({ label: z.string().max(200, 'expected at most 200 characters').optional() });
/** A body with no fields (`{}` or none). */
export const emptyBody = z.strictObject({});
export const killSwitchBody = z.strictObject({ enabled: z.boolean() });

/**
 * A named PII redaction profile (`PUT /redaction-profiles/{name}`), the file's shape; its
 * recognizer ids and RE2 patterns are checked by `parseConfig` on the composed configuration.
 */
export const redactionProfileBody = z.strictObject({
  recognizers: z.array(z.string().min(1).max(32)).max(32).optional(),
  custom_patterns: z.array(z.strictObject({ name: z.string().min(1).max(64), pattern: z.string().min(1).max(1000) })).max(64).optional(),
  replacement: z.enum(['tag', 'hash']).optional(),
  entropy_min_length: z.number().int('expected an integer').min(12).max(4096).optional(),
  redact_uuids: z.boolean().optional(),
});

/** A revision in the file's shape; its fields are checked by `parseConfig`, `id` here. */
export const revisionCreateBody = z.looseObject({ id: id() });

/** A deprecation: the revision retires on `retires_on`; pinned traffic is told to move to `replacement`. */
export const deprecationBody = z.strictObject({ retires_on: isoDate(), replacement: id(), announced_on: isoDate().optional() });

/** An alias in the file's shape (targets or revision, fallbacks, description); checked by `parseConfig`. */
export const aliasCreateBody = z.strictObject({
  name: id(),
  description: z.string().min(1).max(1000).optional(),
  targets: z.array(z.strictObject({ revision: id(), weight: z.number().min(0, 'expected a weight >= 0') })).optional(),
  revision: id().optional(),
  fallbacks: z.array(id()).optional(),
});
export const aliasPutBody = aliasCreateBody.omit({ name: true }).extend({ name: id().optional() });

export const poolCreateBody = z.strictObject({ id: id(), description: z.string().max(1000).optional(), kind: z.enum(['shared', 'dedicated']).optional() });
export const poolPutBody = poolCreateBody.omit({ id: true });

/** The file's `defaults` section; its fields are checked by `parseConfig`. */
export const defaultsBody = z.record(z.string(), z.unknown());

export const adminTokenCreateBody = z.strictObject({ role: z.enum(['admin', 'viewer']), label: z.string().min(1, 'expected a label saying whose token this is').max(200) });

/**
 * Parses `body` with `schema`.
 * @throws WeirError `invalid_request` naming every bad field and what was expected (`param` = the first).
 */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (body === undefined) body = {};
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new WeirError('invalid_request', 'The body must be a JSON object.');
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issues = result.error.issues.flatMap((iss) => {
    const at = iss.path.map(String).join('.');
    if (iss.code === 'unrecognized_keys') return iss.keys.map((k) => ({ param: at ? `${at}.${k}` : k, message: 'unknown field; remove it' }));
    return [{ param: at, message: iss.message }];
  });
  throw new WeirError('invalid_request', `Invalid body: ${issues.map((i) => (i.param ? `${i.param}: ${i.message}` : i.message)).join('; ')}.`, { param: issues[0]?.param || undefined });
}

import { z } from 'zod';
import { describeValue } from './config-error';

/**
 * The zod schema of the configuration file, in the file's own snake_case naming. Every object
 * is strict (an unknown key is an error, so typos are caught) and every field's error message
 * says what was expected and what was found. `parse-config.ts` runs the cross-checks and maps
 * the result to `@weir/core`'s camelCase `PlatformConfig`.
 */

/** The part of a zod issue the message builders read. */
interface IssueLike {
  readonly code?: string;
  readonly input?: unknown;
}

/** Builds a zod error function: `required (<desc>)` when missing, else `expected <desc>, got <value>`. */
function expecting(desc: string): (iss: IssueLike) => string {
  return (iss) => (iss.input === undefined ? `required (${desc})` : `expected ${desc}, got ${describeValue(iss.input)}`);
}

/** Every key the schema knows, for "did you mean" hints on unknown keys. */
export const KNOWN_KEYS = new Set<string>();

/**
 * Marks an `unrecognized_keys` message that carries the object's known keys (as JSON) to
 * `parse-config.ts`, which turns it into one "unknown key (did you mean …?)" problem per key.
 */
const KNOWN_KEYS_MARKER = 'weir:known-keys:';

/** The known keys of the object an `unrecognized_keys` issue came from (empty if not marked). */
export function knownKeysFromMessage(message: string): string[] {
  return message.startsWith(KNOWN_KEYS_MARKER) ? (JSON.parse(message.slice(KNOWN_KEYS_MARKER.length)) as string[]) : [];
}

function strict<T extends z.ZodRawShape>(shape: T) {
  const keys = Object.keys(shape);
  for (const key of keys) KNOWN_KEYS.add(key);
  const mapping = expecting('a mapping');
  return z.strictObject(shape, {
    error: (iss: IssueLike) => (iss.code === 'unrecognized_keys' ? `${KNOWN_KEYS_MARKER}${JSON.stringify(keys)}` : mapping(iss)),
  });
}

function list<T extends z.ZodType>(item: T, what: string) {
  return z.array(item, { error: expecting(`a list of ${what}`) });
}

function int(min: number, max?: number) {
  const desc = max === undefined ? `an integer >= ${min}` : `an integer from ${min} to ${max}`;
  const error = expecting(desc);
  const base = z.number({ error }).int({ error }).min(min, { error });
  return max === undefined ? base : base.max(max, { error });
}

function nonNegativeNumber() {
  const error = expecting('a number >= 0');
  return z.number({ error }).min(0, { error });
}

/** A rate in (0, 1]. */
function rate() {
  const error = expecting('a number > 0 and <= 1');
  return z.number({ error }).gt(0, { error }).max(1, { error });
}

/**
 * An optional section that may be written empty: YAML reads `aliases:` with every entry
 * commented out as null, which means "none here", so null counts as absent.
 */
function section<T extends z.ZodType>(schema: T) {
  return z.preprocess((value) => (value === null ? undefined : value), schema);
}

const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$/;
function id() {
  const error = expecting('a name of 1 to 128 letters, digits or . _ : @ / - (starting with a letter or digit)');
  return z.string({ error }).regex(ID_PATTERN, { error });
}

/**
 * An internal id (issue 14 §4, `@weir/core` internal-ids): the id itself, or `<id>~<hex>`.
 * The control plane writes it into its snapshots; a configuration file leaves it out.
 */
const INTERNAL_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}(~[0-9a-f]{8,64})?$/;
function internalId() {
  const error = expecting('an internal id: the id, or <id>~<hex> (set by the control plane; leave it out of a configuration file)');
  return z.string({ error }).regex(INTERNAL_ID_PATTERN, { error });
}

function text(maxLength = 200) {
  const error = expecting(`a non-empty string of at most ${maxLength} characters`);
  return z.string({ error }).min(1, { error }).max(maxLength, { error });
}

function httpUrl() {
  const error = expecting('an http:// or https:// URL');
  return z.string({ error }).refine(isHttpUrl, { error });
}

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

const llamaCppEngine = strict({
  kind: z.literal('llamacpp'),
  model_path: text(4096).optional(),
  model_sha256: z
    .string({ error: expecting('a sha256 digest (64 hex characters)') })
    .regex(/^[0-9a-fA-F]{64}$/, { error: expecting('a sha256 digest (64 hex characters)') })
    .transform((s) => s.toLowerCase())
    .optional(),
  model_url: httpUrl().optional(),
  threads: int(1, 256).default(1),
  sequences: int(1, 1024).default(4),
  context_size: int(1).optional(),
  test_token_delay_ms: int(0, 60_000).default(0),
});

/**
 * A hosted upstream's tokenizer (`TokenizerName` in `@weir/core`): a tiktoken encoding Weir
 * runs offline (js-tiktoken) for OpenAI model families, or `none` (the default).
 */
function tokenizer() {
  const error = expecting('one of "o200k_base" (GPT-4o, GPT-4.1, o-series, gpt-5), "cl100k_base" (GPT-4, GPT-3.5-turbo), "none"');
  return z.enum(['o200k_base', 'cl100k_base', 'none'], { error }).default('none');
}

const openAICompatibleEngine = strict({
  kind: z.literal('openai-compatible'),
  base_url: httpUrl(),
  upstream_model: text(),
  api_key_env: z
    .string({ error: expecting('an environment variable name such as OPENAI_API_KEY') })
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: expecting('an environment variable name such as OPENAI_API_KEY') })
    .optional(),
  api: z.enum(['chat', 'completions'], { error: expecting('one of "chat", "completions"') }).default('chat'),
  first_token_timeout_ms: int(1).default(30_000),
  idle_timeout_ms: int(1).default(30_000),
  max_concurrency: int(1).default(16),
  continuous_usage_stats: z.boolean({ error: expecting('true or false') }).default(false),
  tokenizer: tokenizer(),
});

/**
 * Anthropic's Messages API. `base_url` is the API's origin (`https://api.anthropic.com`); the
 * key is named by `api_key_env` (an `api_key` value is refused as an unknown key, with a hint).
 * Defaults as openai-compatible: 30 s timeouts, 16 concurrent requests.
 */
const anthropicEngine = strict({
  kind: z.literal('anthropic'),
  base_url: httpUrl(),
  upstream_model: text(),
  api_key_env: z
    .string({ error: expecting('an environment variable name such as ANTHROPIC_API_KEY') })
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: expecting('an environment variable name such as ANTHROPIC_API_KEY') })
    .optional(),
  first_token_timeout_ms: int(1).default(30_000),
  idle_timeout_ms: int(1).default(30_000),
  max_concurrency: int(1).default(16),
  tokenizer: tokenizer(),
});

/**
 * A simulated GPU replica (capacity and load work only; see docs/capacity.md). Defaults are
 * issue 5's example profile: 10,000 prefill tokens/s, 20 ms decode step at batch 1 rising to
 * 40 ms at batch 32, 65,536 KV tokens, 32 sequences.
 */
const simulatedEngine = strict({
  kind: z.literal('simulated'),
  prefill_tokens_per_second: z
    .number({ error: expecting('a number > 0 (prompt tokens/s)') })
    .positive({ error: expecting('a number > 0 (prompt tokens/s)') })
    .default(10_000),
  decode_step_ms: z
    .array(
      z.tuple(
        [
          z.number({ error: expecting('a batch size, an integer >= 1') }).int({ error: expecting('a batch size, an integer >= 1') }).min(1, { error: expecting('a batch size, an integer >= 1') }),
          z.number({ error: expecting('a step time in ms > 0') }).positive({ error: expecting('a step time in ms > 0') }),
        ],
        { error: expecting('a [batch, ms] pair such as [1, 20]') },
      ),
      { error: expecting('a list of [batch, ms] pairs such as [[1, 20], [32, 40]]') },
    )
    .min(1, { error: expecting('at least one [batch, ms] pair such as [[1, 20], [32, 40]]') })
    .default([
      [1, 20],
      [32, 40],
    ]),
  kv_tokens: int(1).default(65_536),
  max_sequences: int(1, 4096).default(32),
  seed: int(0).default(1),
});

const ENGINE_KINDS = ['llamacpp', 'openai-compatible', 'anthropic', 'simulated'] as const;

const engine = z.discriminatedUnion('kind', [llamaCppEngine, openAICompatibleEngine, anthropicEngine, simulatedEngine], {
  error: (iss: IssueLike) => {
    const input = iss.input;
    if (input === null || typeof input !== 'object' || Array.isArray(input)) return expecting('a mapping')(iss);
    const kind = (input as Record<string, unknown>).kind;
    return expecting(`one of ${ENGINE_KINDS.map((k) => JSON.stringify(k)).join(', ')}`)({ input: kind });
  },
});

const pricing = strict({
  input_per_mtok: nonNegativeNumber(),
  output_per_mtok: nonNegativeNumber(),
  /** Cache reads (input tokens read from a prompt cache). Default: `input_per_mtok`. */
  cached_input_per_mtok: nonNegativeNumber().optional(),
  /** Cache writes (input tokens written to a prompt cache, Anthropic). Default: `input_per_mtok`. */
  cache_write_input_per_mtok: nonNegativeNumber().optional(),
  /** Reasoning output tokens (part of the output at OpenAI). Default: `output_per_mtok`. */
  reasoning_per_mtok: nonNegativeNumber().optional(),
});

/** A remote replica of a revision (split topology): an OpenAI-compatible server such as apps/engine-llamacpp. */
/** A replica's base URL: an http(s) URL ending in `/v1` (the engine servers' OpenAI-compatible root). */
function replicaBaseUrl() {
  const error = expecting('an http:// or https:// URL ending in /v1, e.g. http://10.0.0.5:8000/v1');
  return z.string({ error }).refine((v) => isHttpUrl(v) && /\/v1\/?$/.test(new URL(v).pathname), { error });
}

const replica = strict({
  id: id(),
  base_url: replicaBaseUrl(),
  slots: int(1, 4096),
  /** `interactive`, `batch` or a tenant's `dedicated_pool`; default the revision's `pool` (parse-config.ts checks the pools). */
  pool: id().optional(),
  kv_tokens: int(1).optional(),
});

/** What a revision supports; absent fields take the engine kind's defaults (`defaultCapabilities`). */
const capabilities = strict({
  streaming: z.boolean({ error: expecting('true or false') }).optional(),
  tools: z.boolean({ error: expecting('true or false') }).optional(),
  json_output: z.boolean({ error: expecting('true or false') }).optional(),
});

/**
 * A UTC calendar day written `YYYY-MM-DD` (quote it or not: a YAML 1.1 timestamp that arrives
 * as a date is read back as its UTC day). The day must exist (no 2026-02-30).
 */
function isoDay() {
  const error = expecting('a date written YYYY-MM-DD (a UTC day), e.g. "2026-09-30"');
  return z.preprocess(
    (value) => (value instanceof Date && !Number.isNaN(value.getTime()) ? value.toISOString().slice(0, 10) : value),
    z.string({ error }).refine((v) => /^\d{4}-\d{2}-\d{2}$/.test(v) && new Date(`${v}T00:00:00Z`).toISOString().slice(0, 10) === v, { error }),
  );
}

/**
 * A revision's deprecation: the day it retires (from 00:00 UTC it answers `model_retired`), the
 * revision to move to, and the day the countdown is announced. parse-config.ts checks that the
 * replacement exists, is another revision and does not retire first, and that the announcement
 * comes before the retirement.
 */
const deprecation = strict({
  retires_on: isoDay(),
  replacement: id(),
  announced_on: isoDay().optional(),
});

const USE_CASE = /^[A-Za-z0-9._:-]{1,64}$/;
function useCase() {
  const error = expecting('a use case of 1 to 64 letters, digits or . _ : -');
  return z.string({ error }).regex(USE_CASE, { error });
}

/** A tenant's routing override for one alias (optionally one use case): a pin and/or its own fallback chain. */
const tenantRoute = strict({
  alias: id(),
  use_case: useCase().optional(),
  pin: id().optional(),
  fallbacks: list(id(), 'revision ids').optional(),
});

/** An embedding revision's vectors (`kind: embedding`): their size, and whether the upstream shortens them on request. */
const embeddingSpec = strict({
  dimensions: int(1),
  variable_dimensions: z.boolean({ error: expecting('true or false') }).optional(),
});

const revision = strict({
  id: id(),
  model: id(),
  engine,
  /** `generation` (default) or `embedding` (serves POST /v1/embeddings only; llamacpp or openai-compatible engines). */
  kind: z.enum(['generation', 'embedding'], { error: expecting('"generation" or "embedding"') }).optional(),
  embedding: embeddingSpec.optional(),
  context_window: int(1),
  max_output_tokens: int(1),
  default_output_tokens: int(1),
  pricing,
  replicas: list(replica, 'replicas').optional(),
  /**
   * Pool of the in-process replica and default of the `replicas`' (default `interactive`). A
   * revision an alias targets needs some replica outside `batch` (parse-config.ts).
   */
  pool: id().optional(),
  kv_tokens: int(1).optional(),
  capabilities: capabilities.optional(),
  deprecation: deprecation.optional(),
});

/**
 * The largest weight of one alias target. Weights are relative (an arm's share is its weight ÷
 * the sum of the alias's weights); the bound keeps every sum finite and far from float
 * overflow (a weight of 1e308 twice sums to Infinity, which made every share 0 and sent all
 * traffic to one arm), while leaving room for shares as fine as 1 in a million.
 */
export const MAX_ALIAS_TARGET_WEIGHT = 1_000_000;

const aliasTarget = strict({
  revision: id(),
  /** A finite number from 0 to {@link MAX_ALIAS_TARGET_WEIGHT}; 0 keeps the arm listed without traffic. */
  weight: (() => {
    const error = expecting(`a number from 0 to ${MAX_ALIAS_TARGET_WEIGHT}`);
    return z.number({ error }).min(0, { error }).max(MAX_ALIAS_TARGET_WEIGHT, { error });
  })(),
});

const alias = strict({
  name: id(),
  description: text(1000).optional(),
  targets: list(aliasTarget, 'targets').optional(),
  revision: id().optional(),
  fallbacks: list(id(), 'revision ids').optional(),
});

/** Limits shared by tenants and apps; absent means no limit at that scope. */
const limitFields = {
  requests_per_minute: int(1).optional(),
  tokens_per_minute: int(1).optional(),
  input_tokens_per_minute: int(1).optional(),
  output_tokens_per_minute: int(1).optional(),
  monthly_budget_usd: nonNegativeNumber().optional(),
  daily_budget_usd: nonNegativeNumber().optional(),
};

/** A use case's limits: an app's without the session caps. */
const scopeLimits = strict({ max_concurrent: int(1).optional(), ...limitFields });

/**
 * An app's limits, with its session caps (`x-weir-session-id`): an app that sets
 * `session_max_tokens` or `session_budget_usd` allows sessions.
 */
const appLimits = strict({
  max_concurrent: int(1).optional(),
  ...limitFields,
  session_max_tokens: int(1).optional(),
  session_budget_usd: nonNegativeNumber().optional(),
  session_idle_ttl_ms: int(1_000, 7 * 24 * 3_600_000).optional(),
});

const app = strict({
  id: id(),
  /** The app's internal id (control-plane snapshots only). */
  uid: internalId().optional(),
  name: text(),
  limits: section(appLimits.prefault({})),
});

const tenantLimits = strict({
  max_concurrent: int(1).default(64),
  ...limitFields,
});

/** A category name as OpenAI spells them (`violence`, `self-harm/intent`) or the tenant's own (`custom`). */
const categoryName = () =>
  z.string({ error: expecting("a category such as 'violence' or 'self-harm/intent'") }).regex(/^[a-z][a-z0-9-]*(\/[a-z][a-z0-9-]*)?$/, { error: expecting("a category such as 'violence' or 'self-harm/intent'") }).max(64);

/** A tenant's lists and RE2 patterns (compiled and checked in parse-config.ts). */
export const moderationRulesSchema = strict({
  lists: z.array(strict({ category: categoryName(), phrases: z.array(z.string({ error: expecting('a phrase') })).min(1, { error: 'give at least one phrase' }) })).optional(),
  patterns: z.array(strict({ category: categoryName(), pattern: z.string({ error: expecting('an RE2 pattern') }) })).optional(),
});

const failMode = () => z.enum(['open', 'closed'], { error: expecting('one of "open", "closed"') }).default('closed');

/** A tenant's moderation policy (docs/safety.md, "Moderation"); engine names are checked in parse-config.ts. */
export const moderationPolicySchema = strict({
  input: strict({
    engine: id(),
    block_on: z.array(categoryName()).min(1, { error: 'give at least one category, or leave block_on out' }).optional(),
    fail: failMode(),
    timeout_ms: int(1, 60_000).default(2_000),
  }).optional(),
  output: strict({
    engine: id(),
    block_on: z.array(categoryName()).min(1, { error: 'give at least one category, or leave block_on out' }).optional(),
    window_chars: int(16, 100_000).default(400),
    overlap_chars: int(0, 99_999).default(64),
    fail: failMode(),
    timeout_ms: int(1, 60_000).default(2_000),
  }).optional(),
  rules: moderationRulesSchema.optional(),
});

/** A declared moderation engine (`defaults.moderation_engines`). */
export const moderationEngineSchema = z.discriminatedUnion('kind', [
  strict({ name: id(), kind: z.literal('rules'), rules: moderationRulesSchema.optional() }),
  strict({
    name: id(),
    kind: z.literal('openai'),
    base_url: httpUrl(),
    api_key_env: z
      .string({ error: expecting('an environment variable name such as OPENAI_API_KEY') })
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: expecting('an environment variable name such as OPENAI_API_KEY') })
      .optional(),
    model: text().optional(),
    timeout_ms: int(1, 60_000).default(5_000),
  }),
]);

const TEMPLATE_ENTRY = /^[A-Za-z0-9._:/-]{1,128}(@[A-Za-z0-9._-]{1,64})?$/;

/** A tenant's response-cache policy (docs/caching.md); absent = no cache. */
const tenantCache = strict({
  exact: section(
    strict({
      enabled: z.boolean({ error: expecting('true or false') }).default(false),
      /** Time to live of an entry: 1 s to 30 days. */
      ttl_ms: int(1_000, 30 * 24 * 3_600_000).default(600_000),
    }).prefault({}),
  ),
  /**
   * The semantic tier's policy (docs/caching.md "Semantic cache"): the shape here; the threshold
   * floor and the embedding revision are checked by `parseSemanticCachePolicy` of `@weir/cache`
   * in the cross-checks (parse-config.ts), so the file, the admin API and snapshots obey one rule.
   */
  semantic: section(
    strict({
      enabled: z.boolean({ error: expecting('true or false') }).default(false),
      /** Default: the exact tier's TTL when it is on, else 1 h. */
      ttl_ms: int(1_000, 30 * 24 * 3_600_000).optional(),
      threshold: z.number({ error: expecting('a number from 0.95 to 1') }).optional(),
      embedding_revision: id().optional(),
    }).optional(),
  ),
  /** Only `temperature: 0` or seeded requests are cached. */
  deterministic_only: z.boolean({ error: expecting('true or false') }).default(true),
  /** A non-deterministic request may opt in with `weir_cache: "opt_in"`. */
  allow_opt_in: z.boolean({ error: expecting('true or false') }).default(true),
  /** Declared prompt templates: `name` (any version) or `name@version`; others are refused with 400. */
  templates: list(z.string({ error: expecting('a template name or name@version') }).regex(TEMPLATE_ENTRY, { error: expecting('a template name or name@version') }), 'templates').optional(),
  /** A hit is billed this fraction of the cached usage's price (0 to 1). */
  hit_price_fraction: z.number({ error: expecting('a number from 0 to 1') }).min(0, { error: expecting('a number from 0 to 1') }).max(1, { error: expecting('a number from 0 to 1') }).default(0.1),
  /** Use cases whose traffic is personalised: never cached nor served from the cache. */
  personalised_use_cases: list(useCase(), 'use cases').optional(),
});

/**
 * A use case of a tenant (the gateway seed's `TeamPolicy`): model chain, version policy, limits
 * and budget, redaction profile. Cross-checks (alias, revisions, capabilities, profile, unique
 * names) are in parse-config.ts.
 */
const useCasePolicy = strict({
  name: useCase(),
  /** The primary model: an alias the tenant may use. */
  model: id(),
  /** Version policy: pinned to this revision; absent = follow the alias (its canary split). */
  pin: id().optional(),
  /** Fallback revisions, in order. */
  fallbacks: list(id(), 'revision ids').optional(),
  limits: section(scopeLimits.prefault({})),
  /** The PII redaction profile of this use case's content (default: the tenant's). */
  redaction_profile: id().optional(),
});

const tenant = strict({
  id: id(),
  /** The tenant's internal id (control-plane snapshots only): what its state is filed under. */
  uid: internalId().optional(),
  name: text(),
  apps: section(list(app, 'apps').default([])),
  allowed_aliases: list(z.string({ error: expecting('an alias name or "*"') }), 'alias names').default(['*']),
  default_deadline_ms: int(1).default(120_000),
  limits: section(tenantLimits.prefault({})),
  scheduling_weight: z.number({ error: expecting('a number > 0') }).gt(0, { error: expecting('a number > 0') }).optional(),
  /** The pool this tenant's requests run on, only there: some replica must be in it (parse-config.ts). */
  dedicated_pool: id().optional(),
  routes: section(list(tenantRoute, 'routes').default([])),
  /** Refuse every request of the tenant (403 `tenant_disabled`). */
  disabled: z.boolean({ error: expecting('true or false') }).default(false),
  /** Emergency stop of the tenant's requests (503 `kill_switch`). */
  kill_switch: z.boolean({ error: expecting('true or false') }).default(false),
  /** Prompt and output text may be logged, and only after `redaction_profile` has run (without one nothing is logged). */
  content_logging: z.boolean({ error: expecting('true or false') }).default(false),
  /** The PII redaction profile run before any content is logged: a built-in (`default`, `strict`) or one of `redaction_profiles`. */
  redaction_profile: id().optional(),
  /** Input and output moderation (off when absent). */
  moderation: moderationPolicySchema.optional(),
  /** Redact prompts with `redaction_profile` before they are sent upstream (billing counts what was sent). */
  redact_upstream: z.boolean({ error: expecting('true or false') }).default(false),
  /** The response cache (docs/caching.md). */
  cache: section(tenantCache.optional()),
  /** The tenant's use cases: a request naming one may omit `model` (docs/api.md "Use cases"). */
  use_cases: section(list(useCasePolicy, 'use cases').default([])),
});

/** A custom RE2 pattern of a redaction profile (compiled and checked in parse-config.ts). */
const customPattern = strict({
  name: z.string({ error: expecting('a name (a letter, then letters, digits, _ or -)') }),
  pattern: z.string({ error: expecting('an RE2 regular expression') }),
});

/** A named PII redaction profile (`@weir/redaction`): recognizer ids, custom patterns, replacement. */
const redactionProfile = strict({
  recognizers: list(z.string({ error: expecting('a recognizer id') }), 'recognizer ids').default([]),
  custom_patterns: section(list(customPattern, 'custom patterns').default([])),
  replacement: z.enum(['tag', 'hash'], { error: expecting("'tag' or 'hash'") }).default('tag'),
  entropy_min_length: int(12, 4096).optional(),
  redact_uuids: z.boolean({ error: expecting('true or false') }).optional(),
});

const defaults = strict({
  /**
   * Moderation engines tenants' policies may name (besides the built-in `rules`). Under
   * `defaults` so control-plane snapshots carry them with the platform defaults.
   */
  moderation_engines: z.array(moderationEngineSchema).default([]),
  cancel_grace_ms: int(0, 1000).default(250),
  max_body_bytes: int(1).default(1024 * 1024),
  /** Deepest nesting of arrays and objects in a JSON request body (docs/security.md §3). */
  max_body_depth: int(1, 1000).default(64),
  sse_heartbeat_ms: int(1).default(15_000),
  max_queue_per_replica: int(1).default(256),
  scheduling: section(
    strict({
      max_queue_bytes_per_replica: int(1).default(16 * 1024 * 1024),
      tenant_queue_share: z.number({ error: expecting('a number > 0 and <= 1') }).gt(0, { error: expecting('a number > 0 and <= 1') }).max(1, { error: expecting('a number > 0 and <= 1') }).default(0.5),
      quantum_tokens: int(1).default(256),
      prior_prefill_tokens_per_s: z.number({ error: expecting('a number > 0 (tokens/s)') }).gt(0, { error: expecting('a number > 0 (tokens/s)') }).default(1_000),
      prior_decode_tokens_per_s: z.number({ error: expecting('a number > 0 (tokens/s)') }).gt(0, { error: expecting('a number > 0 (tokens/s)') }).default(20),
      ewma_alpha: z.number({ error: expecting('a number > 0 and <= 1') }).gt(0, { error: expecting('a number > 0 and <= 1') }).max(1, { error: expecting('a number > 0 and <= 1') }).default(0.2),
      pushback_ms: int(0, 5_000).default(1_000),
      fair_share_headroom: z.number({ error: expecting('a number >= 0 and <= 0.5') }).min(0, { error: expecting('a number >= 0 and <= 0.5') }).max(0.5, { error: expecting('a number >= 0 and <= 0.5') }).default(0.1),
      tpot_target_ms: z.number({ error: expecting('a number > 0 (ms)') }).gt(0, { error: expecting('a number > 0 (ms)') }).optional(),
    }).prefault({}),
  ),
  admission: section(
    strict({
      reservation_grace_ms: int(0).default(60_000),
      idempotency_retention_ms: int(1000).default(86_400_000),
      burn_rate_factor: z.number({ error: expecting('a number > 1') }).gt(1, { error: expecting('a number > 1') }).default(3),
      burn_rate_baseline_hours: int(1, 24 * 30).default(24),
      burn_rate_min_hourly_usd: nonNegativeNumber().default(1),
    }).prefault({}),
  ),
  /** Where the response cache's exact tier lives and how big it may grow (docs/caching.md). */
  cache: section(
    strict({
      /** `memory`: in each gateway process (the default); `postgres`: shared by a fleet (table `response_cache`). */
      exact_store: z.enum(['memory', 'postgres'], { error: expecting('memory or postgres') }).default('memory'),
      /** The exact tier's size budget (bytes): each in-process tier's, or the Postgres table's (trimmed every minute). Default 64 MiB. */
      max_bytes: int(1_024).default(64 * 1024 * 1024),
      /** One tenant's share of it (bytes; enforced on every store, in either store). Default a quarter of `max_bytes`. */
      max_bytes_per_tenant: int(1_024).optional(),
      /** How long a request's cache lookups may take before they count as a miss (ms). */
      lookup_timeout_ms: int(1, 10_000).default(50),
      /** Where the semantic tier lives: `memory` or `postgres` (table `semantic_cache_entries`). Default: as `exact_store`. */
      semantic_store: z.enum(['memory', 'postgres'], { error: expecting('memory or postgres') }).optional(),
      /** The lookup budget (ms, exact and semantic together) of a tenant whose semantic tier is on: it embeds the prompt. Default 250. */
      semantic_lookup_timeout_ms: int(1, 10_000).default(250),
    }).prefault({}),
  ),
  /** Circuit breakers per revision and per provider; defaults as `DEFAULT_CIRCUIT_BREAKER` in `@weir/core`. */
  circuit_breaker: section(
    strict({
      window_ms: int(100).default(10_000),
      error_rate: rate().default(0.2),
      min_requests: int(1).default(20),
      open_ms: int(0).default(5_000),
      half_open_probes: int(1).default(3),
      /** `null` turns the latency trigger off. */
      slow_call_ms: int(1).nullable().default(10_000),
      slow_call_rate: rate().default(0.8),
    }).prefault({}),
  ),
});

/** The configuration file's schema (snake_case, defaults applied, before cross-checks). */
export const configFileSchema = strict({
  revisions: list(revision, 'revisions').min(1, { error: 'expected at least one revision' }),
  aliases: section(list(alias, 'aliases').default([])),
  tenants: section(list(tenant, 'tenants').default([])),
  /** Named PII redaction profiles, besides the built-in `default` and `strict`. */
  redaction_profiles: section(z.record(id(), redactionProfile, { error: expecting('a mapping of profile names to profiles') }).default({})),
  defaults: section(defaults.prefault({})),
});

/** The parsed file, snake_case, defaults applied. */
export type ConfigFile = z.output<typeof configFileSchema>;

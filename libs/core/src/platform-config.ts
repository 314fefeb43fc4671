/**
 * The validated platform configuration, as every service sees it after `@weir/config` has
 * parsed the file (snake_case on disk, camelCase here). Immutable once loaded: services
 * never re-parse it per request.
 */

/**
 * A revision's prices, USD per million tokens, one per token class (docs/admin-api.md
 * "Prices"; priced by `priceUsage` in `@weir/ledger`).
 */
export interface RevisionPricing {
  /** Input tokens neither read from nor written to a prompt cache. */
  inputPerMTok: number;
  /** Output tokens other than reasoning tokens. */
  outputPerMTok: number;
  /** Input tokens read from a prompt cache (cache reads); `pricing.cached_input_per_mtok`, default `inputPerMTok`. */
  cachedInputPerMTok: number;
  /**
   * Input tokens written to a prompt cache (Anthropic's `cache_creation_input_tokens`);
   * `pricing.cache_write_input_per_mtok`. Absent: `inputPerMTok`.
   */
  cacheWriteInputPerMTok?: number;
  /**
   * Reasoning output tokens (OpenAI's `completion_tokens_details.reasoning_tokens`, part of the
   * output); `pricing.reasoning_per_mtok`. Absent: `outputPerMTok`.
   */
  reasoningPerMTok?: number;
}

/** The llama.cpp engine on a local GGUF file (node-llama-cpp). */
export interface LlamaCppEngineSpec {
  kind: 'llamacpp';
  /** Absolute path of the GGUF file, resolved at load (WEIR_MODEL_PATH overrides the default model's). */
  modelPath?: string;
  /** Expected sha256 (hex) of the GGUF file; checked after a download. */
  modelSha256?: string;
  /** Public download URL, used when `modelPath` does not exist and downloads are allowed. */
  modelUrl?: string;
  /** CPU threads for decode; default 1 (on 2 cores more threads are far slower). */
  threads: number;
  /** Parallel sequences in the one context (continuous batching); default 4. */
  sequences: number;
  /** Context tokens per sequence; default the revision's context window. */
  contextSize: number;
  /** Test-only: sleep this long (ms) after each token, to make a slow producer. Default 0. */
  testTokenDelayMs: number;
}

/**
 * The tokenizer Weir runs itself for a hosted upstream's revision (issue 13): a tiktoken
 * encoding (js-tiktoken, offline, loaded on first use) for OpenAI model families —
 * `o200k_base` (GPT-4o, GPT-4.1, o1/o3/o4, gpt-5) and `cl100k_base` (GPT-4, GPT-3.5-turbo) —
 * or `none`. With one, prompt tokens are counted with it for admission (plus a per-message
 * overhead: an upper bound), and output the upstream did not report (a cut stream without
 * continuous usage) is counted from the text received (`usage_source: counted`); without one,
 * the UTF-8 byte bound reserves and content deltas are counted (`estimated`). A llama.cpp
 * revision always uses its engine's own tokenizer.
 */
export type TokenizerName = 'o200k_base' | 'cl100k_base' | 'none';

/** An OpenAI-compatible HTTP upstream (vLLM, TGI, llama.cpp server, Ollama, OpenAI). */
export interface OpenAICompatibleEngineSpec {
  kind: 'openai-compatible';
  /** Base URL including `/v1`, e.g. `http://127.0.0.1:8000/v1`. */
  baseUrl: string;
  /** The model name the upstream expects. */
  upstreamModel: string;
  /** Name of the environment variable holding the upstream API key (never the key itself). */
  apiKeyEnv?: string;
  /** Which chat/completion endpoint to call; default `chat`. */
  api: 'chat' | 'completions';
  /** Cut the call when no first byte/token arrives within this (ms). Default 30,000. */
  firstTokenTimeoutMs: number;
  /** Cut the call when the stream is silent this long between events (ms). Default 30,000. */
  idleTimeoutMs: number;
  /** Parallel requests this upstream accepts from one Weir replica. Default 16. */
  maxConcurrency: number;
  /**
   * Ask for cumulative usage on every chunk (vLLM's `stream_options.continuous_usage_stats`,
   * also served by `apps/engine-llamacpp`), so a stream stopped mid-way is billed from the
   * upstream's own count rather than an estimate. Only for upstreams that accept it. Default false.
   */
  continuousUsageStats?: boolean;
  /**
   * The upstream is a Weir engine (`apps/engine-llamacpp`): a cancel asks it to stop
   * (`POST /v1/stop/{generation id}`) and reads its final usage, instead of cutting the
   * connection, so a cut stream is billed exactly. Default false.
   */
  gracefulStop?: boolean;
  /** The revision's tokenizer (see {@link TokenizerName}). Default `none`. */
  tokenizer?: TokenizerName;
}

/**
 * Anthropic's Messages API (`POST {baseUrl}/v1/messages`, streaming), served by
 * `createAnthropicEngine` of `@weir/engines`. A hosted upstream, like an OpenAI-compatible one:
 * prompt tokens are counted with the declared tokenizer (`tokenizer`) or the UTF-8 upper bound, never a network call.
 */
export interface AnthropicEngineSpec {
  kind: 'anthropic';
  /**
   * The API's origin, e.g. `https://api.anthropic.com` (the adapter appends `/v1/messages`;
   * a trailing `/v1` is accepted, not doubled).
   */
  baseUrl: string;
  /** The model name the API expects, e.g. `claude-sonnet-4-5`. */
  upstreamModel: string;
  /** Name of the environment variable holding the API key, sent as `x-api-key` (never the key itself). */
  apiKeyEnv?: string;
  /** Cut the call when no first text arrives within this (ms). Default 30,000. */
  firstTokenTimeoutMs: number;
  /** Cut the call when the stream is silent this long after the first text (ms). Default 30,000. */
  idleTimeoutMs: number;
  /** Parallel requests this upstream accepts from one Weir replica. Default 16. */
  maxConcurrency: number;
  /**
   * A tokenizer to count with where the API reports nothing (see {@link TokenizerName}).
   * Claude's tokenizer is not public: a tiktoken encoding only approximates it. Default `none`.
   */
  tokenizer?: TokenizerName;
}

/**
 * A simulated GPU replica (`@weir/capacity`'s replica model driven in real time): no model, it
 * emits filler tokens (`tok1 tok2 …`) with the timing of the profile below. For capacity and
 * load work only; never presented as a real model. See docs/capacity.md.
 */
export interface SimulatedEngineSpec {
  kind: 'simulated';
  /** Prompt tokens prefilled per second (tokens/s). */
  prefillTokensPerSecond: number;
  /** Decode step time by batch size: `[batch, ms]` points, batches increasing, linear between them. */
  decodeStepMs: Array<[batch: number, ms: number]>;
  /** KV-cache capacity: context tokens (input + generated) across active sequences. */
  kvTokens: number;
  /** Largest running batch (concurrent sequences). */
  maxSequences: number;
  /**
   * Seed recorded with the profile, for replaying its arrivals and token lengths offline
   * (`weir capacity --simulate --seed`). The live engine draws nothing: its output is
   * deterministic. Default 1.
   */
  seed: number;
}

/** Engine specs: a closed set, switched over exhaustively. */
export type EngineSpec = LlamaCppEngineSpec | OpenAICompatibleEngineSpec | AnthropicEngineSpec | SimulatedEngineSpec;

/**
 * What a revision serves: `generation` (text: `/v1/chat/completions`, `/v1/completions`,
 * `/v1/responses`, `/v1/generations`) or `embedding` (vectors: `/v1/embeddings` only). A request
 * for the other kind is refused with 400 before anything is reserved.
 */
export type RevisionKind = 'generation' | 'embedding';

/** An embedding revision's vectors (see {@link RevisionSpec.embedding}). */
export interface EmbeddingSpec {
  /** Dimensions of the vectors the model produces. */
  dimensions: number;
  /**
   * The upstream accepts OpenAI's `dimensions` (shortened vectors, e.g. text-embedding-3-*): a
   * request may ask for 1 … `dimensions`. Only OpenAI-compatible upstreams; default false (a
   * request naming `dimensions` other than the model's is refused).
   */
  variableDimensions: boolean;
}

/** A revision's kind: declared, else `generation`. */
export function revisionKindOf(revision: Pick<RevisionSpec, 'kind'>): RevisionKind {
  return revision.kind ?? 'generation';
}

/** An immutable model revision. */
export interface RevisionSpec {
  /** Globally unique revision id, e.g. `stories260k@1`. */
  id: string;
  /** The model family this revision belongs to. */
  model: string;
  engine: EngineSpec;
  /** What it serves (see {@link RevisionKind}). Default `generation`. */
  kind?: RevisionKind;
  /** Its vectors; required when `kind` is `embedding` (llama.cpp and OpenAI-compatible engines only). */
  embedding?: EmbeddingSpec;
  /** Maximum prompt + output tokens. */
  contextWindow: number;
  /** Largest `max_output_tokens` a request may ask for. */
  maxOutputTokens: number;
  /** Output limit when a request names none (OpenAI's `/v1/completions` uses 16 instead). */
  defaultOutputTokens: number;
  pricing: RevisionPricing;
  /**
   * Remote replicas serving this revision (split topology): OpenAI-compatible servers such
   * as `apps/engine-llamacpp`. When set, relays call these instead of loading `engine`
   * in-process; `engine` still describes how the replicas are built. Default: none.
   */
  replicas?: ReplicaEndpoint[];
  /**
   * Pool of the revision's in-process engine replica (all-in-one), and the default pool of its
   * `replicas`: `interactive`, `batch`, or a dedicated pool named by tenants'
   * `dedicatedPool`. Default `interactive`.
   */
  pool?: string;
  /**
   * KV-cache tokens of the in-process engine replica (context tokens across its active
   * sequences), and the default of its `replicas`. Default: sequences × context window.
   */
  kvTokens?: number;
  /**
   * What requests to this revision may use (the capability check of fallback chains and of
   * requests). Default {@link defaultCapabilities} of its engine kind.
   */
  capabilities?: RevisionCapabilities;
  /**
   * The revision is deprecated: responses it serves carry a countdown (`Deprecation`, `Sunset`,
   * `x-weir-retires-in-days`), `/v1/models` shows it, and from `retiresOn` (UTC) requests that
   * resolve to it fail with `model_retired` naming the replacement — never a silent upgrade.
   * Default none.
   */
  deprecation?: RevisionDeprecation;
}

/** A revision's deprecation (see {@link RevisionSpec.deprecation}); dates are UTC calendar days. */
export interface RevisionDeprecation {
  /** First day (`YYYY-MM-DD`, UTC) the revision no longer serves: from 00:00 UTC that day requests get `model_retired`. */
  retiresOn: string;
  /**
   * The revision to move to (an existing revision id that retires later, if at all); named in
   * the countdown and in the retirement error. Nothing switches to it automatically.
   */
  replacement: string;
  /**
   * Day (`YYYY-MM-DD`, UTC) the deprecation is announced: the countdown is shown from this day
   * and the `Deprecation` header (RFC 9745) carries it. Default: shown at once, without a
   * `Deprecation` header (only `Sunset`).
   */
  announcedOn?: string;
}

/** What a revision supports. */
export interface RevisionCapabilities {
  /** Token-by-token streaming. */
  streaming: boolean;
  /** Tool (function) calls: `tools`, `tool_choice`, tool-call deltas. */
  tools: boolean;
  /** JSON output constrained by a schema (`response_format` / `output_schema`). */
  jsonOutput: boolean;
}

/**
 * Capabilities a revision has when its configuration declares none: every engine streams;
 * llama.cpp constrains JSON output with a grammar; Anthropic's Messages API calls tools (the
 * adapter maps them); tools and JSON output at OpenAI-compatible upstreams depend on the
 * upstream, so they must be declared.
 */
export function defaultCapabilities(engine: EngineSpec): RevisionCapabilities {
  return { streaming: true, tools: engine.kind === 'anthropic', jsonOutput: engine.kind === 'llamacpp' };
}

/** A revision's capabilities: declared, else {@link defaultCapabilities}. */
export function capabilitiesOf(revision: Pick<RevisionSpec, 'engine' | 'capabilities'>): RevisionCapabilities {
  return revision.capabilities ?? defaultCapabilities(revision.engine);
}

/** One remote replica of a revision. */
export interface ReplicaEndpoint {
  /** Stable id, e.g. `stories260k@1/0`. */
  id: string;
  /** Base URL including `/v1`. */
  baseUrl: string;
  /** Concurrent sequences it serves (its engine's sequences). */
  slots: number;
  /** Its pool (see `RevisionSpec.pool`). Default: the revision's pool, else `interactive`. */
  pool?: string;
  /** KV-cache tokens across its sequences. Default: the revision's `kvTokens`, else slots × context window. */
  kvTokens?: number;
}

/** The shared pool every request without a dedicated pool uses. */
export const INTERACTIVE_POOL = 'interactive';
/** The pool batch-class requests use when it serves their revision. */
export const BATCH_POOL = 'batch';

/** A weighted arm of an alias (the canary weight). */
export interface AliasTarget {
  revision: string;
  /** Relative weight ≥ 0. */
  weight: number;
}

/** A model alias: the name clients send as `model` / `model_alias`. */
export interface AliasSpec {
  name: string;
  targets: AliasTarget[];
  /**
   * Revisions tried in order when the chosen one fails before its first token (ids; each has
   * every capability of every target). Default none. A tenant route may replace it.
   */
  fallbacks?: string[];
  description?: string;
}

/**
 * Admission limits of one scope (a tenant, or an app of a tenant). Every field is optional:
 * absent means "no limit at this scope". A request must fit every limit of its tenant and of
 * its app. Token limits count the worst case at reservation (input tokens plus the output
 * limit) and are refunded to the measured tokens at settlement.
 */
export interface AdmissionLimits {
  /** Concurrent in-flight generations. */
  maxConcurrent?: number;
  /** Requests per minute (token bucket: capacity = the limit, refilled evenly over 60 s). */
  requestsPerMinute?: number;
  /** Input + output tokens per minute (token bucket, as above). */
  tokensPerMinute?: number;
  /** Input tokens per minute (token bucket, as above). */
  inputTokensPerMinute?: number;
  /** Output tokens per minute (token bucket, as above). */
  outputTokensPerMinute?: number;
  /** Hard budget per calendar month (UTC), USD. */
  monthlyBudgetUsd?: number;
  /** Hard budget per calendar day (UTC), USD. */
  dailyBudgetUsd?: number;
  /**
   * Apps only: the most tokens (input + output) one session may use over its life (the
   * `x-weir-session-id` header; an agent run). An app that sets this or
   * {@link sessionBudgetUsd} allows sessions; otherwise the header is ignored.
   */
  sessionMaxTokens?: number;
  /** Apps only: the most one session may spend over its life, USD. */
  sessionBudgetUsd?: number;
  /** Apps only: a session idle this long (ms) is forgotten, its usage with it. Default 3,600,000 (1 h). */
  sessionIdleTtlMs?: number;
}

/** An app of a tenant; API keys belong to an app. */
export interface AppSpec {
  id: string;
  name: string;
  /**
   * The app's internal id (`<id>~<hex>`, see `@weir/core` internal-ids), set by the control
   * plane in its snapshots; absent in a configuration file (the id is then the internal id).
   */
  uid?: string;
  /** The app's own limits, checked in addition to its tenant's. Default: none. */
  limits: AdmissionLimits;
}

/** Per-tenant limits: {@link AdmissionLimits} with a concurrency limit that is always set. */
export interface TenantLimits extends AdmissionLimits {
  /** Concurrent in-flight generations; default 64. */
  maxConcurrent: number;
}

/** A tenant (a product team). */
export interface TenantSpec {
  id: string;
  name: string;
  /**
   * The tenant's internal id (`<id>~<hex>`, see `@weir/core` internal-ids), set by the control
   * plane in its snapshots so that data-plane processes drop the state of a deleted tenant's
   * internal id when they apply one; absent in a configuration file (the slug is then the
   * internal id).
   */
  uid?: string;
  apps: AppSpec[];
  /** Alias names this tenant may use; `['*']` means all. */
  allowedAliases: string[];
  /** Default deadline when a request gives none (ms). Default 120,000. */
  defaultDeadlineMs: number;
  limits: TenantLimits;
  /**
   * Share of scheduler capacity between tenants queued in the same pool, counted in tokens
   * (deficit round robin): a tenant with weight 2 gets twice the tokens of one with weight 1
   * while both wait. Default 1.
   */
  schedulingWeight?: number;
  /**
   * The dedicated pool this tenant's requests run on (only on it: a revision that pool does not
   * serve answers `no_replica`), and which no other tenant may use. Default none (shared pools).
   */
  dedicatedPool?: string;
  /**
   * Per-alias routing of this tenant, optionally per use case: a pinned revision instead of the
   * alias's canary split, and/or its own fallback chain. The most specific route wins (alias and
   * use case, then alias alone). Default none (follow the alias).
   */
  routes?: TenantRoute[];
  /** Every request of the tenant is refused with 403 `tenant_disabled`. Default false. */
  disabled?: boolean;
  /** Emergency stop: every request of the tenant is refused with 503 `kill_switch`. Default false. */
  killSwitch?: boolean;
  /**
   * The tenant allows prompt and output text in logs (ARCHITECTURE.md §5). Even when true,
   * nothing is logged unless {@link redactionProfile} names the PII redaction to run first.
   * Default false.
   */
  contentLogging?: boolean;
  /**
   * Name of the PII redaction profile run before any content is logged: a built-in one
   * (`default`, `strict`) or one of {@link PlatformConfig.redactionProfiles}. Default none.
   */
  redactionProfile?: string;
  /**
   * Input and output moderation of the tenant's generations (docs/safety.md, "Moderation").
   * Default none: no check runs and the request path pays nothing for it.
   */
  moderation?: TenantModeration;
  /**
   * Prompts are redacted with {@link redactionProfile} before they are sent upstream (the
   * upstream never sees the redacted values; token counts and billing are of what was sent).
   * Requires a profile. Default false.
   */
  redactUpstream?: boolean;
  /**
   * The tenant's response cache (docs/caching.md). Absent: no cache at all — the request path
   * then pays nothing for it (one property read). Set only when a tier is enabled.
   */
  cache?: TenantCachePolicy;
  /**
   * The tenant's use cases (the gateway seed's `TeamPolicy`; docs/api.md "Use cases"): each
   * with its model chain, version policy, limits, budget and redaction profile. A request naming
   * one of these (body `use_case` or `x-weir-use-case`) may omit `model`; its limits hold as a
   * third admission scope (tenant → app → use case). Names are unique. Default none.
   */
  useCases?: UseCasePolicy[];
}

/**
 * One use case of a tenant (the gateway seed's `TeamPolicy` row): its model chain (`model`,
 * then `fallbacks`), version policy (`pin`: pinned to a revision, whose deprecation countdown
 * the responses carry; absent: follow the alias's canary split, which moves behind the eval
 * gate), its admission limits and monthly budget (a scope of its own under the tenant and the
 * app, same reserve-then-settle rules), and the PII redaction profile its traffic's content
 * goes through (instead of the tenant's).
 */
export interface UseCasePolicy {
  /** The use case's name: 1–64 of `[A-Za-z0-9._:-]`, as requests send it. */
  name: string;
  /** The primary model: an alias the tenant may use. */
  model: string;
  /** Pinned version: every request of the use case goes to this revision (no canary). Default: follow the alias. */
  pin?: string;
  /** Revisions tried in order when the chosen one fails before its first token (replacing the alias's). */
  fallbacks?: string[];
  /** Limits and budgets of the use case's scope (absent fields: no limit there). */
  limits: AdmissionLimits;
  /** The redaction profile of this use case's content (a built-in one or one of `redactionProfiles`). Default: the tenant's. */
  redactionProfile?: string;
}

/** The use case `name` of `tenant`, or undefined (a tenant has a handful: a scan beats building an index per snapshot). */
export function useCasePolicyOf(tenant: Pick<TenantSpec, 'useCases'> | undefined, name: string | undefined): UseCasePolicy | undefined {
  if (name === undefined || !tenant?.useCases) return undefined;
  for (const u of tenant.useCases) if (u.name === name) return u;
  return undefined;
}

/**
 * A tenant's cache policy (issue 15 items 1, 2 and 10; docs/caching.md). Entries are partitioned
 * by tenant, model revision, prompt template and every output-changing parameter; nothing is
 * ever read across partitions.
 */
export interface TenantCachePolicy {
  /** The exact tier (same canonical request → same answer). */
  exact: { enabled: boolean; /** Time to live of an entry (ms, ≥ 1,000). */ ttlMs: number };
  /** The semantic tier (another engineer's; reserved fields, validated here for shape only). */
  /**
   * The semantic tier (docs/caching.md "Semantic cache"), validated at load by
   * `parseSemanticCachePolicy` of `@weir/cache`: `ttlMs` (ms, default the exact tier's TTL when it
   * is on, else 1 h); `threshold`, the cosine similarity a hit needs, in [0.95, 1] (the floor
   * tenants cannot lower; default 0.97); `embeddingRevision`, the id of an embedding revision
   * (`kind: embedding`) prompts are embedded with, required when enabled.
   */
  semantic?: { enabled: boolean; ttlMs: number; threshold?: number; embeddingRevision?: string };
  /**
   * Only deterministic requests are cached and served from cache: `temperature` 0, or a `seed`.
   * Default true. False: every request (not personalised, not refused) is cacheable.
   */
  deterministicOnly: boolean;
  /** A non-deterministic request may still opt in (`weir_cache: "opt_in"`). Default true. */
  allowOptIn: boolean;
  /**
   * The prompt templates the tenant declares (`name` for any version, or `name@version`); a
   * request naming another is refused with 400. Absent: any well-formed template name.
   */
  templates?: string[];
  /** A hit is billed this fraction of the cached usage's price at the answering revision (0–1). Default 0.1. */
  hitPriceFraction: number;
  /** Requests of these use cases are personalised: never cached nor served from cache. Default none. */
  personalisedUseCases?: string[];
}

/** Where the response cache's exact tier lives and its bounds (config `defaults.cache`). */
export interface CacheDefaults {
  /** `memory`: in each gateway process (default); `postgres`: shared by a fleet (table `response_cache`). */
  exactStore: 'memory' | 'postgres';
  /** The exact tier's size budget (bytes): each in-process tier's, or the Postgres table's (trimmed every minute). Default 64 MiB. */
  maxBytes: number;
  /** One tenant's share of it (bytes; enforced on every store, in either store). Default a quarter of `maxBytes`. */
  maxBytesPerTenant?: number;
  /** How long a request's cache lookups may take before they count as a miss (ms). Default 50. */
  lookupTimeoutMs: number;
  /**
   * Where the semantic tier lives: `memory` (an index per partition in each gateway process) or
   * `postgres` (table `semantic_cache_entries`, shared by a fleet). Absent: as {@link exactStore}.
   */
  semanticStore?: 'memory' | 'postgres';
  /**
   * The lookup budget (ms, all tiers together) of a request whose tenant turns the semantic tier
   * on: the prompt is embedded first (about 7–16 ms on the tiny model, more on a real one or over
   * the network). Absent: 250 ({@link SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS}).
   */
  semanticLookupTimeoutMs?: number;
}

/** Default of {@link CacheDefaults.semanticLookupTimeoutMs} (ms). */
export const SEMANTIC_LOOKUP_TIMEOUT_DEFAULT_MS = 250;

/**
 * A named PII redaction profile (the file's `redaction_profiles`; `@weir/redaction` compiles it).
 * Built-in `default` and `strict` always exist and cannot be redefined.
 */
export interface RedactionProfileConfig {
  name: string;
  /** Built-in recognizer ids: `email`, `phone`, `card`, `iban`, `ssn`, `ipv4`, `ipv6`, `secret`, `entropy`. */
  recognizers: string[];
  /** Custom RE2 patterns (validated at load). Default none. */
  customPatterns?: { name: string; pattern: string }[];
  /** `tag` → `[REDACTED:EMAIL]`; `hash` → `[REDACTED:EMAIL:<12 hex of a keyed HMAC>]`. Default `tag`. */
  replacement?: 'tag' | 'hash';
  /** Shortest token the `entropy` recognizer considers (characters, 12–4,096). Default 24. */
  entropyMinLength?: number;
  /** UUIDs count as secrets (`entropy`). Default false. */
  redactUuids?: boolean;
}

/** Whether a moderation engine that fails or times out lets the text through (`open`) or blocks it (`closed`). */
export type ModerationFailMode = 'open' | 'closed';

/**
 * A tenant's moderation policy. `input` checks the prompt while the request is routed, admitted
 * and dispatched; `output` checks the answer in rolling windows as it streams. Engines are named
 * from {@link PlatformConfig.moderationEngines}, or `rules` (the built-in rules engine over this
 * tenant's {@link TenantModerationRules}).
 */
export interface TenantModeration {
  input?: {
    /** Engine name (`rules`, or one of `moderation_engines`). */
    engine: string;
    /** Categories that block; absent = any category the engine flags. */
    blockOn?: string[];
    /** On an engine error or timeout. Default `closed`. */
    fail: ModerationFailMode;
    /** Longest wait for the engine (ms, 1–60,000). Default 2,000. */
    timeoutMs: number;
  };
  output?: {
    engine: string;
    blockOn?: string[];
    /**
     * Characters of new output checked per window (the most text held back from the client,
     * plus one engine read). 16–100,000; default 400.
     */
    windowChars: number;
    /**
     * Characters of already-checked output carried into the next window, so a phrase split
     * across windows is still seen whole (phrases up to `overlapChars + 1` long). Less than
     * `windowChars`; default 64.
     */
    overlapChars: number;
    /** On an engine error or timeout. Default `closed` (the stream is cut with `content_filter`). */
    fail: ModerationFailMode;
    /** Longest wait for one window's check (ms, 1–60,000). Default 2,000. */
    timeoutMs: number;
  };
  /** The tenant's own lists and patterns for the built-in `rules` engine. Default none. */
  rules?: TenantModerationRules;
}

/** Word/phrase lists and RE2 patterns of the built-in rules engine, each under a category. */
export interface TenantModerationRules {
  /** Phrases matched case-insensitively on word boundaries (whitespace inside matches any run of whitespace). */
  lists?: { category: string; phrases: string[] }[];
  /** RE2 patterns (linear time: no lookaround, no backreferences); `(?i)` for case-insensitive. */
  patterns?: { category: string; pattern: string }[];
}

/**
 * A moderation engine the configuration declares (`moderation_engines`): `rules` runs the
 * tenant's lists and patterns (plus the engine's own); `openai` calls an OpenAI-compatible
 * `POST {baseUrl}/moderations` through the egress-checked dispatcher.
 */
export type ModerationEngineSpec =
  | { name: string; kind: 'rules'; rules?: TenantModerationRules }
  | {
      name: string;
      kind: 'openai';
      /** Base URL ending before `/moderations` (e.g. `https://api.openai.com/v1`). */
      baseUrl: string;
      /** Environment variable holding the bearer key (egress credential allowlist). Default none. */
      apiKeyEnv?: string;
      /** The upstream's moderation model. Default `omni-moderation-latest`. */
      model?: string;
      /** Per-call timeout (ms). Default 5,000. */
      timeoutMs?: number;
    };

/** One tenant routing override (see {@link TenantSpec.routes}). */
export interface TenantRoute {
  alias: string;
  /** Applies only to requests naming this use case; absent = every request of the alias. */
  useCase?: string;
  /** Revision id every matching request goes to (no canary split). Default: follow the alias. */
  pin?: string;
  /** Fallback chain for matching requests (revision ids), replacing the alias's. */
  fallbacks?: string[];
}

/** Process-wide defaults. */
export interface PlatformDefaults {
  /** Grace period after a client disconnect before the engine is stopped (ms). Default 250, max 1,000. */
  cancelGraceMs: number;
  /** Largest accepted request body (bytes, after inflating a compressed one). Default 1 MiB. */
  maxBodyBytes: number;
  /**
   * Deepest nesting of arrays and objects accepted in a JSON request body (the top-level
   * object is level 1). Default 64 (`DEFAULT_MAX_JSON_DEPTH`); at most 1,000.
   */
  maxBodyDepth?: number;
  /** Heartbeat comment interval on idle SSE streams (ms). Default 15,000. */
  sseHeartbeatMs: number;
  /** Longest a request may wait in the scheduler's queue before `queue_full` (entries per replica). Default 256. */
  maxQueuePerReplica: number;
  admission: AdmissionDefaults;
  /** Scheduler settings (the `defaults.scheduling` section). Default {@link DEFAULT_SCHEDULING}. */
  scheduling?: SchedulingDefaults;
  /** Circuit-breaker settings (the `defaults.circuit_breaker` section). Default {@link DEFAULT_CIRCUIT_BREAKER}. */
  circuitBreaker?: CircuitBreakerDefaults;
  /** The response cache's storage (docs/caching.md; config `defaults.cache`). Default: in memory, 64 MiB. */
  cache?: CacheDefaults;
}

/**
 * Circuit-breaker settings (the `defaults.circuit_breaker` section), shared by every breaker of
 * a gateway: one per revision and one per external provider (`libs/routing`, see
 * `docs/architecture.md`, Circuit breakers). The model is resilience4j's: a time-based sliding
 * window of outcomes, a failure-rate and a slow-call-rate threshold, and half-open probes.
 */
export interface CircuitBreakerDefaults {
  /** Length of the sliding window of outcomes (ms). Default 10,000. */
  windowMs: number;
  /** Failure rate in (0, 1] (failures ÷ calls in the window) at or above which a breaker opens. Default 0.2. */
  errorRate: number;
  /**
   * Calls the window must hold before either rate can open the breaker (integer ≥ 1). Default
   * 20: at 2 requests/s or less a whole 10 s window never trips on a few unlucky calls, while at
   * 100 requests/s the minimum fills in 0.2 s and an outage still opens the breaker in about 2 s.
   */
  minRequests: number;
  /** Wait in `open` before the first half-open probes (ms); doubles on each re-open, up to 60 s. Default 5,000. */
  openMs: number;
  /** Probe calls let through at once in `half_open`; that many successes close the breaker. Default 3. */
  halfOpenProbes: number;
  /**
   * A call whose time to first token is above this (ms) is slow. Absent: latency is not
   * tracked (the file's `slow_call_ms: null`). Default 10,000: a third of the upstreams'
   * default first-token timeout (30 s, a call over it is a failure, not a slow call).
   */
  slowCallMs?: number;
  /**
   * Slow-call rate in (0, 1] (slow calls ÷ calls in the window) at or above which a breaker
   * opens. Default 0.8: a provider in a brownout (most calls slow) is skipped for the fallback
   * chain, while a model that is merely slow on long prompts is not.
   */
  slowCallRate: number;
}

/** `defaults.circuit_breaker` when the configuration names none (see {@link CircuitBreakerDefaults}). */
/** The response cache's storage defaults (config `defaults.cache`). */
export const DEFAULT_CACHE: Readonly<CacheDefaults> = Object.freeze({ exactStore: 'memory', maxBytes: 64 * 1024 * 1024, lookupTimeoutMs: 50, semanticStore: 'memory', semanticLookupTimeoutMs: 250 });

export const DEFAULT_CIRCUIT_BREAKER: Readonly<CircuitBreakerDefaults> = Object.freeze({
  windowMs: 10_000,
  errorRate: 0.2,
  minRequests: 20,
  openMs: 5_000,
  halfOpenProbes: 3,
  slowCallMs: 10_000,
  slowCallRate: 0.8,
});

/**
 * Scheduler settings (the `defaults.scheduling` section). Queue bounds scale with the pool's
 * remaining capacity (healthy replicas, discounted for a measured slowdown), so they shrink in
 * a brownout. See `docs/architecture.md` (Scheduling).
 */
export interface SchedulingDefaults {
  /** Queued bytes (request inputs) per replica of a pool's revision queue. Default 16 MiB. */
  maxQueueBytesPerReplica: number;
  /** Fraction (0, 1] of a pool's length and byte bounds one tenant may fill. Default 0.5. */
  tenantQueueShare: number;
  /**
   * Deficit-round-robin quantum (tokens) a weight-1 tenant earns per round. Default 256: below a
   * typical request, so each turn serves about one request and the order stays close to
   * weighted fair sharing (larger entries are served after the rounds they need).
   */
  quantumTokens: number;
  /** Prefill throughput (tokens/s per sequence) assumed for a replica before any measurement. Default 1,000. */
  priorPrefillTokensPerS: number;
  /**
   * Decode throughput (tokens/s per sequence) assumed before any measurement. Default 20: the
   * seed's 50 ms time-per-output-token target.
   */
  priorDecodeTokensPerS: number;
  /** Weight of a new measurement in the throughput EWMAs, (0, 1]. Default 0.2. */
  ewmaAlpha: number;
  /**
   * Scheduler pushback at the gateway (ms, 0 = off): after the scheduler refuses a tenant's
   * request to a revision with `queue_full` or `deadline_unmeetable` (or sheds its batch work),
   * the gateway refuses that tenant's like requests for up to this long itself — before
   * counting tokens or reserving — unless a grant for the same tenant and revision arrives
   * first. It keeps a flooding tenant's refusals cheap, so they do not consume the front end
   * every tenant shares (the server-pushback idea of gRPC's retry design, A6). Default 1,000: the scheduler's own Retry-After for a full queue, so the gateway holds a tenant off no longer than it already told its clients to wait.
   */
  pushbackMs: number;
  /**
   * Time-per-output-token target (ms) for every pool (absent = off). When set, the scheduler
   * lowers a replica's admitted batch below its declared slots while the replica's measured
   * p95 TPOT is above the target, and raises it back while it is comfortably below: batch
   * size trades throughput for TPOT (the decode step grows with the batch), and this keeps
   * the latency promise at the cost of throughput (additive increase, multiplicative
   * decrease; see `libs/scheduling/src/tpot-limiter.ts`). Default absent.
   */
  tpotTargetMs?: number;
  /**
   * Fair-share headroom, a fraction [0, 0.5] of a pool queue's sequences: while some active
   * tenant (one with work in flight or queued there) is below its weighted share of the pool's
   * sequences, a tenant at or above its own share may not take the last `floor(headroom ×
   * sequences)` free ones. Without it the queue's order is fair but its *slots* are not: a
   * flooding tenant refills every sequence the moment it frees, and a tenant within its share
   * waits for the next release, which with generations of similar length come in waves seconds
   * apart. The headroom lets an under-share tenant start at once, at the cost of up to that many
   * idle sequences while only over-share tenants wait (the minimum-guarantee-with-borrowing idea
   * of YARN's capacity scheduler, without preemption). Pools under 1 ÷ headroom sequences keep
   * none. Default 0.1.
   */
  fairShareHeadroom: number;
}

/** `defaults.scheduling` when the configuration names none (see {@link SchedulingDefaults}). */
export const DEFAULT_SCHEDULING: Readonly<SchedulingDefaults> = Object.freeze({
  maxQueueBytesPerReplica: 16 * 1024 * 1024,
  tenantQueueShare: 0.5,
  quantumTokens: 256,
  priorPrefillTokensPerS: 1_000,
  priorDecodeTokensPerS: 20,
  ewmaAlpha: 0.2,
  pushbackMs: 1_000,
  fairShareHeadroom: 0.1,
});

/** Admission and accounting settings (the `defaults.admission` section). */
export interface AdmissionDefaults {
  /**
   * A reservation never settled (its gateway died) expires this long after the request's
   * deadline (ms); reconciliation then settles it from the ledger or releases it. Default 60,000.
   */
  reservationGraceMs: number;
  /** How long a `request_id` and its result are retained for idempotent replay (ms). Default 86,400,000 (24 h). */
  idempotencyRetentionMs: number;
  /** Burn-rate alert: spend in the last hour above `factor` × the trailing hourly baseline. Default 3. */
  burnRateFactor: number;
  /** Trailing window the hourly baseline is averaged over (hours). Default 24. */
  burnRateBaselineHours: number;
  /** Spend in the last hour below this (USD) never alerts (a new tenant has no baseline). Default 1. */
  burnRateMinHourlyUsd: number;
}

/** The whole validated configuration. */
export interface PlatformConfig {
  revisions: RevisionSpec[];
  aliases: AliasSpec[];
  tenants: TenantSpec[];
  /** Named PII redaction profiles besides the built-in `default` and `strict`. Default none. */
  redactionProfiles?: RedactionProfileConfig[];
  defaults: PlatformDefaults;
  /** Moderation engines tenants' policies may name (see {@link TenantModeration}). Default none. */
  moderationEngines?: ModerationEngineSpec[];
}

/** `defaults.admission` when the configuration names none (see {@link AdmissionDefaults}). */
export const DEFAULT_ADMISSION: Readonly<AdmissionDefaults> = Object.freeze({
  reservationGraceMs: 60_000,
  idempotencyRetentionMs: 86_400_000,
  burnRateFactor: 3,
  burnRateBaselineHours: 24,
  burnRateMinHourlyUsd: 1,
});

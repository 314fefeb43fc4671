import type { ColumnType, Generated } from 'kysely';
import type { UpstreamAttempt } from '@weir/core';

/**
 * Kysely table types for Weir's database. Column names are snake_case as in SQL; the
 * repositories translate to core's camelCase types. Timestamps are `timestamptz` and come
 * back as `Date`; `numeric` comes back as a decimal string (exact); `bigint` aggregates come
 * back as strings too (the `pg` driver's defaults), so repositories convert them explicitly.
 */

/** `tenants`: one row per product team. */
export interface TenantsTable {
  id: string;
  /** Internal id (migration 0012): `<id>~<16 hex>` set on insert (or the id, for a tenant older than 0012); never reused. */
  uid: Generated<string>;
  name: string;
  created_at: Generated<Date>;
}

/** `apps`: an app of a tenant; API keys belong to an app. */
export interface AppsTable {
  id: string;
  /** Internal id (migration 0012), as `tenants.uid`. */
  uid: Generated<string>;
  tenant_id: string;
  name: string;
  created_at: Generated<Date>;
}

/** `api_keys`: keys stored only as SHA-256 (lowercase hex), never the plaintext. */
export interface ApiKeysTable {
  id: string;
  /** Public prefix of `wk_<prefix>_<secret>`; unique. */
  prefix: string;
  /** SHA-256 of the whole key, 64 lowercase hex chars; unique. */
  sha256: string;
  tenant_id: string;
  app_id: string;
  label: string;
  created_at: Generated<Date>;
  /** Null while the key is active. */
  revoked_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/**
 * `usage_ledger`: one row per generation (primary key `generation_id`); metadata only, never
 * prompt or output text.
 */
export interface UsageLedgerTable {
  generation_id: string;
  request_id: string;
  tenant_id: string;
  app_id: string;
  /** The tenant's internal id the row was recorded for (migration 0012); null on older rows (then `tenant_id`). */
  tenant_uid: ColumnType<string | null, string | null | undefined, string | null>;
  /** The app's internal id (migration 0012); null on older rows (then `app_id`). */
  app_uid: ColumnType<string | null, string | null | undefined, string | null>;
  api_key_id: string;
  route: string;
  model_alias: string;
  model_revision: string;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  /** Of `input_tokens`, those written to a prompt cache (migration 0017; 0 on older rows). */
  cache_write_input_tokens: ColumnType<number, number | undefined, number>;
  /** Of `output_tokens`, reasoning tokens (migration 0017; 0 on older rows). */
  reasoning_tokens: ColumnType<number, number | undefined, number>;
  /** USD, `numeric(20,9)`: exact, written from the record's integer nano-USD. */
  cost_usd: ColumnType<string, string, string>;
  status: string;
  finish_reason: string;
  error_code: string | null;
  queue_ms: number;
  ttft_ms: number | null;
  total_ms: number;
  started_at: Date;
  finished_at: Date;
  /** Counts are the gateway's best knowledge after a lost relay; reconciliation settles them. */
  uncertain: ColumnType<boolean, boolean | undefined, boolean>;
  /** The caller's use case, when it named one. */
  use_case: ColumnType<string | null, string | null | undefined, string | null>;
  /** How the counts were obtained (ADR 0002). */
  usage_source: ColumnType<'reported' | 'counted' | 'estimated', 'reported' | 'counted' | 'estimated' | undefined, 'reported' | 'counted' | 'estimated'>;
  /** The reservation this row settled, the leases that covered it and its budget periods. */
  reservation_id: ColumnType<string | null, string | null | undefined, string | null>;
  lease_ids: ColumnType<string[] | null, string[] | null | undefined, string[] | null>;
  budget_month: ColumnType<Date | null, string | null | undefined, string | null>;
  budget_day: ColumnType<Date | null, string | null | undefined, string | null>;
  /**
   * `jsonb` (migration 0010): the request's upstream attempts (`UpstreamAttempt[]`, timings in
   * whole ms) when there was more than one or its only one failed; null when its first attempt
   * answered — the row itself is that attempt (revision, timings, tokens).
   */
  attempts: ColumnType<UpstreamAttempt[] | null, string | null | undefined, string | null>;
  /** Migration 0013: the response-cache tier that answered (`exact`, `semantic`); null for a live answer. */
  cache_hit: ColumnType<string | null, string | null | undefined, string | null>;
}

/**
 * `usage_reconciliations`: a ledger row settled by reconciliation from an engine's own count,
 * with its counts as first recorded (what the usage stream carries). Migration 0006.
 */
export interface UsageReconciliationsTable {
  generation_id: string;
  /** Where the settled count came from, e.g. `engine:stories260k@1/0`. */
  source: string;
  recorded_input_tokens: number;
  recorded_output_tokens: number;
  recorded_cached_input_tokens: number;
  /** USD, `numeric(20,9)`. */
  recorded_cost_usd: ColumnType<string, string, string>;
  reconciled_at: Generated<Date>;
}

/** `bigint` columns: written as number or string, read back as a decimal string (`pg`). */
type BigIntColumn = ColumnType<string, number | string | bigint, number | string | bigint>;

/**
 * `admission_scopes`: per tenant (`tenant:<id>`) or app (`app:<tenant>/<app>`): in-flight
 * count and the consumed level of each per-minute token bucket at `used_at_ms`.
 */
export interface AdmissionScopesTable {
  scope: string;
  in_flight: Generated<number>;
  requests_used: Generated<number>;
  tokens_used: Generated<number>;
  input_tokens_used: Generated<number>;
  output_tokens_used: Generated<number>;
  /** Epoch ms the levels were computed at. */
  used_at_ms: ColumnType<string, number | string | undefined, number | string>;
}

/** `budget_periods`: settled and reserved nano-USD per scope and UTC calendar period. */
export interface BudgetPeriodsTable {
  scope: string;
  period: 'month' | 'day';
  /** First day of the period (`YYYY-MM-DD`, UTC). */
  starts_on: ColumnType<Date, string, string>;
  settled_nano: ColumnType<string, number | string | bigint | undefined, number | string | bigint>;
  reserved_nano: ColumnType<string, number | string | bigint | undefined, number | string | bigint>;
  /** Money of the row held by budget leases (ADR 0002): Σ (granted − consumed) of its live leases. */
  leased_nano: ColumnType<string, number | string | bigint | undefined, number | string | bigint>;
  /** Until when (epoch ms) `demand_holder` wants money other holders of the row hold (migration 0011); 0: no demand. */
  demand_until_ms: ColumnType<string, number | string | undefined, number | string>;
  demand_holder: string | null;
}

/** `key_holders` (migration 0010): a process that claims idempotency keys (a split gateway), and its liveness (epoch ms). */
export interface KeyHoldersTable {
  holder: string;
  started_at_ms: BigIntColumn;
  heartbeat_at_ms: BigIntColumn;
  expires_at_ms: BigIntColumn;
}

/** `admission_holders`: a process that admits, and its liveness (epoch ms). */
export interface AdmissionHoldersTable {
  holder: string;
  mode: 'exclusive' | 'shared';
  started_at_ms: BigIntColumn;
  heartbeat_at_ms: BigIntColumn;
  expires_at_ms: BigIntColumn;
}

/** `admission_leases`: a slice of a budget row, or a share of a scope's rates and slots, drawn by one holder. */
export interface AdmissionLeasesTable {
  lease_id: string;
  holder: string;
  scope: string;
  kind: 'budget' | 'rate';
  period: 'month' | 'day' | null;
  starts_on: ColumnType<Date | null, string | null | undefined, string | null>;
  granted_nano: ColumnType<string, number | string | bigint | undefined, number | string | bigint>;
  consumed_nano: ColumnType<string, number | string | bigint | undefined, number | string | bigint>;
  requests_per_minute: Generated<number>;
  tokens_per_minute: Generated<number>;
  input_tokens_per_minute: Generated<number>;
  output_tokens_per_minute: Generated<number>;
  slots: Generated<number>;
  hold_until_ms: BigIntColumn;
  created_at_ms: BigIntColumn;
  updated_at_ms: BigIntColumn;
}

/** `journal_positions`: how far a settlement journal has been applied (segment number, byte offset). */
export interface JournalPositionsTable {
  journal: string;
  segment: BigIntColumn;
  offset: BigIntColumn;
  updated_at: Generated<Date>;
}

/** `reservations`: one per admitted request. */
export interface ReservationsTable {
  id: string;
  tenant_id: string;
  app_id: string;
  /** The use case whose admission scope it holds too (migration 0018); null: none. */
  use_case: ColumnType<string | null, string | null | undefined, string | null>;
  request_id: string;
  generation_id: string;
  state: 'held' | 'settled' | 'released' | 'expired';
  input_tokens: number;
  max_output_tokens: number;
  worst_case_nano: BigIntColumn;
  month_starts_on: ColumnType<Date, string, string>;
  day_starts_on: ColumnType<Date, string, string>;
  created_at: Generated<Date>;
  expires_at: Date;
  settled_nano: ColumnType<string | null, number | string | bigint | null | undefined, number | string | bigint | null>;
  settled_input_tokens: ColumnType<number | null, number | null | undefined, number | null>;
  settled_output_tokens: ColumnType<number | null, number | null | undefined, number | null>;
  finished_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** `gateway` (settled or released by the request), `reconciler` (expired and reconciled). */
  finished_by: ColumnType<string | null, string | null | undefined, string | null>;
}

/** `idempotency_keys`: a tenant's `request_id`, the generation that claimed it, and its retained result. */
export interface IdempotencyKeysTable {
  tenant_id: string;
  request_id: string;
  body_sha256: string;
  generation_id: string;
  route: string;
  state: 'running' | 'done' | 'interrupted';
  /** The process holding a running key (its liveness tells a retry whether to wait). */
  holder: ColumnType<string | null, string | null | undefined, string | null>;
  result: ColumnType<unknown | null, string | null | undefined, string | null>;
  created_at: Generated<Date>;
  expires_at: Date;
}

/** The whole schema as of the latest migration. */
export interface WeirSchema {
  tenants: TenantsTable;
  apps: AppsTable;
  api_keys: ApiKeysTable;
  usage_ledger: UsageLedgerTable;
  usage_reconciliations: UsageReconciliationsTable;
  admission_scopes: AdmissionScopesTable;
  budget_periods: BudgetPeriodsTable;
  reservations: ReservationsTable;
  idempotency_keys: IdempotencyKeysTable;
}

// ---- Control plane (migration 0008) -------------------------------------------------------
// Appended as declaration merges so the tables above stay as they were: `WeirSchema` and
// `AppsTable` below extend the interfaces of the same name.

/**
 * A `jsonb` column: read back parsed as `T`; written as a JSON string (always
 * `JSON.stringify` it: `pg` would turn a JS array into a Postgres array, not JSON).
 */
export type JsonbColumn<T> = ColumnType<T, string, string>;

/** `apps.limits` (migration 0008): the app's limits in the config file's shape (`tenants[].apps[].limits`). */
export interface AppsTable {
  limits: ColumnType<Record<string, unknown>, string | undefined, string>;
}

/** `admin_tokens`: admin API tokens `wa_<prefix>_<secret>`, stored only as SHA-256 (lowercase hex). */
export interface AdminTokensTable {
  id: string;
  /** Public prefix for lookup and display; unique. */
  prefix: string;
  sha256: string;
  /** `admin` may do everything; `viewer` may only read. */
  role: 'admin' | 'viewer';
  label: string;
  created_at: Generated<Date>;
  revoked_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/** `tenant_policies`: one tenant's policy, the config file's tenant fields other than id, name and apps. */
export interface TenantPoliciesTable {
  tenant_id: string;
  policy: JsonbColumn<Record<string, unknown>>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** `model_revisions`: a revision in the config file's shape; `spec` never changes except its `replicas` (placement, by a config-file import), `deprecation` may. */
export interface ModelRevisionsTable {
  id: string;
  spec: JsonbColumn<Record<string, unknown>>;
  /** `{retires_on, replacement, announced_on?}` or null. */
  deprecation: ColumnType<Record<string, unknown> | null, string | null | undefined, string | null>;
  created_at: ColumnType<Date, Date | undefined, Date>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** `model_aliases`: an alias (id = its name) in the config file's shape (targets/revision, fallbacks). */
export interface ModelAliasesTable {
  id: string;
  spec: JsonbColumn<Record<string, unknown>>;
  created_at: ColumnType<Date, Date | undefined, Date>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** `pools`: a named pool and its description. */
export interface PoolsTable {
  id: string;
  spec: JsonbColumn<Record<string, unknown>>;
  created_at: ColumnType<Date, Date | undefined, Date>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** `redaction_profiles` (migration 0015): a named PII redaction profile (id = its name) in the config file's shape. */
export interface RedactionProfilesTable {
  id: string;
  spec: JsonbColumn<Record<string, unknown>>;
  created_at: ColumnType<Date, Date | undefined, Date>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** `platform_defaults`: the singleton row (`id` is always true) holding the file's `defaults`. */
export interface PlatformDefaultsTable {
  id: Generated<boolean>;
  spec: JsonbColumn<Record<string, unknown>>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** `config_snapshots`: every composed configuration by monotonic `version` (bigint: read as a string). */
export interface ConfigSnapshotsTable {
  version: BigIntColumn;
  schema_version: number;
  issued_at: Date;
  config: JsonbColumn<Record<string, unknown>>;
  /** The admin token id (or `system:<what>`) whose change produced it. */
  created_by: string;
  published_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/** `audit_log`: who changed what, when, with the entity before and after (null when absent). */
export interface AuditLogTable {
  id: ColumnType<string, never, never>;
  at: ColumnType<Date, Date | undefined, never>;
  actor_id: string;
  actor_label: string;
  action: string;
  entity_type: string;
  entity_id: string;
  before: ColumnType<unknown, string | null, never>;
  after: ColumnType<unknown, string | null, never>;
  snapshot_version: ColumnType<string | null, number | string | null, never>;
}

/** `revocations`: fast-path revocations by monotonic `seq` (bigint identity: read as a string). */
export interface RevocationsTable {
  seq: ColumnType<string, never, never>;
  kind: 'api_key' | 'tenant' | 'kill_switch';
  tenant_id: string | null;
  api_key_id: string | null;
  api_key_sha256: string | null;
  enabled: boolean | null;
  issued_at: Date;
  published_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/** The control plane's tables, merged into the whole schema. */
export interface WeirSchema {
  admin_tokens: AdminTokensTable;
  tenant_policies: TenantPoliciesTable;
  model_revisions: ModelRevisionsTable;
  model_aliases: ModelAliasesTable;
  pools: PoolsTable;
  platform_defaults: PlatformDefaultsTable;
  redaction_profiles: RedactionProfilesTable;
  config_snapshots: ConfigSnapshotsTable;
  audit_log: AuditLogTable;
  revocations: RevocationsTable;
}

/** One chat message of a golden prompt, as stored (migration 0009). */
export interface GoldenPromptMessageRow {
  role: 'system' | 'developer' | 'user' | 'assistant';
  content: string;
}

/** `golden_prompts` (migration 0009): a tenant's golden prompts per use case. */
export interface GoldenPromptsTable {
  id: string;
  tenant_id: string;
  use_case: string;
  messages: JsonbColumn<GoldenPromptMessageRow[]>;
  /** Output token cap of each replay (≥ 1). */
  max_tokens: number;
  /** A JSON Schema (draft 2020-12) the output must match; null for free text. */
  output_schema: ColumnType<Record<string, unknown> | null, string | null | undefined, string | null>;
  /** A reviewed answer, the reference when the stable revision fails on the prompt. */
  expected: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: ColumnType<Date, Date | undefined, never>;
}

/** `eval_runs` (migration 0009): one eval of a candidate revision of an alias against its stable revision. */
export interface EvalRunsTable {
  id: string;
  tenant_id: string;
  use_case: string;
  alias: string;
  candidate_revision: string;
  stable_revision: string;
  /** The scorer as on the wire: `{kind, threshold, metric?}`. */
  scorer: JsonbColumn<Record<string, unknown>>;
  /** Least per-prompt score, 0–1 (`double precision`). */
  threshold: number;
  status: 'running' | 'finished' | 'failed';
  /** The gate's verdict; null while running or when the run failed. */
  pass: ColumnType<boolean | null, boolean | null | undefined, boolean | null>;
  /** The report (control-plane's `EvalReport`), or `{error}` for a failed run; null while running. */
  report: ColumnType<Record<string, unknown> | null, string | null | undefined, string | null>;
  created_at: ColumnType<Date, Date | undefined, never>;
  finished_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/** The money-path tables (ADR 0002), merged into the whole schema. */
export interface WeirSchema {
  admission_holders: AdmissionHoldersTable;
  key_holders: KeyHoldersTable;
  admission_leases: AdmissionLeasesTable;
  journal_positions: JournalPositionsTable;
}

/** The eval tables, merged into the whole schema. */
export interface WeirSchema {
  golden_prompts: GoldenPromptsTable;
  eval_runs: EvalRunsTable;
}

// ---- Response cache (migration 0013) --------------------------------------------------------

/** `response_cache`: the fleet's exact cache tier, one row per exact key (see `createPgExactCacheTier`). */
export interface ResponseCacheTable {
  exact_key: string;
  tenant_key: string;
  revision_id: string;
  template: string;
  params_key: string;
  /** The `CachedAnswer` (JSON). */
  answer: JsonbColumn<unknown>;
  /** Estimated size of the answer (bytes of its JSON). */
  bytes: number;
  stored_at: ColumnType<Date, Date | undefined, Date>;
  expires_at: Date;
}

export interface WeirSchema {
  response_cache: ResponseCacheTable;
}

// ---- Semantic cache (migration 0014) --------------------------------------------------------

/** `semantic_cache_entries` (migration 0014): the semantic cache tier's entries, by partition key. */
export interface SemanticCacheEntriesTable {
  id: Generated<string>;
  tenant_key: string;
  /** The partition's full key (`partitionKeyOf` of `@weir/cache`). */
  partition_key: string;
  dims: number;
  /** Unit float32 vector, little-endian. */
  vector: Buffer;
  guard: JsonbColumn<Record<string, unknown>>;
  answer: JsonbColumn<Record<string, unknown>>;
  stored_at_ms: ColumnType<string, number, number>;
  expires_at_ms: ColumnType<string, number, number>;
  last_used_ms: ColumnType<string, number, number>;
}

/** The semantic cache table, merged into the whole schema. */
export interface WeirSchema {
  semantic_cache_entries: SemanticCacheEntriesTable;
}

import type { ColumnType, Generated } from 'kysely';

/**
 * Kysely table types for Weir's database. Column names are snake_case as in SQL; the
 * repositories translate to core's camelCase types. Timestamps are `timestamptz` and come
 * back as `Date`; `numeric` comes back as a decimal string (exact); `bigint` aggregates come
 * back as strings too (the `pg` driver's defaults), so repositories convert them explicitly.
 */

/** `tenants`: one row per product team. */
export interface TenantsTable {
  id: string;
  name: string;
  created_at: Generated<Date>;
}

/** `apps`: an app of a tenant; API keys belong to an app. */
export interface AppsTable {
  id: string;
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
  api_key_id: string;
  route: string;
  model_alias: string;
  model_revision: string;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
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
}

/** The whole schema as of the latest migration. */
export interface WeirSchema {
  tenants: TenantsTable;
  apps: AppsTable;
  api_keys: ApiKeysTable;
  usage_ledger: UsageLedgerTable;
}

/**
 * `weir snapshots|audit|admin-tokens|capacity show|usage`: configuration snapshots, the audit
 * log, admin tokens, the capacity controller's decisions, and a tenant's usage from the data
 * plane.
 */
import { numberFlag, UsageError } from '../args';
import { type CommandSpec, said, seg, stringFlag } from './command';
import { ApiError } from './http';
import { age, type Column, formatDetail, formatTable, orDash, time } from './format';
import { SHOWN_ONCE_WARNING } from './tenant-commands';

/** A snapshot in a list. */
export interface SnapshotSummary {
  version: number;
  schema_version: number;
  issued_at: string;
  created_by: string;
  published_at: string | null;
}

/** An audit entry. */
export interface AuditEntry {
  id: number;
  at: string;
  actor: { id: string; label: string };
  action: string;
  entity_type: string;
  entity_id: string;
  before: unknown;
  after: unknown;
  snapshot_version: number | null;
}

/** A capacity decision (the admin API's `GET /capacity`). */
export interface CapacityDecisionView {
  pool: string;
  desired_replicas: number;
  recommended_replicas: number;
  current_replicas: number;
  healthy_replicas: number;
  demand_tokens_per_second: number;
  replica_tokens_per_second: number;
  basis: string;
  lines: string[];
  telemetry_age_ms: number;
}

/** A usage sum (the data plane's `GET /v1/usage`). */
interface UsageSums {
  tokens: { input: number; output: number; cached_input: number; cache_write_input?: number; reasoning?: number; total: number };
  cost_usd: number;
  requests: number;
}

/** The data plane's `GET /v1/usage` body. */
export interface UsageBody extends UsageSums {
  tenant_id: string;
  window: string;
  period_start: string;
  period_end: string;
  by_model: Array<UsageSums & { model_alias: string; model_revision: string }>;
  by_app: Array<UsageSums & { app_id: string }>;
}

export const SNAPSHOT_COLUMNS: readonly Column<SnapshotSummary>[] = [
  ['VERSION', (s) => String(s.version)],
  ['SCHEMA', (s) => String(s.schema_version)],
  ['ISSUED', (s) => time(s.issued_at)],
  ['BY', (s) => s.created_by],
  ['PUBLISHED', (s) => (s.published_at ? time(s.published_at) : 'not yet')],
];

export const AUDIT_COLUMNS: readonly Column<AuditEntry>[] = [
  ['ID', (e) => String(e.id)],
  ['AT', (e) => time(e.at)],
  ['ACTOR', (e) => e.actor.label || e.actor.id],
  ['ACTION', (e) => e.action],
  ['ENTITY', (e) => `${e.entity_type} ${e.entity_id}`],
  ['VERSION', (e) => orDash(e.snapshot_version)],
];

const n = (x: number) => (Number.isInteger(x) ? x.toLocaleString('en-US') : x.toLocaleString('en-US', { maximumFractionDigits: 1 }));

export const CAPACITY_COLUMNS: readonly Column<CapacityDecisionView>[] = [
  ['POOL', (d) => d.pool],
  ['DESIRED', (d) => String(d.desired_replicas)],
  ['RECOMMENDED', (d) => String(d.recommended_replicas)],
  ['CURRENT', (d) => String(d.current_replicas)],
  ['HEALTHY', (d) => String(d.healthy_replicas)],
  ['DEMAND TOK/S', (d) => n(d.demand_tokens_per_second)],
  ['REPLICA TOK/S', (d) => `${n(d.replica_tokens_per_second)} (${d.basis})`],
  ['TELEMETRY AGE', (d) => age(d.telemetry_age_ms)],
];

const usd = (x: number) => `$${x.toFixed(x !== 0 && Math.abs(x) < 0.01 ? 6 : 2)}`;
const usageCells = <T extends UsageSums>(): Column<T>[] => [
  ['REQUESTS', (u) => n(u.requests)],
  ['INPUT', (u) => n(u.tokens.input)],
  ['OUTPUT', (u) => n(u.tokens.output)],
  ['COST', (u) => usd(u.cost_usd)],
];

/** One internal id's totals in `GET /admin/v1/usage` (issue 14 §4). */
export interface AdminUsageRow extends Omit<UsageSums, 'tokens'> {
  tenant_id: string;
  internal_id: string;
  deleted: boolean;
  tokens: { input: number; output: number; cached_input: number };
}

/** The control plane's `GET /admin/v1/usage` body. */
export interface AdminUsageBody {
  tenant_id: string;
  window: string;
  period_start: string;
  period_end: string;
  data: AdminUsageRow[];
}

export const ADMIN_USAGE_COLUMNS: readonly Column<AdminUsageRow>[] = [
  ['INTERNAL ID', (r) => r.internal_id],
  ['STATUS', (r) => (r.deleted ? 'deleted' : 'current')],
  ['REQUESTS', (r) => n(r.requests)],
  ['INPUT', (r) => n(r.tokens.input)],
  ['OUTPUT', (r) => n(r.tokens.output)],
  ['COST', (r) => usd(r.cost_usd)],
];

/** The token classes a report names beside `cached` when it has any: `, 200 cache-write, 50 reasoning`. */
const classes = (t: UsageSums['tokens']): string =>
  (t.cache_write_input ? `, ${n(t.cache_write_input)} cache-write` : '') + (t.reasoning ? `, ${n(t.reasoning)} reasoning` : '');

/** The usage report: totals, then by model and by app. */
export function formatUsage(u: UsageBody): string {
  return [
    `tenant ${u.tenant_id}, ${u.window} ${time(u.period_start)} → ${time(u.period_end)}: ${n(u.requests)} requests, ${n(u.tokens.input)} input + ${n(u.tokens.output)} output tokens (${n(u.tokens.cached_input)} cached${classes(u.tokens)}), ${usd(u.cost_usd)}`,
    '',
    formatTable(u.by_model, [['ALIAS', (m) => m.model_alias], ['REVISION', (m) => m.model_revision], ...usageCells<UsageBody['by_model'][number]>()], '(no requests)'),
    formatTable(u.by_app, [['APP', (a) => a.app_id], ...usageCells<UsageBody['by_app'][number]>()], '(no requests)'),
  ].join('\n');
}

/** A list page's hint to the next one. */
const more = (next: number | null, command: string) => (next === null ? '' : `more: ${command} ${next}\n`);

const limitFlag = { value: 'N', help: 'entries per page (1 to 200, default 50)' };
const limitOf = (raw: string | undefined) => (raw === undefined ? undefined : numberFlag('limit', raw, { integer: true, min: 1, max: 200 }));

const AUDIT_FILTERS: Readonly<Record<string, { param: string; value: string; help: string }>> = {
  'entity-type': { param: 'entity_type', value: 'TYPE', help: 'tenant, app, api_key, tenant_policy, revision, alias, pool, defaults, admin_token' },
  'entity-id': { param: 'entity_id', value: 'ID', help: 'one entity' },
  action: { param: 'action', value: 'ACTION', help: 'e.g. alias.rollback, api_key.revoke' },
  actor: { param: 'actor_id', value: 'ID', help: "an admin token's id" },
  since: { param: 'since', value: 'TIME', help: 'ISO-8601, inclusive' },
  until: { param: 'until', value: 'TIME', help: 'ISO-8601, exclusive' },
};

/** The snapshot, audit, admin-token, capacity and usage commands. */
export const SYSTEM_COMMANDS: readonly CommandSpec[] = [
  {
    resource: 'snapshots',
    verb: 'list',
    args: [],
    flags: { limit: limitFlag, before: { value: 'VERSION', help: 'only versions below this one (the next page)' } },
    summary: 'list configuration snapshots, newest first',
    async run(ctx) {
      const before = stringFlag(ctx, 'before');
      const query = { limit: limitOf(stringFlag(ctx, 'limit')), before: before === undefined ? undefined : numberFlag('before', before, { integer: true, min: 1 }) };
      const page = await ctx.api.request<{ data: SnapshotSummary[]; next_cursor: number | null }>('GET', '/snapshots', { query });
      return { data: page, text: formatTable(page.data, SNAPSHOT_COLUMNS) + more(page.next_cursor, 'weir snapshots list --before') };
    },
  },
  {
    resource: 'snapshots',
    verb: 'get',
    args: ['version'],
    summary: 'show a snapshot with its configuration (a version or latest)',
    async run({ api, args }) {
      const s = await api.request('GET', `/snapshots/${seg(args.version)}`);
      return { data: s, text: formatDetail(s) };
    },
  },
  {
    resource: 'audit',
    verb: 'list',
    args: [],
    flags: { ...Object.fromEntries(Object.entries(AUDIT_FILTERS).map(([flag, f]) => [flag, { value: f.value, help: f.help }])), limit: limitFlag, cursor: { value: 'ID', help: 'only entries older than this id (the next page)' } },
    summary: 'list audit entries (who changed what, when), newest first',
    async run(ctx) {
      const query: Record<string, string | number | undefined> = { limit: limitOf(stringFlag(ctx, 'limit')) };
      const cursor = stringFlag(ctx, 'cursor');
      if (cursor !== undefined) query.cursor = numberFlag('cursor', cursor, { integer: true, min: 1 });
      for (const [flag, f] of Object.entries(AUDIT_FILTERS)) query[f.param] = stringFlag(ctx, flag);
      const page = await ctx.api.request<{ data: AuditEntry[]; next_cursor: number | null }>('GET', '/audit', { query });
      return { data: page, text: formatTable(page.data, AUDIT_COLUMNS) + more(page.next_cursor, 'weir audit list --cursor') };
    },
  },
  {
    resource: 'audit',
    verb: 'get',
    args: ['id'],
    summary: 'show one audit entry with its before and after',
    async run({ api, args }) {
      const id = numberFlag('id', args.id ?? '', { integer: true, min: 1 });
      const { data } = await api.request<{ data: AuditEntry[] }>('GET', '/audit', { query: { cursor: id + 1, limit: 1 } });
      if (data[0]?.id !== id) throw new ApiError(404, 'not_found', `No audit entry ${id}; list them with weir audit list.`);
      return { data: data[0], text: formatDetail(data[0]) };
    },
  },
  {
    resource: 'admin-tokens',
    verb: 'list',
    args: [],
    summary: 'list admin tokens (public prefixes only)',
    async run({ api }) {
      const { data } = await api.request<{ data: Array<{ id: string; display: string; role: string; label: string; created_at: string; revoked_at: string | null }> }>('GET', '/admin-tokens');
      return {
        data,
        text: formatTable(data, [
          ['ID', (t) => t.id],
          ['TOKEN', (t) => t.display],
          ['ROLE', (t) => t.role],
          ['LABEL', (t) => t.label],
          ['CREATED', (t) => time(t.created_at)],
          ['REVOKED', (t) => time(t.revoked_at)],
        ]),
      };
    },
  },
  {
    resource: 'admin-tokens',
    verb: 'create',
    args: [],
    flags: { role: { value: 'admin|viewer', help: 'viewer tokens may only read', required: true }, label: { value: 'TEXT', help: 'whose token this is', required: true } },
    summary: 'create an admin token; its secret is printed once',
    async run(ctx) {
      const t = await ctx.api.request<{ id: string; display: string; role: string; token: string }>('POST', '/admin-tokens', { body: { role: stringFlag(ctx, 'role'), label: stringFlag(ctx, 'label') } });
      return { data: t, text: `created ${t.role} token ${t.id} (${t.display}):\n\n  ${t.token}\n\n`, warning: SHOWN_ONCE_WARNING };
    },
  },
  {
    resource: 'admin-tokens',
    verb: 'revoke',
    args: ['token-id'],
    summary: 'revoke an admin token',
    async run({ api, args }) {
      const t = await api.request<{ id: string; display: string }>('POST', `/admin-tokens/${seg(args['token-id'])}/revoke`, { body: {} });
      return said(t, `revoked admin token ${t.id} (${t.display})`);
    },
  },
  {
    resource: 'capacity',
    verb: 'show',
    args: ['pool?'],
    summary: "the capacity controller's desired replicas per pool (or one pool, with its arithmetic)",
    async run({ api, args }) {
      if (args.pool === undefined) {
        const { data } = await api.request<{ data: CapacityDecisionView[] }>('GET', '/capacity');
        return { data, text: formatTable(data, CAPACITY_COLUMNS, '(no pool has reported telemetry yet)') };
      }
      const d = await api.request<CapacityDecisionView>('GET', `/capacity/${seg(args.pool)}`);
      return { data: d, text: formatTable([d], CAPACITY_COLUMNS) + d.lines.map((l) => `  ${l}\n`).join('') };
    },
  },
  {
    resource: 'tenants',
    verb: 'usage',
    args: ['tenant'],
    flags: {
      window: { value: 'day|month', help: 'the current UTC day or month (default month)' },
      'internal-id': { value: 'ID', help: "only this internal id's rows (a deleted tenant's, for its invoice)" },
      'include-deleted': { type: 'boolean', help: 'every internal id this tenant id has had, deleted ones included' },
    },
    summary: "a tenant's ledger totals per internal id (deleted tenants' rows stay, under their internal ids)",
    async run(ctx) {
      const window = stringFlag(ctx, 'window');
      if (window !== undefined && window !== 'day' && window !== 'month') throw new UsageError(`--window: expected day or month, got ${JSON.stringify(window)}`);
      const query = { tenant: ctx.args.tenant, window, internal_id: stringFlag(ctx, 'internal-id'), include_deleted: ctx.flags['include-deleted'] === true ? 'true' : undefined };
      const u = await ctx.api.request<AdminUsageBody>('GET', '/usage', { query });
      return { data: u, text: `tenant ${u.tenant_id}, ${u.window} ${time(u.period_start)} → ${time(u.period_end)}
${formatTable(u.data, ADMIN_USAGE_COLUMNS, '(no requests)')}` };
    },
  },
  {
    resource: 'usage',
    verb: '',
    args: [],
    target: 'data',
    flags: { window: { value: 'day|month', help: 'the current UTC day or month (default month)' } },
    summary: "a tenant's tokens and cost this day or month, from the gateway (needs the tenant's API key)",
    async run(ctx) {
      const window = stringFlag(ctx, 'window');
      if (window !== undefined && window !== 'day' && window !== 'month') throw new UsageError(`--window: expected day or month, got ${JSON.stringify(window)}`);
      const u = await ctx.api.request<UsageBody>('GET', '/v1/usage', { query: { window } });
      return { data: u, text: formatUsage(u) };
    },
  },
];

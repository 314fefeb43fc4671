/**
 * `weir tenants|apps|keys|policy …`: tenants, their apps, API keys, policies, the disabled flag
 * and the kill switch, over `/admin/v1/tenants/…`.
 */
import { UsageError } from '../args';
import {
  applyLimits,
  type CommandSpec,
  LIMIT_FLAG_SPECS,
  limitsFromFlags,
  SESSION_LIMIT_FLAG_SPECS,
  parseList,
  parseOnOff,
  readObjectFile,
  said,
  seg,
  stringFlag,
} from './command';
import { type Column, formatDetail, formatTable, keyValues, orDash, time } from './format';

/** A tenant as the admin API returns it. */
export interface TenantView {
  id: string;
  /** What the tenant's state and ledger rows are filed under; new when a deleted id is created again. */
  internal_id?: string;
  name: string;
  created_at: string;
  apps: AppView[];
  policy: Record<string, unknown>;
}

/** An app as the admin API returns it. */
export interface AppView {
  id: string;
  tenant_id: string;
  name: string;
  limits: Record<string, unknown>;
  created_at: string;
}

/** An API key as the admin API returns it (never its secret, but once at creation: `key`). */
export interface ApiKeyView {
  id: string;
  prefix: string;
  display: string;
  tenant_id: string;
  app_id: string;
  label: string;
  created_at: string;
  revoked_at: string | null;
  key?: string;
}

/** `active`, or what stops the tenant's traffic (`disabled`, `kill switch`). */
export function tenantStatus(policy: Record<string, unknown>): string {
  const off = [policy.disabled === true ? 'disabled' : '', policy.kill_switch === true ? 'kill switch' : ''].filter(Boolean);
  return off.length > 0 ? off.join(', ') : 'active';
}

export const TENANT_COLUMNS: readonly Column<TenantView>[] = [
  ['ID', (t) => t.id],
  ['NAME', (t) => t.name],
  ['APPS', (t) => String(t.apps.length)],
  ['STATUS', (t) => tenantStatus(t.policy)],
  ['LIMITS', (t) => keyValues(t.policy.limits)],
];

export const APP_COLUMNS: readonly Column<AppView>[] = [
  ['ID', (a) => a.id],
  ['NAME', (a) => a.name],
  ['LIMITS', (a) => keyValues(a.limits)],
  ['CREATED', (a) => time(a.created_at)],
];

/** Keys show only their public prefix (`wk_<prefix>_…`). */
export const KEY_COLUMNS: readonly Column<ApiKeyView>[] = [
  ['ID', (k) => k.id],
  ['KEY', (k) => k.display],
  ['APP', (k) => k.app_id],
  ['LABEL', (k) => orDash(k.label)],
  ['CREATED', (k) => time(k.created_at)],
  ['REVOKED', (k) => time(k.revoked_at)],
];

/** Printed (to stderr) with a new API key or admin token: its only appearance. */
export const SHOWN_ONCE_WARNING = 'warning: this is the only time the secret is shown; Weir keeps only its hash. Store it in your secret manager now.';

const tenantPath = (t: string | undefined) => `/tenants/${seg(t)}`;

const confirmFlag = { type: 'boolean' as const, help: 'confirm the deletion' };
const requireYes = (flags: Readonly<Record<string, unknown>>, what: string) => {
  if (flags.yes !== true) throw new UsageError(`${what}; add --yes to confirm`);
};

/** The policy fields `policy set` takes as flags (besides the limits), and how each is read. */
const POLICY_FLAGS: Readonly<Record<string, { field: string; value: string; help: string; parse: (raw: string, flag: string) => unknown }>> = {
  'allowed-aliases': { field: 'allowed_aliases', value: 'A,B', help: 'aliases the tenant may call (none: all)', parse: (raw, flag) => parseList(flag, raw) },
  'content-logging': { field: 'content_logging', value: 'on|off', help: 'keep prompt and output text in logs', parse: (raw, flag) => parseOnOff(`--${flag}`, raw) },
  'redaction-profile': { field: 'redaction_profile', value: 'NAME', help: 'PII redaction profile run before content is logged or sent upstream (default, strict, or weir redaction-profiles)', parse: (raw) => raw },
  'redact-upstream': { field: 'redact_upstream', value: 'on|off', help: 'redact prompts with the profile before they are sent upstream', parse: (raw, flag) => parseOnOff(`--${flag}`, raw) },
  'dedicated-pool': { field: 'dedicated_pool', value: 'POOL', help: "the tenant's dedicated pool", parse: (raw) => raw },
};

/**
 * A duration: whole milliseconds (`600000`) or a number with a unit (`500ms`, `30s`, `10m`,
 * `2h`, `7d`). @throws UsageError naming `--flag`.
 */
export function parseDurationMs(flag: string, raw: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(raw.trim());
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
  const ms = m ? Math.round(Number(m[1]) * unit[(m[2] ?? 'ms') as keyof typeof unit]) : NaN;
  if (!Number.isSafeInteger(ms) || ms <= 0) throw new UsageError(`--${flag}: expected a duration such as 600000, 30s, 10m, 2h or 7d, got ${JSON.stringify(raw)}`);
  return ms;
}

/** The flags of `weir tenants cache` and the policy field each sets (docs/caching.md). */
const CACHE_FLAGS: Readonly<Record<string, { value: string; help: string; apply: (cache: Record<string, unknown>, raw: string, flag: string) => void }>> = {
  exact: { value: 'on|off', help: 'the exact tier', apply: (c, raw, flag) => void (c.exact = { ...(c.exact as object | undefined), enabled: parseOnOff(`--${flag}`, raw) }) },
  ttl: { value: 'DURATION', help: "the exact tier's time to live (600000, 30s, 10m, 2h, 7d)", apply: (c, raw, flag) => void (c.exact = { ...(c.exact as object | undefined), ttl_ms: parseDurationMs(flag, raw) }) },
  'deterministic-only': { value: 'on|off', help: 'only temperature 0 or seeded requests are cached', apply: (c, raw, flag) => void (c.deterministic_only = parseOnOff(`--${flag}`, raw)) },
  'allow-opt-in': { value: 'on|off', help: 'a request may opt in with weir_cache: "opt_in"', apply: (c, raw, flag) => void (c.allow_opt_in = parseOnOff(`--${flag}`, raw)) },
  templates: { value: 'A,B|none', help: 'declared prompt templates (name or name@version); none: any', apply: (c, raw, flag) => void (raw === 'none' ? delete c.templates : (c.templates = parseList(flag, raw))) },
  'hit-price': { value: 'FRACTION', help: "a hit bills this share (0-1) of the cached usage's price", apply: (c, raw, flag) => void (c.hit_price_fraction = parseFraction(flag, raw)) },
  'personalised-use-cases': { value: 'A,B|none', help: 'use cases never cached', apply: (c, raw, flag) => void (raw === 'none' ? delete c.personalised_use_cases : (c.personalised_use_cases = parseList(flag, raw))) },
  semantic: { value: 'on|off', help: 'the semantic tier (needs --embedding-revision)', apply: (c, raw, flag) => void (c.semantic = { ...(c.semantic as object | undefined), enabled: parseOnOff(`--${flag}`, raw) }) },
  threshold: { value: 'SIMILARITY', help: "the semantic tier's cosine threshold, 0.95 (the floor) to 1; default 0.97", apply: (c, raw, flag) => void (c.semantic = { ...(c.semantic as object | undefined), threshold: parseThreshold(flag, raw) }) },
  'embedding-revision': { value: 'REVISION', help: 'the embedding revision prompts are embedded with (kind: embedding)', apply: (c, raw) => void (c.semantic = { ...(c.semantic as object | undefined), embedding_revision: raw }) },
  'semantic-ttl': { value: 'DURATION', help: "the semantic tier's time to live (default the exact tier's, else 1h)", apply: (c, raw, flag) => void (c.semantic = { ...(c.semantic as object | undefined), ttl_ms: parseDurationMs(flag, raw) }) },
};

/** A similarity threshold: a number in (0, 1]; the server refuses one under its floor (0.95) with a 400 naming the field. */
function parseThreshold(flag: string, raw: string): number {
  const v = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(v) || v <= 0 || v > 1) throw new UsageError(`--${flag}: expected a cosine similarity from 0.95 to 1, got ${JSON.stringify(raw)}`);
  return v;
}

function parseFraction(flag: string, raw: string): number {
  const v = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(v) || v < 0 || v > 1) throw new UsageError(`--${flag}: expected a number from 0 to 1, got ${JSON.stringify(raw)}`);
  return v;
}

/** One line of a cache policy for people: `exact on (ttl 600000 ms), deterministic only, …`, or `off`. */
export function describeCachePolicy(cache: unknown): string {
  if (cache === null || typeof cache !== 'object') return 'off';
  const c = cache as Record<string, unknown>;
  const exact = (c.exact ?? {}) as { enabled?: boolean; ttl_ms?: number };
  const parts = [`exact ${exact.enabled ? 'on' : 'off'}${exact.ttl_ms !== undefined ? ` (ttl ${exact.ttl_ms} ms)` : ''}`];
  parts.push(c.deterministic_only === false ? 'any request' : 'deterministic only');
  if (c.allow_opt_in === false) parts.push('no opt-in');
  if (c.hit_price_fraction !== undefined) parts.push(`hit price ${String(c.hit_price_fraction)}`);
  if (Array.isArray(c.templates)) parts.push(`templates ${c.templates.join(',')}`);
  if (Array.isArray(c.personalised_use_cases)) parts.push(`personalised ${c.personalised_use_cases.join(',')}`);
  const sem = c.semantic as { enabled?: boolean; threshold?: number; embedding_revision?: string; ttl_ms?: number } | null | undefined;
  if (sem && typeof sem === 'object') {
    const details = [
      ...(sem.threshold !== undefined ? [`threshold ${sem.threshold}`] : []),
      ...(sem.embedding_revision !== undefined ? [`embedding ${sem.embedding_revision}`] : []),
      ...(sem.ttl_ms !== undefined ? [`ttl ${sem.ttl_ms} ms`] : []),
    ];
    parts.push(`semantic ${sem.enabled ? 'on' : 'off'}${details.length > 0 ? ` (${details.join(', ')})` : ''}`);
  }
  return parts.join(', ');
}

/** The tenant, app, key and policy commands. */
export const TENANT_COMMANDS: readonly CommandSpec[] = [
  {
    resource: 'tenants',
    verb: 'list',
    args: [],
    summary: 'list tenants with their status and limits',
    async run({ api }) {
      const { data } = await api.request<{ data: TenantView[] }>('GET', '/tenants');
      return { data, text: formatTable(data, TENANT_COLUMNS) };
    },
  },
  {
    resource: 'tenants',
    verb: 'get',
    args: ['tenant'],
    summary: 'show a tenant with its apps and policy',
    async run({ api, args }) {
      const t = await api.request<TenantView>('GET', tenantPath(args.tenant));
      return { data: t, text: formatDetail(t) };
    },
  },
  {
    resource: 'tenants',
    verb: 'create',
    args: ['tenant'],
    flags: {
      name: { value: 'NAME', help: 'display name', required: true },
      'policy-file': { value: 'FILE', help: 'initial policy, JSON or YAML (fields as in the configuration file)' },
    },
    summary: 'create a tenant',
    async run(ctx) {
      const file = stringFlag(ctx, 'policy-file');
      const policy = file === undefined ? undefined : readObjectFile('policy-file', file, ctx.readFile);
      const t = await ctx.api.request<TenantView>('POST', '/tenants', { body: { id: ctx.args.tenant, name: stringFlag(ctx, 'name'), ...(policy ? { policy } : {}) } });
      return said(t, `created tenant ${t.id} (${t.name})`);
    },
  },
  {
    resource: 'tenants',
    verb: 'update',
    args: ['tenant'],
    flags: { name: { value: 'NAME', help: 'new display name', required: true } },
    summary: "rename a tenant (its policy: weir policy set)",
    async run(ctx) {
      const t = await ctx.api.request<TenantView>('PATCH', tenantPath(ctx.args.tenant), { body: { name: stringFlag(ctx, 'name') } });
      return said(t, `updated tenant ${t.id} (${t.name})`);
    },
  },
  {
    resource: 'tenants',
    verb: 'delete',
    args: ['tenant'],
    flags: { yes: confirmFlag },
    summary: 'delete a tenant with its apps, keys and policy (--yes)',
    async run(ctx) {
      requireYes(ctx.flags, `tenants delete removes tenant ${ctx.args.tenant} with its apps, API keys and policy`);
      const r = await ctx.api.request<{ internal_id?: string }>('DELETE', tenantPath(ctx.args.tenant));
      // Its usage rows stay under the retired internal id (`weir tenants usage --internal-id`).
      return said(r, `deleted tenant ${ctx.args.tenant}${r.internal_id ? ` (internal id ${r.internal_id}: its usage stays in the ledger under it)` : ''}`);
    },
  },
  ...(['disable', 'enable'] as const).map(
    (verb): CommandSpec => ({
      resource: 'tenants',
      verb,
      args: ['tenant'],
      summary: verb === 'disable' ? "refuse all of a tenant's requests (403 tenant_disabled) until enabled" : 'let a disabled tenant in again',
      async run({ api, args }) {
        const policy = await api.request<Record<string, unknown>>('PATCH', `${tenantPath(args.tenant)}/policy`, { body: { disabled: verb === 'disable' ? true : null } });
        return said(policy, `tenant ${args.tenant}: ${verb}d (status: ${tenantStatus(policy)})`);
      },
    }),
  ),
  {
    resource: 'tenants',
    verb: 'kill-switch',
    args: ['tenant', 'state'],
    summary: "on: refuse the tenant's requests at once (503 kill_switch); off: lift it",
    async run({ api, args }) {
      const enabled = parseOnOff('state', args.state ?? '');
      const policy = await api.request<Record<string, unknown>>('POST', `${tenantPath(args.tenant)}/kill-switch`, { body: { enabled } });
      return said(policy, `tenant ${args.tenant}: kill switch ${enabled ? 'on' : 'off'} (status: ${tenantStatus(policy)})`);
    },
  },

  {
    resource: 'tenants',
    verb: 'cache',
    args: ['tenant'],
    flags: {
      ...Object.fromEntries(Object.entries(CACHE_FLAGS).map(([flag, f]) => [flag, { value: f.value, help: f.help }])),
      off: { type: 'boolean' as const, help: 'remove the cache policy (no cache for the tenant)' },
    },
    summary: "show or change a tenant's response-cache policy (docs/caching.md)",
    async run(ctx) {
      const path = `${tenantPath(ctx.args.tenant)}/policy`;
      const given = Object.keys(CACHE_FLAGS).filter((f) => stringFlag(ctx, f) !== undefined);
      if (ctx.flags.off === true) {
        if (given.length > 0) throw new UsageError(`--off removes the cache policy; give it without --${given.join(', --')}`);
        const p = await ctx.api.request<Record<string, unknown>>('PATCH', path, { body: { cache: null } });
        return said(p, `tenant ${ctx.args.tenant}: cache off`);
      }
      const current = await ctx.api.request<Record<string, unknown>>('GET', path);
      if (given.length === 0) return { data: current.cache ?? null, text: `tenant ${ctx.args.tenant}: cache ${describeCachePolicy(current.cache)}\n` };
      // PATCH replaces `cache` whole, so the flags change the current policy.
      const cache: Record<string, unknown> = { ...((current.cache as Record<string, unknown> | undefined) ?? {}) };
      for (const flag of given) CACHE_FLAGS[flag].apply(cache, stringFlag(ctx, flag) as string, flag);
      const p = await ctx.api.request<Record<string, unknown>>('PATCH', path, { body: { cache } });
      return said(p, `tenant ${ctx.args.tenant}: cache ${describeCachePolicy(p.cache)}`);
    },
  },

  // ---- apps
  {
    resource: 'apps',
    verb: 'list',
    args: ['tenant'],
    summary: "list a tenant's apps",
    async run({ api, args }) {
      const { data } = await api.request<{ data: AppView[] }>('GET', `${tenantPath(args.tenant)}/apps`);
      return { data, text: formatTable(data, APP_COLUMNS) };
    },
  },
  {
    resource: 'apps',
    verb: 'get',
    args: ['tenant', 'app'],
    summary: 'show an app',
    async run({ api, args }) {
      const a = await api.request<AppView>('GET', `${tenantPath(args.tenant)}/apps/${seg(args.app)}`);
      return { data: a, text: formatDetail(a) };
    },
  },
  {
    resource: 'apps',
    verb: 'create',
    args: ['tenant', 'app'],
    flags: { name: { value: 'NAME', help: 'display name', required: true }, ...LIMIT_FLAG_SPECS, ...SESSION_LIMIT_FLAG_SPECS },
    summary: 'create an app of a tenant, optionally with its own limits and session caps',
    async run(ctx) {
      const limits = limitsFromFlags(ctx.flags);
      const body = { id: ctx.args.app, name: stringFlag(ctx, 'name'), ...(Object.keys(limits.set).length > 0 ? { limits: limits.set } : {}) };
      const a = await ctx.api.request<AppView>('POST', `${tenantPath(ctx.args.tenant)}/apps`, { body });
      return said(a, `created app ${a.id} (${a.name}) of tenant ${a.tenant_id}`);
    },
  },
  {
    resource: 'apps',
    verb: 'delete',
    args: ['tenant', 'app'],
    flags: { yes: confirmFlag },
    summary: 'delete an app and revoke its keys (--yes)',
    async run(ctx) {
      requireYes(ctx.flags, `apps delete removes app ${ctx.args.app} and revokes its API keys`);
      const r = await ctx.api.request('DELETE', `${tenantPath(ctx.args.tenant)}/apps/${seg(ctx.args.app)}`);
      return said(r, `deleted app ${ctx.args.app} of tenant ${ctx.args.tenant}`);
    },
  },

  // ---- keys
  {
    resource: 'keys',
    verb: 'list',
    args: ['tenant'],
    flags: { app: { value: 'APP', help: "only this app's keys" } },
    summary: "list a tenant's API keys (public prefixes only)",
    async run(ctx) {
      const app = stringFlag(ctx, 'app');
      const { data } = await ctx.api.request<{ data: ApiKeyView[] }>('GET', `${tenantPath(ctx.args.tenant)}${app === undefined ? '' : `/apps/${seg(app)}`}/keys`);
      return { data, text: formatTable(data, KEY_COLUMNS) };
    },
  },
  {
    resource: 'keys',
    verb: 'create',
    args: ['tenant', 'app'],
    flags: { label: { value: 'TEXT', help: "what the key is for (shown in lists)" } },
    summary: 'create an API key for an app; its secret is printed once',
    async run(ctx) {
      const label = stringFlag(ctx, 'label');
      const k = await ctx.api.request<ApiKeyView>('POST', `${tenantPath(ctx.args.tenant)}/apps/${seg(ctx.args.app)}/keys`, { body: label === undefined ? {} : { label } });
      return {
        data: k,
        text: `created API key ${k.id} (${k.display}) for app ${k.app_id} of tenant ${k.tenant_id}:\n\n  ${k.key}\n\n`,
        warning: SHOWN_ONCE_WARNING,
      };
    },
  },
  {
    resource: 'keys',
    verb: 'revoke',
    args: ['tenant', 'app', 'key'],
    summary: 'revoke an API key (every gateway refuses it within seconds)',
    async run({ api, args }) {
      const k = await api.request<ApiKeyView>('POST', `${tenantPath(args.tenant)}/apps/${seg(args.app)}/keys/${seg(args.key)}/revoke`, { body: {} });
      return said(k, `revoked API key ${k.id} (${k.display}) at ${time(k.revoked_at)}`);
    },
  },

  {
    resource: 'keys',
    verb: 'delete',
    args: ['tenant', 'app', 'key'],
    flags: { yes: confirmFlag },
    summary: 'delete an API key: revoked at once on every gateway, then removed from the lists (--yes)',
    async run(ctx) {
      requireYes(ctx.flags, `keys delete revokes and removes API key ${ctx.args.key}`);
      const r = await ctx.api.request('DELETE', `${tenantPath(ctx.args.tenant)}/apps/${seg(ctx.args.app)}/keys/${seg(ctx.args.key)}`);
      return said(r, `deleted API key ${ctx.args.key} of app ${ctx.args.app} (revoked on every gateway)`);
    },
  },

  // ---- policy
  {
    resource: 'policy',
    verb: 'get',
    args: ['tenant'],
    summary: "show a tenant's policy",
    async run({ api, args }) {
      const p = await api.request<Record<string, unknown>>('GET', `${tenantPath(args.tenant)}/policy`);
      return { data: p, text: Object.keys(p).length === 0 ? '(empty policy: platform defaults, no limits)\n' : formatDetail(p) };
    },
  },
  {
    resource: 'policy',
    verb: 'set',
    args: ['tenant'],
    flags: {
      file: { value: 'FILE', help: 'replace the whole policy with this JSON or YAML file' },
      'moderation-file': { value: 'FILE|none', help: "set the tenant's moderation (input, output, rules) from this JSON or YAML file; none removes it" },
      ...LIMIT_FLAG_SPECS,
      ...Object.fromEntries(Object.entries(POLICY_FLAGS).map(([flag, p]) => [flag, { value: p.value, help: `${p.help} (none removes it)` }])),
    },
    summary: "replace a tenant's policy from a file, or change limits and fields with flags",
    async run(ctx) {
      const file = stringFlag(ctx, 'file');
      const given = Object.keys(ctx.flags).filter((f) => f !== 'file' && ctx.flags[f] !== undefined);
      const path = `${tenantPath(ctx.args.tenant)}/policy`;
      if (file !== undefined) {
        if (given.length > 0) throw new UsageError(`--file replaces the whole policy; give the other flags (--${given.join(', --')}) without it, or put them in the file`);
        const p = await ctx.api.request<Record<string, unknown>>('PUT', path, { body: readObjectFile('file', file, ctx.readFile) });
        return said(p, `replaced the policy of tenant ${ctx.args.tenant} (status: ${tenantStatus(p)})`);
      }
      if (given.length === 0) throw new UsageError('policy set: give --file FILE or at least one limit or policy flag (weir policy set --help lists them)');
      const limits = limitsFromFlags(ctx.flags);
      const patch: Record<string, unknown> = {};
      for (const [flag, p] of Object.entries(POLICY_FLAGS)) {
        const raw = stringFlag(ctx, flag);
        if (raw !== undefined) patch[p.field] = raw === 'none' ? null : p.parse(raw, flag);
      }
      const moderation = stringFlag(ctx, 'moderation-file');
      if (moderation !== undefined) patch.moderation = moderation === 'none' ? null : readObjectFile('moderation-file', moderation, ctx.readFile);
      if (Object.keys(limits.set).length + limits.remove.length > 0) {
        // PATCH replaces `limits` whole, so merge the flags into the current limits.
        const current = await ctx.api.request<Record<string, unknown>>('GET', path);
        const merged = applyLimits(current.limits, limits);
        patch.limits = Object.keys(merged).length > 0 ? merged : null;
      }
      const p = await ctx.api.request<Record<string, unknown>>('PATCH', path, { body: patch });
      const moderated = p.moderation !== undefined && p.moderation !== null ? `, moderation ${['input', 'output'].filter((k) => (p.moderation as Record<string, unknown>)[k] !== undefined).join('+') || 'rules only'}` : '';
      return said(p, `updated the policy of tenant ${ctx.args.tenant}: limits ${keyValues(p.limits)}${moderated} (status: ${tenantStatus(p)})`);
    },
  },
];

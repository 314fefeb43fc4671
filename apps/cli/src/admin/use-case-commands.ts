/**
 * `weir use-cases list|get|set|delete` (issue 16 item 7): a tenant's use cases — each with its
 * model chain (`--model` alias, `--pin` for a pinned version, `--fallbacks`), limits and monthly
 * budget, and redaction profile — over `/admin/v1/tenants/{id}/use-cases`. A request naming
 * only its use case is routed by that chain (docs/api.md "Use cases").
 */
import { UsageError } from '../args';
import { applyLimits, type CommandSpec, LIMIT_FLAG_SPECS, limitsFromFlags, parseList, readObjectFile, said, seg, stringFlag } from './command';
import { ApiError } from './http';
import { type Column, formatDetail, formatTable, keyValues } from './format';

/** A use case as the admin API returns it (the policy's `use_cases` entry). */
export interface UseCaseView {
  name: string;
  model: string;
  pin?: string;
  fallbacks?: string[];
  limits?: Record<string, unknown>;
  redaction_profile?: string;
}

export const USE_CASE_COLUMNS: readonly Column<UseCaseView>[] = [
  ['NAME', (u) => u.name],
  ['MODEL', (u) => u.model],
  ['VERSION', (u) => (u.pin !== undefined ? `pinned ${u.pin}` : 'auto (alias)')],
  ['FALLBACKS', (u) => (u.fallbacks ?? []).join(',') || '-'],
  ['LIMITS', (u) => (u.limits && Object.keys(u.limits).length > 0 ? keyValues(u.limits) : '-')],
  ['REDACTION', (u) => u.redaction_profile ?? '-'],
];

const path = (tenant: string | undefined, name?: string) => `/tenants/${seg(tenant)}/use-cases${name !== undefined ? `/${seg(name)}` : ''}`;

/** Fields `set` takes by flag (`none` removes the field). */
const FIELD_FLAGS: Readonly<Record<string, { field: keyof UseCaseView; value: string; help: string; list?: boolean }>> = {
  model: { field: 'model', value: 'ALIAS', help: 'the primary model: an alias the tenant may use (required for a new use case)' },
  pin: { field: 'pin', value: 'REVISION|none', help: 'version policy: pin this revision (none: follow the alias, auto-upgraded behind the eval canary)' },
  fallbacks: { field: 'fallbacks', value: 'REV,REV|none', help: 'fallback revisions, in order', list: true },
  'redaction-profile': { field: 'redaction_profile', value: 'NAME|none', help: "this use case's redaction profile (none: the tenant's)" },
};

/** The use-case commands. */
export const USE_CASE_COMMANDS: readonly CommandSpec[] = [
  {
    resource: 'use-cases',
    verb: 'list',
    args: ['tenant'],
    summary: "list a tenant's use cases (model chain, version policy, limits, redaction)",
    async run({ api, args }) {
      const { data } = await api.request<{ data: UseCaseView[] }>('GET', path(args.tenant));
      return { data, text: data.length === 0 ? `(tenant ${args.tenant} defines no use cases)\n` : formatTable(data, USE_CASE_COLUMNS) };
    },
  },
  {
    resource: 'use-cases',
    verb: 'get',
    args: ['tenant', 'name'],
    summary: 'show a use case',
    async run({ api, args }) {
      const u = await api.request<UseCaseView>('GET', path(args.tenant, args.name));
      return { data: u, text: formatDetail(u) };
    },
  },
  {
    resource: 'use-cases',
    verb: 'set',
    args: ['tenant', 'name'],
    flags: {
      file: { value: 'FILE', help: 'the whole use case, JSON or YAML (model, pin, fallbacks, limits, redaction_profile)' },
      ...Object.fromEntries(Object.entries(FIELD_FLAGS).map(([flag, f]) => [flag, { value: f.value, help: f.help }])),
      ...LIMIT_FLAG_SPECS,
    },
    summary: 'create or change a use case: flags change the fields given (none removes one), --file replaces it',
    async run(ctx) {
      const file = stringFlag(ctx, 'file');
      const given = Object.keys(ctx.flags).filter((f) => f !== 'file' && ctx.flags[f] !== undefined);
      let body: Record<string, unknown>;
      if (file !== undefined) {
        if (given.length > 0) throw new UsageError(`--file gives the whole use case; give --${given.join(', --')} without it, or put them in the file`);
        body = readObjectFile('file', file, ctx.readFile);
        delete body.name;
      } else {
        if (given.length === 0) throw new UsageError('use-cases set: give --model ALIAS (and any of --pin, --fallbacks, --redaction-profile, limit flags), or --file FILE');
        // Flags change the current use case (a new one starts empty and needs --model).
        const current = await ctx.api.request<UseCaseView>('GET', path(ctx.args.tenant, ctx.args.name)).catch((err: unknown) => {
          if (err instanceof ApiError && err.status === 404 && /use case/i.test(err.message)) return undefined;
          throw err;
        });
        body = { ...(current ?? {}) };
        delete body.name;
        for (const [flag, f] of Object.entries(FIELD_FLAGS)) {
          const raw = stringFlag(ctx, flag);
          if (raw === undefined) continue;
          if (raw === 'none') {
            if (f.field === 'model') throw new UsageError('--model cannot be none: a use case needs a model');
            delete body[f.field];
          } else body[f.field] = f.list ? parseList(flag, raw) : raw;
        }
        const limits = applyLimits(body.limits, limitsFromFlags(ctx.flags));
        if (Object.keys(limits).length > 0) body.limits = limits;
        else delete body.limits;
        if (body.model === undefined) throw new UsageError(`use case ${ctx.args.name} is new: give --model ALIAS (its primary model)`);
      }
      const u = await ctx.api.request<UseCaseView>('PUT', path(ctx.args.tenant, ctx.args.name), { body });
      const version = u.pin !== undefined ? `pinned to ${u.pin}` : 'following the alias';
      return said(u, `saved use case ${u.name} of tenant ${ctx.args.tenant}: model ${u.model} (${version})${u.fallbacks?.length ? `, fallbacks ${u.fallbacks.join(' → ')}` : ''}, limits ${keyValues(u.limits)}`);
    },
  },
  {
    resource: 'use-cases',
    verb: 'delete',
    args: ['tenant', 'name'],
    flags: { yes: { type: 'boolean', help: 'confirm the deletion' } },
    summary: 'delete a use case (--yes); requests naming it then need a model',
    async run(ctx) {
      if (ctx.flags.yes !== true) throw new UsageError(`use-cases delete removes use case ${ctx.args.name} of tenant ${ctx.args.tenant}; add --yes to confirm`);
      const r = await ctx.api.request('DELETE', path(ctx.args.tenant, ctx.args.name));
      return said(r, `deleted use case ${ctx.args.name} of tenant ${ctx.args.tenant}`);
    },
  },
];

/**
 * `weir revisions|aliases|pools …` (`weir models …` is `weir revisions …`): immutable model
 * revisions and their deprecation, aliases with their canary weights and rollback, pools.
 */
import { UsageError } from '../args';
import { type CommandSpec, parseDay, parseList, parseWeights, readObjectFile, said, seg, stringFlag } from './command';
import { arms, type Column, formatDetail, formatTable, orDash, time } from './format';

/** A revision as the admin API returns it. */
export interface RevisionView {
  id: string;
  spec: Record<string, unknown> & { model?: string; engine?: { kind?: string } };
  deprecation: { retires_on: string; replacement: string; announced_on?: string } | null;
  created_at: string;
  updated_at: string;
}

/** An alias's spec: weighted `targets` or one `revision`, plus fallbacks and a description. */
export interface AliasSpec {
  name?: string;
  targets?: Array<{ revision: string; weight: number }>;
  revision?: string;
  fallbacks?: string[];
  description?: string;
}

/** An alias as the admin API returns it. */
export interface AliasView {
  name: string;
  spec: AliasSpec;
  created_at: string;
  updated_at: string;
}

/** A revision's `pricing` as the file spells it (USD per million tokens). */
interface PricingSpec {
  input_per_mtok?: number;
  output_per_mtok?: number;
  cached_input_per_mtok?: number;
  cache_write_input_per_mtok?: number;
  reasoning_per_mtok?: number;
}

/**
 * A revision's prices in one cell, USD per million tokens: `in 3 / out 15`, then each class price
 * the revision sets (`cache read 0.3`, `cache write 3.75`, `reasoning 15`); classes left out
 * take their defaults (cache reads and writes the input price, reasoning the output price).
 */
export function formatPrices(pricing: unknown): string {
  if (typeof pricing !== 'object' || pricing === null) return '-';
  const p = pricing as PricingSpec;
  const parts = [`in ${String(p.input_per_mtok ?? '?')} / out ${String(p.output_per_mtok ?? '?')}`];
  if (p.cached_input_per_mtok !== undefined) parts.push(`cache read ${String(p.cached_input_per_mtok)}`);
  if (p.cache_write_input_per_mtok !== undefined) parts.push(`cache write ${String(p.cache_write_input_per_mtok)}`);
  if (p.reasoning_per_mtok !== undefined) parts.push(`reasoning ${String(p.reasoning_per_mtok)}`);
  return parts.join(', ');
}

export const REVISION_COLUMNS: readonly Column<RevisionView>[] = [
  ['ID', (r) => r.id],
  ['MODEL', (r) => orDash(r.spec.model)],
  ['ENGINE', (r) => orDash(r.spec.engine?.kind)],
  ['PRICES $/MTOK', (r) => formatPrices(r.spec.pricing)],
  ['DEPRECATION', (r) => (r.deprecation ? `retires ${r.deprecation.retires_on} → ${r.deprecation.replacement}` : '-')],
  ['CREATED', (r) => time(r.created_at)],
];

export const ALIAS_COLUMNS: readonly Column<AliasView>[] = [
  ['NAME', (a) => a.name],
  ['ARMS', (a) => arms(a.spec)],
  ['FALLBACKS', (a) => (a.spec.fallbacks?.length ? a.spec.fallbacks.join(',') : '-')],
  ['UPDATED', (a) => time(a.updated_at)],
];

const POOL_COLUMNS: readonly Column<Record<string, unknown>>[] = [
  ['ID', (p) => String(p.id)],
  ['KIND', (p) => orDash(p.kind)],
  ['DESCRIPTION', (p) => orDash(p.description)],
];

const revisionCommands = (resource: string): CommandSpec[] => [
  {
    resource,
    verb: 'list',
    args: [],
    summary: 'list model revisions and their deprecations',
    async run({ api }) {
      const { data } = await api.request<{ data: RevisionView[] }>('GET', '/revisions');
      return { data, text: formatTable(data, REVISION_COLUMNS) };
    },
  },
  {
    resource,
    verb: 'get',
    args: ['revision'],
    summary: 'show a revision',
    async run({ api, args }) {
      const r = await api.request<RevisionView>('GET', `/revisions/${seg(args.revision)}`);
      return { data: r, text: formatDetail(r) };
    },
  },
  {
    resource,
    verb: 'create',
    args: [],
    flags: { file: { value: 'FILE', help: 'the revision, JSON or YAML, as in the configuration file (id, model, engine, …)', required: true } },
    summary: 'create an immutable revision from a file',
    async run(ctx) {
      const r = await ctx.api.request<RevisionView>('POST', '/revisions', { body: readObjectFile('file', stringFlag(ctx, 'file') as string, ctx.readFile) });
      return said(r, `created revision ${r.id}`);
    },
  },
  {
    resource,
    verb: 'deprecate',
    args: ['revision'],
    flags: {
      'retires-on': { value: 'YYYY-MM-DD', help: 'UTC day pinned traffic starts failing (404 model_retired)', required: true },
      replacement: { value: 'REVISION', help: 'the revision pinned callers are told to move to', required: true },
      'announced-on': { value: 'YYYY-MM-DD', help: 'UTC day the countdown started (default: the server leaves it out)' },
    },
    summary: 'mark a revision deprecated with a retirement day and a replacement',
    async run(ctx) {
      const announced = stringFlag(ctx, 'announced-on');
      const deprecation = {
        retires_on: parseDay('retires-on', stringFlag(ctx, 'retires-on') as string),
        replacement: stringFlag(ctx, 'replacement'),
        ...(announced !== undefined ? { announced_on: parseDay('announced-on', announced) } : {}),
      };
      const r = await ctx.api.request<RevisionView>('PATCH', `/revisions/${seg(ctx.args.revision)}`, { body: { deprecation } });
      return said(r, `revision ${r.id} deprecated: retires ${deprecation.retires_on}, replacement ${deprecation.replacement}`);
    },
  },
  {
    resource,
    verb: 'undeprecate',
    args: ['revision'],
    summary: "withdraw a revision's deprecation",
    async run({ api, args }) {
      const r = await api.request<RevisionView>('PATCH', `/revisions/${seg(args.revision)}`, { body: { deprecation: null } });
      return said(r, `revision ${r.id} is no longer deprecated`);
    },
  },
];

/** The revision (`revisions` and `models`), alias and pool commands. */
export const MODEL_COMMANDS: readonly CommandSpec[] = [
  ...revisionCommands('revisions'),
  ...revisionCommands('models'),
  {
    resource: 'aliases',
    verb: 'list',
    args: [],
    summary: 'list aliases with their arms and weights',
    async run({ api }) {
      const { data } = await api.request<{ data: AliasView[] }>('GET', '/aliases');
      return { data, text: formatTable(data, ALIAS_COLUMNS) };
    },
  },
  {
    resource: 'aliases',
    verb: 'get',
    args: ['alias'],
    summary: 'show an alias',
    async run({ api, args }) {
      const a = await api.request<AliasView>('GET', `/aliases/${seg(args.alias)}`);
      return { data: a, text: formatDetail(a) };
    },
  },
  {
    resource: 'aliases',
    verb: 'create',
    args: ['alias'],
    flags: {
      revision: { value: 'REVISION', help: 'the one revision it serves' },
      weights: { value: 'REV=W,…', help: 'weighted arms instead, e.g. rev1=90,rev2=10' },
      fallbacks: { value: 'REV,…', help: 'revisions to try, in order, when the arm fails' },
      description: { value: 'TEXT', help: 'what the alias is for' },
    },
    summary: 'create an alias over one revision or weighted arms',
    async run(ctx) {
      const revision = stringFlag(ctx, 'revision');
      const weights = stringFlag(ctx, 'weights');
      if ((revision === undefined) === (weights === undefined)) throw new UsageError('aliases create: give exactly one of --revision and --weights');
      const fallbacks = stringFlag(ctx, 'fallbacks');
      const description = stringFlag(ctx, 'description');
      const body = {
        name: ctx.args.alias,
        ...(revision !== undefined ? { revision } : { targets: parseWeights(weights as string) }),
        ...(fallbacks !== undefined ? { fallbacks: parseList('fallbacks', fallbacks) } : {}),
        ...(description !== undefined ? { description } : {}),
      };
      const a = await ctx.api.request<AliasView>('POST', '/aliases', { body });
      return said(a, `created alias ${a.name}: ${arms(a.spec)}`);
    },
  },
  {
    resource: 'aliases',
    verb: 'set-weights',
    args: ['alias'],
    flags: { weights: { value: 'REV=W,…', help: 'the arms and their weights, e.g. rev1=90,rev2=10', required: true } },
    summary: "set an alias's arms and canary weights (raising a canary may need a passing eval)",
    async run(ctx) {
      const targets = parseWeights(stringFlag(ctx, 'weights') as string);
      const path = `/aliases/${seg(ctx.args.alias)}`;
      const current = await ctx.api.request<AliasView>('GET', path);
      // Keep the description and fallbacks; the arms are replaced.
      const { name: _name, targets: _targets, revision: _revision, ...rest } = current.spec;
      const a = await ctx.api.request<AliasView>('PUT', path, { body: { ...rest, targets } });
      return said(a, `alias ${a.name}: ${arms(a.spec)} (was ${arms(current.spec)})`);
    },
  },
  {
    resource: 'aliases',
    verb: 'rollback',
    args: ['alias'],
    summary: "restore an alias's previous arms (from the audit log; repeat to step further back)",
    async run({ api, args }) {
      const path = `/aliases/${seg(args.alias)}`;
      const before = await api.request<AliasView>('GET', path);
      const a = await api.request<AliasView>('POST', `${path}/rollback`, { body: {} });
      return said(a, `alias ${a.name} rolled back: ${arms(a.spec)} (was ${arms(before.spec)})`);
    },
  },
  {
    resource: 'pools',
    verb: 'list',
    args: [],
    summary: 'list replica pools',
    async run({ api }) {
      const { data } = await api.request<{ data: Array<Record<string, unknown>> }>('GET', '/pools');
      return { data, text: formatTable(data, POOL_COLUMNS) };
    },
  },
];

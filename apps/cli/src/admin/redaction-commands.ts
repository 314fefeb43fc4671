/**
 * `weir redaction-profiles list|get|set|delete` (issue 15, item 5): named PII redaction profiles
 * (`/admin/v1/redaction-profiles`). A tenant chooses one with `weir policy set <tenant>
 * --redaction-profile NAME` (and `--content-logging on`, `--redact-upstream on`).
 */
import { UsageError } from '../args';
import { type CommandSpec, parseList, readObjectFile, said, seg, stringFlag } from './command';
import { type Column, formatDetail, formatTable } from './format';

/** A profile as the admin API returns it. */
export interface RedactionProfileView {
  name: string;
  builtin: boolean;
  spec: { recognizers?: string[]; custom_patterns?: Array<{ name: string; pattern: string }>; replacement?: string; entropy_min_length?: number; redact_uuids?: boolean };
}

export const REDACTION_PROFILE_COLUMNS: readonly Column<RedactionProfileView>[] = [
  ['NAME', (p) => p.name],
  ['BUILTIN', (p) => (p.builtin ? 'yes' : 'no')],
  ['RECOGNIZERS', (p) => (p.spec.recognizers ?? []).join(',') || '-'],
  ['PATTERNS', (p) => (p.spec.custom_patterns ?? []).map((c) => c.name).join(',') || '-'],
  ['REPLACEMENT', (p) => p.spec.replacement ?? 'tag'],
];

const path = (name: string | undefined) => `/redaction-profiles/${seg(name)}`;

/** The redaction profile commands. */
export const REDACTION_COMMANDS: readonly CommandSpec[] = [
  {
    resource: 'redaction-profiles',
    verb: 'list',
    args: [],
    summary: 'list PII redaction profiles (built-in default and strict first)',
    async run({ api }) {
      const { data } = await api.request<{ data: RedactionProfileView[] }>('GET', '/redaction-profiles');
      return { data, text: formatTable(data, REDACTION_PROFILE_COLUMNS) };
    },
  },
  {
    resource: 'redaction-profiles',
    verb: 'get',
    args: ['name'],
    summary: 'show a redaction profile',
    async run({ api, args }) {
      const p = await api.request<RedactionProfileView>('GET', path(args.name));
      return { data: p, text: formatDetail(p) };
    },
  },
  {
    resource: 'redaction-profiles',
    verb: 'set',
    args: ['name'],
    flags: {
      file: { value: 'FILE', help: 'the profile, JSON or YAML (recognizers, custom_patterns, replacement, entropy_min_length, redact_uuids)' },
      recognizers: { value: 'A,B', help: 'built-in recognizers: email,phone,card,iban,ssn,ipv4,ipv6,secret,entropy' },
      replacement: { value: 'tag|hash', help: 'how spans are replaced (default tag)' },
    },
    summary: 'create or replace a redaction profile (custom RE2 patterns: use --file)',
    async run(ctx) {
      const file = stringFlag(ctx, 'file');
      const recognizers = stringFlag(ctx, 'recognizers');
      const replacement = stringFlag(ctx, 'replacement');
      if (file !== undefined && (recognizers !== undefined || replacement !== undefined)) {
        throw new UsageError('--file gives the whole profile; give --recognizers and --replacement without it, or put them in the file');
      }
      if (file === undefined && recognizers === undefined) throw new UsageError('redaction-profiles set: give --file FILE or --recognizers A,B');
      if (replacement !== undefined && replacement !== 'tag' && replacement !== 'hash') throw new UsageError(`--replacement must be tag or hash, got ${JSON.stringify(replacement)}`);
      const body =
        file !== undefined
          ? readObjectFile('file', file, ctx.readFile)
          : { recognizers: parseList('recognizers', recognizers as string), ...(replacement !== undefined ? { replacement } : {}) };
      const p = await ctx.api.request<RedactionProfileView>('PUT', path(ctx.args.name), { body });
      return said(p, `saved redaction profile ${p.name}: ${(p.spec.recognizers ?? []).join(', ') || 'no built-in recognizers'}${p.spec.custom_patterns?.length ? ` + ${p.spec.custom_patterns.length} pattern(s)` : ''} (${p.spec.replacement ?? 'tag'})`);
    },
  },
  {
    resource: 'redaction-profiles',
    verb: 'delete',
    args: ['name'],
    flags: { yes: { type: 'boolean', help: 'confirm the deletion' } },
    summary: 'delete a redaction profile no tenant uses (--yes)',
    async run(ctx) {
      if (ctx.flags.yes !== true) throw new UsageError(`redaction-profiles delete removes profile ${ctx.args.name}; add --yes to confirm`);
      const r = await ctx.api.request<{ name: string }>('DELETE', path(ctx.args.name));
      return said(r, `deleted redaction profile ${ctx.args.name}`);
    },
  },
];

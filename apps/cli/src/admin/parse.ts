/**
 * The admin commands' command line: `weir <resource> <verb> <args…> [flags]`, checked against
 * the command table (positional arguments, required flags, each flag at most once), plus where
 * to connect: `--url`/`WEIR_ADMIN_URL` and `--token`/`WEIR_ADMIN_TOKEN` for the admin API,
 * `--api-url`/`WEIR_API_URL` and `--api-key`/`WEIR_API_KEY` for the data plane. Pure: the
 * environment is a parameter.
 */
import { parseArgs } from 'node:util';
import { UsageError } from '../args';
import type { CommandSpec, CommandTarget, FlagSpec } from './command';
import { BATCH_COMMANDS } from './batch-commands';
import { EVAL_COMMANDS } from './eval-commands';
import { MODEL_COMMANDS } from './model-commands';
import { REDACTION_COMMANDS } from './redaction-commands';
import { SYSTEM_COMMANDS } from './system-commands';
import { TENANT_COMMANDS } from './tenant-commands';
import { USE_CASE_COMMANDS } from './use-case-commands';

/** Every admin command, in help order. */
export const ADMIN_COMMANDS: readonly CommandSpec[] = [...TENANT_COMMANDS, ...USE_CASE_COMMANDS, ...MODEL_COMMANDS, ...REDACTION_COMMANDS, ...EVAL_COMMANDS, ...SYSTEM_COMMANDS, ...BATCH_COMMANDS];

/** The admin API's default address (the control plane's default port). */
export const DEFAULT_ADMIN_URL = 'http://127.0.0.1:8090';
/** The data plane's default address (the gateway's and all-in-one's default port). */
export const DEFAULT_API_URL = 'http://127.0.0.1:8080';

/** Where a command connects and with which credential (flag, else environment variable). */
const CONNECTION_FLAGS: Readonly<Record<CommandTarget, Readonly<Record<string, FlagSpec & { env: string }>>>> = {
  admin: {
    url: { value: 'URL', env: 'WEIR_ADMIN_URL', help: `control plane address (env WEIR_ADMIN_URL; default ${DEFAULT_ADMIN_URL})` },
    token: { value: 'TOKEN', env: 'WEIR_ADMIN_TOKEN', help: 'admin token wa_… (env WEIR_ADMIN_TOKEN, preferred: a flag shows in the process list)' },
  },
  data: {
    'api-url': { value: 'URL', env: 'WEIR_API_URL', help: `gateway address (env WEIR_API_URL; default ${DEFAULT_API_URL})` },
    'api-key': { value: 'KEY', env: 'WEIR_API_KEY', help: "the tenant's API key wk_… (env WEIR_API_KEY, preferred)" },
  },
};

const COMMON_FLAGS: Readonly<Record<string, FlagSpec>> = {
  json: { type: 'boolean', help: 'print the API response as JSON' },
  help: { type: 'boolean', help: 'show this help' },
};

/** A parsed admin command line. */
export type AdminInvocation =
  | { kind: 'help'; text: string; /** 0 when help was asked for, 2 when a command was missing. */ status: 0 | 2 }
  | {
      kind: 'run';
      spec: CommandSpec;
      args: Record<string, string | undefined>;
      flags: Record<string, string | boolean | undefined>;
      json: boolean;
      /** `…/admin/v1` for the admin API, the server root for the data plane. */
      baseUrl: string;
      /** The admin token or API key; never printed. */
      credential: string;
    };

/** Whether `argv` names an admin command (as opposed to the capacity planner or the main help). */
export function isAdminCommandLine(argv: readonly string[]): boolean {
  const [resource, verb] = argv;
  // `weir capacity …` is the planner; only `weir capacity show` reads the control plane.
  if (resource === 'capacity') return verb === 'show';
  return ADMIN_COMMANDS.some((c) => c.resource === resource);
}

const commandName = (c: CommandSpec) => (c.verb ? `${c.resource} ${c.verb}` : c.resource);
const argsUsage = (c: CommandSpec) => c.args.map((a) => (a.endsWith('?') ? `[${a.slice(0, -1)}]` : `<${a}>`)).join(' ');
const flagUsage = (name: string, f: FlagSpec) => (f.type === 'boolean' ? `--${name}` : `--${name} ${f.value ?? 'VALUE'}`);

/** `weir tenants create <tenant> --name NAME [--policy-file FILE] [--json]`. */
export function usageLine(c: CommandSpec): string {
  const flags = Object.entries(c.flags ?? {}).map(([n, f]) => (f.required ? flagUsage(n, f) : `[${flagUsage(n, f)}]`));
  return ['weir', commandName(c), argsUsage(c), ...flags, '[--json]'].filter(Boolean).join(' ');
}

function flagLines(flags: Readonly<Record<string, FlagSpec>>): string[] {
  const entries = Object.entries(flags).map(([n, f]) => [flagUsage(n, f), f.help] as const);
  const width = Math.max(...entries.map(([u]) => u.length));
  return entries.map(([u, h]) => `  ${u.padEnd(width)}  ${h}`);
}

/** `weir <resource> <verb> --help`. */
export function commandHelp(c: CommandSpec): string {
  const own = c.flags ?? {};
  return [
    `weir ${commandName(c)} — ${c.summary}`,
    '',
    `usage: ${usageLine(c)}`,
    ...(Object.keys(own).length > 0 ? ['', 'flags:', ...flagLines(own)] : []),
    '',
    'connection and output:',
    ...flagLines({ ...CONNECTION_FLAGS[c.target ?? 'admin'], ...COMMON_FLAGS }),
    '',
    'exit status: 0 done, 1 the API refused or could not be reached (error: <its message>), 2 bad usage',
  ].join('\n') + '\n';
}

/** `weir <resource> --help`: the resource's commands. */
export function resourceHelp(resource: string): string {
  const specs = ADMIN_COMMANDS.filter((c) => c.resource === resource);
  const lines = specs.map((c) => [`weir ${commandName(c)} ${argsUsage(c)}`.trimEnd(), c.summary] as const);
  const width = Math.max(...lines.map(([u]) => u.length));
  const alias = resource === 'models' ? '\n(weir models … is weir revisions …)\n' : '';
  return `commands:\n${lines.map(([u, s]) => `  ${u.padEnd(width)}  ${s}`).join('\n')}\n${alias}\nweir ${resource} <command> --help shows a command's flags.\n`;
}

/** Turns node:util parseArgs errors into messages that start with the flag. */
function parseArgsMessage(error: unknown, c: CommandSpec): string {
  const e = error as { code?: string; message?: string };
  const flag = /'(-[^' ]+)/.exec(e.message ?? '')?.[1];
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `${flag ?? 'flag'}: unknown flag for ${commandName(c)} (weir ${commandName(c)} --help lists them)`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      return `${flag ?? 'flag'}: ${/argument missing|ambiguous/.test(e.message ?? '') ? 'needs a value' : 'takes no value'}`;
    default:
      return e.message ?? String(error);
  }
}

/** The connection for `target` from flags, else the environment, else the default address. @throws UsageError without a credential or with a bad URL. */
function connection(target: CommandTarget, values: Record<string, string | boolean | undefined>, env: Readonly<Record<string, string | undefined>>) {
  const [urlFlag, credentialFlag] = Object.keys(CONNECTION_FLAGS[target]);
  const spec = CONNECTION_FLAGS[target];
  const pick = (flag: string) => {
    const v = values[flag];
    return typeof v === 'string' ? v : env[spec[flag].env] || undefined;
  };
  const url = pick(urlFlag) ?? (target === 'admin' ? DEFAULT_ADMIN_URL : DEFAULT_API_URL);
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
    throw new UsageError(`--${urlFlag} (or ${spec[urlFlag].env}): expected an http(s) URL such as ${target === 'admin' ? DEFAULT_ADMIN_URL : DEFAULT_API_URL}, got ${JSON.stringify(url)}`);
  }
  const credential = pick(credentialFlag);
  if (!credential) {
    throw new UsageError(
      target === 'admin'
        ? 'no admin token: set WEIR_ADMIN_TOKEN (or pass --token); an admin creates tokens with weir admin-tokens create'
        : "no API key: set WEIR_API_KEY to the tenant's key (or pass --api-key); usage is always the key's own tenant's",
    );
  }
  // Accept the base with or without the API prefix (…/admin/v1, …/v1).
  const root = url.replace(/\/+$/, '').replace(target === 'admin' ? /\/admin\/v1$/ : /\/v1$/, '');
  return { baseUrl: target === 'admin' ? `${root}/admin/v1` : root, credential };
}

/**
 * Parses an admin command line (`argv` without `node` and the script; `env` for the
 * connection defaults).
 * @throws UsageError for an unknown resource, command or flag, a missing or extra argument, a
 *   missing required flag, a repeated flag, a bad URL or a missing credential; the message names it.
 */
export function parseAdminCommandLine(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): AdminInvocation {
  const [resource, ...afterResource] = argv;
  const specs = ADMIN_COMMANDS.filter((c) => c.resource === resource);
  if (specs.length === 0) throw new UsageError(`${resource}: unknown command (weir --help lists them)`);
  let spec: CommandSpec | undefined = specs.find((c) => c.verb === '');
  let rest = afterResource;
  if (!spec) {
    const [verb, ...afterVerb] = afterResource;
    if (verb === undefined) return { kind: 'help', text: resourceHelp(resource), status: 2 };
    if (verb === '-h' || verb === '--help' || verb === 'help') return { kind: 'help', text: resourceHelp(resource), status: 0 };
    if (verb.startsWith('-')) throw new UsageError(`${verb}: name the command first, as in weir ${resource} list ${verb} (weir ${resource} --help lists the commands)`);
    spec = specs.find((c) => c.verb === verb);
    if (!spec) throw new UsageError(`${resource} ${verb}: unknown command (weir ${resource} --help lists them)`);
    rest = afterVerb;
  }
  const target = spec.target ?? 'admin';
  const all: Record<string, FlagSpec> = { ...spec.flags, ...CONNECTION_FLAGS[target], ...COMMON_FLAGS };
  const options = Object.fromEntries(Object.entries(all).map(([name, f]) => [name, { type: f.type ?? 'string', ...(name === 'help' ? { short: 'h' } : {}) }])) as Record<
    string,
    { type: 'string' | 'boolean'; short?: string }
  >;
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: [...rest], options, strict: true, allowPositionals: true, tokens: true });
  } catch (error) {
    throw new UsageError(parseArgsMessage(error, spec));
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  if (values.help) return { kind: 'help', text: commandHelp(spec), status: 0 };
  const seen = new Set<string>();
  for (const token of parsed.tokens ?? []) {
    if (token.kind !== 'option') continue;
    if (seen.has(token.name)) throw new UsageError(`--${token.name}: given more than once`);
    seen.add(token.name);
  }

  const required = spec.args.filter((a) => !a.endsWith('?'));
  const positionals = parsed.positionals;
  if (positionals.length < required.length) {
    throw new UsageError(`${commandName(spec)}: missing <${required[positionals.length]}> (usage: ${usageLine(spec)})`);
  }
  if (positionals.length > spec.args.length) throw new UsageError(`${positionals[spec.args.length]}: unexpected argument (usage: ${usageLine(spec)})`);
  const args = Object.fromEntries(spec.args.map((a, i) => [a.replace(/\?$/, ''), positionals[i]]));
  for (const [name, f] of Object.entries(spec.flags ?? {})) {
    if (f.required && values[name] === undefined) throw new UsageError(`${commandName(spec)}: --${name} ${f.value ?? ''} is required (usage: ${usageLine(spec)})`.replace('  is', ' is'));
  }
  const flags = Object.fromEntries(Object.keys(spec.flags ?? {}).map((name) => [name, values[name]]));
  return { kind: 'run', spec, args, flags, json: values.json === true, ...connection(target, values, env) };
}

/**
 * The shape of an admin command (one row of the command table) and the flag helpers the rows
 * share. A command is `weir <resource> <verb> <args…> [flags]`; its row names its positional
 * arguments and flags (so parsing and `--help` come from the table) and a small `run` that
 * calls the API and says what to print.
 */
import { parse as parseYaml } from 'yaml';
import { numberFlag, UsageError } from '../args';
import type { JsonClient } from './http';

/** A flag of one command. Every flag takes a value unless `type` is `boolean`. */
export interface FlagSpec {
  type?: 'string' | 'boolean';
  /** Placeholder for the value in help (`NAME`, `FILE`). */
  value?: string;
  /** One line of help. */
  help: string;
  /** Parsing fails (exit 2) without it. */
  required?: boolean;
}

/** Which service a command talks to: the control plane's admin API (default) or the data plane's OpenAI-compatible API. */
export type CommandTarget = 'admin' | 'data';

/** One admin command. */
export interface CommandSpec {
  resource: string;
  /** The verb; `''` for a command that is only its resource (`weir usage`). */
  verb: string;
  /** Positional arguments in order, e.g. `['tenant', 'app']`; a trailing `?` marks the last ones optional. */
  args: readonly string[];
  flags?: Readonly<Record<string, FlagSpec>>;
  /** One line for the command list. */
  summary: string;
  /** Default `admin`. */
  target?: CommandTarget;
  run(ctx: CommandContext): Promise<CommandResult>;
}

/** What a command's `run` gets. */
export interface CommandContext {
  /** Positional arguments by name (without the `?`). */
  args: Readonly<Record<string, string | undefined>>;
  /** The command's own flags by name (global flags are not here). */
  flags: Readonly<Record<string, string | boolean | undefined>>;
  /** Bound to the target's base URL and credential. */
  api: JsonClient;
  /** Reads a file as UTF-8 (`-` is standard input). @throws when it cannot. */
  readFile(path: string): string;
}

/** What a command prints: `data` with `--json`, `text` otherwise; `warning` always goes to stderr. */
export interface CommandResult {
  data: unknown;
  text: string;
  warning?: string;
}

/** A string flag's value, or undefined. */
export function stringFlag(ctx: Pick<CommandContext, 'flags'>, name: string): string | undefined {
  const v = ctx.flags[name];
  return typeof v === 'string' ? v : undefined;
}

/** A path segment, percent-encoded (ids may hold `/`, `:`, `@`). */
export const seg = (s: string | undefined): string => encodeURIComponent(s ?? '');

/**
 * Parses `--weights`: comma-separated `revision=weight` pairs, e.g. `rev1=90,rev2=10` →
 * `[{revision: 'rev1', weight: 90}, {revision: 'rev2', weight: 10}]`. Weights are decimal numbers
 * ≥ 0 (relative shares; the server checks their sum and the revisions).
 * @throws UsageError naming `--weights` for an empty list, a malformed pair, a bad weight or a repeated revision.
 */
export function parseWeights(raw: string): Array<{ revision: string; weight: number }> {
  const pairs = raw.split(',').map((p) => p.trim());
  const seen = new Set<string>();
  return pairs.map((pair) => {
    const m = /^([^=\s]+)=([^=\s]+)$/.exec(pair);
    if (!m) throw new UsageError(`--weights: expected revision=weight pairs such as rev1=90,rev2=10, got ${JSON.stringify(pair)} in ${JSON.stringify(raw)}`);
    const weight = numberFlag('weights', m[2], { min: 0 });
    if (seen.has(m[1])) throw new UsageError(`--weights: revision ${JSON.stringify(m[1])} appears twice`);
    seen.add(m[1]);
    return { revision: m[1], weight };
  });
}

/** A comma list (`a,b`) → `['a', 'b']`; empty items are refused. @throws UsageError naming `--flag`. */
export function parseList(flag: string, raw: string): string[] {
  const items = raw.split(',').map((s) => s.trim());
  if (items.some((s) => s === '')) throw new UsageError(`--${flag}: expected a comma-separated list such as a,b, got ${JSON.stringify(raw)}`);
  return items;
}

/** `on`/`true` → true, `off`/`false` → false. @throws UsageError naming `what`. */
export function parseOnOff(what: string, raw: string): boolean {
  if (raw === 'on' || raw === 'true') return true;
  if (raw === 'off' || raw === 'false') return false;
  throw new UsageError(`${what}: expected on or off, got ${JSON.stringify(raw)}`);
}

/** A UTC day `YYYY-MM-DD` that exists. @throws UsageError naming `--flag`. */
export function parseDay(flag: string, raw: string): string {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(raw) || new Date(`${raw}T00:00:00Z`).toISOString().slice(0, 10) !== raw) {
    throw new UsageError(`--${flag}: expected a UTC date YYYY-MM-DD such as 2030-01-31, got ${JSON.stringify(raw)}`);
  }
  return raw;
}

/**
 * The limit flags (`--max-concurrent 8`, `--monthly-budget-usd 500`, …), each a field of the
 * configuration's `limits`; the value `none` removes that limit.
 */
export const LIMIT_FLAGS: Readonly<Record<string, { field: string; integer: boolean; help: string }>> = {
  'max-concurrent': { field: 'max_concurrent', integer: true, help: 'requests in flight at once' },
  'requests-per-minute': { field: 'requests_per_minute', integer: true, help: 'requests per minute' },
  'tokens-per-minute': { field: 'tokens_per_minute', integer: true, help: 'input + output tokens per minute' },
  'input-tokens-per-minute': { field: 'input_tokens_per_minute', integer: true, help: 'input tokens per minute' },
  'output-tokens-per-minute': { field: 'output_tokens_per_minute', integer: true, help: 'output tokens per minute' },
  'daily-budget-usd': { field: 'daily_budget_usd', integer: false, help: 'USD per UTC day' },
  'monthly-budget-usd': { field: 'monthly_budget_usd', integer: false, help: 'USD per UTC month' },
};

/**
 * An app's session caps (`x-weir-session-id`; apps only): an app that sets either cap allows
 * sessions. {@link limitsFromFlags} reads them too.
 */
export const SESSION_LIMIT_FLAGS: Readonly<Record<string, { field: string; integer: boolean; help: string }>> = {
  'session-max-tokens': { field: 'session_max_tokens', integer: true, help: 'tokens one session (x-weir-session-id) may use over its life' },
  'session-budget-usd': { field: 'session_budget_usd', integer: false, help: 'USD one session may spend over its life' },
  'session-idle-ttl-ms': { field: 'session_idle_ttl_ms', integer: true, help: 'ms after which an idle session is forgotten (default 3600000)' },
};

/** {@link SESSION_LIMIT_FLAGS} as flag specs (`apps create`). */
export const SESSION_LIMIT_FLAG_SPECS: Readonly<Record<string, FlagSpec>> = Object.fromEntries(
  Object.entries(SESSION_LIMIT_FLAGS).map(([flag, l]) => [flag, { value: 'N', help: `session cap: ${l.help} (${l.integer ? 'integer ≥ 1' : 'number ≥ 0'})` }]),
);

/** {@link LIMIT_FLAGS} as flag specs, for a command's `flags`. */
export const LIMIT_FLAG_SPECS: Readonly<Record<string, FlagSpec>> = Object.fromEntries(
  Object.entries(LIMIT_FLAGS).map(([flag, l]) => [flag, { value: 'N', help: `limit: ${l.help} (${l.integer ? 'integer ≥ 1' : 'number ≥ 0'}; none removes it)` }]),
);

/**
 * The limit flags given: `set` maps each configuration field to its new value, `remove` lists
 * the fields given as `none`. Integers ≥ 1 for counts and rates, numbers ≥ 0 for USD budgets.
 * @throws UsageError naming the flag for a bad value.
 */
export function limitsFromFlags(flags: Readonly<Record<string, string | boolean | undefined>>): { set: Record<string, number>; remove: string[] } {
  const set: Record<string, number> = {};
  const remove: string[] = [];
  for (const [flag, l] of [...Object.entries(LIMIT_FLAGS), ...Object.entries(SESSION_LIMIT_FLAGS)]) {
    const raw = flags[flag];
    if (typeof raw !== 'string') continue;
    if (raw === 'none') remove.push(l.field);
    else set[l.field] = numberFlag(flag, raw, l.integer ? { integer: true, min: 1 } : { min: 0 });
  }
  return { set, remove };
}

/** `limits` with `change` applied (a field set, or removed). */
export function applyLimits(limits: unknown, change: { set: Record<string, number>; remove: string[] }): Record<string, unknown> {
  const out: Record<string, unknown> = { ...(limits !== null && typeof limits === 'object' ? (limits as Record<string, unknown>) : {}), ...change.set };
  for (const f of change.remove) delete out[f];
  return out;
}

/**
 * Reads a JSON or YAML file holding one object (YAML is a superset of JSON, so one parser
 * reads both).
 * @throws UsageError naming `--flag` and the file when it cannot be read, does not parse, or is not an object.
 */
export function readObjectFile(flag: string, file: string, readFile: (path: string) => string): Record<string, unknown> {
  let text: string;
  try {
    text = readFile(file);
  } catch (error) {
    throw new UsageError(`--${flag}: cannot read ${file}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw new UsageError(`--${flag}: ${file} is neither JSON nor YAML: ${(error as Error).message.split('\n')[0]}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new UsageError(`--${flag}: ${file} must hold one object (a mapping), not ${Array.isArray(value) ? 'a list' : JSON.stringify(value)}`);
  return value as Record<string, unknown>;
}

/** A {@link CommandResult} whose text is one line (newline added). */
export const said = (data: unknown, line: string, warning?: string): CommandResult => ({ data, text: `${line}\n`, ...(warning ? { warning } : {}) });

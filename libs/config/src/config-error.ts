/**
 * The one error `@weir/config` throws: a configuration file or the environment is invalid.
 * It is a startup fault (the process refuses to start), never a request error, so it does not
 * cross a wire boundary and is not a `WeirError`.
 */

/** One problem found while loading configuration. */
export interface ConfigProblem {
  /**
   * Where the problem is, in the source's own naming: a snake_case field path such as
   * `revisions[0].pricing.input_per_mtok` for a file, a variable name such as `PORT` for the
   * environment, or `` (empty) for the whole document.
   */
  path: string;
  /** What is wrong and, where it helps, how to fix it. Never contains secrets. */
  message: string;
}

/**
 * Thrown by `parseConfig`, `loadConfigFile` and `loadAllInOneEnv`. `message` lists every
 * problem on its own line as `<source>: <path>: <message>`, e.g.
 * `weir.yaml: revisions[0].pricing.input_per_mtok: expected a number >= 0, got "abc"`.
 */
export class ConfigError extends Error {
  /** The file name (as given) or `environment`. */
  readonly source: string;
  /** Every problem found, in document order. Never empty. */
  readonly problems: readonly ConfigProblem[];

  constructor(source: string, problems: readonly ConfigProblem[], options?: { cause?: unknown }) {
    super(formatProblems(source, problems), options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ConfigError';
    this.source = source;
    this.problems = problems;
  }
}

/** True when `value` is a {@link ConfigError}. */
export function isConfigError(value: unknown): value is ConfigError {
  return value instanceof ConfigError;
}

function formatProblems(source: string, problems: readonly ConfigProblem[]): string {
  return problems.map((p) => (p.path ? `${source}: ${p.path}: ${p.message}` : `${source}: ${p.message}`)).join('\n');
}

/**
 * Formats a field path the way a reader of the file writes it: `revisions[0].engine.kind`.
 * Keys that are not plain identifiers are quoted: `tenants[1]["my key"]`.
 */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (typeof seg === 'string' && /^[A-Za-z_][A-Za-z0-9_-]*$/.test(seg)) out += out ? `.${seg}` : seg;
    else out += `[${JSON.stringify(String(seg))}]`;
  }
  return out;
}

/**
 * Describes a value for an error message: strings quoted (and cut at 40 characters), numbers
 * and booleans as written, `null`, `a list`, `a mapping`.
 */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
    case 'number':
    case 'boolean':
    case 'bigint':
      return String(value);
    case 'object':
      return 'a mapping';
    case 'undefined':
      return 'nothing';
    default:
      return typeof value;
  }
}

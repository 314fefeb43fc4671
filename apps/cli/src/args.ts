/**
 * Argument parsing for the `weir` CLI: pure functions from argv to a command, so every rule
 * (defaults, ranges, unknown flags) is unit-tested without spawning a process. node:util
 * `parseArgs` does the tokenizing; the values are checked here and every error names its flag.
 */
import { parseArgs } from 'node:util';
import { EXAMPLE_REPLICA_PROFILE, formatNumber, type ReplicaProfile, SEED_LATENCY_TARGETS, type TokenDistribution } from '@weir/capacity';

/** A command-line mistake: exit status 2, the message names the flag and says what to fix. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** `weir capacity …` with its flags checked. */
export interface CapacityCommand {
  command: 'capacity';
  rps: number;
  /** Median (or fixed) prompt tokens per request (`--input`). */
  inputTokens: number;
  /** Median (or fixed) output tokens per request (`--output`). */
  outputTokens: number;
  /** `--replica-tps`: measured output tokens/s per replica; required without `--simulate`. */
  replicaTokensPerSecond?: number;
  /** `--util`, a fraction in (0, 1]; default 0.7 (the seed's ceiling). */
  utilization: number;
  /** `--n-plus`: replica failures to survive; default 1 (the seed's N+1). */
  nPlus: number;
  json: boolean;
  /** Present with `--simulate`. */
  simulate?: {
    profile: ReplicaProfile;
    inputTokens: TokenDistribution;
    outputTokens: TokenDistribution;
    maxOutputTokens?: number;
    durationSeconds: number;
    seed: number;
    ttftP95Ms: number;
    tpotP95Ms: number;
    maxReplicas: number;
  };
}

/**
 * The ranges of the numeric flags and of the work one command may ask for (listed in
 * `weir capacity --help` and docs/capacity.md). Every value must be finite and in range, so every
 * result is a finite number; the bounds are far beyond any real fleet, only there to catch a
 * slipped exponent or a wrong unit.
 */
export const LIMITS = Object.freeze({
  /** `--rps` ≤ this (requests/s). */
  maxRps: 1e6,
  /** `--input`, `--output`, their p95s and samples, `--max-output` ≤ this (tokens per request). */
  maxTokens: 1e7,
  /** `--replica-tps` in [min, max] (output tokens/s of one replica). */
  minReplicaTps: 1e-3,
  maxReplicaTps: 1e9,
  /** `--util` ≥ this (the fraction's upper bound is 1). */
  minUtil: 0.01,
  /** `--n-plus` ≤ this (replica failures). */
  maxNPlus: 1000,
  /** The throughput plan's answer (replicas, before N+) ≤ this. */
  maxPlanReplicas: 1e9,
  /** `--prefill-tps` in [min, max] (prompt tokens/s). */
  minPrefillTps: 1,
  maxPrefillTps: 1e9,
  /** `--decode-ms`: batches ≤ maxDecodeBatch; step times in [minDecodeMs, maxDecodeMs] ms. */
  maxDecodeBatch: 100_000,
  minDecodeMs: 0.001,
  maxDecodeMs: 1e6,
  /** `--kv-tokens` ≤ this. */
  maxKvTokens: 1e9,
  /** `--max-seqs` ≤ this. */
  maxSequences: 100_000,
  /** `--duration` ≤ this (seconds: one day). */
  maxDurationSeconds: 86_400,
  /** `--seed` ≤ this (the PRNG's 32 bits). */
  maxSeed: 4_294_967_295,
  /** `--ttft-p95-ms` ≤ this (one hour) and `--tpot-p95-ms` ≤ maxTpotMs (one minute). */
  maxTtftMs: 3_600_000,
  maxTpotMs: 60_000,
  /** `--max-replicas` ≤ this. */
  maxReplicas: 10_000,
  /** A simulation window must expect at least this many arrivals (rps × duration): fewer cannot give a p95. */
  minArrivals: 20,
  /** … and at most this many, */
  maxArrivals: 100_000,
  /** … and at most this many output tokens (rps × duration × mean output tokens), which bounds the decode steps of a run. */
  maxSimulatedTokens: 5e6,
});

/** What `parseCommandLine` returns. */
export type Command = { command: 'help'; topic?: 'capacity' } | CapacityCommand;

/** `weir --help`. */
export const MAIN_HELP = `weir — Weir's operator command line

usage: weir <command> [flags]
       weir <resource> <verb> [arguments] [flags]

planning:
  capacity      size a replica fleet for a load: the throughput arithmetic, or a simulation
                of replicas (TTFT and TPOT percentiles, KV memory and prefill checks)

the control plane's admin API (WEIR_ADMIN_URL, default http://127.0.0.1:8090; WEIR_ADMIN_TOKEN):
  tenants       list, get, create, update, delete, disable, enable, kill-switch
  apps          list, get, create, delete (a tenant's apps)
  keys          list, create (the key is printed once), revoke
  policy        get, set (from a JSON/YAML file, or limit and policy flags)
  use-cases     list, get, set, delete (a tenant's use cases: model chain, version pin,
                limits and budget, redaction profile)
  revisions     list, get, create (from a file), deprecate, undeprecate (also: weir models …)
  aliases       list, get, create, set-weights, rollback
  pools         list
  prompts       list, get, add, delete (a tenant's golden prompts per use case)
  evals         run (replay a use case on a candidate; prints the report), list, show
  capacity show the capacity controller's desired replicas per pool
  snapshots     list, get
  audit         list (filters), get
  admin-tokens  list, create (printed once), revoke

the data plane (WEIR_API_URL, default http://127.0.0.1:8080; WEIR_API_KEY):
  usage         a tenant's tokens and cost this day or month
  batches       list, get, cancel, watch (a progress bar until the batch ends)

flags:
  -h, --help  show help (also: weir <command> --help, weir <resource> --help)
  --json      print the API's JSON instead of a table (admin and usage commands)

exit status: 0 done, 1 no answer (a simulation found no fleet meeting the targets) or the
API refused the request (error: <its message>), 2 bad usage`;

/** `weir capacity --help`. */
export const CAPACITY_HELP = `weir capacity — how many replicas a load needs

usage: weir capacity --rps N --input TOKENS --output TOKENS --replica-tps TOKENS_PER_S [--util F] [--n-plus K] [--json]
       weir capacity --simulate --rps N --input TOKENS --output TOKENS [profile and load flags] [--json]

Throughput plan (the serving seed's arithmetic; decode throughput only):
  demand = rps × output tokens; replicas = ceil(demand / (replica-tps × util)); then add
  n-plus replicas so the survivors of n-plus failures still meet demand at the ceiling.
  weir capacity --rps 100 --input 2000 --output 300 --replica-tps 2500 --util 0.7 --n-plus 1
  → 30,000 tokens/s; ceil(30,000 / 1,750) = 18 replicas; 19 with N+1.

Numbers are written in decimal (16, 0.5, 1e3; not 0x10), each flag at most once. Ranges
are in brackets; a value outside them, or a plan above 1,000,000,000 replicas, exits 2.

load:
  --rps N              peak requests per second ((0, 1e6]; required)
  --input TOKENS       prompt tokens per request (integer [0, 1e7], ≥ 1 with --simulate;
                       required; the median with --input-p95)
  --output TOKENS      output tokens per request (integer [1, 1e7]; required; the median
                       with --output-p95)
  --replica-tps TPS    measured output tokens/s of one replica at the target latency
                       ([0.001, 1e9]; required without --simulate, optional with it)
  --util F             utilisation ceiling, a fraction in [0.01, 1] (default 0.7)
  --n-plus K           replica failures to survive (integer [0, 1000], default 1)
  --json               print the result as JSON instead of text

simulation (--simulate): replays Poisson arrivals against simulated replicas and finds the
smallest fleet whose p95 TTFT and p95 TPOT meet the targets; see docs/capacity.md.
  --simulate           run the simulation
  --input-p95 TOKENS   draw prompt lengths from a lognormal with median --input and this p95
                       ([--input, 1e7])
  --output-p95 TOKENS  draw output lengths from a lognormal with median --output and this p95
                       ([--output, 1e7])
  --input-samples L    draw prompt lengths uniformly from a comma list (e.g. 800,2000,3500;
                       integers [1, 1e7])
  --output-samples L   draw output lengths uniformly from a comma list (integers [1, 1e7])
  --max-output TOKENS  the output limit requests send, reserved in KV memory (integer
                       [1, 1e7]; default: each request's drawn length)
  --prefill-tps TPS    replica prefill throughput, prompt tokens/s ([1, 1e9], default 10000)
  --decode-ms PTS      decode step time by batch size, batch:ms pairs, linear between them
                       (batch [1, 100000], ms [0.001, 1e6]; default 1:20,32:40)
  --kv-tokens N        replica KV-cache capacity in tokens (integer [1, 1e9], default 65536)
  --max-seqs N         replica's largest running batch (integer [1, 100000], default 32)
  --duration S         simulated arrival window in seconds ((0, 86400], default 60)
  --seed N             PRNG seed for arrivals and lengths (integer [0, 4294967295], default 1)
  --ttft-p95-ms MS     p95 time-to-first-token target ((0, 3600000], default 1000, the seed's)
  --tpot-p95-ms MS     p95 time-per-output-token target ((0, 60000], default 50, the seed's)
  --max-replicas N     give up above this fleet size (integer [1, 10000], default 1000)

The window must expect 20 to 100,000 arrivals (--rps × --duration) and at most 5,000,000
output tokens (× mean output tokens), else exit 2 naming the flags: 20 for a p95 to mean
anything, the caps to bound a run's work (seconds per fleet size at the very worst). A load
whose throughput lower bound exceeds --max-replicas is answered at once (exit 1) without
simulating, and so is one no fleet size can serve (a request larger than the KV cache, a
TTFT or TPOT target below what one idle replica achieves).

The control plane's live decisions (desired replicas per pool from telemetry) are
weir capacity show [pool] (weir capacity show --help).

exit status: 0 done, 1 no fleet up to --max-replicas can meet the targets, 2 bad usage`;

const CAPACITY_OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  rps: { type: 'string' },
  input: { type: 'string' },
  output: { type: 'string' },
  'replica-tps': { type: 'string' },
  util: { type: 'string' },
  'n-plus': { type: 'string' },
  json: { type: 'boolean' },
  simulate: { type: 'boolean' },
  'input-p95': { type: 'string' },
  'output-p95': { type: 'string' },
  'input-samples': { type: 'string' },
  'output-samples': { type: 'string' },
  'max-output': { type: 'string' },
  'prefill-tps': { type: 'string' },
  'decode-ms': { type: 'string' },
  'kv-tokens': { type: 'string' },
  'max-seqs': { type: 'string' },
  duration: { type: 'string' },
  seed: { type: 'string' },
  'ttft-p95-ms': { type: 'string' },
  'tpot-p95-ms': { type: 'string' },
  'max-replicas': { type: 'string' },
} as const;

/** Flags that only mean something with `--simulate`. */
const SIMULATION_FLAGS = [
  'input-p95',
  'output-p95',
  'input-samples',
  'output-samples',
  'max-output',
  'prefill-tps',
  'decode-ms',
  'kv-tokens',
  'max-seqs',
  'duration',
  'seed',
  'ttft-p95-ms',
  'tpot-p95-ms',
  'max-replicas',
] as const;

/**
 * A number as the flags accept it: decimal digits, an optional fraction and an optional exponent
 * (`16`, `0.5`, `1e3`, `2.5E-3`). Not hex, octal or binary (`Number('0x10')` is 16), not empty,
 * no sign (no flag takes a negative value), no surrounding whitespace.
 */
const DECIMAL = /^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$/;

/**
 * Reads a number flag: decimal only ({@link DECIMAL}), finite, `integer` requires an integer;
 * `min`/`exclusiveMin` bound it; `max` caps it.
 * @throws UsageError naming `--flag`, the range and the value given.
 */
export function numberFlag(
  flag: string,
  raw: string,
  rule: { integer?: boolean; min?: number; exclusiveMin?: number; max?: number },
): number {
  const decimal = DECIMAL.test(raw);
  const value = decimal ? Number(raw) : Number.NaN;
  const expected = [
    rule.integer ? 'an integer' : 'a number',
    rule.exclusiveMin !== undefined ? `> ${formatNumber(rule.exclusiveMin)}` : rule.min !== undefined ? `≥ ${formatNumber(rule.min)}` : '',
    rule.max !== undefined ? `and ≤ ${formatNumber(rule.max)}` : '',
  ]
    .filter(Boolean)
    .join(' ');
  if (!decimal) {
    throw new UsageError(`--${flag}: expected ${expected}, written in decimal digits (e.g. ${rule.integer ? '16, 1e3' : '16, 0.5, 1e3'}), got ${JSON.stringify(raw)}`);
  }
  const bad =
    !Number.isFinite(value) ||
    (rule.integer && !Number.isInteger(value)) ||
    (rule.exclusiveMin !== undefined && value <= rule.exclusiveMin) ||
    (rule.min !== undefined && value < rule.min) ||
    (rule.max !== undefined && value > rule.max);
  if (bad) throw new UsageError(`--${flag}: expected ${expected}, got ${JSON.stringify(raw)}`);
  return value;
}

/**
 * Parses `--decode-ms` (`batch:ms` pairs separated by commas, batches strictly increasing),
 * e.g. `1:20,32:40` → `[[1, 20], [32, 40]]`.
 * @throws UsageError naming `--decode-ms`.
 */
export function parseDecodePoints(raw: string): Array<[number, number]> {
  const { maxDecodeBatch, minDecodeMs, maxDecodeMs } = LIMITS;
  const points = raw.split(',').map((pair) => {
    const m = /^\s*(\d+)\s*:\s*(\d+(?:\.\d+)?)\s*$/.exec(pair);
    const [batch, ms] = m ? [Number(m[1]), Number(m[2])] : [Number.NaN, Number.NaN];
    if (!m || !(batch >= 1 && batch <= maxDecodeBatch) || !(ms >= minDecodeMs && ms <= maxDecodeMs)) {
      throw new UsageError(
        `--decode-ms: expected batch:ms pairs such as 1:20,32:40 (batch an integer in [1, ${formatNumber(maxDecodeBatch)}], ms in [${formatNumber(minDecodeMs)}, ${formatNumber(maxDecodeMs)}]), got ${JSON.stringify(raw)}`,
      );
    }
    return [Number(m[1]), Number(m[2])] as [number, number];
  });
  points.forEach((p, i) => {
    if (i > 0 && p[0] <= points[i - 1][0]) throw new UsageError(`--decode-ms: batches must increase (${p[0]} after ${points[i - 1][0]}) in ${JSON.stringify(raw)}`);
  });
  return points;
}

/** Parses a comma list of token counts (integers in [1, 1e7]; spaces around commas allowed). @throws UsageError naming `--flag`. */
export function parseSamples(flag: string, raw: string): number[] {
  return raw.split(',').map((s) => numberFlag(flag, s.trim(), { integer: true, min: 1, max: LIMITS.maxTokens }));
}

function distribution(kind: 'input' | 'output', median: number, values: Record<string, string | boolean | undefined>): TokenDistribution {
  const p95 = values[`${kind}-p95`] as string | undefined;
  const samples = values[`${kind}-samples`] as string | undefined;
  if (p95 !== undefined && samples !== undefined) throw new UsageError(`--${kind}-p95 and --${kind}-samples: give one of them, not both`);
  if (samples !== undefined) return { kind: 'samples', values: parseSamples(`${kind}-samples`, samples) };
  if (p95 !== undefined) {
    const value = numberFlag(`${kind}-p95`, p95, { min: median, max: LIMITS.maxTokens });
    return { kind: 'lognormal', p50: median, p95: value };
  }
  return { kind: 'fixed', value: median };
}

/**
 * Parses a whole command line (without `node` and the script).
 * @throws UsageError for an unknown command or flag, a missing required flag, or a bad value;
 *   the message names the flag.
 */
export function parseCommandLine(argv: readonly string[]): Command {
  const [command, ...rest] = argv;
  if (command === undefined || command === '-h' || command === '--help' || command === 'help') return { command: 'help' };
  if (command !== 'capacity') {
    throw new UsageError(command.startsWith('-') ? `${command}: unknown flag; name a command first (weir --help)` : `${command}: unknown command (weir --help lists them)`);
  }
  let parsed: ReturnType<typeof parseCapacityArgs>;
  try {
    parsed = parseCapacityArgs(rest);
  } catch (error) {
    throw new UsageError(parseArgsMessage(error));
  }
  const values: Record<string, string | boolean | undefined> = parsed.values;
  if (values.help) return { command: 'help', topic: 'capacity' };
  // parseArgs keeps the last of a repeated flag; a second value is more likely a slip
  // (`--rps 100 … --rps 5`) than an override, so refuse it.
  const seen = new Set<string>();
  for (const token of parsed.tokens) {
    if (token.kind !== 'option') continue;
    if (seen.has(token.name)) throw new UsageError(`--${token.name} given twice: give each flag once`);
    seen.add(token.name);
  }

  const required = (flag: string): string => {
    const v = values[flag];
    if (typeof v !== 'string') throw new UsageError(`--${flag}: required (weir capacity --help)`);
    return v;
  };
  const optional = (flag: string): string | undefined => values[flag] as string | undefined;
  const L = LIMITS;
  const rps = numberFlag('rps', required('rps'), { exclusiveMin: 0, max: L.maxRps });
  const inputTokens = numberFlag('input', required('input'), { integer: true, min: 0, max: L.maxTokens });
  const outputTokens = numberFlag('output', required('output'), { integer: true, min: 1, max: L.maxTokens });
  const simulate = values.simulate === true;
  const tps = optional('replica-tps');
  if (tps === undefined && !simulate) throw new UsageError('--replica-tps: required without --simulate (measured output tokens/s of one replica)');
  if (!simulate) {
    const stray = SIMULATION_FLAGS.find((f) => values[f] !== undefined);
    if (stray) throw new UsageError(`--${stray}: only meaningful with --simulate`);
  }
  const command_: CapacityCommand = {
    command: 'capacity',
    rps,
    inputTokens,
    outputTokens,
    ...(tps !== undefined ? { replicaTokensPerSecond: numberFlag('replica-tps', tps, { min: L.minReplicaTps, max: L.maxReplicaTps }) } : {}),
    utilization: numberFlag('util', optional('util') ?? '0.7', { min: L.minUtil, max: 1 }),
    nPlus: numberFlag('n-plus', optional('n-plus') ?? '1', { integer: true, min: 0, max: L.maxNPlus }),
    json: values.json === true,
  };
  if (!simulate) return command_;

  if (simulate && inputTokens < 1) throw new UsageError('--input: expected an integer ≥ 1 with --simulate, got "0"');
  const d = EXAMPLE_REPLICA_PROFILE;
  const num = (flag: string, fallback: number, rule: Parameters<typeof numberFlag>[2]): number => {
    const raw = optional(flag);
    return raw === undefined ? fallback : numberFlag(flag, raw, rule);
  };
  const maxOutput = optional('max-output');
  const outputDistribution = distribution('output', outputTokens, values);
  return {
    ...command_,
    simulate: {
      profile: {
        prefillTokensPerSecond: num('prefill-tps', d.prefillTokensPerSecond, { min: L.minPrefillTps, max: L.maxPrefillTps }),
        decodeStepMs: optional('decode-ms') === undefined ? d.decodeStepMs.map(([b, ms]) => [b, ms] as [number, number]) : parseDecodePoints(optional('decode-ms') as string),
        kvTokens: num('kv-tokens', d.kvTokens, { integer: true, min: 1, max: L.maxKvTokens }),
        maxSequences: num('max-seqs', d.maxSequences, { integer: true, min: 1, max: L.maxSequences }),
      },
      inputTokens: distribution('input', inputTokens, values),
      outputTokens: outputDistribution,
      ...(maxOutput !== undefined ? { maxOutputTokens: numberFlag('max-output', maxOutput, { integer: true, min: 1, max: L.maxTokens }) } : {}),
      durationSeconds: num('duration', 60, { exclusiveMin: 0, max: L.maxDurationSeconds }),
      seed: num('seed', 1, { integer: true, min: 0, max: L.maxSeed }),
      ttftP95Ms: num('ttft-p95-ms', SEED_LATENCY_TARGETS.ttftP95Ms, { exclusiveMin: 0, max: L.maxTtftMs }),
      tpotP95Ms: num('tpot-p95-ms', SEED_LATENCY_TARGETS.tpotP95Ms, { exclusiveMin: 0, max: L.maxTpotMs }),
      maxReplicas: num('max-replicas', 1000, { integer: true, min: 1, max: L.maxReplicas }),
    },
  };
}

const parseCapacityArgs = (args: readonly string[]) =>
  parseArgs({ args: [...args], options: CAPACITY_OPTIONS, strict: true, allowPositionals: false, tokens: true });

/** Turns node:util parseArgs errors into messages that start with the flag. */
function parseArgsMessage(error: unknown): string {
  const e = error as { code?: string; message?: string };
  const flag = /'(-[^' ]+)/.exec(e.message ?? '')?.[1];
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `${flag ?? 'flag'}: unknown flag (weir capacity --help lists them)`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      return `${flag ?? 'flag'}: ${/argument missing|ambiguous/.test(e.message ?? '') ? 'needs a value (a negative number is written --flag=-1)' : 'takes no value'}`;
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `${/'([^']+)'/.exec(e.message ?? '')?.[1] ?? 'argument'}: unexpected argument (flags take the form --name value)`;
    default:
      return e.message ?? String(error);
  }
}

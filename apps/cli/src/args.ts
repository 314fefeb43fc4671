/**
 * Argument parsing for the `weir` CLI: pure functions from argv to a command, so every rule
 * (defaults, ranges, unknown flags) is unit-tested without spawning a process. node:util
 * `parseArgs` does the tokenizing; the values are checked here and every error names its flag.
 */
import { parseArgs } from 'node:util';
import { EXAMPLE_REPLICA_PROFILE, type ReplicaProfile, SEED_LATENCY_TARGETS, type TokenDistribution } from '@weir/capacity';

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

/** What `parseCommandLine` returns. */
export type Command = { command: 'help'; topic?: 'capacity' } | CapacityCommand;

/** `weir --help`. */
export const MAIN_HELP = `weir — Weir's operator command line

usage: weir <command> [flags]

commands:
  capacity    size a replica fleet for a load: the throughput arithmetic, or a simulation
              of replicas (TTFT and TPOT percentiles, KV memory and prefill checks)

flags:
  -h, --help  show help (also: weir <command> --help)

exit status: 0 done, 1 no answer (a simulation found no fleet meeting the targets), 2 bad usage`;

/** `weir capacity --help`. */
export const CAPACITY_HELP = `weir capacity — how many replicas a load needs

usage: weir capacity --rps N --input TOKENS --output TOKENS --replica-tps TOKENS_PER_S [--util F] [--n-plus K] [--json]
       weir capacity --simulate --rps N --input TOKENS --output TOKENS [profile and load flags] [--json]

Throughput plan (the serving seed's arithmetic; decode throughput only):
  demand = rps × output tokens; replicas = ceil(demand / (replica-tps × util)); then add
  n-plus replicas so the survivors of n-plus failures still meet demand at the ceiling.
  weir capacity --rps 100 --input 2000 --output 300 --replica-tps 2500 --util 0.7 --n-plus 1
  → 30,000 tokens/s; ceil(30,000 / 1,750) = 18 replicas; 19 with N+1.

load:
  --rps N              peak requests per second (> 0; required)
  --input TOKENS       prompt tokens per request (required; the median with --input-p95)
  --output TOKENS      output tokens per request (required; the median with --output-p95)
  --replica-tps TPS    measured output tokens/s of one replica at the target latency
                       (> 0; required without --simulate, optional with it)
  --util F             utilisation ceiling, a fraction in (0, 1] (default 0.7)
  --n-plus K           replica failures to survive (integer ≥ 0, default 1)
  --json               print the result as JSON instead of text

simulation (--simulate): replays Poisson arrivals against simulated replicas and finds the
smallest fleet whose p95 TTFT and p95 TPOT meet the targets; see docs/capacity.md.
  --simulate           run the simulation
  --input-p95 TOKENS   draw prompt lengths from a lognormal with median --input and this p95
  --output-p95 TOKENS  draw output lengths from a lognormal with median --output and this p95
  --input-samples L    draw prompt lengths uniformly from a comma list (e.g. 800,2000,3500)
  --output-samples L   draw output lengths uniformly from a comma list
  --max-output TOKENS  the output limit requests send, reserved in KV memory (default: each
                       request's drawn length)
  --prefill-tps TPS    replica prefill throughput, prompt tokens/s (default 10000)
  --decode-ms PTS      decode step time by batch size, batch:ms pairs, linear between them
                       (default 1:20,32:40)
  --kv-tokens N        replica KV-cache capacity in tokens (default 65536)
  --max-seqs N         replica's largest running batch (default 32)
  --duration S         simulated arrival window in seconds (default 60)
  --seed N             PRNG seed for arrivals and lengths (integer, default 1)
  --ttft-p95-ms MS     p95 time-to-first-token target (default 1000, the seed's)
  --tpot-p95-ms MS     p95 time-per-output-token target (default 50, the seed's)
  --max-replicas N     give up above this fleet size (default 1000)

exit status: 0 done, 1 no fleet up to --max-replicas met the targets, 2 bad usage`;

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
 * Reads a number flag. `integer` requires an integer; `min`/`exclusiveMin` bound it; `max` caps it.
 * @throws UsageError naming `--flag` and the value given.
 */
export function numberFlag(
  flag: string,
  raw: string,
  rule: { integer?: boolean; min?: number; exclusiveMin?: number; max?: number },
): number {
  const value = raw.trim() === '' ? Number.NaN : Number(raw);
  const expected = [
    rule.integer ? 'an integer' : 'a number',
    rule.exclusiveMin !== undefined ? `> ${rule.exclusiveMin}` : rule.min !== undefined ? `≥ ${rule.min}` : '',
    rule.max !== undefined ? `and ≤ ${rule.max}` : '',
  ]
    .filter(Boolean)
    .join(' ');
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
  const points = raw.split(',').map((pair) => {
    const m = /^\s*(\d+)\s*:\s*(\d+(?:\.\d+)?)\s*$/.exec(pair);
    if (!m || Number(m[1]) < 1 || Number(m[2]) <= 0) {
      throw new UsageError(`--decode-ms: expected batch:ms pairs such as 1:20,32:40 (batch an integer ≥ 1, ms > 0), got ${JSON.stringify(raw)}`);
    }
    return [Number(m[1]), Number(m[2])] as [number, number];
  });
  points.forEach((p, i) => {
    if (i > 0 && p[0] <= points[i - 1][0]) throw new UsageError(`--decode-ms: batches must increase (${p[0]} after ${points[i - 1][0]}) in ${JSON.stringify(raw)}`);
  });
  return points;
}

/** Parses a comma list of token counts (integers ≥ 1). @throws UsageError naming `--flag`. */
export function parseSamples(flag: string, raw: string): number[] {
  return raw.split(',').map((s) => numberFlag(flag, s, { integer: true, min: 1 }));
}

function distribution(kind: 'input' | 'output', median: number, values: Record<string, string | boolean | undefined>): TokenDistribution {
  const p95 = values[`${kind}-p95`] as string | undefined;
  const samples = values[`${kind}-samples`] as string | undefined;
  if (p95 !== undefined && samples !== undefined) throw new UsageError(`--${kind}-p95 and --${kind}-samples: give one of them, not both`);
  if (samples !== undefined) return { kind: 'samples', values: parseSamples(`${kind}-samples`, samples) };
  if (p95 !== undefined) {
    const value = numberFlag(`${kind}-p95`, p95, { min: median });
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
    throw new UsageError(command.startsWith('-') ? `${command}: unknown flag; name a command first (weir --help)` : `${command}: unknown command (try: weir capacity --help)`);
  }
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: [...rest], options: CAPACITY_OPTIONS, strict: true, allowPositionals: false }).values;
  } catch (error) {
    throw new UsageError(parseArgsMessage(error));
  }
  if (values.help) return { command: 'help', topic: 'capacity' };

  const required = (flag: string): string => {
    const v = values[flag];
    if (typeof v !== 'string') throw new UsageError(`--${flag}: required (weir capacity --help)`);
    return v;
  };
  const optional = (flag: string): string | undefined => values[flag] as string | undefined;
  const rps = numberFlag('rps', required('rps'), { exclusiveMin: 0 });
  const inputTokens = numberFlag('input', required('input'), { integer: true, min: 0 });
  const outputTokens = numberFlag('output', required('output'), { integer: true, min: 1 });
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
    ...(tps !== undefined ? { replicaTokensPerSecond: numberFlag('replica-tps', tps, { exclusiveMin: 0 }) } : {}),
    utilization: numberFlag('util', optional('util') ?? '0.7', { exclusiveMin: 0, max: 1 }),
    nPlus: numberFlag('n-plus', optional('n-plus') ?? '1', { integer: true, min: 0 }),
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
        prefillTokensPerSecond: num('prefill-tps', d.prefillTokensPerSecond, { exclusiveMin: 0 }),
        decodeStepMs: optional('decode-ms') === undefined ? d.decodeStepMs.map(([b, ms]) => [b, ms] as [number, number]) : parseDecodePoints(optional('decode-ms') as string),
        kvTokens: num('kv-tokens', d.kvTokens, { integer: true, min: 1 }),
        maxSequences: num('max-seqs', d.maxSequences, { integer: true, min: 1 }),
      },
      inputTokens: distribution('input', inputTokens, values),
      outputTokens: outputDistribution,
      ...(maxOutput !== undefined ? { maxOutputTokens: numberFlag('max-output', maxOutput, { integer: true, min: 1 }) } : {}),
      durationSeconds: num('duration', 60, { exclusiveMin: 0 }),
      seed: num('seed', 1, { integer: true, min: 0 }),
      ttftP95Ms: num('ttft-p95-ms', SEED_LATENCY_TARGETS.ttftP95Ms, { exclusiveMin: 0 }),
      tpotP95Ms: num('tpot-p95-ms', SEED_LATENCY_TARGETS.tpotP95Ms, { exclusiveMin: 0 }),
      maxReplicas: num('max-replicas', 1000, { integer: true, min: 1 }),
    },
  };
}

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

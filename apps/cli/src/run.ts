/**
 * The `weir` command: dispatches a parsed command line and writes its report. Pure apart from
 * the two output streams it is given, so tests run it in-process.
 */
import {
  type CapacityPlan,
  formatNumber as f,
  isCapacityInputError,
  type LatencyTargets,
  planBySimulation,
  planCapacity,
  plannedMeanTokens,
  type Percentiles,
  simulationLowerBound,
  type SimulationPlan,
  type SimulationReport,
  type TokenDistribution,
} from '@weir/capacity';
import { type AdminIo, runAdminCommand } from './admin/run-admin';
import { isAdminCommandLine } from './admin/parse';
import { CAPACITY_HELP, type CapacityCommand, LIMITS, MAIN_HELP, parseCommandLine, UsageError } from './args';

/** Where the command writes. */
export interface CliOutput {
  out(text: string): void;
  err(text: string): void;
}

/**
 * Formats a number for a message: as {@link f} (thousands separators, 3 decimals), but a value
 * below 0.001 keeps 3 significant digits (0.0001, not 0) and one above 10^15 is written with an
 * exponent (1.00e+18), where digits past 2^53 would only be floating-point noise.
 */
export function g(x: number): string {
  if (x !== 0 && Math.abs(x) < 0.001) return String(Number(x.toPrecision(3)));
  if (Math.abs(x) >= 1e15) return x.toExponential(2);
  return f(x);
}

/** The library's field names → the flags that set them, so a library error names the flag. */
const FLAG_OF_FIELD: Record<string, string> = {
  rps: '--rps',
  inputTokens: '--input',
  outputTokens: '--output',
  replicaTokensPerSecond: '--replica-tps',
  utilization: '--util',
  nPlus: '--n-plus',
  maxOutputTokens: '--max-output',
  durationSeconds: '--duration',
  seed: '--seed',
  maxReplicas: '--max-replicas',
  'targets.ttftP95Ms': '--ttft-p95-ms',
  'targets.tpotP95Ms': '--tpot-p95-ms',
  'profile.prefillTokensPerSecond': '--prefill-tps',
  'profile.kvTokens': '--kv-tokens',
  'profile.maxSequences': '--max-seqs',
  'profile.decodeStepMs': '--decode-ms',
  'inputTokens.p95': '--input-p95',
  'outputTokens.p95': '--output-p95',
};

/** The flag for a library field (`profile.decodeStepMs[1].batch` → `--decode-ms`; `inputTokens[3]` → `--input-samples`). */
export function flagOfField(field: string): string {
  if (FLAG_OF_FIELD[field]) return FLAG_OF_FIELD[field];
  if (field.startsWith('profile.decodeStepMs')) return '--decode-ms';
  const sample = /^(input|output)Tokens\[\d+\]$/.exec(field);
  if (sample) return `--${sample[1]}-samples`;
  return field;
}

/**
 * Runs any `weir` command line and resolves to its exit status: the admin commands
 * (`weir tenants list`, …; 0 done, 1 the API refused or could not be reached, 2 bad usage)
 * through {@link runAdminCommand}, everything else (the capacity planner, help) through
 * {@link runCli}. `io.env`, `io.fetch` and `io.readFile` default to the process's.
 */
export async function run(argv: readonly string[], io: AdminIo): Promise<number> {
  return isAdminCommandLine(argv) ? runAdminCommand(argv, io) : runCli(argv, io);
}

/**
 * Runs `weir <argv…>` for the capacity planner and help, and returns the exit status: 0 done,
 * 1 no answer (a simulation found no fleet meeting the targets), 2 bad usage (the message on
 * `err` names the flag).
 */
export function runCli(argv: readonly string[], io: CliOutput): number {
  try {
    const command = parseCommandLine(argv);
    if (command.command === 'help') {
      io.out(`${command.topic === 'capacity' ? CAPACITY_HELP : MAIN_HELP}\n`);
      return argv.length === 0 ? 2 : 0;
    }
    return runCapacity(command, io);
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`weir: ${error.message}\n`);
      return 2;
    }
    if (isCapacityInputError(error)) {
      io.err(`weir: ${flagOfField(error.field)}: ${error.problem}\n`);
      return 2;
    }
    throw error;
  }
}

/**
 * The simulation's answer when the throughput lower bound already exceeds `--max-replicas`:
 * no fleet the command may try can keep up with the arrivals, so nothing is simulated.
 */
export interface SkippedSimulation {
  targets: Required<LatencyTargets>;
  lowerBound: number;
  replicas: null;
  replicasWithFailures: null;
  trials: [];
  unreachable: { reason: 'lower_bound_above_max_replicas'; maxReplicas: number };
}

/**
 * Refuses a throughput plan whose answer would exceed {@link LIMITS.maxPlanReplicas} (each flag is
 * in range, but their combination can still ask for 10^18 replicas).
 * @throws UsageError naming the flags.
 */
export function checkPlanSize(c: CapacityCommand & { replicaTokensPerSecond: number }): void {
  const replicas = (c.rps * c.outputTokens) / (c.replicaTokensPerSecond * c.utilization);
  if (!(replicas <= LIMITS.maxPlanReplicas)) {
    throw new UsageError(
      `--rps ${g(c.rps)} × --output ${g(c.outputTokens)} ÷ (--replica-tps ${g(c.replicaTokensPerSecond)} × --util ${g(c.utilization)}) needs about ${g(replicas)} replicas, more than the ${g(LIMITS.maxPlanReplicas)} this command plans: check those flags`,
    );
  }
}

/**
 * Checks that the simulation window holds enough arrivals for a p95 and bounds the run's work
 * ({@link LIMITS}: minArrivals ≤ rps × duration ≤ maxArrivals, and rps × duration × mean output
 * tokens ≤ maxSimulatedTokens).
 * @throws UsageError naming the flags and saying which `--duration` would do.
 */
export function checkSimulationWindow(c: CapacityCommand): void {
  const s = c.simulate as NonNullable<CapacityCommand['simulate']>;
  const { minArrivals, maxArrivals, maxSimulatedTokens, maxDurationSeconds } = LIMITS;
  const arrivals = c.rps * s.durationSeconds;
  if (arrivals < minArrivals) {
    const needed = Math.ceil(minArrivals / c.rps);
    if (needed > maxDurationSeconds) {
      throw new UsageError(
        `--rps ${g(c.rps)}: too low to simulate: even the longest window (--duration ${g(maxDurationSeconds)}) expects ${g(c.rps * maxDurationSeconds)} arrivals, fewer than the ${minArrivals} a p95 needs; size a load this light with the throughput plan (--replica-tps) instead`,
      );
    }
    throw new UsageError(
      `--duration: a ${g(s.durationSeconds)} s window at --rps ${g(c.rps)} expects ${g(arrivals)} arrivals (it may hold none), fewer than the ${minArrivals} a p95 needs: give --duration ${g(needed)} or longer (at most ${g(maxDurationSeconds)})`,
    );
  }
  const shorter = (cap: number): string => `give --duration ${g(Math.floor((cap / c.rps) * 1000) / 1000)} or less`;
  if (arrivals > maxArrivals) {
    throw new UsageError(
      `--rps ${g(c.rps)} × --duration ${g(s.durationSeconds)} s = ${g(arrivals)} expected arrivals, more than the ${g(maxArrivals)} a simulation replays: ${shorter(maxArrivals)}`,
    );
  }
  const meanOutput = plannedMeanTokens(s.outputTokens);
  const tokens = arrivals * meanOutput;
  if (tokens > maxSimulatedTokens) {
    const outputFlag = s.outputTokens.kind === 'samples' ? '--output-samples' : s.outputTokens.kind === 'lognormal' ? '--output/--output-p95' : '--output';
    if (minArrivals * meanOutput > maxSimulatedTokens) {
      throw new UsageError(
        `${outputFlag}: ${g(meanOutput)} output tokens per request on average is too many to simulate ${minArrivals} requests within ${g(maxSimulatedTokens)} output tokens`,
      );
    }
    throw new UsageError(
      `--rps ${g(c.rps)} × --duration ${g(s.durationSeconds)} s × ${g(meanOutput)} mean output tokens (${outputFlag}) = ${g(Math.round(tokens))} output tokens to simulate, more than ${g(maxSimulatedTokens)}: ${shorter(maxSimulatedTokens / meanOutput)}`,
    );
  }
}

function runCapacity(c: CapacityCommand, io: CliOutput): number {
  if (c.replicaTokensPerSecond !== undefined) checkPlanSize({ ...c, replicaTokensPerSecond: c.replicaTokensPerSecond });
  const plan =
    c.replicaTokensPerSecond !== undefined
      ? planCapacity({
          rps: c.rps,
          inputTokens: c.inputTokens,
          outputTokens: c.outputTokens,
          replicaTokensPerSecond: c.replicaTokensPerSecond,
          utilization: c.utilization,
          nPlus: c.nPlus,
        })
      : undefined;
  const s = c.simulate;
  const simulation = s ? simulate(c) : undefined;
  if (c.json) {
    const json = simulation && 'report' in simulation ? withoutRequests(simulation) : simulation;
    io.out(`${JSON.stringify({ plan, simulation: json }, null, 2)}\n`);
  } else {
    if (plan) io.out(formatPlan(plan));
    if (simulation && s) io.out(`${plan ? '\n' : ''}${formatSimulation(c, simulation)}`);
  }
  return simulation && simulation.replicas === null ? 1 : 0;
}

/** The simulation plan, or at once {@link SkippedSimulation} when the lower bound exceeds `--max-replicas`. */
function simulate(c: CapacityCommand): SimulationPlan | SkippedSimulation {
  const s = c.simulate as NonNullable<CapacityCommand['simulate']>;
  const lowerBound = simulationLowerBound({ rps: c.rps, inputTokens: s.inputTokens, outputTokens: s.outputTokens, profile: s.profile });
  if (lowerBound > s.maxReplicas) {
    return {
      targets: { ttftP95Ms: s.ttftP95Ms, tpotP95Ms: s.tpotP95Ms },
      lowerBound,
      replicas: null,
      replicasWithFailures: null,
      trials: [],
      unreachable: { reason: 'lower_bound_above_max_replicas', maxReplicas: s.maxReplicas },
    };
  }
  checkSimulationWindow(c);
  return planBySimulation({
        rps: c.rps,
        inputTokens: s.inputTokens,
        outputTokens: s.outputTokens,
        maxOutputTokens: s.maxOutputTokens,
        profile: s.profile,
        targets: { ttftP95Ms: s.ttftP95Ms, tpotP95Ms: s.tpotP95Ms },
        durationSeconds: s.durationSeconds,
        seed: s.seed,
        nPlus: c.nPlus,
        maxReplicas: s.maxReplicas,
      });
}

/** The plan's arithmetic, one line each, under a heading. */
export function formatPlan(plan: CapacityPlan): string {
  return `throughput plan (decode tokens/s only)\n${plan.lines.map((l) => `  ${l}`).join('\n')}\n`;
}

const ms = (x: number): string => (Number.isNaN(x) ? 'n/a' : `${f(x < 100 ? Math.round(x * 10) / 10 : Math.round(x))} ms`);
const pct = (x: number): string => `${f(Math.round(x * 1000) / 10)}%`;
const dist = (d: TokenDistribution): string =>
  d.kind === 'fixed' ? `${f(d.value)}` : d.kind === 'lognormal' ? `lognormal p50 ${f(d.p50)}, p95 ${f(d.p95)}` : `${d.values.length} samples`;
const row = (name: string, p: Percentiles): string => `    ${name.padEnd(6)} p50 ${ms(p.p50)}, p95 ${ms(p.p95)}, p99 ${ms(p.p99)}`;

function describeRun(r: SimulationReport, label: string): string[] {
  return [
    `  ${label}: ${r.replicas} replicas, ${f(r.requests.length)} requests served${r.rejected > 0 ? `, ${f(r.rejected)} never fit the KV cache` : ''}`,
    row('TTFT', r.ttftMs),
    row('TPOT', r.tpotMs),
    row('queue', r.queueMs),
    row('e2e', r.e2eMs),
    `    throughput ${f(Math.round(r.outputTokensPerSecond))} output tokens/s, prefill ${f(Math.round(r.prefillTokensPerSecond))} tokens/s; fleet busy ${pct(r.busyFraction)}, of it prefill ${pct(r.prefillShare)}`,
    `    KV peak ${pct(r.maxKvUtilization)} used, ${pct(r.maxKvReservedUtilization)} reserved; largest batch ${r.maxBatch}; binding constraint: ${r.bindingConstraint.replace('_', ' ')}`,
  ];
}

/** Why no fleet can meet the targets, in words that name the flags to change. */
function unreachableAnswer(c: CapacityCommand, plan: SimulationPlan | SkippedSimulation): string {
  const s = c.simulate as NonNullable<CapacityCommand['simulate']>;
  const u = plan.unreachable;
  switch (u?.reason) {
    case 'lower_bound_above_max_replicas':
      return `none up to --max-replicas ${f(u.maxReplicas)}: the throughput lower bound is ${f(plan.lowerBound)} replicas (a smaller fleet falls behind the arrivals), so nothing was simulated; ${
        plan.lowerBound <= LIMITS.maxReplicas
          ? `raise --max-replicas to at least ${f(plan.lowerBound)}`
          : `that is above the ${f(LIMITS.maxReplicas)} --max-replicas allows: size a load this large with the throughput plan (--replica-tps)`
      }`;
    case 'no_arrivals':
      return `none: the ${f(s.durationSeconds)} s window held no arrivals at ${g(c.rps)} requests/s, so there is nothing to measure; give a longer --duration`;
    case 'kv_memory':
      return `none at any fleet size: ${f(u.rejected)} requests need more KV memory (input + output limit) than a replica's ${f(s.profile.kvTokens)} tokens; raise --kv-tokens or shorten --input/--max-output`;
    case 'tpot':
      return `none at any fleet size: every token after the first takes at least the fastest decode step, ${ms(u.minTpotMs)} (--decode-ms), above --tpot-p95-ms ${f(s.tpotP95Ms)}`;
    case 'ttft':
      return `none at any fleet size: even with no queueing, p95 TTFT is at least ${ms(u.minTtftP95Ms)} (prefill at --prefill-tps plus one decode step), above --ttft-p95-ms ${f(s.ttftP95Ms)}`;
    default:
      return `none up to --max-replicas ${f(s.maxReplicas)} met the targets`;
  }
}

/** The simulation's answer, the runs at the answer and just below it, and every size tried. */
export function formatSimulation(c: CapacityCommand, plan: SimulationPlan | SkippedSimulation): string {
  const s = c.simulate as NonNullable<CapacityCommand['simulate']>;
  const p = s.profile;
  const lines = [
    `simulation (${g(c.rps)} requests/s, Poisson, ${f(s.durationSeconds)} s, seed ${s.seed}; input ${dist(s.inputTokens)} tokens, output ${dist(s.outputTokens)} tokens)`,
    `  replica: prefill ${f(p.prefillTokensPerSecond)} tokens/s; decode step ${p.decodeStepMs.map(([b, t]) => `${t} ms at batch ${b}`).join(', ')}; KV ${f(p.kvTokens)} tokens; ${p.maxSequences} sequences`,
    `  targets: p95 TTFT ≤ ${ms(plan.targets.ttftP95Ms)}, p95 TPOT ≤ ${ms(plan.targets.tpotP95Ms)}; throughput lower bound ${f(plan.lowerBound)} replicas`,
  ];
  if (!('report' in plan)) {
    lines.push(`  answer: ${unreachableAnswer(c, plan)}`);
    return `${lines.join('\n')}\n`;
  }
  lines.push(`  tried: ${plan.trials.map((t) => `${t.replicas} ${t.meets ? 'meets' : 'misses'}`).join(', ')}`);
  if (plan.replicas === null) {
    lines.push(`  answer: ${unreachableAnswer(c, plan)}`, ...describeRun(plan.report, plan.unreachable ? 'the run' : 'largest tried'));
  } else {
    lines.push(
      `  answer: ${plan.replicas} replicas meet the targets${c.nPlus > 0 ? `; ${plan.replicasWithFailures} with N+${c.nPlus}` : ''}`,
      ...describeRun(plan.report, 'at the answer'),
    );
    if (plan.below) lines.push(...describeRun(plan.below, 'one fewer'));
  }
  return `${lines.join('\n')}\n`;
}

/** The plan without per-request rows (thousands of them) for JSON output. */
function withoutRequests(plan: SimulationPlan): unknown {
  const strip = (r: SimulationReport | undefined) => (r ? { ...r, requests: undefined } : undefined);
  return { ...plan, report: strip(plan.report), below: strip(plan.below) };
}

/**
 * The `weir` command: dispatches a parsed command line and writes its report. Pure apart from
 * the two output streams it is given, so tests run it in-process.
 */
import {
  type CapacityPlan,
  formatNumber as f,
  isCapacityInputError,
  planBySimulation,
  planCapacity,
  type Percentiles,
  type SimulationPlan,
  type SimulationReport,
  type TokenDistribution,
} from '@weir/capacity';
import { CAPACITY_HELP, type CapacityCommand, MAIN_HELP, parseCommandLine, UsageError } from './args';

/** Where the command writes. */
export interface CliOutput {
  out(text: string): void;
  err(text: string): void;
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
 * Runs `weir <argv…>` and returns the exit status: 0 done, 1 no answer (a simulation found no
 * fleet meeting the targets), 2 bad usage (the message on `err` names the flag).
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

function runCapacity(c: CapacityCommand, io: CliOutput): number {
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
  const simulation = s
    ? planBySimulation({
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
      })
    : undefined;
  if (c.json) {
    io.out(`${JSON.stringify({ plan, simulation: simulation && withoutRequests(simulation) }, null, 2)}\n`);
  } else {
    if (plan) io.out(formatPlan(plan));
    if (simulation && s) io.out(`${plan ? '\n' : ''}${formatSimulation(c, simulation)}`);
  }
  return simulation && simulation.replicas === null ? 1 : 0;
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

/** The simulation's answer, the runs at the answer and just below it, and every size tried. */
export function formatSimulation(c: CapacityCommand, plan: SimulationPlan): string {
  const s = c.simulate as NonNullable<CapacityCommand['simulate']>;
  const p = s.profile;
  const lines = [
    `simulation (${f(c.rps)} requests/s, Poisson, ${f(s.durationSeconds)} s, seed ${s.seed}; input ${dist(s.inputTokens)} tokens, output ${dist(s.outputTokens)} tokens)`,
    `  replica: prefill ${f(p.prefillTokensPerSecond)} tokens/s; decode step ${p.decodeStepMs.map(([b, t]) => `${t} ms at batch ${b}`).join(', ')}; KV ${f(p.kvTokens)} tokens; ${p.maxSequences} sequences`,
    `  targets: p95 TTFT ≤ ${ms(plan.targets.ttftP95Ms)}, p95 TPOT ≤ ${ms(plan.targets.tpotP95Ms)}; throughput lower bound ${plan.lowerBound} replicas`,
    `  tried: ${plan.trials.map((t) => `${t.replicas} ${t.meets ? 'meets' : 'misses'}`).join(', ')}`,
  ];
  if (plan.replicas === null) {
    lines.push(`  answer: none up to --max-replicas ${s.maxReplicas} met the targets`, ...describeRun(plan.report, 'largest tried'));
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

/**
 * The capacity planner: how many replicas a load needs, by the seed's throughput arithmetic
 * ({@link planCapacity}) and by simulation against a replica profile ({@link planBySimulation}).
 * Pure functions; the `weir capacity` command and the capacity controller call them.
 */
import { CapacityInputError, requirePositive } from './errors';
import { meanTokens, type TokenDistribution } from './distribution';
import { peakDecodeTokensPerSecond, type ReplicaProfile } from './profile';
import { type SimulationReport, simulateCluster, validateSimulationInput } from './simulate';

/** Inputs of the throughput plan (the seed's §2). */
export interface CapacityPlanInput {
  /** Peak requests per second (> 0). */
  rps: number;
  /** Prompt tokens per request (≥ 0): reported as prefill demand, not planned on (use the simulation). */
  inputTokens: number;
  /** Output tokens per request (> 0). */
  outputTokens: number;
  /** Measured output tokens/s one replica sustains at the target latency (> 0). */
  replicaTokensPerSecond: number;
  /** Utilisation ceiling, a fraction in (0, 1] (0.7 = plan each replica at 70%). */
  utilization: number;
  /** Replica failures the fleet must survive at the ceiling (integer ≥ 0). Default 0. */
  nPlus?: number;
}

/** One "lose k replicas" check: `survivors × replicaTokensPerSecond × utilization` against demand. */
export interface FailureCheck {
  replicas: number;
  survivors: number;
  /** Tokens/s the survivors serve at the ceiling. */
  capacityTokensPerSecond: number;
  meetsDemand: boolean;
}

/** The throughput plan, with the arithmetic as lines a person can check. */
export interface CapacityPlan {
  inputs: Required<CapacityPlanInput>;
  /** rps × outputTokens (tokens/s). */
  demandTokensPerSecond: number;
  /** rps × inputTokens (tokens/s): prefill work this plan does not size for. */
  prefillDemandTokensPerSecond: number;
  /** replicaTokensPerSecond × utilization (tokens/s). */
  usableTokensPerReplica: number;
  /** ceil(demand / replicaTokensPerSecond): the arithmetic floor at 100%. */
  floorReplicas: number;
  /** ceil(demand / usable): enough at the ceiling with every replica up. */
  replicas: number;
  /** Smallest count whose survivors after `nPlus` failures still meet demand at the ceiling (`replicas + nPlus`). */
  replicasWithFailures: number;
  /** `replicas` losing `nPlus` (fails when nPlus > 0) and `replicasWithFailures` losing `nPlus` (passes). Empty when nPlus = 0. */
  failureChecks: FailureCheck[];
  /** The arithmetic, one step per line (for the CLI and logs). */
  lines: string[];
}

/** Rounds away floating-point noise (2,500 × 0.7 × 17 = 29,749.999…): to 1e-6. */
const clean = (x: number): number => Math.round(x * 1e6) / 1e6;
/** ceil that ignores noise below 1e-9 (30,000 / 1,750 must not become 18.000000001 → 19). */
const ceil = (x: number): number => Math.ceil(clean(x) - 1e-9);

/** Formats a number the way the seed writes it: thousands separators, at most 3 decimals. */
export function formatNumber(x: number): string {
  return clean(x).toLocaleString('en-US', { maximumFractionDigits: 3 });
}

/**
 * Sizes a fleet by decode throughput, as the seed does: demand = rps × output tokens;
 * replicas = ceil(demand / (replicaTokensPerSecond × utilization)); to survive `nPlus` failures,
 * the survivors must still meet demand at the ceiling, so `replicas + nPlus`. With the seed's
 * numbers (100 rps, 300 output tokens, 2,500 tokens/s, 0.7, N+1): 30,000 tokens/s, 18 replicas,
 * 19 with N+1 (17 × 2,500 × 0.7 = 29,750 < 30,000). It does not check prefill, KV memory or
 * latency: see {@link planBySimulation}.
 *
 * @throws CapacityInputError naming the field (`rps`, `inputTokens`, `outputTokens`,
 *   `replicaTokensPerSecond`, `utilization`, `nPlus`) when it is out of range.
 */
export function planCapacity(input: CapacityPlanInput): CapacityPlan {
  requirePositive('rps', input.rps);
  requirePositive('inputTokens', input.inputTokens, { allowZero: true });
  requirePositive('outputTokens', input.outputTokens);
  requirePositive('replicaTokensPerSecond', input.replicaTokensPerSecond);
  requirePositive('utilization', input.utilization);
  if (input.utilization > 1) throw new CapacityInputError('utilization', `must be a fraction in (0, 1], e.g. 0.7 for 70% (got ${input.utilization})`);
  const nPlus = input.nPlus ?? 0;
  requirePositive('nPlus', nPlus, { allowZero: true, integer: true });

  const f = formatNumber;
  const { rps, inputTokens, outputTokens, replicaTokensPerSecond: tps, utilization: util } = input;
  const demand = clean(rps * outputTokens);
  const prefillDemand = clean(rps * inputTokens);
  const usable = clean(tps * util);
  const floorReplicas = ceil(demand / tps);
  const replicas = ceil(demand / usable);
  const withFailures = replicas + nPlus;
  const check = (count: number): FailureCheck => {
    const survivors = count - nPlus;
    const capacity = clean(survivors * usable);
    return { replicas: count, survivors, capacityTokensPerSecond: capacity, meetsDemand: capacity >= demand };
  };
  const failureChecks = nPlus > 0 ? [check(replicas), check(withFailures)] : [];
  const pct = `${f(util * 100)}%`;

  const lines = [
    `demand:   ${f(rps)} requests/s × ${f(outputTokens)} output tokens = ${f(demand)} tokens/s`,
    `floor:    ceil(${f(demand)} / ${f(tps)}) = ${floorReplicas} replicas at 100% of ${f(tps)} tokens/s each`,
    `at ${pct}:${' '.repeat(Math.max(1, 6 - pct.length))}ceil(${f(demand)} / (${f(tps)} × ${f(util)})) = ceil(${f(demand)} / ${f(usable)}) = ${replicas} replicas`,
  ];
  for (const c of failureChecks) {
    const verdict = c.meetsDemand ? `≥ ${f(demand)}: enough` : `< ${f(demand)}: short`;
    lines.push(
      `N+${nPlus}:      ${c.replicas} replicas losing ${nPlus} leave ${c.survivors} × ${f(tps)} × ${f(util)} = ${f(c.capacityTokensPerSecond)} tokens/s ${verdict}`,
    );
  }
  lines.push(
    nPlus > 0
      ? `answer:   ${withFailures} replicas (${replicas} for throughput at ${pct} + ${nPlus} to survive ${nPlus} failure${nPlus === 1 ? '' : 's'})`
      : `answer:   ${replicas} replicas (no failure reserve: set an N+ to survive a replica loss)`,
    `prefill:  ${f(rps)} requests/s × ${f(inputTokens)} input tokens = ${f(prefillDemand)} tokens/s, not sized here; KV memory and latency neither (simulate to check them)`,
  );
  return {
    inputs: { ...input, nPlus },
    demandTokensPerSecond: demand,
    prefillDemandTokensPerSecond: prefillDemand,
    usableTokensPerReplica: usable,
    floorReplicas,
    replicas,
    replicasWithFailures: withFailures,
    failureChecks,
    lines,
  };
}

/** Latency targets of the simulation plan (the seed's: p95 TTFT < 1 s, p95 TPOT < 50 ms). */
export interface LatencyTargets {
  /** p95 time to first token (ms). Default 1,000. */
  ttftP95Ms?: number;
  /** p95 request-level time per output token (ms). Default 50. */
  tpotP95Ms?: number;
}

/** The seed's targets for the short-prompt interactive class. */
export const SEED_LATENCY_TARGETS: Readonly<Required<LatencyTargets>> = Object.freeze({ ttftP95Ms: 1000, tpotP95Ms: 50 });

/** Inputs of {@link planBySimulation}. */
export interface SimulationPlanInput {
  /** Offered load (requests/s, > 0), Poisson. */
  rps: number;
  inputTokens: TokenDistribution;
  outputTokens: TokenDistribution;
  /** Output limit requests send (KV reservation); default each request's drawn length. */
  maxOutputTokens?: number;
  profile: ReplicaProfile;
  targets?: LatencyTargets;
  /** Simulated arrival window (s). Default 60. */
  durationSeconds?: number;
  /** Default 1. */
  seed?: number;
  /** Failures to survive: added to the count found (each replica is sized for the latency targets). Default 0. */
  nPlus?: number;
  /** Give up above this many replicas. Default 1,000. */
  maxReplicas?: number;
}

/** One simulated fleet size and whether it met the targets. */
export interface SimulationTrial {
  replicas: number;
  ttftP95Ms: number;
  tpotP95Ms: number;
  meets: boolean;
}

/** What {@link planBySimulation} found. */
export interface SimulationPlan {
  targets: Required<LatencyTargets>;
  /**
   * A lower bound from throughput alone (no simulation): each replica's second must hold the
   * prefill and the decode work sent to it, decode at its peak batch efficiency:
   * `ceil(rps × (E[input] / prefillTokensPerSecond + E[output] / peakDecodeTokensPerSecond))`.
   */
  lowerBound: number;
  /** Smallest fleet that met both targets; null when none up to `maxReplicas` did. */
  replicas: number | null;
  /** `replicas + nPlus` (null when `replicas` is null). */
  replicasWithFailures: number | null;
  /** The run at `replicas` (or at the largest tried when none met the targets). */
  report: SimulationReport;
  /** The run at `replicas − 1` when it was simulated (it misses a target), to show the margin. */
  below?: SimulationReport;
  /** Every size simulated, in the order tried. */
  trials: SimulationTrial[];
}

const meets = (r: SimulationReport, t: Required<LatencyTargets>): boolean =>
  r.rejected === 0 && r.requests.length > 0 && r.ttftMs.p95 <= t.ttftP95Ms && !(r.tpotMs.p95 > t.tpotP95Ms);

/**
 * Finds the smallest replica count whose simulated p95 TTFT and p95 TPOT meet the targets at the
 * offered load ({@link simulateCluster} with the same seed for every size, so sizes are compared
 * on the same arrivals). Search: from {@link SimulationPlan.lowerBound}, double until a size
 * meets the targets, then bisect between the last miss and the first hit; this assumes latency
 * does not get worse with more replicas, which holds for this model up to simulation noise. A
 * run where some request can never fit the KV cache never meets the targets.
 *
 * @throws CapacityInputError naming the field when an input is out of range.
 */
export function planBySimulation(input: SimulationPlanInput): SimulationPlan {
  const targets = { ...SEED_LATENCY_TARGETS, ...input.targets };
  requirePositive('targets.ttftP95Ms', targets.ttftP95Ms);
  requirePositive('targets.tpotP95Ms', targets.tpotP95Ms);
  const nPlus = input.nPlus ?? 0;
  requirePositive('nPlus', nPlus, { allowZero: true, integer: true });
  const maxReplicas = input.maxReplicas ?? 1000;
  requirePositive('maxReplicas', maxReplicas, { integer: true });
  const base = {
    profile: input.profile,
    rps: input.rps,
    durationSeconds: input.durationSeconds,
    inputTokens: input.inputTokens,
    outputTokens: input.outputTokens,
    maxOutputTokens: input.maxOutputTokens,
    seed: input.seed,
  };
  validateSimulationInput({ ...base, replicas: 1 });

  const perRequestSeconds =
    meanTokens(input.inputTokens) / input.profile.prefillTokensPerSecond + meanTokens(input.outputTokens) / peakDecodeTokensPerSecond(input.profile);
  const lowerBound = Math.min(maxReplicas, Math.max(1, ceil(input.rps * perRequestSeconds)));

  const trials: SimulationTrial[] = [];
  const runs = new Map<number, SimulationReport>();
  const run = (replicas: number): SimulationReport => {
    const report = simulateCluster({ ...base, replicas });
    runs.set(replicas, report);
    trials.push({ replicas, ttftP95Ms: report.ttftMs.p95, tpotP95Ms: report.tpotMs.p95, meets: meets(report, targets) });
    return report;
  };

  let miss = 0;
  let hit: number | undefined;
  for (let n = lowerBound; ; n = Math.min(maxReplicas, n * 2)) {
    if (meets(run(n), targets)) {
      hit = n;
      break;
    }
    miss = n;
    if (n >= maxReplicas) break;
  }
  if (hit === undefined) {
    return { targets, lowerBound, replicas: null, replicasWithFailures: null, report: runs.get(miss) as SimulationReport, trials };
  }
  while (hit - miss > 1 && miss >= lowerBound) {
    const mid = Math.floor((miss + hit) / 2);
    if (meets(run(mid), targets)) hit = mid;
    else miss = mid;
  }
  // Show the margin: the size just below the answer misses a target (or is below the bound).
  if (hit > 1 && !runs.has(hit - 1)) run(hit - 1);
  return {
    targets,
    lowerBound,
    replicas: hit,
    replicasWithFailures: hit + nPlus,
    report: runs.get(hit) as SimulationReport,
    ...(runs.has(hit - 1) ? { below: runs.get(hit - 1) } : {}),
    trials,
  };
}

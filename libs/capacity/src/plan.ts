/**
 * The capacity planner: how many replicas a load needs, by the seed's throughput arithmetic
 * ({@link planCapacity}) and by simulation against a replica profile ({@link planBySimulation}).
 * Pure functions; the `weir capacity` command and the capacity controller call them.
 */
import { CapacityInputError, requirePositive } from './errors';
import { meanTokens, type TokenDistribution, validateDistribution } from './distribution';
import { decodeStepMs, peakDecodeTokensPerSecond, prefillMs, type ReplicaProfile, validateProfile } from './profile';
import { type SimulationReport, simulateCluster, validateSimulationInput } from './simulate';
import { nearestRank } from './stats';

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
  /** `replicas − nPlus`, or 0 when `nPlus` exceeds `replicas` (losing more than it has leaves none). */
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
 *   `replicaTokensPerSecond`, `utilization`, `nPlus`) when it is out of range, or when the
 *   answer would not be a finite, exactly countable number of replicas (≤ 2^53 − 1).
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
  if (!Number.isSafeInteger(nPlus)) throw new CapacityInputError('nPlus', `must be at most ${Number.MAX_SAFE_INTEGER} (got ${nPlus})`);

  const f = formatNumber;
  const { rps, inputTokens, outputTokens, replicaTokensPerSecond: tps, utilization: util } = input;
  const demand = clean(rps * outputTokens);
  const prefillDemand = clean(rps * inputTokens);
  const usable = clean(tps * util);
  const floorReplicas = ceil(demand / tps);
  const replicas = ceil(demand / usable);
  const withFailures = replicas + nPlus;
  // Every result must be a finite, countable number: a product that overflows, or a usable rate
  // that rounds to 0 (below the 1e-6 tokens/s kept), would otherwise print Infinity or NaN.
  if (!Number.isFinite(demand) || !Number.isFinite(prefillDemand)) {
    throw new CapacityInputError('rps', `× tokens per request is not a finite number of tokens/s (rps ${rps}, ${inputTokens} input and ${outputTokens} output tokens)`);
  }
  if (!(usable > 0)) {
    throw new CapacityInputError('replicaTokensPerSecond', `× utilization is ${tps * util} tokens/s per replica, below the 1e-6 tokens/s the plan resolves`);
  }
  if (!Number.isSafeInteger(withFailures)) {
    throw new CapacityInputError('rps', `× outputTokens ÷ (replicaTokensPerSecond × utilization) needs ${replicas} replicas (+ ${nPlus}), not an exactly countable number`);
  }
  const check = (count: number): FailureCheck => {
    const survivors = Math.max(0, count - nPlus);
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
    const left = c.replicas < nPlus ? `none: 0 tokens/s` : `${c.survivors} × ${f(tps)} × ${f(util)} = ${f(c.capacityTokensPerSecond)} tokens/s`;
    lines.push(`N+${nPlus}:      ${c.replicas} replicas losing ${nPlus} leave ${left} ${verdict}`);
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
  /**
   * Set when the first run showed that no fleet size can meet the targets, so the search stopped
   * there (the arrivals and their lengths are the same at every size): see {@link Unreachable}.
   */
  unreachable?: Unreachable;
}

/**
 * Why no number of replicas can meet the targets, read from one run (what it depends on does
 * not change with the fleet size):
 * - `no_arrivals`: the window held no arrivals at this rate (nothing to measure; lengthen it);
 * - `kv_memory`: `rejected` requests need more KV memory (input + output limit) than a replica has;
 * - `tpot`: every request's TPOT is at least the fastest decode step, `minTpotMs`, above the target;
 * - `ttft`: with no queueing at all, each request's TTFT is its own prefill plus one decode step;
 *   the p95 of that, `minTtftP95Ms`, is above the target.
 */
export type Unreachable =
  | { reason: 'no_arrivals' }
  | { reason: 'kv_memory'; rejected: number }
  | { reason: 'tpot'; minTpotMs: number }
  | { reason: 'ttft'; minTtftP95Ms: number };

/**
 * The fastest decode step (ms) over batches 1…`maxSequences`: a lower bound on every request's
 * time per output token. The step time is piecewise linear, so the minimum is at a point or an end.
 */
export function minDecodeStepMs(profile: ReplicaProfile): number {
  const batches = [1, profile.maxSequences, ...profile.decodeStepMs.map(([b]) => b).filter((b) => b <= profile.maxSequences)];
  return Math.min(...batches.map((b) => decodeStepMs(profile, b)));
}

/** The largest draw of a distribution (tokens). */
const largestDraw = (d: TokenDistribution): number =>
  d.kind === 'fixed' ? d.value : d.kind === 'samples' ? Math.max(...d.values) : (d.max ?? 4 * Math.ceil(d.p95));

/**
 * The mean tokens per request used for planning: {@link meanTokens}, but never above the largest
 * draw (a lognormal with a very wide tail has an enormous untruncated mean; its draws are capped).
 */
export function plannedMeanTokens(d: TokenDistribution): number {
  return Math.min(meanTokens(d), largestDraw(d));
}

/**
 * The throughput lower bound of {@link planBySimulation} (not clamped to `maxReplicas`): each
 * replica's second must hold the prefill and the decode work sent to it, decode at its peak batch
 * efficiency, so `ceil(rps × (E[input] / prefillTokensPerSecond + E[output] / peakDecodeTokensPerSecond))`,
 * at least 1. A smaller fleet falls behind the arrivals: its queue grows for as long as the load
 * lasts. Needs no simulation, so a caller can compare it with its own limit first.
 *
 * @throws CapacityInputError naming the field when an input is out of range.
 */
export function simulationLowerBound(input: Pick<SimulationPlanInput, 'rps' | 'inputTokens' | 'outputTokens' | 'profile'>): number {
  requirePositive('rps', input.rps);
  validateProfile(input.profile);
  validateDistribution('inputTokens', input.inputTokens);
  validateDistribution('outputTokens', input.outputTokens);
  const perRequestSeconds =
    plannedMeanTokens(input.inputTokens) / input.profile.prefillTokensPerSecond + plannedMeanTokens(input.outputTokens) / peakDecodeTokensPerSecond(input.profile);
  return Math.max(1, ceil(input.rps * perRequestSeconds));
}

/** Why `report` (any size) shows that no size can meet `targets`, or undefined. */
function unreachable(report: SimulationReport, profile: ReplicaProfile, targets: Required<LatencyTargets>): Unreachable | undefined {
  if (report.arrived === 0) return { reason: 'no_arrivals' };
  if (report.rejected > 0) return { reason: 'kv_memory', rejected: report.rejected };
  const step = minDecodeStepMs(profile);
  // A hair of tolerance: a simulated TPOT is a float sum of step times divided by the steps.
  if (report.tpotMs.count > 0 && targets.tpotP95Ms < step * (1 - 1e-9)) return { reason: 'tpot', minTpotMs: step };
  const floor = report.requests.map((r) => prefillMs(profile, r.inputTokens) + step).sort((a, b) => a - b);
  const minTtftP95Ms = nearestRank(floor, 95);
  if (minTtftP95Ms > targets.ttftP95Ms * (1 + 1e-9)) return { reason: 'ttft', minTtftP95Ms };
  return undefined;
}

const meets = (r: SimulationReport, t: Required<LatencyTargets>): boolean =>
  r.rejected === 0 && r.requests.length > 0 && r.ttftMs.p95 <= t.ttftP95Ms && !(r.tpotMs.p95 > t.tpotP95Ms);

/**
 * Finds the smallest replica count whose simulated p95 TTFT and p95 TPOT meet the targets at the
 * offered load ({@link simulateCluster} with the same seed for every size, so sizes are compared
 * on the same arrivals). Search: from {@link SimulationPlan.lowerBound}, double until a size
 * meets the targets, then bisect between the last miss and the first hit; this assumes latency
 * does not get worse with more replicas, which holds for this model up to simulation noise. A
 * run where some request can never fit the KV cache never meets the targets. When the first run
 * shows that no size can ({@link Unreachable}), the search stops there.
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

  const lowerBound = Math.min(maxReplicas, simulationLowerBound(input));

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
  let impossible: Unreachable | undefined;
  for (let n = lowerBound; ; n = Math.min(maxReplicas, n * 2)) {
    const report = run(n);
    if (meets(report, targets)) {
      hit = n;
      break;
    }
    miss = n;
    impossible = trials.length === 1 ? unreachable(report, input.profile, targets) : undefined;
    if (impossible || n >= maxReplicas) break;
  }
  if (hit === undefined) {
    return {
      targets,
      lowerBound,
      replicas: null,
      replicasWithFailures: null,
      report: runs.get(miss) as SimulationReport,
      trials,
      ...(impossible ? { unreachable: impossible } : {}),
    };
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

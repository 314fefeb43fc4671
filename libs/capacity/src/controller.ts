/**
 * The capacity controller (issue 7, deliverable 7): desired replicas per pool from live queue
 * and token telemetry, sized with the planner's own arithmetic ({@link planCapacity}) and the
 * per-replica throughput measured from that telemetry rather than a configured figure.
 *
 * Per pool, on every {@link PoolTelemetrySample}:
 *
 * 1. **Window** (default 60 s): the samples of the last `windowSeconds`. The counters in a
 *    sample are cumulative, so the window's figures are differences between its newest and
 *    oldest sample; a missed sample loses nothing.
 * 2. **Demand** (output tokens/s) = observed output tokens/s over the window + the queue's
 *    backlog (its estimated output tokens) ÷ the drain target (default 30 s): what the pool
 *    produced, plus what it must add to empty its queue in that time.
 * 3. **Per-replica throughput** = output tokens ÷ busy replica-seconds (time a replica held at
 *    least one lease) over the window, smoothed by an EWMA across evaluations. Until the
 *    window has held `minBusyReplicaSeconds` of busy time, the pool's configured hint is used
 *    and the decision's `basis` says `hint`; once measured, the EWMA is kept when load stops
 *    (an idle window measures nothing, it does not unlearn).
 * 4. **Plan**: {@link planCapacity} with the demand as requests/s × mean output tokens per
 *    request, the throughput, the utilisation ceiling (default 0.7) and N+k (default 1).
 * 5. **Clamp** to the pool's [minReplicas, maxReplicas].
 * 6. **Stabilise** like the Kubernetes HPA's `behavior.scaleDown.stabilizationWindowSeconds`
 *    (default 300 s): the decision is the highest recommendation of the last 300 s, so a rise
 *    applies at once and a fall only once every higher recommendation has aged out. Until the
 *    controller has watched a pool for that long it never goes below the replicas running.
 *
 * Pure: time comes from the injected clock and the samples; publishing goes through the
 * {@link DesiredReplicasGauge} and `onDecision` hooks (the NATS subject and the Prometheus
 * gauge live in adapters).
 */
import type { Clock } from '@weir/core';
import { CapacityInputError, requirePositive } from './errors';
import { formatNumber, planCapacity } from './plan';

/**
 * One pool's telemetry at one instant, as the scheduler publishes it (`@weir/scheduling`'s
 * `createCapacityTelemetry`). Counters (`…Total`) are cumulative since `source` started and
 * never decrease; a decrease or a new `source` (a restarted scheduler) starts the pool's
 * window afresh.
 */
export interface PoolTelemetrySample {
  pool: string;
  /** The sampler instance (a scheduler process). */
  source: string;
  /** When the sample was taken: wall-clock ms since the epoch. */
  at: number;
  /** Requests waiting in the pool's queues now. */
  queuedRequests: number;
  /** Estimated output tokens of the queued requests (their output limits × the measured fill), tokens. */
  queuedOutputTokens: number;
  /** Leases held on the pool's replicas now. */
  runningRequests: number;
  /** Replicas of the pool (in rotation or not). */
  replicas: number;
  /** Replicas in rotation. */
  healthyReplicas: number;
  /** Requests granted a lease in the pool (cumulative). */
  admittedRequestsTotal: number;
  /** Leases released with a usage report (cumulative). */
  completedRequestsTotal: number;
  /** Output tokens those reports counted (cumulative). */
  outputTokensTotal: number;
  /** Prompt tokens those reports counted (cumulative). */
  inputTokensTotal: number;
  /** Seconds any replica of the pool held at least one lease, summed over replicas (cumulative, replica-seconds). */
  busyReplicaSecondsTotal: number;
}

/** Per-pool overrides of {@link CapacityControllerOptions}. */
export interface PoolCapacitySettings {
  /** Lower bound of the decision (integer ≥ 0). Default the controller's `minReplicas`. */
  minReplicas?: number;
  /** Upper bound of the decision (integer ≥ minReplicas). Default the controller's `maxReplicas`. */
  maxReplicas?: number;
  /** Replica failures to survive (integer ≥ 0). Default the controller's `nPlus`. */
  nPlus?: number;
  /** Utilisation ceiling in (0, 1]. Default the controller's `utilization`. */
  utilization?: number;
  /** Output tokens/s one replica is assumed to sustain until measured (> 0). Default the controller's hint. */
  replicaTokensPerSecondHint?: number;
}

/** Where the Prometheus gauge `weir_pool_desired_replicas{pool}` is set (an adapter implements it). */
export interface DesiredReplicasGauge {
  /** Records the pool's latest decision. Must not throw. */
  set(pool: string, desiredReplicas: number): void;
}

/** Options of {@link createCapacityController}. */
export interface CapacityControllerOptions {
  /** Wall clock (ms since the epoch): stabilisation and each decision's `at`. */
  clock: Clock;
  /** Output tokens/s one replica is assumed to sustain before any measurement (> 0), for pools without their own hint. */
  replicaTokensPerSecondHint: number;
  /** Per-pool settings by pool name. Default none. */
  pools?: Readonly<Record<string, PoolCapacitySettings>>;
  /** Telemetry window (s, > 0). Default 60. */
  windowSeconds?: number;
  /** The queue backlog should drain within this (s, > 0). Default 30. */
  drainTargetSeconds?: number;
  /** Utilisation ceiling in (0, 1]. Default 0.7. */
  utilization?: number;
  /** Replica failures to survive (integer ≥ 0). Default 1. */
  nPlus?: number;
  /** Default lower bound (integer ≥ 0). Default 1. */
  minReplicas?: number;
  /** Default upper bound (integer ≥ 1). Default 1,000. */
  maxReplicas?: number;
  /** Scale-down stabilisation window (s, ≥ 0), as the HPA's `behavior.scaleDown.stabilizationWindowSeconds`. Default 300. */
  scaleDownStabilizationSeconds?: number;
  /** Busy replica-seconds a window must hold before its throughput counts as measured (> 0). Default 10. */
  minBusyReplicaSeconds?: number;
  /** Weight of each new window measurement in the throughput EWMA, in (0, 1]. Default 0.3. */
  throughputEwmaAlpha?: number;
  /** Set on every decision. Default none. */
  gauge?: DesiredReplicasGauge;
  /** Called with every decision (e.g. to publish it on NATS). Must not throw. Default none. */
  onDecision?: (decision: CapacityDecision) => void;
}

/** Whether the per-replica throughput was measured from telemetry or is the configured hint. */
export type CapacityBasis = 'measured' | 'hint';

/** One pool's capacity decision. JSON-safe (it is published as is). */
export interface CapacityDecision {
  pool: string;
  /** The replicas the pool should run: clamped and stabilised. */
  desiredReplicas: number;
  /** This evaluation's plan, clamped but not yet stabilised. */
  recommendedReplicas: number;
  /** Replicas of the pool in the sample (in rotation or not). */
  currentReplicas: number;
  /** Replicas in rotation in the sample. */
  healthyReplicas: number;
  /** Observed + backlog output tokens/s. */
  demandTokensPerSecond: number;
  /** Output tokens/s produced over the window. */
  observedTokensPerSecond: number;
  /** Queued output tokens ÷ the drain target (tokens/s). */
  backlogTokensPerSecond: number;
  /** Requests admitted per second over the window. */
  admittedRequestsPerSecond: number;
  /** The per-replica throughput planned with (output tokens/s). */
  replicaTokensPerSecond: number;
  basis: CapacityBasis;
  /** The arithmetic, one step per line: the window, demand and throughput, the planner's lines, clamp and stabilisation. */
  lines: string[];
  /** When decided (ISO-8601 UTC). */
  at: string;
  /** When the newest sample it used was taken (ISO-8601 UTC): a decision whose telemetry stopped is visibly old. */
  telemetryAt: string;
}

/** The controller: feed it samples, read its decisions. */
export interface CapacityController {
  /**
   * Takes one sample and returns the pool's new decision (also given to the gauge and
   * `onDecision`). A sample not newer than the pool's previous one (same source) is ignored:
   * returns undefined.
   * @throws CapacityInputError naming the sample field when a number is negative, not finite, or a
   *   count is not an integer; or {@link planCapacity}'s, when the plan is not a countable number of replicas.
   */
  ingest(sample: PoolTelemetrySample): CapacityDecision | undefined;
  /** The latest decision of every pool seen, by pool name. */
  decisions(): CapacityDecision[];
  /** The latest decision of `pool`, or undefined when no sample of it has arrived. */
  decision(pool: string): CapacityDecision | undefined;
}

interface PoolState {
  source: string;
  /** Samples in the window, oldest first. */
  samples: PoolTelemetrySample[];
  /** Measured throughput (EWMA, output tokens/s per busy replica). */
  throughput?: number;
  /** Recommendations of the stabilisation window, oldest first. */
  recommendations: Array<{ at: number; replicas: number }>;
  /** When this controller first decided for the pool (controller clock, ms). */
  firstAt: number;
  latest?: CapacityDecision;
}

const COUNTS = ['queuedRequests', 'runningRequests', 'replicas', 'healthyReplicas', 'admittedRequestsTotal', 'completedRequestsTotal'] as const;
const AMOUNTS = ['queuedOutputTokens', 'outputTokensTotal', 'inputTokensTotal', 'busyReplicaSecondsTotal'] as const;
const COUNTERS = ['admittedRequestsTotal', 'completedRequestsTotal', 'outputTokensTotal', 'inputTokensTotal', 'busyReplicaSecondsTotal'] as const;

function validateSample(s: PoolTelemetrySample): void {
  if (typeof s.pool !== 'string' || s.pool.length === 0) throw new CapacityInputError('sample.pool', 'must be a non-empty string');
  if (typeof s.source !== 'string' || s.source.length === 0) throw new CapacityInputError('sample.source', 'must be a non-empty string');
  requirePositive('sample.at', s.at, { allowZero: true });
  for (const f of COUNTS) requirePositive(`sample.${f}`, s[f], { allowZero: true, integer: true });
  for (const f of AMOUNTS) requirePositive(`sample.${f}`, s[f], { allowZero: true });
}

function requireFraction(field: string, value: number): void {
  requirePositive(field, value);
  if (value > 1) throw new CapacityInputError(field, `must be a fraction in (0, 1] (got ${value})`);
}

/**
 * Creates a capacity controller (see the module comment for the arithmetic).
 * @throws CapacityInputError naming the option when one is out of range (checked here, and
 *   per pool on its first sample).
 */
export function createCapacityController(options: CapacityControllerOptions): CapacityController {
  const windowS = options.windowSeconds ?? 60;
  const drainS = options.drainTargetSeconds ?? 30;
  const stabilizationS = options.scaleDownStabilizationSeconds ?? 300;
  const minBusy = options.minBusyReplicaSeconds ?? 10;
  const alpha = options.throughputEwmaAlpha ?? 0.3;
  requirePositive('windowSeconds', windowS);
  requirePositive('drainTargetSeconds', drainS);
  requirePositive('scaleDownStabilizationSeconds', stabilizationS, { allowZero: true });
  requirePositive('minBusyReplicaSeconds', minBusy);
  requireFraction('throughputEwmaAlpha', alpha);
  requirePositive('replicaTokensPerSecondHint', options.replicaTokensPerSecondHint);
  const windowMs = windowS * 1000;
  const stabilizationMs = stabilizationS * 1000;

  const settingsOf = (pool: string) => {
    const p = options.pools?.[pool] ?? {};
    const s = {
      minReplicas: p.minReplicas ?? options.minReplicas ?? 1,
      maxReplicas: p.maxReplicas ?? options.maxReplicas ?? 1000,
      nPlus: p.nPlus ?? options.nPlus ?? 1,
      utilization: p.utilization ?? options.utilization ?? 0.7,
      hint: p.replicaTokensPerSecondHint ?? options.replicaTokensPerSecondHint,
    };
    const at = (f: string) => (options.pools?.[pool] ? `pools.${pool}.${f}` : f);
    requirePositive(at('minReplicas'), s.minReplicas, { allowZero: true, integer: true });
    requirePositive(at('maxReplicas'), s.maxReplicas, { integer: true });
    if (s.maxReplicas < s.minReplicas) throw new CapacityInputError(at('maxReplicas'), `must be ≥ minReplicas ${s.minReplicas} (got ${s.maxReplicas})`);
    requirePositive(at('nPlus'), s.nPlus, { allowZero: true, integer: true });
    requireFraction(at('utilization'), s.utilization);
    requirePositive(at('replicaTokensPerSecondHint'), s.hint);
    return s;
  };
  // Fail at start-up on a bad default or pool setting, not on the first sample.
  settingsOf('\u0000defaults');
  for (const pool of Object.keys(options.pools ?? {})) settingsOf(pool);

  const pools = new Map<string, PoolState>();
  const f = formatNumber;
  const iso = (ms: number) => new Date(ms).toISOString();

  const decide = (state: PoolState, sample: PoolTelemetrySample): CapacityDecision => {
    const settings = settingsOf(sample.pool);
    const now = options.clock.now();
    const first = state.samples[0];
    const spanS = (sample.at - first.at) / 1000;
    const d = (k: (typeof COUNTERS)[number]) => sample[k] - first[k];
    const tokens = d('outputTokensTotal');
    const completed = d('completedRequestsTotal');
    const busy = d('busyReplicaSecondsTotal');
    const observed = spanS > 0 ? tokens / spanS : 0;
    const backlog = sample.queuedOutputTokens / drainS;
    const demand = observed + backlog;
    const admittedRate = spanS > 0 ? d('admittedRequestsTotal') / spanS : 0;

    const lines: string[] = [];
    lines.push(
      spanS > 0
        ? `window:   ${f(spanS)} s of telemetry (${state.samples.length} samples from ${sample.source}): ${f(tokens)} output tokens, ${completed} requests completed, ${f(busy)} busy replica-s`
        : `window:   1 sample from ${sample.source}: no rates yet (the next sample gives them)`,
      `observed: ${f(tokens)} tokens / ${f(spanS)} s = ${f(observed)} tokens/s`,
      `backlog:  ${sample.queuedRequests} queued requests, ~${f(sample.queuedOutputTokens)} output tokens / ${f(drainS)} s drain target = ${f(backlog)} tokens/s`,
      `tokens:   observed ${f(observed)} + backlog ${f(backlog)} = ${f(demand)} output tokens/s`,
    );

    if (busy >= minBusy && tokens > 0) {
      const measured = tokens / busy;
      state.throughput = state.throughput === undefined ? measured : state.throughput + alpha * (measured - state.throughput);
      lines.push(`replica:  ${f(tokens)} tokens / ${f(busy)} busy replica-s = ${f(measured)} tokens/s; EWMA (α ${f(alpha)}) ${f(state.throughput)} tokens/s (measured)`);
    } else if (state.throughput !== undefined) {
      lines.push(`replica:  ${f(state.throughput)} tokens/s (measured earlier; this window holds ${f(busy)} of the ${f(minBusy)} busy replica-s a new measurement needs)`);
    } else {
      lines.push(`replica:  ${f(settings.hint)} tokens/s (configured hint: not measured yet, the window holds ${f(busy)} of the ${f(minBusy)} busy replica-s a measurement needs)`);
    }
    const basis: CapacityBasis = state.throughput !== undefined ? 'measured' : 'hint';
    const replicaTps = state.throughput ?? settings.hint;

    let planned: number;
    if (demand > 0) {
      // planCapacity sizes rps × output tokens per request; the mean request of the window (or
      // of the queue when nothing finished) turns the demand back into that form.
      const queuedMean = sample.queuedRequests > 0 ? sample.queuedOutputTokens / sample.queuedRequests : 0;
      const meanOutput = completed > 0 && tokens > 0 ? tokens / completed : queuedMean > 0 ? queuedMean : demand;
      const meanInput = completed > 0 ? d('inputTokensTotal') / completed : 0;
      const plan = planCapacity({
        rps: demand / meanOutput,
        inputTokens: meanInput,
        outputTokens: meanOutput,
        replicaTokensPerSecond: replicaTps,
        utilization: settings.utilization,
        nPlus: settings.nPlus,
      });
      lines.push(...plan.lines);
      planned = plan.replicasWithFailures;
    } else {
      planned = settings.nPlus;
      lines.push(`answer:   ${planned} replicas (no demand: 0 for throughput + ${settings.nPlus} to survive ${settings.nPlus} failure${settings.nPlus === 1 ? '' : 's'})`);
    }

    const recommended = Math.min(settings.maxReplicas, Math.max(settings.minReplicas, planned));
    lines.push(`clamp:    ${planned} within [${settings.minReplicas}, ${settings.maxReplicas}] = ${recommended} replicas`);

    state.recommendations.push({ at: now, replicas: recommended });
    while (state.recommendations.length > 1 && state.recommendations[0].at < now - stabilizationMs) state.recommendations.shift();
    let desired = Math.max(...state.recommendations.map((r) => r.replicas));
    const watchedMs = now - state.firstAt;
    if (watchedMs < stabilizationMs && desired < sample.replicas) {
      desired = Math.min(settings.maxReplicas, sample.replicas);
      lines.push(`desired:  ${desired} replicas (watched for ${f(watchedMs / 1000)} s of the ${f(stabilizationMs / 1000)} s scale-down window: never below the ${sample.replicas} running until then)`);
    } else if (desired > recommended) {
      lines.push(`desired:  ${desired} replicas (the highest recommendation of the last ${f(stabilizationMs / 1000)} s: scale-down waits for it to age out)`);
    } else {
      lines.push(`desired:  ${desired} replicas`);
    }

    return {
      pool: sample.pool,
      desiredReplicas: desired,
      recommendedReplicas: recommended,
      currentReplicas: sample.replicas,
      healthyReplicas: sample.healthyReplicas,
      demandTokensPerSecond: round(demand),
      observedTokensPerSecond: round(observed),
      backlogTokensPerSecond: round(backlog),
      admittedRequestsPerSecond: round(admittedRate),
      replicaTokensPerSecond: round(replicaTps),
      basis,
      lines,
      at: iso(now),
      telemetryAt: iso(sample.at),
    };
  };

  return {
    ingest(sample) {
      validateSample(sample);
      let state = pools.get(sample.pool);
      if (!state) {
        state = { source: sample.source, samples: [], recommendations: [], firstAt: options.clock.now() };
        pools.set(sample.pool, state);
      }
      const previous = state.samples.at(-1);
      const restarted = state.source !== sample.source || (previous !== undefined && COUNTERS.some((k) => sample[k] < previous[k]));
      if (restarted) {
        // A new scheduler (or one whose counters restarted): its counters cannot be
        // differenced with the old ones. The measured throughput and the recommendations stay.
        state.source = sample.source;
        state.samples = [];
      } else if (previous && sample.at <= previous.at) {
        return undefined;
      }
      state.samples.push(sample);
      while (state.samples.length > 1 && state.samples[0].at < sample.at - windowMs) state.samples.shift();
      const decision = decide(state, sample);
      state.latest = decision;
      options.gauge?.set(decision.pool, decision.desiredReplicas);
      options.onDecision?.(decision);
      return decision;
    },
    decisions: () => [...pools.values()].flatMap((s) => (s.latest ? [s.latest] : [])),
    decision: (pool) => pools.get(pool)?.latest,
  };
}

/** To 1e-3: the published figures are for people and dashboards. */
const round = (x: number): number => Math.round(x * 1000) / 1000;

/**
 * The load benchmark's fixed profile (issue 5, deliverable 7), written down before any result
 * was taken, and the arithmetic that turns it into offered rates. docs/performance.md ("Load
 * benchmark: the profile") says the same in prose; change both together, and never after a run
 * to make a target pass.
 *
 * Capacity comes from the capacity library's own simulator (`simulateCluster`, the code behind
 * `weir capacity --simulate`): the largest Poisson arrival rate at which the simulated fleet
 * still meets the seed's targets (p95 TTFT ≤ 1 s, p95 TPOT ≤ 50 ms). That is the seed's
 * definition of a replica's rate: "measured … at the target latency".
 */
import { type ReplicaProfile, SEED_LATENCY_TARGETS, simulateCluster } from '@weir/capacity';

/** One simulated GPU replica: issue 5's example profile. */
export const BENCH_REPLICA: Readonly<ReplicaProfile> = Object.freeze({
  /** Prompt tokens/s. */
  prefillTokensPerSecond: 10_000,
  /** 20 ms per decode step at batch 1, rising linearly to 40 ms at batch 32. */
  decodeStepMs: Object.freeze([Object.freeze([1, 20] as const), Object.freeze([32, 40] as const)]),
  /** KV-cache tokens (context tokens across the batch). */
  kvTokens: 65_536,
  /** Largest batch; also the replica's `slots` in the config, so the scheduler never oversubscribes it. */
  maxSequences: 32,
});

/** The shape of every request and the run. Times in ms, rates in requests/s. */
export interface LoadProfile {
  /** Engine-sim replicas behind the one `simulated` revision (all in the `interactive` pool). */
  replicas: number;
  /** Prompt tokens per request, as the replicas' tokenizer counts them (1 + words). */
  inputTokens: number;
  /** `max_tokens` of every request; the simulated replica always produces exactly that many. */
  outputTokens: number;
  /** The quiet tenant's interactive rate as a fraction of its fair share (≤ 1). */
  quietShare: number;
  /** The noisy tenant's interactive rate as a multiple of its fair share. */
  noisyShare: number;
  /** A batch-class stream (`x-weir-priority: batch`) from the quiet tenant's second app (requests/s; 0 = none). */
  batchRps: number;
  /** `x-weir-deadline-ms` of interactive requests. */
  interactiveDeadlineMs: number;
  /** `x-weir-deadline-ms` of batch requests. */
  batchDeadlineMs: number;
  /** Load before measuring (not recorded): fills the queues to their steady state. */
  warmupMs: number;
  /** The steady run's measured window. */
  steadyMs: number;
  /** The brownout run: measured window before the kill, then after it. */
  beforeKillMs: number;
  afterKillMs: number;
  /** Arrival PRNG seed (each stream derives its own). */
  seed: number;
}

/**
 * The fixed profile. Why these numbers:
 * - 3 replicas: the largest fleet whose offered load (≈ 100 requests/s at the noisy tenant's
 *   10×) the 2-core machine can still push through the split topology; and with 3, the
 *   survivors of one failure still hold the quiet tenant's share (2/3 of the fleet).
 * - 200 prompt tokens and 100 output tokens: the seed's "short-prompt class".
 * - Quiet at half its fair share: at its full share, with a competitor that is always
 *   backlogged, the quiet tenant's own queue is served at exactly its arrival rate (DRR hands it
 *   half the freed slots), a queue at utilisation ≈ 1 whose waits grow without bound by
 *   queueing theory alone: that would measure its self-queueing, not isolation. `--quiet-share 1`
 *   runs that case.
 * - Noisy at 10× its fair share: the issue's figure; total offered ≈ 5× capacity (≥ 2×).
 * - Deadlines 10 s (a 100-token answer takes ≈ 4.7 s at a full batch) and 60 s for batch.
 */
export const BENCH_PROFILE: Readonly<LoadProfile> = Object.freeze({
  replicas: 3,
  inputTokens: 200,
  outputTokens: 100,
  quietShare: 0.5,
  noisyShare: 10,
  batchRps: 1,
  interactiveDeadlineMs: 10_000,
  batchDeadlineMs: 60_000,
  warmupMs: 5_000,
  steadyMs: 40_000,
  beforeKillMs: 20_000,
  afterKillMs: 35_000,
  seed: 1,
});

/** A few seconds of tiny load on two replicas (one killed): the smoke test's profile (`--smoke`). */
export const SMOKE_PROFILE: Readonly<LoadProfile> = Object.freeze({
  ...BENCH_PROFILE,
  replicas: 2,
  outputTokens: 10,
  quietShare: 0.1,
  noisyShare: 0.2,
  batchRps: 0.5,
  warmupMs: 500,
  steadyMs: 3_000,
  beforeKillMs: 2_000,
  afterKillMs: 2_000,
});

/** What {@link fleetCapacity} found. */
export interface FleetCapacity {
  /** Largest arrival rate meeting both targets (requests/s, to 0.1). */
  rps: number;
  /** p95 TTFT and TPOT of the simulation at that rate (ms). */
  ttftP95Ms: number;
  tpotP95Ms: number;
  /** Output tokens/s of the fleet at that rate. */
  outputTokensPerSecond: number;
  /** The method, in words, for the results. */
  method: string;
}

/**
 * The fleet's capacity at the seed's latency targets: bisection (to 0.1 requests/s) over the
 * Poisson arrival rate of {@link simulateCluster} with `replicas` replicas of `replica`, fixed
 * request lengths, 120 simulated seconds, seed 1. Pure and deterministic (≈ 1 s of CPU).
 *
 * @throws CapacityInputError (from the simulator) for a bad profile.
 */
export function fleetCapacity(replica: ReplicaProfile, replicas: number, inputTokens: number, outputTokens: number): FleetCapacity {
  const run = (rps: number) =>
    simulateCluster({
      profile: replica,
      replicas,
      rps,
      durationSeconds: 120,
      inputTokens: { kind: 'fixed', value: inputTokens },
      outputTokens: { kind: 'fixed', value: outputTokens },
      seed: 1,
    });
  const meets = (r: ReturnType<typeof run>) => r.rejected === 0 && r.ttftMs.p95 <= SEED_LATENCY_TARGETS.ttftP95Ms && !(r.tpotMs.p95 > SEED_LATENCY_TARGETS.tpotP95Ms);
  // Upper bound: every replica at its full batch, prefill ignored.
  const peak = (replica.maxSequences / (replica.decodeStepMs[replica.decodeStepMs.length - 1][1] / 1000)) / outputTokens;
  let lo = 0.1;
  let hi = peak * replicas * 1.2;
  if (!meets(run(lo))) throw new Error(`the fleet misses the targets even at ${lo} requests/s`);
  while (hi - lo > 0.1) {
    const mid = Math.round(((lo + hi) / 2) * 100) / 100;
    if (meets(run(mid))) lo = mid;
    else hi = mid;
  }
  const rps = Math.floor(lo * 10) / 10;
  const at = run(rps);
  return {
    rps,
    ttftP95Ms: at.ttftMs.p95,
    tpotP95Ms: at.tpotMs.p95,
    outputTokensPerSecond: at.outputTokensPerSecond,
    method: `largest Poisson rate (bisection to 0.1 req/s) at which simulateCluster (libs/capacity) over ${replicas} replica(s), ${inputTokens} prompt + ${outputTokens} output tokens, 120 s, seed 1, meets p95 TTFT ≤ ${SEED_LATENCY_TARGETS.ttftP95Ms} ms and p95 TPOT ≤ ${SEED_LATENCY_TARGETS.tpotP95Ms} ms`,
  };
}

/** Offered rates (requests/s) of each stream, from the capacity and the profile. */
export interface OfferedRates {
  fairShare: number;
  quiet: number;
  noisy: number;
  batch: number;
  total: number;
  /** total ÷ capacity. */
  overload: number;
}

/** Equal weights: each of the two tenants' fair share is half the capacity. */
export function offeredRates(capacityRps: number, profile: LoadProfile): OfferedRates {
  const fairShare = capacityRps / 2;
  const quiet = fairShare * profile.quietShare;
  const noisy = fairShare * profile.noisyShare;
  const total = quiet + noisy + profile.batchRps;
  return { fairShare, quiet, noisy, batch: profile.batchRps, total, overload: total / capacityRps };
}

/** The engine-sim environment of one replica of `replica`. */
export function replicaEnv(replica: ReplicaProfile): Record<string, string> {
  return {
    SIM_PREFILL_TPS: String(replica.prefillTokensPerSecond),
    SIM_DECODE_MS: replica.decodeStepMs.map(([b, ms]) => `${b}:${ms}`).join(','),
    SIM_KV_TOKENS: String(replica.kvTokens),
    SIM_MAX_SEQUENCES: String(replica.maxSequences),
    SIM_SEED: '1',
  };
}

/** Tenants, apps and the alias of the benchmark's configuration. */
export const BENCH_ALIAS = 'sim';
export const BENCH_REVISION = 'sim@1';
export const TENANTS = { quiet: { id: 'quiet', app: 'quiet-app', batchApp: 'quiet-batch' }, noisy: { id: 'noisy', app: 'noisy-app' } } as const;

/**
 * The configuration every service reads: one `simulated` revision whose `replicas` are the
 * engine-sim processes (so the relay reaches them over real HTTP), two tenants with equal
 * weights and a concurrency limit high enough that the scheduler, not admission, throttles.
 * `platform.tpotTargetMs` (diagnostic runs only; the profile sets none) becomes
 * `defaults.scheduling.tpot_target_ms`.
 */
export function benchConfigYaml(replicaUrls: readonly string[], replica: ReplicaProfile, platform: { tpotTargetMs?: number } = {}): string {
  return `# tools/bench/load-run.ts: simulated replicas (engine-sim), two tenants with equal weights
${platform.tpotTargetMs === undefined ? '' : `defaults:\n  scheduling:\n    tpot_target_ms: ${platform.tpotTargetMs}\n`}revisions:
  - id: ${BENCH_REVISION}
    model: sim
    engine:
      kind: simulated
      prefill_tokens_per_second: ${replica.prefillTokensPerSecond}
      decode_step_ms: ${JSON.stringify(replica.decodeStepMs)}
      kv_tokens: ${replica.kvTokens}
      max_sequences: ${replica.maxSequences}
    context_window: 4096
    max_output_tokens: 1024
    default_output_tokens: 100
    pricing: { input_per_mtok: 0.5, output_per_mtok: 1.5 }
    kv_tokens: ${replica.kvTokens}
    replicas:
${replicaUrls.map((u, i) => `      - { id: ${BENCH_REVISION}/${i}, base_url: ${u}/v1, slots: ${replica.maxSequences} }`).join('\n')}
aliases:
  - name: ${BENCH_ALIAS}
    revision: ${BENCH_REVISION}
tenants:
  - id: ${TENANTS.quiet.id}
    name: Quiet
    apps: [{ id: ${TENANTS.quiet.app}, name: Quiet app }, { id: ${TENANTS.quiet.batchApp}, name: Quiet batch }]
    scheduling_weight: 1
    limits: { max_concurrent: 4096 }
  - id: ${TENANTS.noisy.id}
    name: Noisy
    apps: [{ id: ${TENANTS.noisy.app}, name: Noisy app }]
    scheduling_weight: 1
    limits: { max_concurrent: 4096 }
`;
}

/**
 * The scheduler's arithmetic, as pure functions: throughput EWMAs per replica, the work of a
 * request in sequence-seconds, its fair position in a queue, the start-time estimate behind
 * `deadline_unmeetable`, and a pool's remaining capacity behind brownout.
 */
import type { LeaseUsageReport } from '@weir/core';

/**
 * Exponentially weighted moving average: `prev + alpha × (sample − prev)`, i.e.
 * `alpha × sample + (1 − alpha) × prev` (Roberts 1959; the smoothing vLLM and Envoy use for
 * rates). `prev` undefined (no history) returns the sample.
 *
 * @param alpha weight of the new sample, in (0, 1].
 */
export function ewma(prev: number | undefined, sample: number, alpha: number): number {
  if (prev === undefined) return sample;
  return prev + alpha * (sample - prev);
}

/** Prompts shorter than this (tokens) measure the first-token overhead, not the prefill rate. */
export const SHORT_PROMPT_TOKENS = 128;
/** Prompts at least this long (tokens) measure the prefill rate (their TTFT beyond the overhead). */
export const PREFILL_SAMPLE_TOKENS = 256;

/** One generation's measured per-sequence throughput (tokens/s); a side is absent when it cannot be measured. */
export interface ThroughputSample {
  /**
   * Prompt tokens ÷ (time from grant to first token − the first-token overhead), for prompts of
   * at least {@link PREFILL_SAMPLE_TOKENS}: a short prompt's TTFT is mostly the fixed cost (a
   * decode step, the hops), and dividing by it read a 10,000 tokens/s replica as 30–55 tokens/s,
   * which then refused long prompts as unmeetable.
   */
  prefillTokensPerS?: number;
  /** TTFT (ms) of a prompt under {@link SHORT_PROMPT_TOKENS}: the first-token overhead. */
  firstTokenOverheadMs?: number;
  /** (Output tokens − 1) ÷ time from first token to end: the TPOT definition of semconv. */
  decodeTokensPerS?: number;
}

/**
 * Throughput a lease report shows. Prefill needs input tokens and a TTFT ≥ 1 ms; decode needs
 * at least 2 output tokens and ≥ 1 ms between the first and the last (semconv
 * `gen_ai.server.time_per_output_token` = (duration − TTFT) ÷ (output − 1)).
 */
export function throughputFromReport(report: LeaseUsageReport, overheadMs = 0): ThroughputSample {
  const out: ThroughputSample = {};
  if (report.ttftMs !== null && report.inputTokens < SHORT_PROMPT_TOKENS) out.firstTokenOverheadMs = report.ttftMs;
  if (report.ttftMs !== null && report.inputTokens >= PREFILL_SAMPLE_TOKENS && report.ttftMs - overheadMs >= 1) {
    out.prefillTokensPerS = report.inputTokens / ((report.ttftMs - overheadMs) / 1000);
  }
  if (report.ttftMs !== null && report.outputTokens >= 2 && report.durationMs - report.ttftMs >= 1) {
    out.decodeTokensPerS = (report.outputTokens - 1) / ((report.durationMs - report.ttftMs) / 1000);
  }
  return out;
}

/** Per-sequence rates (tokens/s) a replica or pool is assumed to serve at. */
export interface SequenceRates {
  prefillTokensPerS: number;
  decodeTokensPerS: number;
  /** Fixed time to the first token beyond prefill (s): a decode step, the hops. Default 0. */
  firstTokenOverheadS?: number;
}

/**
 * Time one sequence needs for a request (s): `overhead + input ÷ prefill + output ÷ decode`
 * (the overhead only when there is work). Rates that are not positive count as infinitely slow
 * (Infinity).
 */
export function sequenceSeconds(inputTokens: number, outputTokens: number, rates: SequenceRates): number {
  const prefill = inputTokens <= 0 ? 0 : rates.prefillTokensPerS > 0 ? inputTokens / rates.prefillTokensPerS : Infinity;
  const decode = outputTokens <= 0 ? 0 : rates.decodeTokensPerS > 0 ? outputTokens / rates.decodeTokensPerS : Infinity;
  const overhead = inputTokens > 0 || outputTokens > 0 ? Math.max(0, rates.firstTokenOverheadS ?? 0) : 0;
  return overhead + prefill + decode;
}

/**
 * How much of the other tenants' queued work is served before a new entry of tenant T, in the
 * fluid limit of weighted fair sharing (GPS: Demers, Keshav and Shenker, SIGCOMM 1989; Parekh
 * and Gallager 1993), which deficit round robin tracks to within a quantum: while T is served
 * `own` units, every other backlogged tenant U is served `own × wU ÷ wT` units, capped by what
 * U has queued. The result adds T's own work ahead (`own`, which includes the new entry).
 *
 * @param own T's work up to and including the new entry (any unit: tokens, seconds).
 * @param weight T's weight (> 0).
 * @param others every other backlogged tenant's queued work and weight.
 */
export function fairShareAhead(own: number, weight: number, others: ReadonlyArray<{ amount: number; weight: number }>): number {
  let total = own;
  for (const u of others) total += Math.min(u.amount, (own * u.weight) / weight);
  return total;
}

/** Inputs of {@link estimateStartMs}. */
export interface StartEstimateInput {
  /** Sequence-seconds still to run on the pool's in-flight leases. */
  inFlightSeconds: number;
  /** Sequence-seconds queued ahead of the request (by the fair order), not counting itself. */
  aheadSeconds: number;
  /** Sequences the pool serves at once (healthy slots, scaled by measured slowdown). */
  servers: number;
}

/**
 * Estimated wait before a request starts (ms), for a pool whose sequences are all busy: the
 * work ahead (in flight plus queued) ÷ the sequences serving it — the fluid approximation of a
 * multi-server queue (Little's law; Kleinrock 1975, ch. 8). Infinity when nothing serves.
 */
export function estimateStartMs(input: StartEstimateInput): number {
  if (input.servers <= 0) return Infinity;
  return (Math.max(0, input.inFlightSeconds + input.aheadSeconds) / input.servers) * 1000;
}

/**
 * A replica's speed relative to its peers: its measured per-sequence decode rate ÷ the median
 * of its peers' (the other usable replicas of its pool queue that have a measurement), when
 * that is below `threshold` (a real slowdown), else 1 (noise). 1 without a measurement or
 * without measured peers.
 *
 * Why peers and not its own history: per-sequence decode rate falls with batch size by design
 * (a decode step of 20 ms at batch 1 and 40 ms at batch 32 halves it), and every replica of a
 * pool under the same load slows together. Comparing with its own past read plain load as lost
 * capacity; comparing with peers that share the load finds the one replica that is sick.
 */
export function speedFactor(rate: number | undefined, peerRates: readonly number[], threshold: number): number {
  if (rate === undefined || peerRates.length === 0) return 1;
  const sorted = [...peerRates].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  if (!(median > 0)) return 1;
  const ratio = rate / median;
  return ratio < threshold ? Math.max(0, ratio) : 1;
}

/** Queue bounds of one pool queue and of one tenant in it. */
export interface QueueBounds {
  /** Entries the pool queue holds. */
  length: number;
  /** Bytes it holds. */
  bytes: number;
  /** Entries one tenant may hold. */
  tenantLength: number;
  /** Bytes one tenant may hold. */
  tenantBytes: number;
}

/**
 * Bounds scaled by the pool's remaining capacity in replica-equivalents (`capacity`: healthy
 * replicas, each discounted by its speed factor), so they shrink in a brownout: with one of two
 * replicas gone the bounds halve. Length bounds round down (at least 1 while any capacity is
 * left); a tenant may fill `tenantShare` of the pool's bounds (at least one entry).
 */
export function queueBounds(capacity: number, perReplica: { length: number; bytes: number }, tenantShare: number): QueueBounds {
  if (capacity <= 0) return { length: 0, bytes: 0, tenantLength: 0, tenantBytes: 0 };
  const length = Math.max(1, Math.floor(perReplica.length * capacity + 1e-9));
  const bytes = perReplica.bytes * capacity;
  return { length, bytes, tenantLength: Math.max(1, Math.floor(length * tenantShare + 1e-9)), tenantBytes: bytes * tenantShare };
}

/**
 * Moderation metrics (issue 15 item 9), never with content in a label:
 * - `weir_moderation_checks_total{stage,engine,verdict}` — checks run (`stage` input|output|api;
 *   `verdict` pass|flagged|engine_error|timeout|failed_open);
 * - `weir_moderation_check_duration_seconds{stage,engine}` — check latency;
 * - `weir_moderation_blocks_total{stage,category}` — inputs blocked and outputs cut, by the
 *   category that blocked (a configured or engine category name), or the failure (`engine_error`,
 *   `timeout`) when a policy failed closed.
 */
import type { Meter } from '@opentelemetry/api';
import { QUEUE_BUCKETS_S } from './metric-names';

/** The check-latency histogram's name: `weir_moderation_check_duration_seconds` in Prometheus. */
export const MODERATION_CHECK_DURATION = 'weir.moderation.check_duration_seconds';

/** Recorders the gateway and the relay take (`GatewayModeration`, `RelayDeps.moderation`). */
export interface ModerationMetrics {
  /** A check ended after `ms` milliseconds (recorded in seconds). */
  onCheck(stage: 'input' | 'output' | 'api', engine: string, ms: number, verdict: { reason: string }): void;
  onBlock(stage: 'input' | 'output', verdict: { reason: string; categories: string[] }): void;
}

/** Creates the instruments on `meter`. */
export function createModerationMetrics(meter: Meter): ModerationMetrics {
  const checks = meter.createCounter('weir.moderation.checks', { unit: '{check}', description: 'Moderation checks by stage, engine and verdict' });
  const blocks = meter.createCounter('weir.moderation.blocks', { unit: '{block}', description: 'Inputs blocked and outputs cut by moderation, by stage and category' });
  // Seconds, in second buckets (1 ms to 120 s, the queue's): a check is a map lookup to an upstream call.
  const duration = meter.createHistogram(MODERATION_CHECK_DURATION, {
    unit: 's',
    description: 'Moderation check latency by stage and engine',
    advice: { explicitBucketBoundaries: [...QUEUE_BUCKETS_S] },
  });
  return {
    onCheck(stage, engine, ms, verdict) {
      checks.add(1, { stage, engine, verdict: verdict.reason });
      duration.record(ms / 1000, { stage, engine });
    },
    onBlock(stage, verdict) {
      const categories = verdict.reason === 'flagged' && verdict.categories.length > 0 ? verdict.categories : [verdict.reason];
      for (const category of categories) blocks.add(1, { stage, category });
    },
  };
}

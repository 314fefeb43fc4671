import type { FinishReason, UsageStatus } from '@weir/core';

const STATUS: Record<FinishReason, UsageStatus> = {
  stop: 'completed',
  length: 'completed',
  cancelled: 'cancelled',
  deadline: 'deadline',
  error: 'failed',
  content_filter: 'filtered',
  tool_calls: 'completed',
};

/**
 * The ledger status recorded for a terminal `finish_reason`: `stop`/`length`/`tool_calls` → `completed`,
 * `cancelled` → `cancelled`, `deadline` → `deadline`, `error` → `failed`,
 * `content_filter` → `filtered`.
 */
export function usageStatusFor(finishReason: FinishReason): UsageStatus {
  return STATUS[finishReason];
}

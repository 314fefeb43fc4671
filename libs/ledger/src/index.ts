export { priceUsage, formatUsd, microUsdPerMTok } from './pricing';
export { usageStatusFor } from './usage-status';
export {
  createBatchedUsageSink,
  type BatchedUsageSink,
  type BatchedUsageSinkOptions,
  type BatchedUsageSinkDeps,
  type UsageSinkCloseResult,
  type UsageWriteFailure,
  type LedgerLogger,
} from './batched-usage-sink';

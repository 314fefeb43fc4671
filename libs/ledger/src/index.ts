export { priceUsage, worstCaseNanoUsd, formatUsd, microUsdPerMTok } from './pricing';
export { usageStatusFor } from './usage-status';
export { evaluateBurnRate, debounceBurnRate, HOUR_MS, type BurnRateSettings, type BurnRateVerdict, type BurnRateDebounceState } from './burn-rate';
export {
  createBurnRateMonitor,
  type BurnRateMonitor,
  type BurnRateMonitorOptions,
  type BurnRateMonitorDeps,
  type BurnRateMetrics,
} from './burn-rate-monitor';
export { usagePeriod, nanoUsdToDecimal, type UsagePeriod } from './usage-period';
export {
  createBatchedUsageSink,
  type BatchedUsageSink,
  type BatchedUsageSinkOptions,
  type BatchedUsageSinkDeps,
  type UsageSinkCloseResult,
  type UsageWriteFailure,
  type LedgerLogger,
} from './batched-usage-sink';
export {
  reconcileUsage,
  settleFromEngineCount,
  type ReconcileUsageInput,
  type UsageReconciliation,
  type UsageTally,
  type GroupTally,
  type RecordCounts,
  type LedgerUsageRow,
  type StreamUsageRecord,
  type EngineCounterSample,
  type CostMismatch,
  type StreamMismatch,
  type StreamComparison,
  type EngineComparison,
  type UncertainSettlement,
} from './reconcile';
export {
  encodeJournalRecord,
  decodeJournalRecord,
  journalRecordGeneration,
  settlementEntryFault,
  JOURNAL_RECORD_VERSION,
  type JournalRecord,
  type DecodeJournalRecordResult,
} from './journal-record';
export { settlementCharge, sumCharges, type SettlementCharge, type ChargeTotals, type BudgetRowCharge, type LeaseCharge } from './settlement-charge';
export {
  createOpenGenerations,
  settleAbandoned,
  estimatedUsage,
  INTERRUPTED_ERROR_CODE,
  UNBILLED_INTERRUPTION_MARK,
  type OpenGeneration,
  type OpenGenerations,
  type SettleAbandonedOptions,
} from './open-generations';

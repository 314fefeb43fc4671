// Moved to @weir/engine-server (shared with apps/engine-sim).
export {
  createGenerationUsageLog,
  DEFAULT_USAGE_MAX_ENTRIES,
  DEFAULT_USAGE_RETENTION_MS,
  type GenerationEndReason,
  type GenerationUsage,
  type GenerationUsageLog,
  type GenerationUsageLogOptions,
} from '@weir/engine-server';

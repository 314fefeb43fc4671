export { createLogger, redactDeep, REDACTED_KEYS, REDACT_PATHS, type LoggerOptions, type WeirLogger } from './logger';
export {
  ATTRIBUTE_NAMES,
  DURATION_BUCKETS_S,
  METRIC_NAMES,
  PROMETHEUS_SERIES,
  QUEUE_BUCKETS_S,
  TOKEN_BUCKETS,
  TPOT_BUCKETS_S,
  TTFT_BUCKETS_S,
} from './metric-names';
export {
  createTelemetry,
  METER_NAME,
  type CapacitySample,
  type ConfigPublicationSample,
  type EngineSample,
  type ReplicaSample,
  type SchedulerSample,
  type Telemetry,
  type TelemetryOptions,
} from './telemetry';
export {
  createWeirMetrics,
  type GenAiOperation,
  type InFlightAttributes,
  type RejectionReason,
  type RequestMetrics,
  type RequestStatus,
  type WeirMetrics,
} from './weir-metrics';
export { KEPT_FIELDS, MAX_CAUSE_DEPTH, MAX_FRAMES, MAX_MESSAGE_CHARS, scrubErrorMessage, serializeError, SQLSTATE_TEXT, type SerializedError } from './error-serializer';
export { createModerationMetrics, type ModerationMetrics } from './moderation-metrics';

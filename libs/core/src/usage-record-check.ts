import { USE_CASE_PATTERN, type UsageRecord } from './ports';

/**
 * Returns what is wrong with a usage record, or undefined when it can be carried and written:
 * ids non-empty strings; token counts (the optional `cacheWriteInputTokens` and `reasoningTokens` when present) and `costNanoUsd` non-negative safe integers; `queueMs`,
 * `totalMs` (and `ttftMs` unless null) finite non-negative ms; `startedAt`/`finishedAt` valid
 * `Date`s; `useCase`, when present, matches `USE_CASE_PATTERN`; `cacheHit`, when present, is `exact` or `semantic`. Every usage path (the ledger's batched sink, the in-process channel, the NATS
 * sink) refuses a record by these rules, so one bad record can never block a queue behind it.
 * Never includes field values in the message (only names).
 */
export function usageRecordFault(r: UsageRecord): string | undefined {
  if (typeof r !== 'object' || r === null) return 'record must be an object';
  for (const field of ['generationId', 'requestId', 'tenantId'] as const) {
    const v = r[field];
    if (typeof v !== 'string' || v.length === 0) return `${field} must be a non-empty string`;
  }
  for (const field of ['inputTokens', 'outputTokens', 'cachedInputTokens', 'costNanoUsd'] as const) {
    const v = r[field];
    if (!Number.isSafeInteger(v) || v < 0) return `${field} must be a non-negative integer`;
  }
  for (const field of ['cacheWriteInputTokens', 'reasoningTokens'] as const) {
    const v = r[field];
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 0)) return `${field} must be a non-negative integer when present`;
  }
  for (const field of ['queueMs', 'totalMs', 'ttftMs'] as const) {
    const v = r[field];
    if (v === null && field === 'ttftMs') continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return `${field} must be a non-negative number of ms`;
  }
  for (const field of ['startedAt', 'finishedAt'] as const) {
    const v = r[field];
    if (!(v instanceof Date) || Number.isNaN(v.getTime())) return `${field} must be a valid Date`;
  }
  if (r.useCase !== undefined && (typeof r.useCase !== 'string' || !USE_CASE_PATTERN.test(r.useCase))) {
    return 'useCase must be 1-64 characters of [A-Za-z0-9._:-]';
  }
  if (r.cacheHit !== undefined && r.cacheHit !== 'exact' && r.cacheHit !== 'semantic') return 'cacheHit must be "exact" or "semantic"';
  return undefined;
}

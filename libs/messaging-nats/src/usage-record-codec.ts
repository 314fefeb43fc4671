import type { ApiRoute, FinishReason, UsageRecord, UsageStatus } from '@weir/core';
import { usageRecordFault } from '@weir/core';

/** Version of the usage record wire format written by {@link encodeUsageRecord}. */
export const USAGE_RECORD_WIRE_VERSION = 1;

/** The outcome of {@link decodeUsageRecord}: the record, or why the message was refused. */
export type DecodeUsageRecordResult = { ok: true; record: UsageRecord } | { ok: false; reason: string };

const ROUTES: ReadonlySet<ApiRoute> = new Set<ApiRoute>(['generations', 'chat.completions', 'completions', 'embeddings']);
const STATUSES: ReadonlySet<UsageStatus> = new Set<UsageStatus>(['completed', 'cancelled', 'deadline', 'failed', 'filtered']);
const FINISH_REASONS: ReadonlySet<FinishReason> = new Set<FinishReason>([
  'stop',
  'length',
  'cancelled',
  'deadline',
  'error',
  'content_filter',
  'tool_calls',
]);

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * Serializes a usage record for the wire: UTF-8 JSON of the record's fields with `startedAt`
 * and `finishedAt` as ISO-8601 strings and a version field `v` (currently 1). Metadata only:
 * a usage record holds no prompt or output text.
 */
export function encodeUsageRecord(record: UsageRecord): Uint8Array {
  const wire = {
    v: USAGE_RECORD_WIRE_VERSION,
    ...record,
    startedAt: record.startedAt.toISOString(),
    finishedAt: record.finishedAt.toISOString(),
  };
  return encoder.encode(JSON.stringify(wire));
}

/**
 * Parses and validates a message written by {@link encodeUsageRecord}. Never throws: invalid
 * UTF-8 or JSON, an unknown version, a missing or mistyped field, an unknown route, status or
 * finish reason, or a record `usageRecordFault` refuses, all give `{ok: false, reason}` (the
 * reason names the field, never its value). Unknown extra fields are ignored.
 */
export function decodeUsageRecord(data: Uint8Array): DecodeUsageRecordResult {
  let raw: unknown;
  try {
    raw = JSON.parse(decoder.decode(data));
  } catch {
    return { ok: false, reason: 'not UTF-8 JSON' };
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return { ok: false, reason: 'not a JSON object' };
  const o = raw as Record<string, unknown>;
  if (o.v !== USAGE_RECORD_WIRE_VERSION) return { ok: false, reason: 'unsupported version v' };

  for (const f of ['generationId', 'requestId', 'tenantId', 'appId', 'apiKeyId', 'modelAlias', 'modelRevision'] as const) {
    if (typeof o[f] !== 'string') return { ok: false, reason: `${f} must be a string` };
  }
  if (!ROUTES.has(o.route as ApiRoute)) return { ok: false, reason: 'route is not a known route' };
  if (!STATUSES.has(o.status as UsageStatus)) return { ok: false, reason: 'status is not a known status' };
  if (!FINISH_REASONS.has(o.finishReason as FinishReason)) return { ok: false, reason: 'finishReason is not a known reason' };
  if (o.errorCode !== null && typeof o.errorCode !== 'string') return { ok: false, reason: 'errorCode must be a string or null' };
  if (o.uncertain !== undefined && typeof o.uncertain !== 'boolean') return { ok: false, reason: 'uncertain must be a boolean' };
  if (o.useCase !== undefined && typeof o.useCase !== 'string') return { ok: false, reason: 'useCase must be a string' };
  for (const f of ['tenantUid', 'appUid'] as const) {
    if (o[f] !== undefined && typeof o[f] !== 'string') return { ok: false, reason: `${f} must be a string` };
  }
  for (const f of ['startedAt', 'finishedAt'] as const) {
    if (typeof o[f] !== 'string') return { ok: false, reason: `${f} must be an ISO-8601 string` };
  }

  const record: UsageRecord = {
    generationId: o.generationId as string,
    requestId: o.requestId as string,
    tenantId: o.tenantId as string,
    appId: o.appId as string,
    apiKeyId: o.apiKeyId as string,
    route: o.route as ApiRoute,
    modelAlias: o.modelAlias as string,
    modelRevision: o.modelRevision as string,
    inputTokens: o.inputTokens as number,
    outputTokens: o.outputTokens as number,
    cachedInputTokens: o.cachedInputTokens as number,
    costNanoUsd: o.costNanoUsd as number,
    status: o.status as UsageStatus,
    finishReason: o.finishReason as FinishReason,
    errorCode: o.errorCode as string | null,
    queueMs: o.queueMs as number,
    ttftMs: o.ttftMs as number | null,
    totalMs: o.totalMs as number,
    startedAt: new Date(o.startedAt as string),
    finishedAt: new Date(o.finishedAt as string),
  };
  if (o.uncertain !== undefined) record.uncertain = o.uncertain as boolean;
  if (o.useCase !== undefined) record.useCase = o.useCase as string;
  if (o.tenantUid !== undefined) record.tenantUid = o.tenantUid as string;
  if (o.appUid !== undefined) record.appUid = o.appUid as string;
  if (o.cacheHit !== undefined) record.cacheHit = o.cacheHit as UsageRecord['cacheHit'];
  if (o.cacheWriteInputTokens !== undefined) record.cacheWriteInputTokens = o.cacheWriteInputTokens as number;
  if (o.reasoningTokens !== undefined) record.reasoningTokens = o.reasoningTokens as number;
  const fault = usageRecordFault(record);
  return fault ? { ok: false, reason: fault } : { ok: true, record };
}

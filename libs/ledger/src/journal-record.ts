import {
  type ApiRoute,
  type ClaimMark,
  type FinishReason,
  type IdempotencySettlement,
  type ProgressMark,
  type SettlementEntry,
  type SettlementItem,
  type UsageRecord,
  type UsageStatus,
  usageRecordFault,
} from '@weir/core';

/**
 * One record of a settlement journal (ADR 0002 §2): a settlement (or a recovered interruption)
 * the ledger applies, or a mark that only recovery reads — a keyed generation's claim, a running
 * generation's progress, a generation's release.
 */
export type JournalRecord =
  | SettlementItem
  | { kind: 'progress'; mark: ProgressMark }
  | { kind: 'claim'; claim: ClaimMark }
  /** The generation ended without a settlement (it did no work: refused, ended in the queue); forget its claim and progress. */
  | { kind: 'release'; generationId: string };

/** Version of the JSON written by {@link encodeJournalRecord} (field `v`). */
export const JOURNAL_RECORD_VERSION = 1;

/** The outcome of {@link decodeJournalRecord}. */
export type DecodeJournalRecordResult = { ok: true; record: JournalRecord } | { ok: false; reason: string };

const ROUTES: ReadonlySet<string> = new Set<ApiRoute>(['generations', 'chat.completions', 'completions', 'embeddings']);
const STATUSES: ReadonlySet<string> = new Set<UsageStatus>(['completed', 'cancelled', 'deadline', 'failed', 'filtered']);
const FINISH_REASONS: ReadonlySet<string> = new Set<FinishReason>(['stop', 'length', 'cancelled', 'deadline', 'error', 'content_filter', 'tool_calls']);
const SOURCES: ReadonlySet<string> = new Set(['reported', 'counted', 'estimated']);

/**
 * Serializes a journal record as one line of JSON (no newline in it: `JSON.stringify` escapes
 * every control character): `{"v":1,"kind":…, …}`, dates (`usage.startedAt`/`finishedAt`) as
 * ISO-8601 strings. The file journal and the JetStream journal carry the same text. A settle
 * record's idempotency result holds output text (the client asked for idempotency); usage
 * records and marks hold metadata only.
 */
export function encodeJournalRecord(record: JournalRecord): string {
  return JSON.stringify({ v: JOURNAL_RECORD_VERSION, ...record });
}

/**
 * Parses text written by {@link encodeJournalRecord}. Never throws: invalid JSON, an unknown
 * version or kind, or a missing or mistyped field gives `{ok: false, reason}` (naming the field,
 * never a value). Unknown extra fields are ignored.
 */
export function decodeJournalRecord(text: string): DecodeJournalRecordResult {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  if (!isObject(raw)) return { ok: false, reason: 'not a JSON object' };
  if (raw.v !== JOURNAL_RECORD_VERSION) return { ok: false, reason: 'unsupported version v' };
  switch (raw.kind) {
    case 'settle': {
      if (!isObject(raw.entry)) return { ok: false, reason: 'entry must be an object' };
      const usage = decodeUsage(raw.entry.usage);
      if (typeof usage === 'string') return { ok: false, reason: `entry.usage: ${usage}` };
      const entry: SettlementEntry = { usage };
      if (raw.entry.idempotency !== undefined) entry.idempotency = raw.entry.idempotency as unknown as IdempotencySettlement;
      const fault = settlementEntryFault(entry);
      if (fault) return { ok: false, reason: `entry.${fault}` };
      return { ok: true, record: { kind: 'settle', entry } };
    }
    case 'interrupted': {
      const fault = idempotencyFault(raw.idempotency);
      if (fault) return { ok: false, reason: `idempotency: ${fault}` };
      return { ok: true, record: { kind: 'interrupted', idempotency: raw.idempotency as unknown as IdempotencySettlement } };
    }
    case 'progress': {
      const fault = progressFault(raw.mark);
      if (fault) return { ok: false, reason: `mark: ${fault}` };
      return { ok: true, record: { kind: 'progress', mark: raw.mark as unknown as ProgressMark } };
    }
    case 'claim': {
      const fault = claimFault(raw.claim);
      if (fault) return { ok: false, reason: `claim: ${fault}` };
      return { ok: true, record: { kind: 'claim', claim: raw.claim as unknown as ClaimMark } };
    }
    case 'release':
      if (typeof raw.generationId !== 'string') return { ok: false, reason: 'generationId must be a string' };
      return { ok: true, record: { kind: 'release', generationId: raw.generationId } };
    default:
      return { ok: false, reason: 'unknown kind' };
  }
}

/**
 * Returns what is wrong with a settlement entry, or undefined when the ledger can apply it: its
 * usage record passes `usageRecordFault` and names a known route, status, finish reason and
 * source; its attempts have known outcomes and non-negative integer counts and finite timings;
 * its reservation has YYYY-MM-DD periods and string lease ids; its idempotency part names its
 * key and generation. Journals refuse a faulty entry at `append` (a bug in the caller), so one
 * bad entry can never wedge the applier behind it. Names fields, never values.
 */
export function settlementEntryFault(entry: SettlementEntry): string | undefined {
  if (typeof entry !== 'object' || entry === null) return 'entry must be an object';
  const u = entry.usage;
  const usageFault = usageRecordFault(u);
  if (usageFault) return `usage: ${usageFault}`;
  if (!ROUTES.has(u.route)) return 'usage: route is not a known route';
  if (!STATUSES.has(u.status)) return 'usage: status is not a known status';
  if (!FINISH_REASONS.has(u.finishReason)) return 'usage: finishReason is not a known reason';
  if (u.usageSource !== undefined && !SOURCES.has(u.usageSource)) return 'usage: usageSource is not a known source';
  if (u.attempts !== undefined) {
    if (!Array.isArray(u.attempts)) return 'usage: attempts must be an array';
    for (const a of u.attempts) {
      const fault = attemptFault(a);
      if (fault) return `usage: attempts: ${fault}`;
    }
  }
  if (u.reservation !== undefined) {
    const fault = reservationFault(u.reservation);
    if (fault) return `usage: reservation: ${fault}`;
  }
  if (entry.idempotency !== undefined) {
    const fault = idempotencyFault(entry.idempotency);
    if (fault) return `idempotency: ${fault}`;
  }
  return undefined;
}

function attemptFault(a: unknown): string | undefined {
  if (!isObject(a)) return 'must be objects';
  if (!Number.isSafeInteger(a.attempt) || (a.attempt as number) < 1) return 'attempt must be a positive integer';
  if (typeof a.revisionId !== 'string' || typeof a.provider !== 'string') return 'revisionId and provider must be strings';
  if (a.outcome !== 'answered' && a.outcome !== 'failed') return 'outcome must be answered or failed';
  for (const f of ['inputTokens', 'outputTokens'] as const) if (!Number.isSafeInteger(a[f]) || (a[f] as number) < 0) return `${f} must be a non-negative integer`;
  for (const f of ['startedAtMs', 'durationMs'] as const) if (!Number.isFinite(a[f]) || (a[f] as number) < 0) return `${f} must be a non-negative number`;
  if (a.ttftMs !== null && (!Number.isFinite(a.ttftMs) || (a.ttftMs as number) < 0)) return 'ttftMs must be a non-negative number or null';
  return undefined;
}

/** The generation a record is about. */
export function journalRecordGeneration(record: JournalRecord): string {
  switch (record.kind) {
    case 'settle':
      return record.entry.usage.generationId;
    case 'interrupted':
      return record.idempotency.outcome.kind === 'interrupted' ? record.idempotency.outcome.generationId : record.idempotency.outcome.result.generationId;
    case 'progress':
      return record.mark.generationId;
    case 'claim':
      return record.claim.generationId;
    case 'release':
      return record.generationId;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The usage record of a decoded settlement, its dates revived (checked by `settlementEntryFault`). */
function decodeUsage(v: unknown): UsageRecord | string {
  if (!isObject(v)) return 'must be an object';
  for (const f of ['appId', 'apiKeyId', 'modelAlias', 'modelRevision'] as const) if (typeof v[f] !== 'string') return `${f} must be a string`;
  if (v.errorCode !== null && typeof v.errorCode !== 'string') return 'errorCode must be a string or null';
  for (const f of ['startedAt', 'finishedAt'] as const) if (typeof v[f] !== 'string') return `${f} must be an ISO-8601 string`;
  return { ...v, startedAt: new Date(v.startedAt as string), finishedAt: new Date(v.finishedAt as string) } as unknown as UsageRecord;
}

function reservationFault(v: unknown): string | undefined {
  if (!isObject(v)) return 'must be an object';
  if (typeof v.reservationId !== 'string') return 'reservationId must be a string';
  if (!Number.isSafeInteger(v.worstCaseNano)) return 'worstCaseNano must be an integer';
  if (!isDate(v.monthStartsOn) || !isDate(v.dayStartsOn)) return 'monthStartsOn and dayStartsOn must be YYYY-MM-DD';
  if (!Array.isArray(v.leaseIds) || v.leaseIds.some((l) => typeof l !== 'string')) return 'leaseIds must be strings';
  if (v.useCase !== undefined && typeof v.useCase !== 'string') return 'useCase must be a string';
  return undefined;
}

function idempotencyFault(v: unknown): string | undefined {
  if (!isObject(v)) return 'must be an object';
  if (typeof v.tenantId !== 'string' || typeof v.key !== 'string') return 'tenantId and key must be strings';
  if (!Number.isFinite(v.retainUntilMs)) return 'retainUntilMs must be a number';
  const o = v.outcome;
  if (!isObject(o)) return 'outcome must be an object';
  if (o.kind === 'result') return isObject(o.result) && typeof o.result.generationId === 'string' ? undefined : 'outcome.result must name its generation';
  if (o.kind === 'interrupted') return typeof o.generationId === 'string' && typeof o.message === 'string' ? undefined : 'outcome must name its generation and message';
  return 'outcome.kind is not a known kind';
}

function progressFault(v: unknown): string | undefined {
  if (!isObject(v)) return 'must be an object';
  for (const f of ['generationId', 'requestId', 'tenantId', 'appId', 'apiKeyId', 'modelAlias', 'modelRevision'] as const) if (typeof v[f] !== 'string') return `${f} must be a string`;
  if (!ROUTES.has(v.route as string)) return 'route is not a known route';
  for (const f of ['inputTokens', 'outputTokens', 'cachedInputTokens', 'costNanoUsd'] as const) {
    if (!Number.isSafeInteger(v[f]) || (v[f] as number) < 0) return `${f} must be a non-negative integer`;
  }
  for (const f of ['startedAtMs', 'atMs', 'queueMs'] as const) if (!Number.isFinite(v[f])) return `${f} must be a number`;
  if (v.ttftMs !== null && !Number.isFinite(v.ttftMs)) return 'ttftMs must be a number or null';
  if (v.reservation !== undefined && reservationFault(v.reservation)) return `reservation: ${reservationFault(v.reservation)}`;
  return undefined;
}

function claimFault(v: unknown): string | undefined {
  if (!isObject(v)) return 'must be an object';
  for (const f of ['tenantId', 'key', 'generationId', 'bodySha256'] as const) if (typeof v[f] !== 'string') return `${f} must be a string`;
  if (!ROUTES.has(v.route as string)) return 'route is not a known route';
  if (!Number.isFinite(v.retainUntilMs) || !Number.isFinite(v.atMs)) return 'retainUntilMs and atMs must be numbers';
  return undefined;
}

function isDate(v: unknown): boolean {
  return typeof v === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(v);
}

import type { ClaimMark, IdempotencySettlement, ProgressMark, SettlementItem, UpstreamAttempt, UsageRecord } from '@weir/core';
import { type JournalRecord, journalRecordGeneration } from './journal-record';

/** A generation the journal saw start (a claim or progress) and not yet settle. */
export interface OpenGeneration {
  generationId: string;
  /** Its claim, when it had an idempotency key. */
  claim?: ClaimMark;
  /** Its last progress mark, when it journaled one. */
  progress?: ProgressMark;
}

/**
 * The generations of a journal that started and have not settled, kept as records are written
 * (or read back at recovery): a claim or a progress mark opens (or updates) one; a settlement,
 * an interruption or a release closes it. What is open when a process died is what recovery settles.
 */
export interface OpenGenerations {
  /** Takes one record, in journal order. */
  note(record: JournalRecord): void;
  /** The open generations, oldest first. */
  list(): OpenGeneration[];
  has(generationId: string): boolean;
  readonly size: number;
}

/** Creates an empty {@link OpenGenerations}. */
export function createOpenGenerations(): OpenGenerations {
  const open = new Map<string, OpenGeneration>();
  return {
    note(record) {
      const id = journalRecordGeneration(record);
      if (record.kind === 'claim' || record.kind === 'progress') {
        let g = open.get(id);
        if (!g) open.set(id, (g = { generationId: id }));
        if (record.kind === 'claim') g.claim = record.claim;
        else g.progress = record.mark;
      } else open.delete(id);
    },
    list: () => [...open.values()],
    has: (id) => open.has(id),
    get size() {
      return open.size;
    },
  };
}

/** Options of {@link settleAbandoned}. */
export interface SettleAbandonedOptions {
  /**
   * How long an `interrupted` key is kept when the generation journaled no claim to say so
   * (ms). Default 86,400,000 (24 h, the default idempotency retention).
   */
  retentionMs?: number;
}

/** Error code of a usage row recovered from progress: its process stopped mid-generation. */
export const INTERRUPTED_ERROR_CODE = 'interrupted';

/**
 * The words every "interrupted before any output was recorded" message carries: a run under such
 * a key billed nothing, so a caller that owns the work (the batch runner) may run it again under a
 * new key without charging twice.
 */
export const UNBILLED_INTERRUPTION_MARK = 'nothing was billed';

/**
 * What recovery writes for generations whose process died before they settled (ADR 0002 §3):
 *
 * - with a progress mark: one usage row from the last mark — its tokens, its cost (computed at
 *   the revision's prices when the mark was taken) capped at the reservation's worst case;
 *   `usage_source` `estimated` and `uncertain` (reconciliation may settle it against the
 *   engine's own count), status `failed`, finish reason `error`, error code `interrupted`,
 *   finishing at the mark; the running attempt recorded as failed (`interrupted`); and, for a
 *   keyed request, its key `interrupted`;
 * - with only a claim: no row (nothing billable is known; less than one progress interval was
 *   lost), and the key `interrupted`.
 *
 * Pure: `nowMs` (epoch ms) only dates the retention of keys that journaled no claim.
 */
export function settleAbandoned(open: readonly OpenGeneration[], nowMs: number, options: SettleAbandonedOptions = {}): SettlementItem[] {
  const retentionMs = options.retentionMs ?? 86_400_000;
  const out: SettlementItem[] = [];
  for (const g of open) {
    const { claim, progress: mark } = g;
    if (!mark) {
      if (claim) out.push({ kind: 'interrupted', idempotency: interruptedKey(claim, g.generationId, `the process running it stopped before any of its output was recorded, so ${UNBILLED_INTERRUPTION_MARK}; send a new key to run it again`) });
      continue;
    }
    const usage = estimatedUsage(mark);
    const key = claim?.key ?? mark.idempotencyKey;
    const message = `the process running it stopped after ${usage.outputTokens} output tokens; they were billed (estimated); send a new key to run it again`;
    const idempotency: IdempotencySettlement | undefined = claim
      ? interruptedKey(claim, g.generationId, message)
      : key !== undefined
        ? { tenantId: mark.tenantId, key, outcome: { kind: 'interrupted', generationId: g.generationId, message: interruption(g.generationId, message) }, retainUntilMs: nowMs + retentionMs }
        : undefined;
    out.push({ kind: 'settle', entry: idempotency ? { usage, idempotency } : { usage } });
  }
  return out;
}

/** The usage row of an abandoned generation's last progress mark (see {@link settleAbandoned}). */
export function estimatedUsage(mark: ProgressMark): UsageRecord {
  const cap = mark.reservation?.worstCaseNano;
  const costNanoUsd = cap === undefined ? mark.costNanoUsd : Math.min(mark.costNanoUsd, Math.max(0, cap));
  const usage: UsageRecord = {
    generationId: mark.generationId,
    requestId: mark.requestId,
    tenantId: mark.tenantId,
    appId: mark.appId,
    ...(mark.tenantUid !== undefined ? { tenantUid: mark.tenantUid } : {}),
    ...(mark.appUid !== undefined ? { appUid: mark.appUid } : {}),
    apiKeyId: mark.apiKeyId,
    route: mark.route,
    modelAlias: mark.modelAlias,
    modelRevision: mark.modelRevision,
    inputTokens: mark.inputTokens,
    outputTokens: mark.outputTokens,
    cachedInputTokens: mark.cachedInputTokens,
    costNanoUsd,
    status: 'failed',
    finishReason: 'error',
    errorCode: INTERRUPTED_ERROR_CODE,
    queueMs: Math.max(0, mark.queueMs),
    ttftMs: mark.ttftMs,
    totalMs: Math.max(0, mark.atMs - mark.startedAtMs),
    startedAt: new Date(mark.startedAtMs),
    finishedAt: new Date(Math.max(mark.atMs, mark.startedAtMs)),
    uncertain: true,
    usageSource: 'estimated',
  };
  if (mark.useCase !== undefined) usage.useCase = mark.useCase;
  if (mark.reservation) usage.reservation = mark.reservation;
  if (mark.attempts && mark.attempts.length > 0) usage.attempts = interruptedAttempts(mark.attempts, mark.atMs);
  return usage;
}

/** The attempts so far, the running (last) one marked failed with `interrupted`. */
function interruptedAttempts(attempts: readonly UpstreamAttempt[], atMs: number): UpstreamAttempt[] {
  return attempts.map((a, i) =>
    i === attempts.length - 1 ? { ...a, outcome: 'failed', errorCode: INTERRUPTED_ERROR_CODE, durationMs: Math.max(a.durationMs, atMs - a.startedAtMs) } : a,
  );
}

function interruptedKey(claim: ClaimMark, generationId: string, message: string): IdempotencySettlement {
  return {
    tenantId: claim.tenantId,
    key: claim.key,
    outcome: { kind: 'interrupted', generationId, message: interruption(generationId, message) },
    retainUntilMs: claim.retainUntilMs,
    bodySha256: claim.bodySha256,
    route: claim.route,
  };
}

/** The message a retry of an interrupted generation gets. */
function interruption(generationId: string, why: string): string {
  return `generation ${generationId} was interrupted: ${why}`;
}

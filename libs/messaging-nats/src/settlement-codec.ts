import type { SettlementItem, UsageRecord } from '@weir/core';
import { decodeJournalRecord, encodeJournalRecord } from '@weir/ledger';
import { decodeUsageRecord } from './usage-record-codec';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * A settlement on the wire: the UTF-8 JSON of the settlement journal's record
 * (`encodeJournalRecord`, `{"v":1,"kind":"settle","entry":…}`) — the same text the file journal
 * writes, so one applier handles both.
 */
export function encodeSettlementMessage(item: SettlementItem): Uint8Array {
  return encoder.encode(encodeJournalRecord(item));
}

/** What {@link decodeUsageMessage} read: a settlement item, or a usage record in the older format. */
export type UsageMessage = { ok: true; kind: 'settlement'; item: SettlementItem } | { ok: true; kind: 'usage'; record: UsageRecord } | { ok: false; reason: string };

/**
 * Reads a message of the usage stream, which carries two formats: settlements (a JSON object
 * with a `kind`, from `createNatsSettlementJournal`) and usage records (no `kind`, from
 * `createNatsUsageSink`, kept while producers move to the journal). Never throws; a malformed
 * message gives `{ok: false, reason}` naming a field, never a value. Claims, progress and
 * releases are refused: they never travel on the stream.
 */
export function decodeUsageMessage(data: Uint8Array): UsageMessage {
  let text: string;
  try {
    text = decoder.decode(data);
  } catch {
    return { ok: false, reason: 'not UTF-8 JSON' };
  }
  // The kind field decides the format without parsing twice: records never carry one.
  if (!/"kind"\s*:/.test(text)) {
    const usage = decodeUsageRecord(data);
    return usage.ok ? { ok: true, kind: 'usage', record: usage.record } : usage;
  }
  const decoded = decodeJournalRecord(text);
  if (!decoded.ok) return decoded;
  const r = decoded.record;
  if (r.kind !== 'settle' && r.kind !== 'interrupted') return { ok: false, reason: `a ${r.kind} record does not belong on the usage stream` };
  return { ok: true, kind: 'settlement', item: r };
}

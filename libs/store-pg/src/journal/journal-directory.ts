/**
 * Reading a file settlement journal's directory back (ADR 0002 §3): what the journal's recovery
 * at open starts from, and what `npm run reconcile` reports without writing anything.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { JournalPosition, SettlementApplier, SettlementItem } from '@weir/core';
import { createOpenGenerations, type OpenGenerations, settleAbandoned } from '@weir/ledger';
import type { StoreLogger } from '../logger';
import type { QueuedSettlement } from './applier-loop';
import { parseJournalSegment } from './journal-line';

const SEGMENT_PATTERN = /^(\d{16})\.journal$/;

/** The file of segment `n` in `dir`: `<dir>/<n, 16 digits>.journal`. */
export function journalSegmentPath(dir: string, n: number): string {
  return path.join(dir, `${String(n).padStart(16, '0')}.journal`);
}

/** What {@link readJournalDirectory} found. */
export interface JournalDirectoryRead {
  /** Segment numbers on disk, ascending. */
  segments: number[];
  /** Valid lines read. */
  records: number;
  /** Lines skipped for a bad checksum or content. */
  invalidLines: number;
  /** Bytes of torn last lines ignored. */
  tornBytes: number;
  /** Settlements and interruptions after `stored`, in journal order, each with the position just past its line. */
  unapplied: QueuedSettlement[];
  /** Of `unapplied`, how many are in each segment. */
  unappliedBySegment: Map<number, number>;
  /** The generations that journaled a claim or progress and no settlement, interruption or release. */
  open: OpenGenerations;
}

/**
 * Reads every segment of `dir` (which must exist), oldest first. Invalid and torn lines are
 * counted, logged and skipped. A settlement at or before `stored` (the applier's position) is
 * applied already and is not listed; every record still counts for the open generations.
 * @throws the file system's error when the directory or a segment cannot be read.
 */
export function readJournalDirectory(dir: string, stored: JournalPosition | undefined, logger?: StoreLogger): JournalDirectoryRead {
  const segments = readdirSync(dir)
    .map((f) => SEGMENT_PATTERN.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
  const out: JournalDirectoryRead = { segments, records: 0, invalidLines: 0, tornBytes: 0, unapplied: [], unappliedBySegment: new Map(), open: createOpenGenerations() };
  for (const n of segments) {
    const parsed = parseJournalSegment(readFileSync(journalSegmentPath(dir, n)));
    out.records += parsed.lines.length;
    out.invalidLines += parsed.invalid;
    out.tornBytes += parsed.tornTailBytes;
    if (parsed.invalid > 0) logger?.warn({ segment: n, invalid: parsed.invalid, reason: parsed.firstInvalidReason }, 'settlement journal: invalid lines skipped');
    let pending = 0;
    for (const line of parsed.lines) {
      out.open.note(line.record);
      if (line.record.kind !== 'settle' && line.record.kind !== 'interrupted') continue;
      if (stored && (n < stored.segment || (n === stored.segment && line.end <= stored.offset))) continue;
      out.unapplied.push({ item: line.record, position: { segment: n, offset: line.end } });
      pending++;
    }
    out.unappliedBySegment.set(n, pending);
  }
  return out;
}

/** The generation a settlement item is about. */
function idOf(item: SettlementItem): string {
  if (item.kind === 'settle') return item.entry.usage.generationId;
  const o = item.idempotency.outcome;
  return o.kind === 'interrupted' ? o.generationId : o.result.generationId;
}

/** Options of {@link inspectFileSettlementJournal}. */
export interface InspectSettlementJournalOptions {
  /** The journal's directory, e.g. `$WEIR_DATA_DIR/journal`. */
  dir: string;
  /** Its name in `journal_positions`. Default `local`. */
  name?: string;
  /** Epoch ms, only to date the keys recovery would write (see `settleAbandoned`). Default `Date.now()`. */
  nowMs?: number;
}

/** What recovery would do with a journal ({@link inspectFileSettlementJournal}); ids at most 20 each. */
export interface SettlementJournalInspection {
  /** False when the directory does not exist (an all-in-one from before the journal, or none). */
  present: boolean;
  /** The applier's stored position (undefined: none). */
  position?: JournalPosition;
  segments: number;
  records: number;
  invalidLines: number;
  tornBytes: number;
  /** Settlements written and not yet applied (recovery applies them). */
  unapplied: { settlements: number; interruptions: number; generationIds: string[] };
  /**
   * Generations that started and never settled: recovery writes an `estimated` row for each with
   * progress (`estimated`), nothing but an `interrupted` key for each with only a claim
   * (`interrupted`); `keys` counts the idempotency keys it marks interrupted, of either kind.
   */
  abandoned: { estimated: number; interrupted: number; keys: number; generationIds: string[] };
}

/**
 * Reads a file settlement journal without writing anything (no new segment, nothing applied)
 * and says what its recovery at the next open would do: the settlements after the applier's
 * stored position, and the abandoned generations it would settle. Call it only while no process
 * writes the journal (hold the data directory's lock).
 * @throws the file system's or the database's error when either cannot be read.
 */
export async function inspectFileSettlementJournal(
  options: InspectSettlementJournalOptions,
  deps: { applier: Pick<SettlementApplier, 'position'>; logger?: StoreLogger },
): Promise<SettlementJournalInspection> {
  const empty: SettlementJournalInspection = {
    present: false,
    segments: 0,
    records: 0,
    invalidLines: 0,
    tornBytes: 0,
    unapplied: { settlements: 0, interruptions: 0, generationIds: [] },
    abandoned: { estimated: 0, interrupted: 0, keys: 0, generationIds: [] },
  };
  if (!existsSync(options.dir)) return empty;
  const position = await deps.applier.position(options.name ?? 'local');
  const read = readJournalDirectory(options.dir, position, deps.logger);
  const abandoned = settleAbandoned(read.open.list(), options.nowMs ?? Date.now());
  return {
    present: true,
    ...(position ? { position } : {}),
    segments: read.segments.length,
    records: read.records,
    invalidLines: read.invalidLines,
    tornBytes: read.tornBytes,
    unapplied: {
      settlements: read.unapplied.filter((q) => q.item.kind === 'settle').length,
      interruptions: read.unapplied.filter((q) => q.item.kind === 'interrupted').length,
      generationIds: read.unapplied.slice(0, 20).map((q) => idOf(q.item)),
    },
    abandoned: {
      estimated: abandoned.filter((a) => a.kind === 'settle').length,
      interrupted: abandoned.filter((a) => a.kind === 'interrupted').length,
      keys: abandoned.filter((a) => a.kind === 'interrupted' || a.entry.idempotency !== undefined).length,
      generationIds: abandoned.slice(0, 20).map(idOf),
    },
  };
}

/**
 * The file settlement journal (ADR 0002 §2–3): the all-in-one's single, durable settlement path.
 *
 * Layout: segment files `<dir>/<16-digit number>.journal`, numbered upwards, one record per
 * line (`journal-line.ts`). A process appends to one segment at a time and never to a segment an
 * earlier process wrote: at open it starts a new one, numbered past every segment on disk and
 * past the stored position, so a stored position can never point into fresh bytes.
 *
 * Durability: `append` resolves after a synchronous `write(2)` of its line (several appends of
 * one event-loop turn share one write), so the entry is in the OS page cache and survives a
 * kill -9 of the process; an `fdatasync` every `syncIntervalMs` puts it on disk, so a machine
 * crash loses at most that interval.
 *
 * Application: written settlements are handed to the applier loop in memory (the file is read
 * only at open); the loop commits them in batches with the journal position in the same
 * transaction.
 *
 * Recovery (at open, before the journal is returned, so before anything is served): every
 * settlement after the stored position is applied again (exactly once: the position commits with
 * what it applied, and usage rows are idempotent on generation id); generations that journaled a
 * claim or progress and never settled are settled from what they left (`settleAbandoned`:
 * an `estimated` row from the last progress, or an `interrupted` key) — written to the new
 * segment first, so a crash during recovery recovers the same way.
 *
 * Segments: a new one is started when the current one has `segmentBytes` of records; its first
 * lines repeat the claims and last progress of the generations still open, so the segments before
 * it are never needed for them. A segment before the current one is deleted once every settlement
 * in it is applied, the next segment has been synced (its repeated lines are on disk) and, with
 * `syncDatabase`, the database has made those commits durable.
 *
 * One process per directory: the caller holds the data directory's lock.
 */
import { appendFileSync, closeSync, fdatasync, fdatasyncSync, fsyncSync, mkdirSync, openSync, unlinkSync, writeSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  type ClaimMark,
  type JournalPosition,
  type OverspendEvent,
  type ProgressMark,
  type SettlementApplier,
  type SettlementEntry,
  type SettlementJournal,
  WeirError,
} from '@weir/core';
import { type JournalRecord, encodeJournalRecord, settleAbandoned, settlementEntryFault } from '@weir/ledger';
import type { StoreLogger } from '../logger';
import type { RejectedSettlement } from '../settlement-isolation';
import { type QueuedSettlement, createApplierLoop } from './applier-loop';
import { journalSegmentPath, readJournalDirectory } from './journal-directory';
import { LINE_OVERHEAD_BYTES, encodeJournalLine, writeJournalLine } from './journal-line';

const fdatasyncAsync = promisify(fdatasync);
/** The write buffer kept between turns grows to at most this. */
const MAX_KEPT_BUFFER_BYTES = 1024 * 1024;

/** Options of {@link openFileSettlementJournal}. */
export interface FileSettlementJournalOptions {
  /** The journal's directory (created if missing), e.g. `$WEIR_DATA_DIR/journal`. */
  dir: string;
  /** Its name in `journal_positions` (one per directory sharing a database). Default `local`. */
  name?: string;
  /** Interval of the group `fdatasync` (ms; `WEIR_JOURNAL_SYNC_MS`). Default 20. */
  syncIntervalMs?: number;
  /** Least time between two progress marks of one generation (ms; `WEIR_JOURNAL_PROGRESS_MS`). Default 1,000. */
  progressIntervalMs?: number;
  /** Bytes of records after which a new segment is started. Default 8 MiB. */
  segmentBytes?: number;
  /**
   * Longest a settlement waits for its batch (ms): how long after a request ends its usage row may
   * still be missing from `/v1/usage` (plus the transaction's own time). Default 100: a
   * transaction has a fixed cost (~1 ms of CPU on PGlite, `tools/bench/settlement-journal.ts`), so
   * at 1,000 requests/s 100 ms batches spend ~10 µs per settlement on it, 50 ms batches ~20 µs.
   */
  applyIntervalMs?: number;
  /**
   * Most settlements per applier transaction (a full batch is applied at once). Default 256: on
   * PGlite a transaction runs on this process's event loop (~25–35 µs of CPU per settlement
   * measured), so this bounds that pause to ~6–9 ms, and above ~2,500 requests/s batches fill
   * before `applyIntervalMs`.
   */
  maxBatch?: number;
  /** Unapplied settlements at which `saturated()` turns true (the gateway then answers 503). Default 10,000. */
  capacity?: number;
  /** First retry delay after a failed applier transaction (ms), doubling. Default 100. */
  retryBaseMs?: number;
  /** Longest retry delay (ms). Default 5,000. */
  retryMaxMs?: number;
  /** How long an `interrupted` key recovered without a claim is kept (ms). Default 86,400,000. */
  interruptedRetentionMs?: number;
  /**
   * Makes what the database has committed durable, awaited before applied segments are deleted.
   * PGlite writes its files at each commit but never fsyncs them, so after a machine crash its
   * recent commits may be gone: the journal must still hold them. Pass
   * `() => fsyncDirectoryTree(dataDir)` for PGlite; leave unset for Postgres (each commit is
   * fsynced). Failures are logged and the deletion retried later.
   */
  syncDatabase?: () => Promise<void>;
  /** Recovery, write failures, applier retries and overspends are logged here. Default: silent. */
  logger?: StoreLogger;
  /** Called with every overspend the applier reports (for metrics and alerts). Must not throw. */
  onOverspend?: (events: readonly OverspendEvent[]) => void;
  /**
   * Called with every settlement the database refused even degraded (see `applyIsolating`),
   * after its line was appended to `<dir>/rejected.journal` (kept: an operator can correct and
   * re-append it) and logged. Must not throw.
   */
  onRejected?: (rejected: RejectedSettlement) => void;
}

/** Dependencies of {@link openFileSettlementJournal}. */
export interface FileSettlementJournalDeps {
  applier: SettlementApplier;
  /** Epoch ms (progress intervals, recovered keys' retention). Default `Date.now`. */
  now?: () => number;
  /** Uniform [0, 1) source for retry jitter. Default `Math.random`. */
  random?: () => number;
}

/** What {@link openFileSettlementJournal} found and did at open. */
export interface JournalRecovery {
  /** The position stored before recovery (undefined: none). */
  position?: JournalPosition;
  /** Segments read. */
  segments: number;
  /** Valid lines read. */
  records: number;
  /** Settlements after the stored position, applied again. */
  replayed: number;
  /** Estimated usage rows written for generations that died mid-stream. */
  estimated: number;
  /** Keys marked `interrupted` for keyed generations that died before any progress. */
  interrupted: number;
  /** Lines skipped for a bad checksum or content. */
  invalidLines: number;
  /** Bytes of torn last lines ignored (a machine crash while writing). */
  tornBytes: number;
  /** The segment this process writes. */
  segment: number;
}

/** Counters of a {@link FileSettlementJournal} since it was opened. */
export interface FileSettlementJournalStats {
  /** Settlements appended (excluding recovery's). */
  appended: number;
  /** Claims and progress marks written. */
  marks: number;
  /** `write(2)` calls. */
  writes: number;
  /** Completed group syncs. */
  syncs: number;
  /** Settlements applied (committed). */
  applied: number;
  /** Settlements the database refused even degraded, set aside in `rejected.journal`. */
  rejected: number;
  /** Segments deleted. */
  segmentsDeleted: number;
  /** Generations with a claim or progress and no settlement yet. */
  openGenerations: number;
}

/** The file settlement journal (see the module comment). */
export interface FileSettlementJournal extends SettlementJournal {
  readonly recovery: JournalRecovery;
  /** Settlements written and not yet applied. */
  pending(): number;
  stats(): FileSettlementJournalStats;
  /**
   * Refuses further appends (WeirError `shutting_down`), applies what is pending, syncs and
   * closes the segment. With `timeoutMs`, stops waiting for the database after that long and
   * reports what is left: nothing is lost, it stays in the journal and is applied at the next
   * open. Idempotent.
   */
  close(options?: { timeoutMs?: number }): Promise<{ unapplied: number }>;
}

interface SegmentState {
  /** Settlements in it not yet applied. */
  pending: number;
  /** A sync of it completed after it was created (its repeated open-generation lines are on disk). */
  synced: boolean;
  /** Its fd, while open. */
  fd?: number;
}

interface PendingWrite {
  record: JournalRecord;
  /** `encodeJournalRecord(record)`, taken when the record was offered. */
  json: string;
  resolve?: () => void;
  reject?: (err: unknown) => void;
}

/**
 * Opens (creating if needed) the journal in `options.dir`, recovers it (see the module comment)
 * and resolves once every recovered settlement is applied — retrying while the database is away,
 * for as long as it takes (bound it with your own timeout).
 * @throws the file system's error when the directory cannot be read or a segment cannot be created.
 */
export async function openFileSettlementJournal(options: FileSettlementJournalOptions, deps: FileSettlementJournalDeps): Promise<FileSettlementJournal> {
  const dir = options.dir;
  const name = options.name ?? 'local';
  const syncIntervalMs = Math.max(1, options.syncIntervalMs ?? 20);
  const progressIntervalMs = Math.max(0, options.progressIntervalMs ?? 1_000);
  const segmentBytes = Math.max(1, options.segmentBytes ?? 8 * 1024 * 1024);
  const { logger } = options;
  const now = deps.now ?? Date.now;
  const stats = { appended: 0, marks: 0, writes: 0, syncs: 0, applied: 0, rejected: 0, segmentsDeleted: 0 };

  // Owner-only whatever the umask (issue 14, part 6): settlements name tenants and amounts.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const segmentPath = (n: number) => journalSegmentPath(dir, n);
  const segments = new Map<number, SegmentState>();

  const loop = createApplierLoop(deps.applier, {
    journal: name,
    applyIntervalMs: Math.max(0, options.applyIntervalMs ?? 100),
    maxBatch: Math.max(1, options.maxBatch ?? 256),
    capacity: Math.max(1, options.capacity ?? 10_000),
    retryBaseMs: Math.max(0, options.retryBaseMs ?? 100),
    retryMaxMs: options.retryMaxMs ?? 5_000,
    logger,
    random: deps.random,
    onOverspend: options.onOverspend,
    onRejected(rejected) {
      stats.rejected++;
      try {
        appendFileSync(path.join(dir, 'rejected.journal'), encodeJournalLine(rejected.item), { mode: 0o600 });
      } catch (err) {
        logger?.error({ err, journal: name }, 'settlement journal: a refused settlement could not be kept aside');
      }
      options.onRejected?.(rejected);
    },
    onApplied(items) {
      stats.applied += items.length;
      for (const q of items) {
        const s = segments.get(q.position.segment);
        if (s) s.pending--;
      }
      deleteApplied();
    },
  });

  // ---- Recovery: read what is on disk -------------------------------------------------------
  const stored = await deps.applier.position(name);
  const read = readJournalDirectory(dir, stored, logger);
  const onDisk = read.segments;
  const open = read.open;
  const recovery: JournalRecovery = {
    segments: onDisk.length,
    records: read.records,
    replayed: read.unapplied.length,
    estimated: 0,
    interrupted: 0,
    invalidLines: read.invalidLines,
    tornBytes: read.tornBytes,
    segment: 0,
  };
  if (stored) recovery.position = stored;
  for (const n of onDisk) segments.set(n, { pending: read.unappliedBySegment.get(n) ?? 0, synced: true });
  const replay: QueuedSettlement[] = [...read.unapplied];

  // ---- The new segment --------------------------------------------------------------------
  let segment = Math.max(onDisk.length > 0 ? onDisk[onDisk.length - 1] : 0, stored?.segment ?? 0) + 1;
  let fd = openSync(segmentPath(segment), 'wx', 0o600);
  segments.set(segment, { pending: 0, synced: false, fd });
  recovery.segment = segment;
  /** Bytes in the current segment; records since it started, excluding repeated open-generation lines. */
  let size = 0;
  let recordBytes = 0;
  let needsNewSegment = false;
  let dirDirty = true;
  let dataDirty = false;
  const retiring: number[] = [];

  const abandoned = settleAbandoned(open.list(), now(), { retentionMs: options.interruptedRetentionMs });
  for (const item of abandoned) {
    if (item.kind === 'interrupted') recovery.interrupted++;
    else recovery.estimated++;
  }
  if (abandoned.length > 0) {
    const lines = abandoned.map((item) => encodeJournalLine(item));
    writeFully(fd, Buffer.from(lines.join('')));
    abandoned.forEach((item, i) => {
      size += Buffer.byteLength(lines[i]);
      open.note(item);
      replay.push({ item, position: { segment, offset: size } });
      segments.get(segment)!.pending++;
    });
    recordBytes = size;
  }
  // The recovered settlements are on disk before any older segment can be deleted.
  fdatasyncSync(fd);
  syncDir();
  segments.get(segment)!.synced = true;
  dirDirty = false;
  if (recovery.replayed + recovery.estimated + recovery.interrupted + recovery.invalidLines > 0 || recovery.tornBytes > 0) {
    logger?.info({ journal: name, ...recovery }, 'settlement journal recovered');
  }

  // ---- Writing ----------------------------------------------------------------------------
  let writes: PendingWrite[] = [];
  let writeScheduled = false;
  /** Reused for every write: lines are encoded into it, then written with one write(2) per segment. */
  let out = Buffer.allocUnsafe(64 * 1024);
  const lastProgress = new Map<string, number>();
  /** Generations this process journaled a claim or progress of, until they settle or are released. */
  const marked = new Set<string>();
  let closed = false;
  let closing: Promise<{ unapplied: number }> | undefined;

  function enqueue(w: PendingWrite): void {
    writes.push(w);
    if (!writeScheduled) {
      writeScheduled = true;
      // Same turn, after the current synchronous code: appends made together share one write(2),
      // and every promise resolves only after its line is written.
      queueMicrotask(writeOut);
    }
  }

  /** Queues a record's line; resolves once it is written. */
  function journalWrite(record: JournalRecord): Promise<void> {
    let json: string;
    try {
      json = encodeJournalRecord(record);
    } catch (err) {
      return Promise.reject(new WeirError('internal', 'the settlement journal record could not be serialized', { cause: err }));
    }
    return new Promise<void>((resolve, reject) => enqueue({ record, json, resolve, reject }));
  }

  function writeOut(): void {
    writeScheduled = false;
    const batch = writes;
    writes = [];
    // Every line of the turn, encoded into `out` back to back; `ends[k]` is where line k ends.
    let needed = 0;
    for (const w of batch) needed += Buffer.byteLength(w.json) + LINE_OVERHEAD_BYTES;
    // A turn with more than 1 MiB of lines gets a buffer of its own rather than growing `out` for good.
    if (needed > out.length && needed <= MAX_KEPT_BUFFER_BYTES) out = Buffer.allocUnsafe(Math.max(needed, Math.min(out.length * 2, MAX_KEPT_BUFFER_BYTES)));
    const buf = needed > out.length ? Buffer.allocUnsafe(needed) : out;
    const ends: number[] = [];
    let filled = 0;
    for (const w of batch) {
      filled += writeJournalLine(buf, filled, w.json);
      ends.push(filled);
    }
    let i = 0;
    try {
      while (i < batch.length) {
        const from = i === 0 ? 0 : ends[i - 1];
        if (needsNewSegment || (recordBytes > 0 && recordBytes + ends[i] - from > segmentBytes)) startSegment();
        // Lines up to the segment's end, written together.
        let j = i + 1;
        while (j < batch.length && recordBytes + ends[j] - from <= segmentBytes) j++;
        writeFully(fd, buf, from, ends[j - 1]);
        stats.writes++;
        dataDirty = true;
        const base = size - from;
        size += ends[j - 1] - from;
        recordBytes += ends[j - 1] - from;
        for (let k = i; k < j; k++) written(batch[k], base + ends[k]);
        i = j;
      }
    } catch (err) {
      // The failed write may have left part of a line: later lines go to a new segment, so the
      // torn part stays a torn tail rather than spoiling the next line.
      needsNewSegment = true;
      logger?.error({ err, journal: name, lost: batch.length - i }, 'settlement journal write failed');
      for (const w of batch.slice(i)) w.reject?.(new WeirError('internal', 'the settlement journal could not be written', { cause: err }));
    }
  }

  function written(w: PendingWrite, end: number): void {
    const r = w.record;
    open.note(r);
    if (r.kind === 'settle' || r.kind === 'interrupted') {
      segments.get(segment)!.pending++;
      loop.push({ item: r, position: { segment, offset: end } });
    }
    w.resolve?.();
  }

  /** Closes the current segment (synced and closed by the next sync) and starts the next, repeating what is open. */
  function startSegment(): void {
    const next = segment + 1;
    const nextFd = openSync(segmentPath(next), 'wx', 0o600);
    retiring.push(segment);
    segment = next;
    fd = nextFd;
    segments.set(next, { pending: 0, synced: false, fd: nextFd });
    size = 0;
    recordBytes = 0;
    needsNewSegment = false;
    dirDirty = true;
    const carried = open.list().flatMap((g) => [
      ...(g.claim ? [encodeJournalLine({ kind: 'claim', claim: g.claim })] : []),
      ...(g.progress ? [encodeJournalLine({ kind: 'progress', mark: g.progress })] : []),
    ]);
    if (carried.length > 0) {
      const buf = Buffer.from(carried.join(''));
      writeFully(fd, buf);
      size = buf.length;
      dataDirty = true;
    }
  }

  // ---- Syncing and deleting ---------------------------------------------------------------
  let syncing = false;
  let databaseSync: Promise<void> | undefined;
  let deleteAgain = false;
  let closedFiles = false;
  async function syncTick(): Promise<void> {
    if (syncing || (!dataDirty && retiring.length === 0 && !dirDirty)) return;
    syncing = true;
    try {
      const current = segment;
      const currentFd = fd;
      const retired = retiring.splice(0);
      dataDirty = false;
      while (retired.length > 0) {
        const s = segments.get(retired[0]);
        if (s?.fd !== undefined) {
          try {
            await fdatasyncAsync(s.fd);
          } catch (err) {
            retiring.unshift(...retired);
            throw err;
          }
          closeSync(s.fd);
          s.fd = undefined;
          s.synced = true;
        }
        retired.shift();
      }
      await fdatasyncAsync(currentFd);
      if (dirDirty) {
        dirDirty = false;
        syncDir();
      }
      const s = segments.get(current);
      if (s) s.synced = true;
      stats.syncs++;
    } catch (err) {
      dataDirty = true;
      logger?.error({ err, journal: name }, 'settlement journal sync failed; will retry');
    } finally {
      syncing = false;
    }
    deleteApplied();
  }

  function syncDir(): void {
    const dfd = openSync(dir, 'r');
    try {
      fsyncSync(dfd);
    } finally {
      closeSync(dfd);
    }
  }

  /**
   * Deletes, oldest first, each segment before the current one whose settlements are all applied,
   * once it is closed and the segment after it has been synced (it repeats what was still open).
   */
  function deleteApplied(): void {
    if (closedFiles) return;
    // Map order is segment order: segments are added in ascending order.
    const list = [...segments.entries()];
    const done: number[] = [];
    for (let i = 0; i + 1 < list.length; i++) {
      const [n, s] = list[i];
      if (s.pending > 0 || s.fd !== undefined || !list[i + 1][1].synced) break;
      done.push(n);
    }
    if (done.length === 0) return;
    if (!options.syncDatabase) {
      unlinkSegments(done);
      return;
    }
    // Deleted only after a database sync that started after their last commit.
    if (databaseSync) {
      deleteAgain = true;
      return;
    }
    databaseSync = options
      .syncDatabase()
      .then(
        () => unlinkSegments(done),
        (err: unknown) => logger?.warn({ err, journal: name }, 'settlement journal: database sync failed; applied segments kept'),
      )
      .finally(() => {
        databaseSync = undefined;
        if (deleteAgain && !closedFiles) {
          deleteAgain = false;
          deleteApplied();
        }
      });
  }

  function unlinkSegments(numbers: readonly number[]): void {
    for (const n of numbers) {
      try {
        unlinkSync(segmentPath(n));
        stats.segmentsDeleted++;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
          logger?.warn({ err, segment: n }, 'settlement journal: could not delete an applied segment');
          return;
        }
      }
      segments.delete(n);
    }
  }

  const syncTimer = setInterval(() => void syncTick(), syncIntervalMs);
  syncTimer.unref();

  // ---- Recovery: apply before serving -------------------------------------------------------
  for (const q of replay) loop.push(q);
  await loop.flush();
  deleteApplied();

  return {
    recovery,

    append(entry: SettlementEntry) {
      if (closed) return Promise.reject(new WeirError('shutting_down', 'the settlement journal is closed'));
      const fault = settlementEntryFault(entry);
      if (fault) return Promise.reject(new WeirError('internal', `malformed settlement entry: ${fault}`));
      lastProgress.delete(entry.usage.generationId);
      marked.delete(entry.usage.generationId);
      stats.appended++;
      return journalWrite({ kind: 'settle', entry });
    },

    claim(claim: ClaimMark) {
      if (closed) return Promise.reject(new WeirError('shutting_down', 'the settlement journal is closed'));
      stats.marks++;
      marked.add(claim.generationId);
      return journalWrite({ kind: 'claim', claim });
    },

    release(generationId: string) {
      lastProgress.delete(generationId);
      if (!marked.delete(generationId) || closed) return;
      stats.marks++;
      journalWrite({ kind: 'release', generationId }).catch(() => undefined);
    },

    progress(generationId: string, mark: () => ProgressMark) {
      if (closed) return;
      const t = now();
      const last = lastProgress.get(generationId);
      // The first offer starts the clock: a generation shorter than one interval writes no mark.
      if (last === undefined) {
        lastProgress.set(generationId, t);
        return;
      }
      if (t - last < progressIntervalMs) return;
      lastProgress.set(generationId, t);
      try {
        const record: JournalRecord = { kind: 'progress', mark: mark() };
        const json = encodeJournalRecord(record);
        stats.marks++;
        marked.add(generationId);
        enqueue({ record, json });
      } catch (err) {
        logger?.warn({ err, generationId }, 'settlement journal: progress mark not taken');
      }
    },

    flush: () => loop.flush(),
    saturated: () => loop.saturated(),
    pending: () => loop.pending(),
    stats: () => ({ ...stats, openGenerations: open.size }),

    close(closeOptions = {}) {
      closing ??= (async () => {
        closed = true;
        // Appends made in this turn are written by their microtask before the loop drains.
        await Promise.resolve();
        const unapplied = await loop.close(closeOptions.timeoutMs);
        clearInterval(syncTimer);
        while (syncing) await new Promise((r) => setTimeout(r, 1));
        for (const [, s] of segments) {
          if (s.fd === undefined) continue;
          try {
            fdatasyncSync(s.fd);
          } finally {
            closeSync(s.fd);
            s.fd = undefined;
            s.synced = true;
          }
        }
        retiring.length = 0;
        // No new deletion now (the next open deletes what is applied); one in progress may finish.
        closedFiles = true;
        if (databaseSync) {
          await (closeOptions.timeoutMs === undefined ? databaseSync : Promise.race([databaseSync, new Promise((r) => setTimeout(r, closeOptions.timeoutMs).unref())]));
        }
        if (unapplied > 0) logger?.warn({ journal: name, unapplied }, 'settlement journal closed with settlements not applied; they are applied at the next open');
        return { unapplied };
      })();
      return closing;
    },
  };
}

/** `write(2)` of `buf[from, to)` until every byte is written (a regular file may take a short write). */
function writeFully(fd: number, buf: Buffer, from = 0, to = buf.length): void {
  let off = from;
  while (off < to) off += writeSync(fd, buf, off, to - off);
}

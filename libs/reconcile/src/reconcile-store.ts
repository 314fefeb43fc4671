/**
 * The store a reconciliation runs against: a Postgres server (`DATABASE_URL`: the split, or an
 * all-in-one run on Postgres — live), or a stopped all-in-one's data directory — its embedded
 * PGlite database and its file settlement journal, under the same lock the all-in-one takes,
 * so reconciliation refuses to run while it does (PGlite serves one process).
 */
import { existsSync } from 'node:fs';
import type { OverspendEvent } from '@weir/core';
import {
  createPgSettlementApplier,
  dataDirLayout,
  type DataDirLock,
  fsyncDirectoryTree,
  inspectFileSettlementJournal,
  lockDataDir,
  openDatabase,
  openFileSettlementJournal,
  pendingMigrations,
  type StoreLogger,
  type WeirDatabase,
} from '@weir/store-pg';
import type { JournalRecoveryOutcome, ReconcileJournal } from './run-reconciliation';

/** Where to reconcile. */
export type ReconcileTarget = { kind: 'postgres'; databaseUrl: string } | { kind: 'embedded'; dataDir: string };

/** An open store. */
export interface ReconcileStore {
  target: ReconcileTarget;
  database: WeirDatabase;
  /** The embedded database's owner is stopped (this process holds its data directory's lock). */
  ownerStopped: boolean;
  /** The stopped all-in-one's settlement journal (embedded only). */
  journal?: ReconcileJournal;
  /** Migrations applied on open (embedded with `fix` only). */
  migrated: string[];
  /** Closes the database (PGlite flushes its directory), then releases the lock. Idempotent. */
  close(): Promise<void>;
}

/** Why a store cannot be opened; the command exits 2 with the message. */
export class ReconcileStoreError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ReconcileStoreError';
  }
}

/** Options of {@link openReconcileStore}. */
export interface OpenReconcileStoreOptions {
  /**
   * Whether the run writes. On the embedded database a writing run migrates the schema first
   * (as the all-in-one's next start would); a report-only run refuses a schema that is behind.
   * A Postgres server is never migrated here (its services do that).
   */
  fix: boolean;
  /** The name of the journal in `journal_positions`. Default `local` (the all-in-one's). */
  journalName?: string;
  logger?: StoreLogger;
}

/**
 * Opens the target.
 *
 * Embedded: refuses a directory without a database (`<dataDir>/pg`) or one the all-in-one is
 * running on (the data directory's lock names its pid: stop it, or run it with `DATABASE_URL`
 * to reconcile it live); then takes the lock, opens PGlite and offers the journal in
 * `<dataDir>/journal`: `inspect()` reads it, `recover()` opens it — which applies what was not
 * applied and settles abandoned generations, exactly as the all-in-one's start does — and closes
 * it again.
 * @throws ReconcileStoreError for the refusals above and a schema that is behind; the driver's
 *   error when the database cannot be opened.
 */
export async function openReconcileStore(target: ReconcileTarget, options: OpenReconcileStoreOptions): Promise<ReconcileStore> {
  if (target.kind === 'postgres') {
    const database = await openDatabase({ databaseUrl: target.databaseUrl, migrate: false, maxConnections: 2, logger: options.logger });
    return { target, database, ownerStopped: false, migrated: [], close: () => database.close() };
  }

  const layout = dataDirLayout(target.dataDir);
  if (!existsSync(layout.database)) {
    throw new ReconcileStoreError(
      `no embedded database at ${layout.database}: set WEIR_DATA_DIR (or --data-dir) to the all-in-one's data directory, or DATABASE_URL to reconcile a Postgres server`,
    );
  }
  let lock: DataDirLock;
  try {
    lock = lockDataDir(target.dataDir);
  } catch (err) {
    const owner = (err as { ownerPid?: number }).ownerPid;
    if (owner === undefined) throw err;
    throw new ReconcileStoreError(
      `the all-in-one (pid ${owner}) is running on ${target.dataDir}: its embedded database serves one process. Stop it first (reconciliation then does what its next start would), or run it with DATABASE_URL to reconcile it live`,
      { cause: err },
    );
  }
  let database: WeirDatabase | undefined;
  try {
    database = await openDatabase({ dataDir: layout.database, migrate: false, logger: options.logger });
    const pending = await pendingMigrations(database.db);
    let migrated: string[] = [];
    if (pending.length > 0) {
      if (!options.fix) {
        throw new ReconcileStoreError(
          `the embedded database's schema is behind this Weir (${pending.join(', ')} not applied): run with --fix, which migrates it as the all-in-one's next start would, or start the all-in-one once`,
        );
      }
      await database.close();
      database = await openDatabase({ dataDir: layout.database, migrate: true, logger: options.logger });
      migrated = pending;
    }
    const db = database;
    const applier = createPgSettlementApplier(db.db);
    const name = options.journalName ?? 'local';
    const journal: ReconcileJournal = {
      inspect: () => inspectFileSettlementJournal({ dir: layout.journal, name }, { applier, logger: options.logger }),
      async recover(): Promise<JournalRecoveryOutcome | undefined> {
        // No directory: an all-in-one from before the journal; nothing to recover (and a
        // restart would create an empty one, which changes nothing).
        if (!existsSync(layout.journal)) return undefined;
        const overspends: OverspendEvent[] = [];
        let rejected = 0;
        const opened = await openFileSettlementJournal(
          {
            dir: layout.journal,
            name,
            // PGlite never fsyncs: applied segments are deleted only after its files are synced.
            syncDatabase: () => fsyncDirectoryTree(layout.database),
            logger: options.logger,
            onOverspend: (events) => overspends.push(...events),
            onRejected: () => rejected++,
          },
          { applier },
        );
        const { unapplied } = await opened.close();
        return { recovery: opened.recovery, overspends, rejected, unapplied };
      },
    };
    let closed: Promise<void> | undefined;
    return {
      target,
      database: db,
      ownerStopped: true,
      journal,
      migrated,
      close: () =>
        (closed ??= db.close().finally(() => lock.release())),
    };
  } catch (err) {
    await database?.close().catch(() => undefined);
    lock.release();
    throw err;
  }
}

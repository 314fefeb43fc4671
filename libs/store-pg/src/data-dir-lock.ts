/**
 * One process per data directory: PGlite is a single-process database, and two processes
 * writing the same directory lose rows silently. The lock is a file holding the owner's pid,
 * created exclusively; a lock whose pid is no longer running is stale and taken over. The
 * all-in-one holds it while it runs; `npm run reconcile` takes it to work on a stopped
 * all-in-one's embedded database and settlement journal.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Where the all-in-one keeps its state inside `WEIR_DATA_DIR`. */
export interface DataDirLayout {
  /** The embedded PGlite database: `<dataDir>/pg`. */
  database: string;
  /** The file settlement journal (ADR 0002 §2): `<dataDir>/journal`. */
  journal: string;
  /** The lock file: `<dataDir>/weir.lock`. */
  lock: string;
}

/** The paths of the all-in-one's state inside `dataDir` (see {@link DataDirLayout}). */
export function dataDirLayout(dataDir: string): DataDirLayout {
  return { database: path.join(dataDir, 'pg'), journal: path.join(dataDir, 'journal'), lock: path.join(dataDir, 'weir.lock') };
}

/** A held lock. */
export interface DataDirLock {
  release(): void;
}

/** Thrown by {@link lockDataDir} when a running process holds the directory. */
export class DataDirInUseError extends Error {
  constructor(
    readonly dataDir: string,
    /** The process holding it. */
    readonly ownerPid: number,
  ) {
    super(`the data directory ${dataDir} is in use by another Weir process (pid ${ownerPid}); stop it, or give this one its own WEIR_DATA_DIR`);
    this.name = 'DataDirInUseError';
  }
}

/**
 * Creates `dataDir` if needed and locks it.
 * @throws DataDirInUseError naming the other process when the directory is in use; the file
 *   system's error when the lock file cannot be written.
 */
export function lockDataDir(dataDir: string): DataDirLock {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = dataDirLayout(dataDir).lock;
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx', mode: 0o600 });
      let released = false;
      return {
        release() {
          if (released) return;
          released = true;
          rmSync(file, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(readFileSync(file, 'utf8').trim());
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isRunning(owner)) throw new DataDirInUseError(dataDir, owner);
      rmSync(file, { force: true }); // stale: its owner is gone
    }
  }
  throw new Error(`could not lock the data directory ${dataDir}`);
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * One all-in-one per data directory: PGlite is a single-process database, and two processes
 * writing the same directory lose rows silently. The lock is a file holding the owner's pid,
 * created exclusively; a lock whose pid is no longer running is stale and taken over.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** A held lock. */
export interface DataDirLock {
  release(): void;
}

/**
 * Creates `dataDir` if needed and locks it.
 * @throws Error naming the other process when the directory is in use.
 */
export function lockDataDir(dataDir: string): DataDirLock {
  mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, 'weir.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
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
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isRunning(owner)) {
        throw new Error(
          `the data directory ${dataDir} is in use by another Weir process (pid ${owner}); stop it, or give this one its own WEIR_DATA_DIR`,
        );
      }
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

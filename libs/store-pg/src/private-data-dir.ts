/**
 * The data directory is private to the service user (issue 14, part 6): directories 0700,
 * files 0600 (owner bits kept, group and other bits cleared), whatever the umask. Weir's own
 * files are created with explicit modes; files a library creates (PGlite's database files) are
 * covered by tightening the process umask before the library runs and by a pass over the tree
 * after it; directories and files left by an earlier, looser start are fixed at start.
 */
import { chmodSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';

/** Mode of every directory in the data directory. */
export const PRIVATE_DIR_MODE = 0o700;
/** Mode of a file Weir creates in the data directory. */
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Makes the process umask clear group and other bits (`umask | 077`), so that files and
 * directories any library creates from now on are owner-only. Returns the previous umask.
 * Process-wide by nature: call it in a service's start-up (the all-in-one does), not per request.
 */
export function restrictUmask(): number {
  const previous = process.umask();
  process.umask(previous | 0o077);
  return previous;
}

/**
 * Creates `dir` (and missing parents) owner-only, and sets `dir` itself to 0700 when it
 * already existed with looser permissions.
 */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  chmodSync(dir, PRIVATE_DIR_MODE);
}

/**
 * Clears group and other permission bits on `root` and everything below it: directories
 * become 0700, files keep their owner bits (0600 for a 0644 file, 0700 for an executable).
 * Symbolic links are neither followed nor changed. Files that vanish during the walk (a
 * database rotating its WAL) are skipped.
 *
 * @returns how many entries had their mode changed (for a start-up log line).
 * @throws the file system's error for anything but a vanished entry (e.g. EPERM on a file the
 *   service user does not own: the operator must fix that by hand).
 */
export function privatizeTree(root: string): number {
  let changed = 0;
  const visit = (p: string): void => {
    let st;
    try {
      st = lstatSync(p);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    if (st.isSymbolicLink()) return;
    const mode = st.mode & 0o7777;
    const wanted = st.isDirectory() ? PRIVATE_DIR_MODE : mode & 0o700;
    if (mode !== wanted) {
      try {
        chmodSync(p, wanted);
        changed++;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    if (st.isDirectory()) {
      let names: string[];
      try {
        names = readdirSync(p);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw err;
      }
      for (const name of names) visit(path.join(p, name));
    }
  };
  visit(root);
  return changed;
}

/**
 * Prepares `dataDir` for a service that keeps private state in it: tightens the umask
 * ({@link restrictUmask}), creates the directory owner-only and fixes the modes of whatever is
 * already in it ({@link privatizeTree}).
 *
 * @returns how many existing entries had their mode tightened.
 */
export function preparePrivateDataDir(dataDir: string): number {
  restrictUmask();
  mkdirSync(dataDir, { recursive: true, mode: PRIVATE_DIR_MODE });
  return privatizeTree(dataDir); // the directory itself included
}

/**
 * The data directory is private to the service user whatever the umask (issue 14, part 6):
 * with umask 000, the directory, the embedded database's files, the settlement journal and the
 * lock file are owner-only, and a directory left world-readable by an earlier start is fixed.
 */
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildSettlementEntry, createInMemorySettlementApplier } from '@weir/testing';
import { dataDirLayout, lockDataDir } from './data-dir-lock';
import { openDatabase } from './database';
import { openFileSettlementJournal } from './journal/file-settlement-journal';
import { preparePrivateDataDir, privatizeTree } from './private-data-dir';

/** Every entry below `root` (itself included) whose mode has a group or other bit, as `path mode`. */
function notPrivate(root: string): string[] {
  const out: string[] = [];
  const visit = (p: string) => {
    const st = statSync(p);
    if ((st.mode & 0o077) !== 0) out.push(`${path.relative(root, p) || '.'} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const name of readdirSync(p)) visit(path.join(p, name));
  };
  visit(root);
  return out;
}

/** How many files and directories are below `root`. */
function countEntries(root: string): number {
  let n = 0;
  for (const name of readdirSync(root)) {
    n++;
    const p = path.join(root, name);
    if (statSync(p).isDirectory()) n += countEntries(p);
  }
  return n;
}

describe('a private data directory under umask 000', () => {
  let parent: string;
  let savedUmask: number;
  beforeEach(() => {
    savedUmask = process.umask(0);
    parent = mkdtempSync(path.join(os.tmpdir(), 'weir-private-'));
  });
  afterEach(() => {
    process.umask(savedUmask);
    rmSync(parent, { recursive: true, force: true });
  });

  it('Weir\'s own files get explicit modes: the lock file and the settlement journal are owner-only', async () => {
    const dataDir = path.join(parent, 'data');
    const lock = lockDataDir(dataDir);
    const journal = await openFileSettlementJournal({ dir: dataDirLayout(dataDir).journal, applyIntervalMs: 5 }, { applier: createInMemorySettlementApplier() });
    await journal.append(buildSettlementEntry(1));
    await journal.close({ timeoutMs: 1_000 });
    expect(readdirSync(dataDirLayout(dataDir).journal).length).toBeGreaterThan(0);
    expect(notPrivate(dataDir)).toEqual([]);
    lock.release();
  });

  it('fixes a directory an earlier start left readable by others', () => {
    const dataDir = path.join(parent, 'old');
    mkdirSync(path.join(dataDir, 'models'), { recursive: true, mode: 0o777 });
    writeFileSync(path.join(dataDir, 'models', 'm.gguf'), 'x', { mode: 0o666 });
    writeFileSync(path.join(dataDir, 'run.sh'), 'x', { mode: 0o755 });
    chmodSync(dataDir, 0o755);
    expect(notPrivate(dataDir).length).toBe(4);
    expect(preparePrivateDataDir(dataDir)).toBe(4);
    expect(notPrivate(dataDir)).toEqual([]);
    expect(statSync(path.join(dataDir, 'run.sh')).mode & 0o777).toBe(0o700); // owner bits kept
    expect(statSync(path.join(dataDir, 'models', 'm.gguf')).mode & 0o777).toBe(0o600);
    expect(privatizeTree(dataDir)).toBe(0);
  });

  it('the embedded database\'s files (PGlite, created by a library) are owner-only, and stay so after writes', async () => {
    const dataDir = path.join(parent, 'data');
    mkdirSync(dataDir); // as a service creates its WEIR_DATA_DIR (0777 under this umask)
    const database = await openDatabase({ dataDir: dataDirLayout(dataDir).database });
    try {
      await database.db.insertInto('tenants').values({ id: 'private-test', name: 'P' }).execute();
      expect(process.umask() & 0o077).toBe(0o077);
    } finally {
      await database.close();
    }
    const pg = dataDirLayout(dataDir).database;
    expect(countEntries(pg)).toBeGreaterThan(100); // a real cluster was written
    expect(notPrivate(pg)).toEqual([]);
  }, 120_000);
});

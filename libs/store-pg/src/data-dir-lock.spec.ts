import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DataDirInUseError, dataDirLayout, lockDataDir } from './data-dir-lock';

describe('lockDataDir', () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(path.join(os.tmpdir(), 'weir-lock-'));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('creates a missing (nested) data directory and holds the lock until released', () => {
    const dir = path.join(root, 'a', 'b');
    const lock = lockDataDir(dir);
    expect(readFileSync(path.join(dir, 'weir.lock'), 'utf8')).toBe(String(process.pid));
    lock.release();
    expect(existsSync(path.join(dir, 'weir.lock'))).toBe(false);
  });

  it('refuses a directory another running process holds, naming it', async () => {
    const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 10000)']);
    try {
      writeFileSync(path.join(root, 'weir.lock'), String(other.pid));
      expect(() => lockDataDir(root)).toThrow(new RegExp(`in use by another Weir process \\(pid ${other.pid}\\)`));
      expect(() => lockDataDir(root)).toThrow(DataDirInUseError);
    } finally {
      other.kill('SIGKILL');
    }
  });

  it('takes over a stale lock whose process is gone', async () => {
    const gone = spawn(process.execPath, ['-e', '0']);
    await new Promise((r) => gone.on('exit', r));
    writeFileSync(path.join(root, 'weir.lock'), String(gone.pid));
    const lock = lockDataDir(root);
    expect(readFileSync(path.join(root, 'weir.lock'), 'utf8')).toBe(String(process.pid));
    lock.release();
  });

  it('names the embedded database, the journal and the lock inside the data directory', () => {
    expect(dataDirLayout('/srv/weir')).toEqual({ database: '/srv/weir/pg', journal: '/srv/weir/journal', lock: '/srv/weir/weir.lock' });
  });
});

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fsyncDirectoryTree } from './fsync-tree';

describe('fsyncDirectoryTree', () => {
  it('walks nested directories and files, and fails on a missing directory', async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'weir-fsync-'));
    try {
      mkdirSync(path.join(root, 'a', 'b'), { recursive: true });
      writeFileSync(path.join(root, 'a', 'b', 'f'), 'x');
      writeFileSync(path.join(root, 'g'), 'y');
      await expect(fsyncDirectoryTree(root)).resolves.toBeUndefined();
      await expect(fsyncDirectoryTree(path.join(root, 'missing'))).rejects.toMatchObject({ code: 'ENOENT' });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

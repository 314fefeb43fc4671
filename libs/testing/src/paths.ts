import { createServer } from 'node:net';
import path from 'node:path';

/** Absolute path of the repository root (this file is `libs/testing/src/paths.ts`). */
export const REPO_ROOT = path.resolve(__dirname, '../../..');

/** Resolves `segments` against the repository root, e.g. `repoPath('libs', 'core')`. */
export function repoPath(...segments: string[]): string {
  return path.resolve(REPO_ROOT, ...segments);
}

/**
 * Absolute path of the tiny real model: `WEIR_MODEL_PATH` when set, else
 * `../shared/models/stories260K.gguf` relative to the repository root (used in place, never
 * copied).
 */
export function tinyModelPath(): string {
  const fromEnv = process.env.WEIR_MODEL_PATH;
  return fromEnv && fromEnv.length > 0 ? path.resolve(fromEnv) : repoPath('..', 'shared', 'models', 'stories260K.gguf');
}

/**
 * A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
 * Racy by nature; prefer listening on port 0 directly when the server allows it.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

// Runs apps/<name>/src/main.ts under tsx (installing dependencies first if missing),
// forwarding SIGINT/SIGTERM so the app shuts down gracefully. `npm run split` uses it.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const app = process.argv[2];
const env = { NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true', NODE_LLAMA_CPP_GPU: 'false', ...process.env, TSX_TSCONFIG_PATH: path.join(root, 'tsconfig.json') };
if (!existsSync(path.join(root, 'node_modules/.package-lock.json'))) {
  const r = spawnSync('npm', ['ci'], { cwd: root, stdio: 'inherit', env });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'apps', app, 'src/main.ts'), ...process.argv.slice(3)], { stdio: 'inherit', env });
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
// `npm start` does not always pass a SIGTERM on: when npm itself is killed, this process is
// re-parented. Treat losing the parent as a SIGTERM, so Weir drains and exits instead of
// running on as an orphan.
const parent = process.ppid;
const watch = setInterval(() => {
  if (process.ppid !== parent) {
    clearInterval(watch);
    child.kill('SIGTERM');
  }
}, 500);
watch.unref();
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

// `npm start`: installs dependencies if they are missing (npm ci), then runs the all-in-one
// (apps/all-in-one/src/main.ts) under tsx, forwarding SIGINT/SIGTERM so shutdown is graceful.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const env = { NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true', NODE_LLAMA_CPP_GPU: 'false', ...process.env };

if (!existsSync(path.join(root, 'node_modules/.package-lock.json'))) {
  process.stderr.write('weir: installing dependencies (npm ci)…\n');
  const r = spawnSync('npm', ['ci'], { cwd: root, stdio: 'inherit', env });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'apps/all-in-one/src/main.ts')], {
  cwd: process.cwd(),
  stdio: 'inherit',
  env: { ...env, TSX_TSCONFIG_PATH: path.join(root, 'tsconfig.json') },
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

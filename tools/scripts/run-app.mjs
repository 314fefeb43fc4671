// Runs apps/<name> as compiled JavaScript (installing dependencies first if missing, then
// building dist/apps/<name>/main.cjs with esbuild when a source is newer: see app-bundle.cjs),
// with plain `node`, no TypeScript loader, passing SIGINT/SIGTERM/SIGHUP on so the app shuts
// down gracefully. `npm start`, `npm run split` and `npm run reconcile` use it.
//
// One Ctrl-C must reach the app once: the terminal sends SIGINT to its whole foreground process
// group (npm, this script and, if it shared the group, the app) and npm passes it on to this
// script again. So the app runs in a process group of its own (`detached`: the terminal no longer
// signals it directly), and signals arriving within SIGNAL_DEDUP_MS of the last one passed on
// count as that same one. A deliberate second Ctrl-C later still reaches the app (which then
// exits at once, as documented).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Signals closer together than this (ms) are one user action delivered through several routes. */
const SIGNAL_DEDUP_MS = 1_000;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const app = process.argv[2];
const env = { NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true', NODE_LLAMA_CPP_GPU: 'false', ...process.env };
if (!existsSync(path.join(root, 'node_modules/.package-lock.json'))) {
  const r = spawnSync('npm', ['ci'], { cwd: root, stdio: 'inherit', env });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
let bundle;
try {
  const { ensureAppBundle, RUNTIME_ENV } = createRequire(import.meta.url)('./app-bundle.cjs');
  Object.assign(env, { ...RUNTIME_ENV, ...env });
  bundle = ensureAppBundle(app, { log: (line) => process.stderr.write(`run-app: ${line}\n`) });
} catch (err) {
  process.stderr.write(`run-app: cannot build ${app}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
const child = spawn(process.execPath, [bundle, ...process.argv.slice(3)], {
  stdio: 'inherit',
  env,
  detached: true,
});
child.on('error', (err) => {
  process.stderr.write(`run-app: cannot start ${app}: ${err.message}\n`);
  process.exit(1);
});

let lastForwardedAt = -Infinity;
/** Passes `signal` on to the app, unless another signal was passed on less than SIGNAL_DEDUP_MS ago. */
const forward = (signal) => {
  const now = Date.now();
  if (now - lastForwardedAt < SIGNAL_DEDUP_MS) return;
  lastForwardedAt = now;
  if (child.exitCode === null && child.signalCode === null) child.kill(signal);
};
process.on('SIGINT', () => forward('SIGINT'));
process.on('SIGTERM', () => forward('SIGTERM'));
// The app is in a session of its own, so a closed terminal no longer hangs it up directly; it
// gets a SIGTERM (drain) rather than a SIGHUP (which Node answers by exiting without draining).
process.on('SIGHUP', () => forward('SIGTERM'));

// `npm start` does not always pass a SIGTERM on: when npm itself is killed, this process is
// re-parented. Treat losing the parent as a SIGTERM, so Weir drains and exits instead of
// running on as an orphan.
const parent = process.ppid;
const watch = setInterval(() => {
  if (process.ppid !== parent) {
    clearInterval(watch);
    forward('SIGTERM');
  }
}, 500);
watch.unref();

// Whatever ends this script (the app's exit, an error here), nothing of the app's process group
// is left behind: the terminal no longer reaches it.
process.on('exit', () => {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGTERM');
  } catch {
    // the group is gone already
  }
});
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

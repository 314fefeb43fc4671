// Compiled JavaScript for Weir's processes (issue 13, item 6): `apps/<app>/src/main.ts` and
// everything it imports from the repository (the apps and `@weir/*` libraries) bundled by
// esbuild into `dist/apps/<app>/main.cjs`, which plain `node` runs: no TypeScript loader at run
// time. `npm start`, `npm run split`/`reconcile` (tools/scripts/run-app.mjs) and the launcher
// (libs/launcher: the split's services) all start processes from these bundles.
//
// - Rebuilt only when stale: a bundle records the files it was built from
//   (`main.inputs.json`, from esbuild's metafile) and is stale when one of them is newer than
//   the bundle, is gone, or when the bundle itself is missing. The check is a stat per input
//   (~200 files, a few ms). A build of all stale apps is one esbuild call (~1–2 s).
// - Packages from node_modules stay external (`packages: 'external'`): loaded by node at run
//   time as before, so native and WASM packages (node-llama-cpp, PGlite), ESM-only ones
//   (loaded with `import()`, which esbuild keeps as is for node 20) and packages that find
//   files next to themselves (pino's worker threads) work unchanged. Only Weir's own
//   TypeScript is compiled; `@weir/*` imports resolve through tsconfig.base.json's paths.
// - CommonJS, as the repository's TypeScript is today (no "type": "module"): `__dirname` and
//   `__filename` keep meaning the source file's directory and path (a plugin rewrites them
//   relative to the bundle), so `REPO_ROOT` and default paths computed from them still hold.
// - Written atomically (a temporary file renamed), so processes building the same app at once
//   (a launcher and a test, say) never run a half-written bundle. The bundle's mtime is set to
//   the build's start: a source saved during a build makes it stale again.
// - A source map beside each bundle (`main.cjs.map`); run `node --enable-source-maps` (or set
//   NODE_OPTIONS) to see TypeScript positions in stack traces. Off by default: it keeps every
//   map in memory.
//
// API: `RUNTIME_ENV` (environment for every app process); `ensureAppBundles(apps, { root?, force?, log? })` → `{ files: { [app]: path }, built: string[], ms }`
// (synchronous; builds in a child process when stale); `ensureAppBundle(app, options)` → path;
// `buildAppBundles(apps, { root? })` (async, always builds); `bundlePath(app, root?)`;
// `isStale(app, root?)`; `staleApps(apps, root?)`; `allApps(root?)`.
// CLI: `node tools/scripts/app-bundle.cjs [app…] [--force]` (default: every app with a
// `src/main.ts`).
'use strict';
const fs = require('node:fs');
const path = require('node:path');

/** The repository root (this file is tools/scripts/app-bundle.cjs). */
const ROOT = path.resolve(__dirname, '../..');

/** Files every bundle depends on besides its inputs: the paths mapping and this build. */
const always = (root) => [path.join(root, 'tsconfig.base.json'), __filename];

/**
 * Environment every app process starts with (a value already in the environment wins).
 *
 * `MALLOC_MMAP_THRESHOLD_` (glibc): allocations of 128 KiB and more get their own mapping,
 * returned to the system when freed. glibc's default threshold adapts upwards once such blocks
 * are freed, after which they come from the heap and stay resident: PGlite's first start on a
 * new data directory (an initdb instance whose data directory is copied through tarballs in
 * memory) left ~45 MB of freed buffers in the main heap of an idle all-in-one (221 → 172 MiB
 * of RSS, tools/bench/idle-memory.ts). Ignored by other C libraries.
 */
const RUNTIME_ENV = Object.freeze({ MALLOC_MMAP_THRESHOLD_: '131072' });

/** Path of the bundle of `app`. */
function bundlePath(app, root = ROOT) {
  return path.join(root, 'dist', 'apps', app, 'main.cjs');
}

function inputsPath(app, root) {
  return path.join(root, 'dist', 'apps', app, 'main.inputs.json');
}

function mtimeMs(file) {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/** True when the bundle of `app` is missing or older than one of the files it was built from. */
function isStale(app, root = ROOT) {
  const built = mtimeMs(bundlePath(app, root));
  if (built === undefined) return true;
  let inputs;
  try {
    inputs = JSON.parse(fs.readFileSync(inputsPath(app, root), 'utf8'));
  } catch {
    return true;
  }
  if (!Array.isArray(inputs) || inputs.length === 0) return true;
  for (const file of [...inputs.map((rel) => path.join(root, rel)), ...always(root)]) {
    const m = mtimeMs(file);
    if (m === undefined || m > built) return true;
  }
  return false;
}

/** The apps of `apps` whose bundle is stale. */
function staleApps(apps, root = ROOT) {
  return apps.filter((app) => isStale(app, root));
}

/**
 * esbuild plugin: `__dirname` / `__filename` in the repository's own sources mean the source
 * file's directory / path, as under a TypeScript loader, not the bundle's. They are rewritten
 * to a path relative to the bundle's directory, so a moved checkout keeps working.
 */
function sourcePathsPlugin(root, outDirOf) {
  return {
    name: 'weir-source-paths',
    setup(build) {
      build.onLoad({ filter: /\.ts$/ }, (args) => {
        if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
        const text = fs.readFileSync(args.path, 'utf8');
        if (!/\b__(dirname|filename)\b/.test(text)) return undefined;
        const fromBundle = (p) => JSON.stringify(path.relative(outDirOf, p).split(path.sep).join('/'));
        const prologue =
          `const __weir_src_dirname = require('node:path').resolve(__dirname, ${fromBundle(path.dirname(args.path))});` +
          `const __weir_src_filename = require('node:path').resolve(__dirname, ${fromBundle(args.path)});`;
        // Identifiers only (not `x.__dirname`); comments and strings that mention them are
        // rewritten too, which is harmless.
        const body = text.replace(/(?<![.\w$])__dirname\b/g, '__weir_src_dirname').replace(/(?<![.\w$])__filename\b/g, '__weir_src_filename');
        return { contents: `${prologue}\n${body}`, loader: 'ts', resolveDir: path.dirname(args.path) };
      });
    },
  };
}

function writeAtomic(file, data, mtime) {
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  fs.writeFileSync(tmp, data);
  if (mtime !== undefined) fs.utimesSync(tmp, mtime, mtime);
  fs.renameSync(tmp, file);
}

/**
 * Builds the bundles of `apps` (all of them, stale or not) in one esbuild call.
 *
 * @param {string[]} apps names under apps/ (each with a src/main.ts)
 * @param {{ root?: string }} [options]
 * @returns {Promise<string[]>} the bundles written
 * @throws Error with esbuild's messages when the code does not compile.
 */
async function buildAppBundles(apps, options = {}) {
  const root = options.root ?? ROOT;
  for (const app of apps) {
    if (!fs.existsSync(path.join(root, 'apps', app, 'src/main.ts'))) throw new Error(`no such app: apps/${app}/src/main.ts`);
  }
  // Loaded only to build: a fresh bundle starts without esbuild.
  const esbuild = require('esbuild');
  const startedAt = new Date();
  const outdir = path.join(root, 'dist', 'apps');
  const result = await esbuild.build({
    absWorkingDir: root,
    entryPoints: apps.map((app) => ({ in: path.join('apps', app, 'src/main.ts'), out: path.join(app, 'main') })),
    outdir,
    outExtension: { '.js': '.cjs' },
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    packages: 'external',
    tsconfig: path.join(root, 'tsconfig.base.json'),
    sourcemap: 'external',
    sourcesContent: false,
    metafile: true,
    write: false,
    logLevel: 'silent',
    // Every bundle sits at dist/apps/<app>/, one level below outdir: paths relative to
    // dist/apps/__app__ hold for each.
    plugins: [sourcePathsPlugin(root, path.join(outdir, '__app__'))],
  });
  const written = [];
  for (const app of apps) {
    const out = path.join(outdir, app, 'main.cjs');
    const meta = result.metafile.outputs[path.relative(root, out).split(path.sep).join('/')];
    const code = result.outputFiles.find((f) => f.path === out);
    if (!meta || !code) throw new Error(`esbuild produced no ${path.relative(root, out)}`);
    const inputs = Object.keys(meta.inputs).filter((f) => !f.startsWith('<'));
    const map = result.outputFiles.find((f) => f.path === `${out}.map`);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    if (map) writeAtomic(`${out}.map`, map.contents);
    writeAtomic(inputsPath(app, root), JSON.stringify(inputs));
    writeAtomic(out, code.contents, startedAt);
    written.push(out);
  }
  return written;
}

/**
 * The bundles of `apps`, building the stale ones first (all of them with `force`). Synchronous
 * (the launcher spawns synchronously): the build itself, which needs esbuild's asynchronous API
 * for its plugin, runs in a child `node` process (this file's CLI), only when something is stale.
 *
 * @param {string[]} apps names under apps/
 * @param {{ root?: string, force?: boolean, log?: (line: string) => void }} [options] `log`
 *   receives one line when something was built.
 * @returns {{ files: Record<string, string>, built: string[], ms: number }} each app's bundle,
 *   the apps (re)built, and the time taken (ms).
 * @throws Error with esbuild's messages when the code does not compile.
 */
function ensureAppBundles(apps, options = {}) {
  const root = options.root ?? ROOT;
  const t0 = Date.now();
  const files = Object.fromEntries(apps.map((app) => [app, bundlePath(app, root)]));
  const todo = options.force ? [...apps] : staleApps(apps, root);
  if (todo.length === 0) return { files, built: [], ms: Date.now() - t0 };
  const { spawnSync } = require('node:child_process');
  const r = spawnSync(process.execPath, [__filename, '--build', '--root', root, ...todo], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } });
  if (r.status !== 0) throw new Error(`building ${todo.join(', ')} failed:\n${(r.stderr || r.stdout || String(r.error ?? '')).trim()}`);
  const ms = Date.now() - t0;
  options.log?.(`built ${todo.map((a) => `dist/apps/${a}/main.cjs`).join(', ')} in ${ms} ms`);
  return { files, built: todo, ms };
}

/** The bundle of one app, built first if stale. See {@link ensureAppBundles}. */
function ensureAppBundle(app, options = {}) {
  return ensureAppBundles([app], options).files[app];
}

/** Every app with a src/main.ts. */
function allApps(root = ROOT) {
  return fs
    .readdirSync(path.join(root, 'apps'))
    .filter((d) => fs.existsSync(path.join(root, 'apps', d, 'src/main.ts')))
    .sort();
}

module.exports = { ROOT, RUNTIME_ENV, bundlePath, isStale, staleApps, buildAppBundles, ensureAppBundles, ensureAppBundle, allApps };

if (require.main === module) {
  const args = process.argv.slice(2);
  const rootAt = args.indexOf('--root');
  const root = rootAt >= 0 ? args[rootAt + 1] : ROOT;
  const apps = args.filter((a, i) => !a.startsWith('--') && !(rootAt >= 0 && i === rootAt + 1));
  const fail = (err) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  };
  if (args.includes('--build')) {
    // The child of ensureAppBundles: build exactly these.
    buildAppBundles(apps, { root }).then(() => undefined, fail);
  } else {
    try {
      const r = ensureAppBundles(apps.length ? apps : allApps(root), { root, force: args.includes('--force'), log: (l) => process.stdout.write(`${l}\n`) });
      if (r.built.length === 0) process.stdout.write(`up to date (${r.ms} ms)\n`);
    } catch (err) {
      fail(err);
    }
  }
}

/**
 * tools/scripts/app-bundle.cjs (what `npm start` and the launcher run processes from), on a
 * throwaway repository: an app importing a `@weir/*` library through tsconfig paths is bundled
 * into dist/apps/<app>/main.cjs that plain node runs; the bundle is rebuilt only when one of its
 * sources is newer; `__dirname` keeps meaning the source file's directory; a compile error is
 * reported with the compiler's message.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT } from './processes';

interface AppBundleModule {
  ensureAppBundles(apps: string[], options?: { root?: string; force?: boolean }): { files: Record<string, string>; built: string[]; ms: number };
  isStale(app: string, root?: string): boolean;
}

const appBundle = createRequire(__filename)(path.join(REPO_ROOT, 'tools/scripts/app-bundle.cjs')) as AppBundleModule;

describe('app bundles (tools/scripts/app-bundle.cjs)', () => {
  let root: string;
  const write = (rel: string, text: string) => {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), text);
  };
  /** Sets a file's mtime `secondsFromNow` from now (negative: in the past). */
  const age = (rel: string, secondsFromNow: number) => {
    const t = new Date(Date.now() + secondsFromNow * 1000);
    utimesSync(path.join(root, rel), t, t);
  };
  const run = (file: string) => spawnSync(process.execPath, [file], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } });

  beforeEach(() => {
    root = mkdtempSync(path.join(os.tmpdir(), 'weir-app-bundle-'));
    write('tsconfig.base.json', JSON.stringify({ compilerOptions: { baseUrl: '.', paths: { '@weir/*': ['libs/*/src/index.ts'] } } }));
    write('libs/greet/src/index.ts', "export const where: string = __dirname;\nexport function greet(name: string): string {\n  return `hello ${name}`;\n}\n");
    write('apps/demo/src/main.ts', "import { greet, where } from '@weir/greet';\nprocess.stdout.write(JSON.stringify({ text: greet('weir'), where }));\n");
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('bundles an app with its libraries into JavaScript that plain node runs, __dirname being the source directory', () => {
    const r = appBundle.ensureAppBundles(['demo'], { root });
    expect(r.built).toEqual(['demo']);
    expect(r.files.demo).toBe(path.join(root, 'dist/apps/demo/main.cjs'));
    const out = run(r.files.demo);
    expect(out.status).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ text: 'hello weir', where: path.join(root, 'libs/greet/src') });
    // The inputs recorded for the staleness check are the two sources.
    expect(JSON.parse(readFileSync(path.join(root, 'dist/apps/demo/main.inputs.json'), 'utf8')).sort()).toEqual(['apps/demo/src/main.ts', 'libs/greet/src/index.ts']);
  }, 60_000);

  it('rebuilds only when a source is newer than the bundle', () => {
    appBundle.ensureAppBundles(['demo'], { root });
    for (const rel of ['apps/demo/src/main.ts', 'libs/greet/src/index.ts', 'tsconfig.base.json']) age(rel, -60);
    expect(appBundle.isStale('demo', root)).toBe(false);
    const again = appBundle.ensureAppBundles(['demo'], { root });
    expect(again.built).toEqual([]);

    const bundleMtime = statSync(again.files.demo).mtimeMs;
    write('libs/greet/src/index.ts', "export const where: string = __dirname;\nexport function greet(name: string): string {\n  return `hi ${name}`;\n}\n");
    age('libs/greet/src/index.ts', 1); // newer than the bundle, even on a coarse clock
    expect(appBundle.isStale('demo', root)).toBe(true);
    const rebuilt = appBundle.ensureAppBundles(['demo'], { root });
    expect(rebuilt.built).toEqual(['demo']);
    expect(statSync(rebuilt.files.demo).mtimeMs).not.toBe(bundleMtime);
    expect(JSON.parse(run(rebuilt.files.demo).stdout).text).toBe('hi weir');
  }, 60_000);

  it('is stale when the bundle or its record of inputs is gone', () => {
    appBundle.ensureAppBundles(['demo'], { root });
    for (const rel of ['apps/demo/src/main.ts', 'libs/greet/src/index.ts', 'tsconfig.base.json']) age(rel, -60);
    expect(appBundle.isStale('demo', root)).toBe(false);
    rmSync(path.join(root, 'dist/apps/demo/main.inputs.json'));
    expect(appBundle.isStale('demo', root)).toBe(true);
    appBundle.ensureAppBundles(['demo'], { root });
    rmSync(path.join(root, 'dist/apps/demo/main.cjs'));
    expect(appBundle.isStale('demo', root)).toBe(true);
  }, 60_000);

  it('reports a compile error with the compiler\'s message and leaves no bundle', () => {
    write('apps/demo/src/main.ts', 'const x: number = ;\n');
    expect(() => appBundle.ensureAppBundles(['demo'], { root })).toThrow(/building demo failed:[\s\S]*main\.ts/);
    expect(() => statSync(path.join(root, 'dist/apps/demo/main.cjs'))).toThrow();
  }, 60_000);
});

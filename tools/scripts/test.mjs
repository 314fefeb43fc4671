// `npm test`: lint and typecheck every project (module boundaries included), then run each
// project's jest suite one after another (2 cores: in band), then print the totals as a
// plain `N passed, N failed` line summed from the jest JSON reports in .reports/.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const reports = path.join(root, '.reports');
rmSync(reports, { recursive: true, force: true });
const env = { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true', NX_TUI: 'false' };
// Each project's tests run in its own folder: a relative WEIR_MODEL_PATH (as the README
// writes it, from the repository root) must be made absolute here.
if (env.WEIR_MODEL_PATH) env.WEIR_MODEL_PATH = path.resolve(env.WEIR_MODEL_PATH);
if (process.env.CI) env.NX_SKIP_NX_CACHE = 'true';
const nx = (args) => spawnSync('npx', ['nx', ...args, '--output-style=stream'], { cwd: root, stdio: 'inherit', env }).status ?? 1;

const only = process.argv.slice(2);
const projects = only.length > 0 ? ['-p', ...only] : [];
const staticStatus = nx(['run-many', '-t', 'lint', 'typecheck', '--parallel=2', ...projects]);
const testStatus = nx(['run-many', '-t', 'test', '--parallel=1', ...projects]);

let passed = 0;
let failed = 0;
let suitesFailed = 0;
try {
  for (const f of readdirSync(reports)) {
    const r = JSON.parse(readFileSync(path.join(reports, f), 'utf8'));
    passed += r.numPassedTests;
    failed += r.numFailedTests;
    // A suite that fails to run (syntax error, failing hook) has no failed tests: count it.
    suitesFailed += r.testResults.filter((s) => s.status === 'failed' && s.assertionResults.every((a) => a.status !== 'failed')).length;
  }
} catch {
  // no reports: nothing ran
}
failed += suitesFailed;
if (staticStatus !== 0) {
  process.stdout.write('lint/typecheck failed (counted as one failure)\n');
  failed += 1;
}
if (testStatus !== 0 && failed === 0) failed += 1;
process.stdout.write(`\n${passed} passed, ${failed} failed\n`);
process.exit(failed > 0 ? 1 : 0);

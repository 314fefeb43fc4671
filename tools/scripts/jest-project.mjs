// Runs one project's jest suite in band and writes its JSON report to .reports/<project>.json,
// which tools/scripts/test.mjs sums into the closing `N passed, N failed` line.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const project = process.argv[2];
const reports = path.join(root, '.reports');
mkdirSync(reports, { recursive: true });
const jestBin = path.join(root, 'node_modules/jest/bin/jest.js');
const args = [
  '--experimental-vm-modules',
  '--disable-warning=ExperimentalWarning',
  jestBin,
  '--runInBand',
  '--passWithNoTests',
  // A suite that leaves a handle open must not hang CI: jest reports it and exits.
  '--forceExit',
  '--json',
  `--outputFile=${path.join(reports, `${project.replace(/[^A-Za-z0-9_-]+/g, "_")}.json`)}`,
  ...process.argv.slice(3),
];
const env = { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true', NODE_LLAMA_CPP_GPU: 'false' };
const result = spawnSync(process.execPath, args, { stdio: 'inherit', env, cwd: process.cwd() });
process.exit(result.status ?? 1);

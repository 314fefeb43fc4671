#!/usr/bin/env node
// The `weir` bin (npm links it into node_modules/.bin from the workspace): runs
// apps/cli/src/main.ts under tsx with the repository's tsconfig (for the @weir/* paths), the
// same way tools/scripts/run-app.mjs runs the services, and passes its exit status on.
import { spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(realpathSync(fileURLToPath(import.meta.url)));
const root = path.resolve(here, '../../..');
// tsx resolved from here, not from the caller's directory (weir may run anywhere).
const tsx = import.meta.resolve('tsx');
const result = spawnSync(process.execPath, ['--import', tsx, path.join(here, '../src/main.ts'), ...process.argv.slice(2)], {
  stdio: 'inherit',
  cwd: process.cwd(),
  env: { ...process.env, TSX_TSCONFIG_PATH: path.join(root, 'tsconfig.json') },
});
if (result.error) {
  console.error(`weir: could not start: ${result.error.message}`);
  process.exit(1);
}
process.exit(result.status ?? 1);

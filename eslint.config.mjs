// Lint for every project: typescript-eslint's recommended rules plus Nx's module-boundary
// rule, which encodes STYLE.md's dependency direction (app → composition → domain → core).
// A violation is an error, so `npm run lint` (and CI) fails on it.
import nx from '@nx/eslint-plugin';
import tseslint from 'typescript-eslint';

const transportAndDrivers = [
  'express',
  'pg',
  'kysely',
  '@electric-sql/*',
  '@grpc/*',
  '@bufbuild/*',
  '@connectrpc/*',
  '@nats-io/*',
  'undici',
  'node-llama-cpp',
  '@weir/proto',
];

/** STYLE.md's dependency direction; `forTests` adds the shared test kit (`@weir/testing`) for spec files. */
function depConstraints(forTests) {
  const t = forTests ? ['type:testing'] : [];
  return [
    { sourceTag: 'type:core', onlyDependOnLibsWithTags: ['type:core', ...t], bannedExternalImports: transportAndDrivers },
    { sourceTag: 'type:domain', onlyDependOnLibsWithTags: ['type:core', 'type:domain', ...t], bannedExternalImports: forTests ? [] : transportAndDrivers },
    { sourceTag: 'type:proto', onlyDependOnLibsWithTags: [] },
    { sourceTag: 'type:adapter', onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:proto', ...t] },
    { sourceTag: 'type:testing', onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:testing', 'type:proto'] },
    { sourceTag: 'type:app', onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:testing', 'type:proto'] },
  ];
}

const boundaries = (forTests) => [
  'error',
  { allow: [], enforceBuildableLibDependency: false, depConstraints: depConstraints(forTests) },
];

export default [
  { ignores: ['**/node_modules/**', '**/dist/**', '**/*.js', '**/*.mjs', '**/*.cjs', '**/src/gen/**'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    plugins: { '@nx': nx },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@nx/enforce-module-boundaries': boundaries(false),
    },
  },
  {
    // Specs (and their helper files) may use the shared test kit and real drivers: integration
    // tests talk to real servers.
    files: ['**/*.spec.ts', '**/test-support.ts'],
    rules: { '@nx/enforce-module-boundaries': boundaries(true) },
  },
];

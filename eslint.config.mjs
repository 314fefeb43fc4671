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

export default [
  { ignores: ['**/node_modules/**', '**/dist/**', '**/*.js', '**/*.mjs', '**/*.cjs'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    plugins: { '@nx': nx },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@nx/enforce-module-boundaries': [
        'error',
        {
          allow: [],
          enforceBuildableLibDependency: false,
          depConstraints: [
            { sourceTag: 'type:core', onlyDependOnLibsWithTags: ['type:core'], bannedExternalImports: transportAndDrivers },
            {
              sourceTag: 'type:domain',
              onlyDependOnLibsWithTags: ['type:core', 'type:domain'],
              bannedExternalImports: transportAndDrivers,
            },
            { sourceTag: 'type:proto', onlyDependOnLibsWithTags: [] },
            { sourceTag: 'type:adapter', onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:proto'] },
            {
              sourceTag: 'type:testing',
              onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:testing', 'type:proto'],
            },
            { sourceTag: 'type:app', onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:testing', 'type:proto'] },
          ],
        },
      ],
    },
  },
];
